"""The bench settings, described once: `BenchSettings` is what a sweep measures (the same for
every arm, for fairness), and each field's metadata says the rest of it. From those the CLI
makes `specops bench`'s options (cli/settingopts.py, tune's shared ones too), the typed
options become settings (`settings_from_options`; how each option's text is read and written
back, and the one-load-axis rule, are bench/settingtext.py's), a dict of
settings (the command line's, a playbook's, a resumed run's manifest) is checked once
(`BenchSettings.from_dict`), the manifest's `bench` is written (`settings_record`) and read
(records/manifest.py's `RunSettings`: a field per setting, each with the check its stored value
must pass; `_check_record` holds the two to the same keys), and settings become the command line that asks for them again (`settings_words`: the resume command).

A field's metadata: `option` (config/optionspec.Option: flag, help, default as typed, how it
is read and written back; none for settings only a playbook or the run sets), `accepts` (the
types a settings dict may hold), `each` (a list's item type) and `with_` (the field whose
None leaves this one out of the manifest: a concurrency sweep records no rate fields).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from specops.bench.arrivals import DEFAULT_ARRIVAL, TRACE, parse_arrival, parse_rates
from specops.bench.matrix import Length, Point, length_pairs, plan_points
from specops.bench.phases import parse_phases, timeline_of
from specops.bench.repeats import RepeatRule, parse_repeats
from specops.bench.scheduling import CHOICES as SCHEDULING_CHOICES
from specops.bench.settingtext import (
    LOAD,
    cost_words,
    ints,
    load_axis,
    load_words,
    read_as,
    read_lengths,
    read_repeats,
    read_scheduling,
    repeats_words,
    scheduling_words,
    slo_words,
)
from specops.bench.trace import read_trace
from specops.config.optionspec import (
    CHOICE,
    EXTEND,
    FLAG,
    FLOAT,
    IGNORE,
    INT,
    OVERRIDE,
    PATH,
    SWITCH,
    option,
    option_words,
    options_of,
)
from specops.config.schema import check_keys, choice, invalid, optional
from specops.config.slo import OBJECTIVES, check_cost, check_objective, parse_slo
from specops.errors import ConfigError
from specops.records.checks import of
from specops.records.manifest import RunSettings
from specops.records.schema import AXIS_CONCURRENCY, AXIS_RATE

#: --runner's values; `auto` is decided per host by runners.runner_name.
RUNNERS = ("auto", "sglang", "builtin")

def setting(default: Any = MISSING, *, factory: Callable[[], Any] | None = None, accepts: type | tuple[type, ...],
            each: type | None = None, with_: str | None = None, typed: Any = None,
            **opt: Any) -> Any:
    """A BenchSettings field and its metadata (see the module docstring); `opt`: its
    option's (config/optionspec.option), `typed` the option's default as typed, when it has one."""
    meta: dict[str, Any] = {"accepts": accepts, "each": each, "with_": with_}
    if opt:
        meta.update(option(**opt, default=typed))
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class BenchSettings:
    """What a sweep measures; the same for every arm (fairness) and kept in the manifest."""

    arms: list[str] = setting(
        factory=lambda: ["baseline", "eagle3", "adaptive"], accepts=list, each=str,
        flag="--arms", typed="baseline,eagle3,adaptive", help="",
        parse=read_as("arms", lambda v: [a.strip() for a in str(v).split(",") if a.strip()]))
    concurrency: list[int] = setting(
        factory=lambda: [1, 2, 4, 8, 16, 32, 64], accepts=list, each=int,
        flag="--concurrency", typed="1,2,4,8,16,32,64", help="closed loops: requests kept in flight per level",
        parse=read_as("concurrency", lambda v: ints(v, "--concurrency")), show=load_words("concurrency"), resume=EXTEND)
    # request rates (open loop): the load axis instead of concurrency
    rate: list[float] | None = setting(
        None, accepts=list, with_="rate", flag="--rate",
        help="open loops instead of --concurrency: request rates per level, requests/s (e.g. 1,2,4,8 or 0.5/s); "
             "arrivals come whatever the server's speed",
        parse=read_as("rate", parse_rates), show=load_words("rate"), resume=EXTEND)
    # a rate point's arrival process (bench/arrivals.py)
    arrival: str = setting(
        DEFAULT_ARRIVAL, accepts=str, with_="rate", flag="--arrival", typed=DEFAULT_ARRIVAL,
        help="with --rate: the arrival process, poisson | constant | gamma:CV (CV > 1 bursty); offsets are drawn "
             "from --seed, the same for every arm and repeat",
        parse=read_as("arrival", lambda v: parse_arrival(v).text()), show=load_words("arrival", "rate", "phases"))
    # with repeats_auto: the most (bench/repeats.py)
    repeats: int = setting(
        3, accepts=(int, str), flag="--repeats", typed="3",
        help="a count per point, or auto[:MAX]: at least 2, until the point is settled, at most MAX (5)",
        parse=read_repeats, show=repeats_words, resume=EXTEND)
    repeats_auto: bool = setting(False, accepts=bool)   # --repeats auto[:MAX]: stop a settled point
    num_prompts: int | None = setting(
        None, accepts=int, flag="--num-prompts", kind=INT,
        help="requests per point (default: max(4 x level, 16))")
    prompts_per_level: int | None = setting(
        None, accepts=int, flag="--prompts-per-level", kind=INT,
        help="same as --num-prompts, by another name")
    # a list: context length is an axis of the sweep
    input_len: int | list[int] = setting(
        256, accepts=(int, list), each=int, flag="--input-len", typed="256",
        help="input tokens per prompt; a list (256,2048,8192) sweeps context length beside concurrency",
        parse=read_as("input_len", read_lengths("--input-len")), resume=EXTEND)
    output_len: int | list[int] = setting(
        256, accepts=(int, list), each=int, flag="--output-len", typed="256",
        help="output tokens per request; a list sweeps too", parse=read_as("output_len", read_lengths("--output-len")), resume=EXTEND)
    dataset: str = setting("random", accepts=str, flag="--dataset", typed="random",
                           help="random | sharegpt | PATH")
    runner: str = setting(
        "auto", accepts=str, flag="--runner", typed="auto", kind=CHOICE,
        choices=RUNNERS,
        help="auto: sglang's bench_serving on SGLang hosts, the builtin client on simulated ones")
    seed: int = setting(1, accepts=int, flag="--seed", typed=1, kind=INT)
    keep_servers: bool = setting(False, accepts=bool, flag="--keep-servers", kind=FLAG,
                                 help="leave servers this run launched running", resume=IGNORE)
    ready_timeout: float = setting(1800.0, accepts=(int, float))
    point_timeout: float = setting(1800.0, accepts=(int, float))
    # latency limits (config/slo.py): goodput per point in the report
    slo: dict[str, float] | None = setting(
        None, accepts=(dict, str), flag="--slo",
        help="latency limits, e.g. ttft_ms=200,tpot_ms=50: goodput and attainment per point (default: the "
             "hosts' `slo` var)", show=slo_words)
    # what the report's crossover and threshold compare
    objective: str = setting(
        "throughput", accepts=str, flag="--objective", typed="throughput", kind=CHOICE,
        choices=tuple(OBJECTIVES), help="what the crossover and threshold compare (goodput needs an SLO)")
    # $ per GPU-hour (or per host): $/1M tokens
    gpu_hour_cost: float | dict[str, float] | None = setting(
        None, accepts=(int, float, dict), flag="--gpu-hour-cost", kind=FLOAT,
        help="$ per GPU-hour: $ per 1M output tokens per arm and level (default: the hosts' `gpu_hour_cost` var)",
        show=cost_words)
    # auto | arms-at-once | one-arm-at-a-time (bench/scheduling.py)
    scheduling: str = setting(
        "auto", accepts=str, flag="--arms-at-once", off="--one-arm-at-a-time", kind=SWITCH,
        help="measure each point on every arm at once (arms on distinct GPUs), or one arm at a time (default: at "
             "once where the arms have their own GPUs and the host 2 CPU cores per arm)",
        parse=read_scheduling, show=scheduling_words, resume=OVERRIDE)
    # a trace file replayed against every arm (bench/trace.py): one level
    trace: str | None = setting(
        None, accepts=str, with_="trace", flag="--trace", kind=PATH,
        help="replay a trace file against every arm instead of levels: JSON lines of timestamp (ms), input_length, "
             "output_length (the Mooncake format bench_serving replays); the builtin runner",
        show=load_words("trace"))
    # its digest when the run read it (a changed file is refused)
    trace_sha256: str | None = setting(None, accepts=str, with_="trace")
    # rates one after another (bench/phases.py): one level, one timeline
    phases: str | None = setting(
        None, accepts=str, with_="phases", flag="--phases",
        help="load that changes: request rates one after another, RATE[/s]:DUR[s|m],... e.g. "
             "'2/s:120s,16/s:120s,2/s:120s', one timeline for every arm; the builtin runner",
        parse=read_as("phases", lambda v: (parse_phases(v), v)[1]), show=load_words("phases"))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "bench settings",
                  command: str = "bench") -> "BenchSettings":
        """Checked settings; keys and types are checked as in every YAML file (schema.check_keys:
        file:line when `data` came from a playbook, else `where`); `command` names the flags of
        a bad arm list or level (`tune --concurrency`)."""
        what = "bench settings"
        check_keys(data, list(cls.__dataclass_fields__), what, where=where)
        for f in fields(cls):
            optional(data, f.name, f.metadata["accepts"], what, where=where)
            items, want = data.get(f.name), f.metadata["each"]
            if want is not None and isinstance(items, list) and not all(of(want)(v) for v in items):
                raise invalid(data, f.name, f"'{f.name}' in {what} must be a list of {want.__name__}s, got {items!r}",
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
        plan_points(settings.arms, settings.levels(), settings.repeats, axis=settings.axis(),  # validates them
                    command=command)
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
        choice(data, "runner", sorted(RUNNERS), what, where=where)
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
    contents = [p.content() for i, o in lengths
                for p in make_prompts(4, input_len=i, output_len=o, seed=settings.seed, dataset=settings.dataset)]
    blob = json.dumps([settings.dataset, settings.input_len, settings.output_len, settings.seed, contents])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def settings_record(settings: BenchSettings) -> dict[str, Any]:
    """The manifest's `bench`: the settings and the dataset hash; a setting whose `with_` field
    is None is left out (a concurrency sweep records no rate fields: its manifest reads as
    before rates existed)."""
    data = asdict(settings)
    for f in fields(settings):
        if f.metadata["with_"] is not None and getattr(settings, f.metadata["with_"]) is None:
            data.pop(f.name)
    data["dataset_hash"] = dataset_hash(settings)
    return data


def _check_record() -> None:
    """The manifest's `bench` (records/manifest.py's RunSettings) reads every setting this
    schema records, and nothing else but the dataset hash (a setting it did not read would
    come back as an untyped leftover)."""
    recorded = {f.name for f in fields(BenchSettings)} | {"dataset_hash"}
    assert recorded == set(RunSettings.PLAIN), ("BenchSettings against RunSettings", recorded ^ set(RunSettings.PLAIN))


_check_record()

#: What `--resume DIR --extend` may add to a run; every other setting must match it.
EXTENDABLE = tuple(f.name for f, opt in options_of(BenchSettings) if opt.resume == EXTEND)
#: settings a resumed run takes from the command line whatever the run was started with
OVERRIDES = tuple(f.name for f, opt in options_of(BenchSettings) if opt.resume == OVERRIDE)

def settings_from_options(typed: Mapping[str, Any], given: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings `specops bench`'s options ask for (`typed`: field name -> the option's
    value; `given`: the fields whose option was typed, not defaulted), each read by its
    field's Option; and those of them typed (what a resumed run compares, all but IGNORE).
    One load axis per run: two given is a usage error, as is --arrival without --rate or --phases."""
    axis = load_axis(typed, given)
    settings: dict[str, Any] = {}
    typed_settings: dict[str, Any] = {}
    for f, opt in options_of(BenchSettings):
        if f.name in LOAD and f.name not in axis:
            continue
        values = opt.read(f.name, typed.get(f.name))
        settings.update(values)
        if f.name in given and opt.resume != IGNORE:
            typed_settings.update(values)
    return settings, typed_settings


def settings_words(settings: Mapping[str, Any], names: Callable[[str], bool] = lambda _n: True) -> list[str]:
    """The command-line words that ask for `settings` (a settings dict, the manifest's
    `bench` or the command line's) again: each option whose field `names` accepts."""
    return option_words(BenchSettings, settings, names)
