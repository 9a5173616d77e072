"""The bench settings: what a sweep measures, the same for every arm (fairness), checked once
and kept in the run's manifest (`settings_record`)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.arrivals import DEFAULT_ARRIVAL, TRACE, parse_arrival
from specops.bench.matrix import Length, Point, length_pairs, plan_points
from specops.bench.phases import timeline_of
from specops.bench.repeats import RepeatRule, parse_repeats
from specops.bench.runners import (
    RUNNERS,
    Load,
)
from specops.bench.scheduling import CHOICES as SCHEDULING_CHOICES
from specops.bench.schema import AXIS_CONCURRENCY, AXIS_RATE
from specops.bench.trace import read_trace
from specops.config.schema import check_keys, choice, invalid, optional
from specops.config.slo import check_cost, check_objective, parse_slo
from specops.errors import ConfigError

#: The type of each bench setting, checked before the settings are built.
_SETTING_TYPES: dict[str, type | tuple[type, ...]] = {
    "arms": list, "concurrency": list, "rate": list, "arrival": str, "repeats": (int, str), "repeats_auto": bool, "num_prompts": int, "prompts_per_level": int,
    "input_len": (int, list), "output_len": (int, list), "dataset": str, "runner": str, "seed": int, "keep_servers": bool,
    "ready_timeout": (int, float), "point_timeout": (int, float), "slo": (dict, str), "objective": str,
    "gpu_hour_cost": (int, float, dict), "scheduling": str, "trace": str, "trace_sha256": str,
    "phases": str,
}


@dataclass
class BenchSettings:
    """What a sweep measures; the same for every arm (fairness) and kept in the manifest."""

    arms: list[str] = field(default_factory=lambda: ["baseline", "eagle3", "adaptive"])
    concurrency: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    rate: list[float] | None = None      # request rates (open loop): the load axis instead of concurrency
    arrival: str = DEFAULT_ARRIVAL       # a rate point's arrival process (bench/arrivals.py)
    repeats: int = 3                     # with repeats_auto: the most (bench/repeats.py)
    repeats_auto: bool = False           # --repeats auto[:MAX]: stop a point when it is settled
    num_prompts: int | None = None
    prompts_per_level: int | None = None
    input_len: int | list[int] = 256    # a list: context length is an axis of the sweep
    output_len: int | list[int] = 256
    dataset: str = "random"
    runner: str = "auto"
    seed: int = 1
    keep_servers: bool = False
    ready_timeout: float = 1800.0
    point_timeout: float = 1800.0
    slo: dict[str, float] | None = None   # latency limits (config/slo.py): goodput per point in the report
    objective: str = "throughput"         # what the report's crossover and threshold compare
    gpu_hour_cost: float | dict[str, float] | None = None   # $ per GPU-hour (or per host): $/1M tokens
    scheduling: str = "auto"              # auto | arms-at-once | one-arm-at-a-time (bench/scheduling.py)
    trace: str | None = None              # a trace file replayed against every arm (bench/trace.py): one level
    trace_sha256: str | None = None       # its digest when the run read it (a changed file is refused)
    phases: str | None = None             # rates one after another (bench/phases.py): one level, one timeline

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "bench settings") -> "BenchSettings":
        """Checked settings; keys and types are checked as in every YAML file (schema.check_keys:
        file:line when `data` came from a playbook, else `where`)."""
        what = "bench settings"
        check_keys(data, list(cls.__dataclass_fields__), what, where=where)
        for key, types in _SETTING_TYPES.items():
            optional(data, key, types, what, where=where)
        for key in ("arms", "concurrency", "input_len", "output_len"):
            items = data.get(key)
            want = str if key == "arms" else int
            if key in ("input_len", "output_len") and not isinstance(items, list):
                continue
            if items is not None and not all(isinstance(v, want) and not isinstance(v, bool) for v in items):
                raise invalid(data, key, f"'{key}' in {what} must be a list of {want.__name__}s, got {items!r}",
                              where=where)
        data = _checked_load(data, what, where)
        rule = _repeats_of(data, where)
        settings = cls(**{k: v for k, v in data.items() if v is not None})
        if rule is not None:
            settings.repeats, settings.repeats_auto = rule.most, rule.auto or settings.repeats_auto
        for name in ("input_len", "output_len"):
            values = as_list(getattr(settings, name))
            flag = f"--{name.replace('_', '-')}"
            if not values or any(v < 1 for v in values):
                raise invalid(data, name, f"{flag} must be at least 1, got {shown(getattr(settings, name))}",
                              where=where)
            if len(set(values)) != len(values):
                raise invalid(data, name, f"{flag} lists a length twice: {shown(values)}", where=where)
            setattr(settings, name, one_or_list(values))
        for name in ("num_prompts", "prompts_per_level"):
            if getattr(settings, name) is not None and int(getattr(settings, name)) < 1:
                raise invalid(data, name, f"--{name.replace('_', '-')} must be at least 1", where=where)
        if settings.num_prompts is not None and settings.prompts_per_level is not None:
            raise invalid(data, None, "give --num-prompts or --prompts-per-level, not both", where=where)
        if settings.trace is not None:
            _replay(settings, where)
        if settings.phases is not None:
            _phased(settings, where)
        plan_points(settings.arms, settings.levels(), settings.repeats, axis=settings.axis())  # validates arms/levels
        settings.gpu_hour_cost = check_cost(settings.gpu_hour_cost, where=where)
        settings.slo = parse_slo(settings.slo, where=where)
        check_objective(settings.objective, settings.slo, where=where)
        return settings

    def axis(self) -> str:
        """The load axis the run sweeps: request rate where `rate` is set, else concurrency."""
        return AXIS_RATE if self.rate is not None else AXIS_CONCURRENCY

    def levels(self) -> list[float]:
        """The load levels on the run's axis."""
        return list(self.rate) if self.rate is not None else list(self.concurrency)

    def plan(self, repeats: int | None = None) -> list[Point]:
        """Every point of the run, in run order (bench/matrix.py)."""
        return plan_points(self.arms, self.levels(), self.repeats if repeats is None else repeats, self.lengths(),
                           axis=self.axis())

    def repeat_rule(self) -> RepeatRule:
        """--repeats as a rule: a fixed count, or auto (at least 2, at most MAX)."""
        return RepeatRule(self.repeats_auto, self.repeats)

    def lengths(self) -> list[Length]:
        """The sweep's context lengths, (input, output) pairs, shortest first: one unless
        --input-len or --output-len lists several."""
        return length_pairs(as_list(self.input_len), as_list(self.output_len))

    def length_of(self, point: Point) -> Length:
        """The (input, output) length a point measures: its own, else the run's one length."""
        if point.input_len is not None and point.output_len is not None:
            return point.input_len, point.output_len
        return self.lengths()[0]

    def prompts_for(self, concurrency: float) -> int:
        """Requests per point: explicit, else the client's default (at least 4x the level)."""
        if self.num_prompts:
            return int(self.num_prompts)
        if self.prompts_per_level:
            return int(self.prompts_per_level)
        from specops.bench.client import default_num_prompts  # (see runners.BuiltinRunner.measure)

        return default_num_prompts(math.ceil(concurrency))

    def load(self, point: Point) -> Load:
        """What the point sends, whichever runner measures it."""
        input_len, output_len = self.length_of(point)
        return Load(concurrency=point.concurrency, repeat=point.repeat, num_prompts=self.prompts_for(point.level),
                    input_len=input_len, output_len=output_len, dataset=self.dataset, seed=self.seed,
                    timeout_s=self.point_timeout, rate=point.rate, arrival=self.arrival, trace=self.trace,
                    trace_sha256=self.trace_sha256, phases=self.phases)


def _phased(settings: BenchSettings, where: str) -> None:
    """A phase run: one rate level (the timeline's mean rate, for the report's axis) and
    exactly the timeline's requests, drawn now (a bad phase list stops here, naming it)."""
    assert settings.phases is not None
    if settings.trace is not None:
        raise ConfigError("--phases and --trace are each a run's whole load; give one", where=where)
    tl = timeline_of(settings.phases, settings.arrival, settings.seed, where=where)
    if not tl.offsets:
        raise ConfigError(f"--phases {settings.phases} offers no request", where=where)
    if settings.num_prompts is not None and settings.num_prompts != len(tl.offsets):
        raise ConfigError(f"--num-prompts {settings.num_prompts}: a phase run sends its timeline's "
                          f"{len(tl.offsets)} requests", where=where, hint="change the phases' rates or durations")
    settings.rate = [round(tl.mean_rate, 6)]
    settings.num_prompts, settings.prompts_per_level = len(tl.offsets), None


def _replay(settings: BenchSettings, where: str) -> None:
    """A trace run: one rate level (the trace's mean rate, for the report's axis), the trace's
    own arrivals, and exactly its requests; the file read now (a bad line stops here, naming
    it), and refused when it is not the file a resumed run replayed."""
    assert settings.trace is not None
    trace = read_trace(Path(settings.trace).expanduser())
    if settings.trace_sha256 is not None and settings.trace_sha256 != trace.sha256:
        raise ConfigError(f"the trace {settings.trace} changed since the run replayed it (sha256 "
                          f"{settings.trace_sha256[:12]}..., now {trace.sha256[:12]}...)", where=where,
                          hint="replay it into a new run directory")
    if trace.mean_rate is None:
        raise ConfigError(f"every request of {settings.trace} arrives at one instant: no open loop to replay",
                          where=where, hint="use --concurrency for a burst")
    if settings.num_prompts is not None and settings.num_prompts != len(trace.requests):
        raise ConfigError(f"--num-prompts {settings.num_prompts}: a trace replays its own {len(trace.requests)} "
                          f"requests", where=where, hint="cut the trace file instead")
    settings.trace = str(Path(settings.trace).expanduser().absolute())
    settings.trace_sha256 = trace.sha256
    settings.rate, settings.arrival = [round(trace.mean_rate, 6)], TRACE
    settings.num_prompts, settings.prompts_per_level = len(trace.requests), None



def _checked_load(data: dict[str, Any], what: str, where: str) -> dict[str, Any]:
    """`rate` a list of numbers (kept as floats), `arrival` a process bench/arrivals.py reads,
    `runner` and `scheduling` among their choices."""
    if data.get("rate") is not None:
        rates = data["rate"]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rates):
            raise invalid(data, "rate", f"'rate' in {what} must be a list of numbers, got {rates!r}", where=where)
        data = {**data, "rate": [float(v) for v in rates]}
    if data.get("arrival") is not None:
        try:
            parse_arrival(data["arrival"])
        except ConfigError as exc:
            raise invalid(data, "arrival", exc.message, where=where, hint=exc.hint) from None
    if data.get("runner") is not None:
        choice(data, "runner", RUNNERS, what, where=where)
    if data.get("scheduling") is not None:
        choice(data, "scheduling", SCHEDULING_CHOICES, what, where=where)
    return data


def _repeats_of(data: dict[str, Any], where: str) -> RepeatRule | None:
    """`repeats`: a count, or "auto[:MAX]" (from --repeats or a playbook); None when absent."""
    if data.get("repeats") is None:
        return None
    try:
        return parse_repeats(data["repeats"])
    except ConfigError as exc:
        raise invalid(data, "repeats", exc.message, where=where, hint=exc.hint) from None



def shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)



def as_list(value: Any) -> list[int]:
    """A length setting (one int, or a list of them) as a list."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def one_or_list(values: list[int]) -> int | list[int]:
    """One length stays an int (the manifest of a one-length run reads as before); several
    stay a list, in the order given."""
    return values[0] if len(values) == 1 else list(values)



def dataset_hash(settings: BenchSettings) -> str:
    """A fingerprint of the prompts every arm receives, so runs can be compared honestly."""
    from specops.bench.client import make_prompts  # (see runners.BuiltinRunner.measure)

    lengths = settings.lengths()
    texts = [p.text for i, o in lengths
             for p in make_prompts(4, input_len=i, output_len=o, seed=settings.seed, dataset=settings.dataset)]
    blob = json.dumps([settings.dataset, settings.input_len, settings.output_len, settings.seed, texts])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]



def settings_record(settings: BenchSettings) -> dict[str, Any]:
    """The manifest's `bench`: the settings and the dataset hash; a concurrency sweep records
    no rate fields (its manifest reads as before rates existed)."""
    data = asdict(settings)
    if settings.rate is None:
        data.pop("rate")
        data.pop("arrival")
    if settings.trace is None:
        data.pop("trace")
        data.pop("trace_sha256")
    if settings.phases is None:
        data.pop("phases")
    data["dataset_hash"] = dataset_hash(settings)
    return data

