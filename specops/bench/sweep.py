"""One host's part of `specops bench`: launch (or reuse) the arms, run the matrix point by
point, write each result the moment it exists, relaunch a crashed arm once, stop what
was launched. Used by the `bench` step kind. The servers are the arm pool's
(bench/armpool.py) and each point is measured by the host's runner (bench/runners.py):
this module schedules the points and keeps their records."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import math
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from specops import __version__
from specops.bench.armpool import ArmPool
from specops.bench.arrivals import DEFAULT_ARRIVAL, TRACE, parse_arrival
from specops.bench.bench_serving import DATASET_NAMES
from specops.bench.manifest import ArmRecord, Manifest
from specops.bench.manifest import update as update_manifest
from specops.bench.matrix import Length, Point, length_pairs, plan_points, point_groups
from specops.bench.phases import timeline_of
from specops.bench.repeats import RepeatRule, level_key, parse_repeats, settled, throughputs
from specops.bench.runners import (
    RUNNERS,
    ArmServer,
    Load,
    Runner,
    crash_excerpt,
    runner_for,
    runner_name,
    sampled,
    server_dead,
)
from specops.bench.scheduling import AT_ONCE, ONE_AT_A_TIME, Scheduling, compare, decide, median, probe_level
from specops.bench.scheduling import CHOICES as SCHEDULING_CHOICES
from specops.bench.schema import AXIS_CONCURRENCY, AXIS_RATE, CONTEXT_AXIS, STATUS_FAILED, ResultRecord
from specops.bench.store import append_result, load_results, missing_points
from specops.bench.trace import read_trace
from specops.config.inventory import Host
from specops.config.schema import check_keys, choice, invalid, optional, suggest
from specops.config.slo import check_cost, check_objective, parse_slo
from specops.errors import ConfigError, SpecopsError
from specops.secrets import redact
from specops.servers import LaunchPlan, ServerState, end_reason, server_info
from specops.servers.container import image_manifest, image_record
from specops.servers.lease import LeaseBook, TakenOver
from specops.servers.lifecycle import check_version
from specops.servers.slurm import replica_plan, replicas
from specops.transport.base import Transport
from specops.transport.connect import open_transport
from specops.transport.nvidia import read_gpus
from specops.transport.probes import read_cpu

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
                raise invalid(data, name, f"{flag} must be at least 1, got {_shown(getattr(settings, name))}",
                              where=where)
            if len(set(values)) != len(values):
                raise invalid(data, name, f"{flag} lists a length twice: {_shown(values)}", where=where)
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


def check_for_hosts(settings: BenchSettings, hosts: dict[str, tuple[str, Any]]) -> None:
    """Before anything runs: every arm named exists in each host's `arms`, the dataset is a
    name or a readable file, and the runner can use it. `hosts`: name -> (engine, arms var)."""
    names = sorted(set(DATASET_NAMES) | {"sharegpt"})
    is_file = Path(settings.dataset).expanduser().is_file()
    if settings.dataset not in DATASET_NAMES and not is_file:
        raise ConfigError(f"--dataset '{settings.dataset}' is neither a dataset name ({', '.join(names)}) "
                          f"nor an existing file{suggest(settings.dataset, names)}", where="bench --dataset")
    if is_file:  # read now: a file that is not UTF-8 JSON with prompts is bad input, not a failed sweep
        dataset_hash(settings)
    for host, (engine, arms) in hosts.items():
        if not isinstance(arms, dict) or not arms:
            raise ConfigError(f"host {host} has no 'arms' variable to benchmark", where="bench --arms",
                              hint="define arms in hosts.yaml vars (see the shipped hosts.yaml)")
        for arm in settings.arms:
            if arm not in arms:
                raise ConfigError(f"no arm '{arm}' on host {host}{suggest(arm, arms)}; its arms: "
                                  f"{', '.join(sorted(arms))}", where="bench --arms")
        if settings.phases is not None and runner_name(settings.runner, engine) != "builtin":
            raise ConfigError(f"--phases runs through specops' own client, which sends the timeline and "
                              f"measures each phase; host {host}'s runner is {runner_name(settings.runner, engine)}",
                              where="bench --phases", hint="add --runner builtin")
        if settings.trace is not None and runner_name(settings.runner, engine) != "builtin":
            raise ConfigError(f"--trace replays through specops' own client; host {host}'s runner is "
                              f"{runner_name(settings.runner, engine)}", where="bench --trace",
                              hint="add --runner builtin")
        if runner_name(settings.runner, engine) == "builtin" and settings.dataset != "random" and not is_file:
            raise ConfigError(f"the builtin runner (host {host}) makes random prompts or reads a file; "
                              f"--dataset {settings.dataset} needs SGLang's runner", where="bench --dataset",
                              hint="--dataset random, --dataset PATH (a ShareGPT-style JSON/JSONL file), "
                                   "or --runner sglang on an SGLang host")


#: What `--resume DIR --extend` may add to a run; every other setting must match it.
EXTENDABLE = ("concurrency", "rate", "repeats", "input_len", "output_len")
#: settings that are lists of levels: compared as sets, extended by union
#: settings a resumed run takes from the command line whatever the run was started with
OVERRIDES = ("scheduling",)
LISTS = ("concurrency", "rate", "input_len", "output_len")


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


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def as_list(value: Any) -> list[int]:
    """A length setting (one int, or a list of them) as a list."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def one_or_list(values: list[int]) -> int | list[int]:
    """One length stays an int (the manifest of a one-length run reads as before); several
    stay a list, in the order given."""
    return values[0] if len(values) == 1 else list(values)


def check_resume(manifest_settings: dict[str, Any], given: dict[str, Any], run_dir: Path, *,
                 extend: bool = False) -> tuple[dict[str, Any], list[str]]:
    """`--resume DIR` with options: each one given must match what the run was started with.
    With `extend`, `--concurrency` and `--repeats` may add to the run (new levels, more
    repeats); the settings returned are the union, and the notes say what was kept that
    the options left out (the run's points are never dropped)."""
    settings, notes = dict(manifest_settings), []
    for key, value in given.items():
        had = manifest_settings.get(key)
        if key in OVERRIDES:  # how the run is scheduled, not what it measures: the option wins
            settings[key] = value
            continue
        if key == "repeats_auto":
            if bool(had) != bool(value):
                run_rule = RepeatRule(bool(had), int(manifest_settings.get("repeats") or 1)).text()
                raise ConfigError(f"--resume {run_dir}: --repeats {'auto' if value else 'N'} differs from the run's "
                                  f"--repeats {run_rule} (manifest.json)", where="bench --resume",
                                  hint="drop --repeats to fill the run's gaps, or start a new run with --out")
            continue
        if key in LISTS and had is not None:
            same = sorted(map(float, _listed(had))) == sorted(map(float, _listed(value)))
        else:
            same = had == value
        if same:
            continue
        flag = "--" + key.replace("_", "-")
        differs = f"{flag} {_shown(value)} differs from the run's {flag} {_shown(had)} (manifest.json)"
        if not extend:
            what = "lengths" if key in ("input_len", "output_len") else "levels or repeats"
            extra = f"add --extend to add {what} to it, " if key in EXTENDABLE else ""
            raise ConfigError(f"--resume {run_dir}: {differs}", where="bench --resume",
                              hint=f"{extra}drop {flag} to fill the run's gaps, or start a new run with --out")
        if key not in EXTENDABLE:
            raise ConfigError(f"--resume {run_dir} --extend: {differs}; --extend adds only --concurrency levels "
                              f"and --repeats (and --input-len/--output-len lengths)", where="bench --extend",
                              hint=f"drop {flag}, or start a new run with --out")
        if key in ("concurrency", "rate") and isinstance(had, list):
            settings[key] = sorted(set(had) | set(value))
            kept = sorted(set(had) - set(value))
            if kept:
                notes.append(f"--extend keeps the run's points at {key} {_shown(kept)} "
                             f"(not in {flag} {_shown(value)})")
        elif key in ("input_len", "output_len") and had is not None:
            old, new = as_list(had), as_list(value)
            settings[key] = one_or_list(old + [v for v in new if v not in old])
            kept = [v for v in old if v not in new]
            if kept:
                notes.append(f"--extend keeps the run's points at {flag} {_shown(kept)} "
                             f"(not in {flag} {_shown(value)})")
        elif key == "repeats" and isinstance(had, int) and isinstance(value, int):
            settings[key] = max(had, value)
            if value < had:
                notes.append(f"--extend keeps the run's {had} repeats (--repeats {value} is fewer)")
        else:  # a manifest without the setting: nothing to add to
            raise ConfigError(f"--resume {run_dir} --extend: the run records no {flag} to extend (manifest.json)",
                              where="bench --extend")
    return settings, notes


def dataset_hash(settings: BenchSettings) -> str:
    """A fingerprint of the prompts every arm receives, so runs can be compared honestly."""
    from specops.bench.client import make_prompts  # (see runners.BuiltinRunner.measure)

    lengths = settings.lengths()
    texts = [p.text for i, o in lengths
             for p in make_prompts(4, input_len=i, output_len=o, seed=settings.seed, dataset=settings.dataset)]
    blob = json.dumps([settings.dataset, settings.input_len, settings.output_len, settings.seed, texts])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def gpus_share(plans: list[LaunchPlan]) -> bool:
    """True when two arms would share a GPU, or the host's CPU (`device: cpu`: one measured
    arm beside another's idle server would share its cores and memory): then they run one
    after another."""
    seen: set[str] = set()
    for plan in plans:
        devices = ({"cpu"} if plan.device == "cpu" else
                   {d for d in plan.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d})
        if not devices:
            continue
        if devices & seen:
            return True
        seen |= devices
    return False


class HostSweep:
    """The sweep on one host. `log` receives progress lines (the step's journal)."""

    def __init__(self, *, host: Host, transport: Transport, plans: list[LaunchPlan], settings: BenchSettings,
                 run_dir: Path, tree: str, log: Callable[[str, dict[str, Any]], None],
                 progress: Callable[[ResultRecord], None] | None = None, leases: LeaseBook | None = None,
                 on_wait: Callable[[str], None] | None = None):
        self.host, self.transport, self.settings, self.run_dir, self.tree = host, transport, settings, run_dir, tree
        self.plans = {p.arm: p for p in plans}
        self.log = log
        self.progress = progress or (lambda _e: None)
        #: this run's arm leases (servers.lease); None: no leasing (a sweep driven by hand)
        self.leases = leases
        #: the arms' servers (claim, up, down, relaunch, taken over), one pool shared by the
        #: sweep's threads (bench/armpool.py)
        self.pool = ArmPool(host.name, self.plans, leases=leases,
                            run_id=leases.run_id if leases is not None else run_dir.name,
                            ready_timeout=settings.ready_timeout, keep_servers=settings.keep_servers, log=log,
                            on_wait=on_wait)
        #: what measures each point (bench/runners.py); one per host, shared by the sweep's threads
        self.runner: Runner = runner_for(settings.runner, engine=host.engine, python=host.python, tree=tree, log=log)
        self.time_scales: dict[str, Any] = {}  # per arm, /server_info's sim_time_scale (a scaled clock)
        self.scheduling: Scheduling | None = None  # how the arms were scheduled (bench/scheduling.py)

    # ----- servers ---------------------------------------------------------------------

    @property
    def states(self) -> dict[str, ServerState]:
        """Per arm, the server it measures (the pool's)."""
        return self.pool.states

    @property
    def launched(self) -> set[str]:
        """The arms whose servers this sweep launched: the pool's live set (run.state reads it)."""
        return self.pool.launched

    @property
    def taken_over(self) -> dict[str, str]:
        """arm -> what ended it: another run took it over."""
        return self.pool.taken_over()

    def _leased(self, arm: str) -> bool:
        return self.pool.leased(arm)

    def claim(self, arms: list[str]) -> None:
        self.pool.claim(self.transport, arms)

    def _up(self, arms: list[str], avoid: tuple[int, str] | None = None) -> None:
        self.pool.up(self.transport, arms, avoid)
        infos = self._record_arms(arms)
        for arm in arms:  # results are credited to the tree only when the tree's SGLang answered
            if "error" not in infos[arm]:
                check_version(self.transport, self.states[arm], infos[arm])

    def _down(self, arms: list[str]) -> None:
        self.pool.down(self.transport, arms)

    def stop_launched(self) -> None:
        self.pool.stop_launched(self.transport)

    def _record_arms(self, arms: list[str]) -> dict[str, dict[str, Any]]:
        """Each arm's /server_info into the manifest (command, args, mechanism); returned."""
        infos: dict[str, dict[str, Any]] = {}
        for arm in arms:
            try:
                infos[arm] = server_info(self.transport, self.states[arm])
            except SpecopsError as exc:
                infos[arm] = {"error": str(exc)}

        def update(manifest: Manifest) -> None:
            host_part = manifest.host(self.host.name)
            arms_part = host_part.arm_records()
            for arm in arms:
                plan, state, info = self.plans[arm], self.states[arm], infos[arm]
                self.time_scales[arm] = info.get("sim_time_scale")
                # through the sink, keys and all: a server echoes its --api-key as "api_key"
                server_args = redact({k: v for k, v in info.items() if k not in ("internal_states",)})
                record: dict[str, Any] = {
                    "command": state.command, "argv": state.argv, "mechanism": state.mechanism,
                    "effective_threshold": state.effective_threshold, "notes": plan.notes,
                    "server_args": server_args, "simulated": bool(info.get("simulated")), "device": plan.device}
                if state.slurm:  # which job, node and GPU indices measured this arm
                    record["slurm"] = {k: state.slurm.get(k) for k in ("job_id", "node", "gpus")}
                if state.container:  # which image (id and registry digest) measured this arm
                    record["container"] = image_record(state.container)
                arms_part[arm] = ArmRecord.from_dict(record)
            images = image_manifest([self.states[a] for a in self.states])
            if images is not None:
                host_part.merge({"container": images})
        update_manifest(self.run_dir, update)
        return infos

    # ----- points ----------------------------------------------------------------------

    def _measure(self, point: Point) -> ResultRecord:
        """The point on its arm's server, by this host's runner (bench/runners.py)."""
        arm = point.arm
        server = ArmServer(self.states[arm], self.plans[arm], self.time_scales.get(arm))
        return self.runner.measure(self.transport, server, self.settings.load(point))

    def _measure_sampled(self, point: Point) -> ResultRecord:
        """`_measure` with the server's running batch sampled meanwhile (runners.sampled)."""
        return sampled(self.transport, self.states[point.arm], functools.partial(self._measure, point))

    def _server(self, arm: str, before: dict[str, Any] | None = None) -> dict[str, Any]:
        """The identity of the server a point measures (pid, start, args hash, who launched
        it, which other runs share it), checked on the host before and after the point
        when the arm is leased. Raises TakenOver when this run's lease was revoked or the
        server was restarted with other arguments; after the point (`before` given), a
        restart with the same arguments marks the identity `restarted`."""
        state, shared = self.states[arm], []
        if self._leased(arm):
            assert self.leases is not None
            view = self.leases.check(self.transport, self.host.name, arm)
            now = view.state
            if now is not None and (now.pid, now.proc_start) != (state.pid, state.proc_start):
                if now.args_hash != self.plans[arm].args_hash:
                    raise TakenOver(f"arm {arm} restarted with other launch arguments by "
                                    f"{'run ' + now.launched_by if now.launched_by else 'another process'}",
                                    where=f"host {self.host.name}, arm '{arm}'")
                state = now  # restarted with the same arguments (by a run sharing it)
                self.pool.restarted(arm, now)
            shared = sorted({x.run_id for x in view.live(self.leases.cli_host)
                             if x.key != self.leases.key and x.args_hash == state.args_hash})
        ident = {"pid": state.pid, "proc_start": state.proc_start, "args_hash": state.args_hash,
                 "config_hash": self.plans[arm].config_hash, "started_at": state.started_at,
                 "launched_by": state.launched_by, "shared_with": shared}
        if before is not None:
            ident["shared_with"] = sorted(set(before["shared_with"]) | set(shared))
            if (before["pid"], before["proc_start"]) != (state.pid, state.proc_start):
                ident["restarted"] = before["pid"]
        return ident

    def _end_arm(self, arm: str, exc: TakenOver) -> None:
        """Another run took the arm over: its server is theirs now; this sweep leaves it alone."""
        self.pool.end(arm, exc)

    def run_point(self, point: Point) -> ResultRecord:
        """Measure one point and write it; on a crashed server record the failure with the log
        excerpt and relaunch the arm once. Where another run took the arm over (checked on
        the host before and after the point), the point fails saying so, and the arm ends."""
        plan = self.plans[point.arm]
        started = time.time()
        taken: TakenOver | None = None
        ident: dict[str, Any] | None = None
        raw = ResultRecord()
        try:
            ident = self._server(point.arm)
            try:
                raw = self._measure_sampled(point)
            except SpecopsError as exc:
                raw = ResultRecord.failed_point(str(exc))
            ident = self._server(point.arm, ident)
        except TakenOver as exc:
            taken = exc
            raw = ResultRecord.failed_point(exc.message)
        if ident is not None and ident.pop("restarted", None) is not None and raw.status != STATUS_FAILED:
            raw = replace(raw, status=STATUS_FAILED,
                          error=f"server '{point.arm}' was restarted during the point (same arguments); not counted")
        record = replace(raw, host=self.host.name, arm=point.arm, mechanism=plan.mechanism,
                         concurrency=point.concurrency, rate=point.rate, repeat=point.repeat, extra=dict(raw.extra))
        self._set_length(record, point)
        if ident is not None:
            record.shared_with = ident.pop("shared_with")
            record.server = ident
        state = self.states[point.arm]
        crashed = taken is None and record.status == STATUS_FAILED and server_dead(self.transport, state)
        if crashed:
            excerpt = crash_excerpt(self.transport, state)
            record.error = f"server '{point.arm}' crashed during the point: {record.error or ''}".strip()
            ended = end_reason(self.transport, state)
            if ended:  # a Slurm arm: the job's end state and reason (FAILED, CANCELLED, TIMEOUT, ...)
                record.error = f"server '{point.arm}' {ended} during the point: {raw.error or ''}".strip()
            record.extra["log_excerpt"] = excerpt
        written = append_result(self.run_dir, record)
        self.log("point", {"arm": point.arm, "concurrency": point.concurrency, **({"rate": point.rate} if point.rate
                           is not None else {}), "repeat": point.repeat,
                           "status": written.status, "output_throughput": written.output_throughput,
                           "t0": round(started, 3), "wall_s": round(time.time() - started, 3)})
        self.progress(written)
        if taken is not None:
            self._end_arm(point.arm, taken)
        elif crashed:
            self._relaunch(point.arm)
        return written

    @staticmethod
    def _set_length(record: ResultRecord, point: Point) -> None:
        """A point of a several-length sweep records the length it asked for (the report
        and --resume group by it); a one-length sweep's records are as before."""
        if point.input_len is not None:
            record.input_len, record.output_len = point.input_len, int(point.output_len or 0)
            record.extra[CONTEXT_AXIS] = True

    def _relaunch(self, arm: str) -> None:
        self._up([arm], avoid=self.pool.relaunch(arm))  # a run sharing the arm may relaunch it first

    # ----- the sweep -------------------------------------------------------------------

    def run(self, points: list[Point]) -> None:
        needed = [a for a in self.settings.arms if any(p.arm == a for p in points)]
        try:
            self.claim(needed)
            if any(p.slurm is not None for p in self.plans.values()):
                return self._run_jobs(points)
            shares = gpus_share(list(self.plans.values()))
            sched = decide(self.settings.scheduling, arms=len(needed), shares_gpu=shares,
                           cores=self.runner.client_cores(self.transport) if self.settings.scheduling == "auto" and not shares
                           and len(needed) > 1 else None)
            if shares:
                self._record_scheduling(sched)
                # Arms that share GPUs cannot be up together: launch, sweep, stop, one arm at a time.
                for arm in needed:
                    self._up([arm])
                    for point in points:
                        if point.arm == arm and self._wanted(point):
                            self.run_point(point)
                    self._down([arm])
                return None
            if needed:
                self._up(needed)
            if sched.mode == AT_ONCE:
                return self._run_side_by_side(points, sched)
            self._record_scheduling(sched)
            for point in points:
                if self._wanted(point):
                    self.run_point(point)
        finally:
            self.stop_launched()
        return None

    # ----- scheduling: side by side, one arm at a time (bench/scheduling.py) -------------

    def _wanted(self, point: Point) -> bool:
        """The point still runs: its arm was not taken over, and with --repeats auto its arm
        and level are not settled yet (bench/repeats.py)."""
        if self.pool.taken(point.arm):
            return False
        if not self.settings.repeat_rule().auto:
            return True
        return bool(unsettled(self.settings, [point], load_results(self.run_dir), self.host.name))

    def _record_scheduling(self, sched: Scheduling) -> None:
        self.scheduling = sched

        def update(manifest: Manifest) -> None:
            manifest.host(self.host.name).scheduling = sched

        update_manifest(self.run_dir, update)
        self.log("scheduling", {"mode": sched.mode, "reason": sched.reason})

    def _connected(self, owner: "HostSweep | None" = None) -> "HostSweep":
        """A copy of the sweep for another thread: it shares the arm pool (one object, its
        state behind its lock) and the runner (its caches behind its lock), not the connection (a transport is
        not shared between threads)."""
        mine = copy.copy(owner or self)
        mine.transport = open_transport(self.host)
        return mine

    def _probe(self, points: list[Point]) -> list[Point]:
        """The fairness check's point on each arm: the first pending group at the sweep's
        median level (else the first group with two arms or more); [] when no group has two."""
        groups = [g for g in point_groups(points) if len({p.arm for p in g}) > 1]
        level = probe_level(self.settings.levels())
        at_level = [g for g in groups if g[0].level == level]
        return (at_level or groups or [[]])[0]

    def _measure_together(self, workers: dict[str, "HostSweep"], probe: list[Point]) -> dict[str, float | None]:
        """The probe measured on every arm at once; output tok/s per arm (None: it failed).
        Not written as results: the fairness check's figures go to the manifest."""
        got: dict[str, float | None] = {}

        def one(point: Point) -> None:
            try:
                raw = workers[point.arm]._measure_sampled(point)
            except SpecopsError as exc:
                raw = ResultRecord.failed_point(str(exc))
            tput = raw.output_throughput if raw.status != STATUS_FAILED else None
            got[point.arm] = float(tput) if isinstance(tput, (int, float)) else None

        errors = _in_threads([(f"fair-{p.arm}", functools.partial(one, p)) for p in probe])
        if errors:
            raise errors[0]
        return got

    def _run_side_by_side(self, points: list[Point], sched: Scheduling) -> None:
        """Every arm measures the same point (level, repeat, length) at once, each with its own
        client and connection, then the next point. A fairness check first (the probe alone,
        then side by side: a failure interleaves the rest) and at the end (a failure measures
        the side-by-side points again, one arm at a time)."""
        workers = {arm: self._connected() for arm in self.settings.arms if any(p.arm == arm for p in points)}
        try:
            probe = self._probe(points)
            alone = {p.arm: _tps(self.run_point(p)) for p in probe}
            rest = [p for p in points if p not in probe]
            if probe:
                self._fairness(sched, "start", alone, self._measure_together(workers, probe))
            self._record_scheduling(sched)
            if sched.mode != AT_ONCE:
                for point in rest:
                    if self._wanted(point):
                        self.run_point(point)
                return
            together = self._groups_at_once(workers, rest)
            if probe and together:
                # the probe side by side once more, with the level's repeats measured side by side:
                # their median against the alone figure, within their spread
                last = self._measure_together(workers, probe)
                side = {p.arm: self._side_figures(p, together) + [v for v in [last.get(p.arm)] if v is not None]
                        for p in probe}
                fair = self._fairness(sched, "end", alone, {a: median(v) for a, v in side.items()}, side,
                                      redo=len(together))
                self._record_scheduling(sched)
                if not fair:
                    for point in together:
                        if not self.pool.taken(point.arm):
                            self.run_point(point)
        finally:
            for worker in workers.values():
                worker.transport.close()

    def _side_figures(self, probe: Point, together: list[Point]) -> list[float]:
        """Output tok/s of the probe's arm and level at the repeats measured side by side."""
        repeats = {p.repeat for p in together if p.arm == probe.arm and level_key(p) == level_key(probe)}
        figures = []
        for rec in load_results(self.run_dir):
            tput = _tps(rec)
            if (rec.host == self.host.name and rec.arm == probe.arm and rec.repeat in repeats
                    and level_key(rec) == level_key(probe) and tput is not None):
                figures.append(tput)
        return figures

    def _fairness(self, sched: Scheduling, phase: str, alone: dict[str, float | None],
                  together: dict[str, float | None], spread: dict[str, list[float]] | None = None,
                  redo: int = 0) -> bool:
        """Record one fairness check; on a failure the sweep goes on one arm at a time, saying why."""
        check = compare(phase, alone, together, spread)
        sched.fairness.append(check)
        if not check["ok"]:
            sched.mode = ONE_AT_A_TIME
            then = (f"the {redo} points measured side by side were measured again one arm at a time" if redo
                    else "fell back to one arm at a time")
            sched.reason = f"fairness check failed at the {phase} ({check['why']}): {then}"
        return bool(check["ok"])

    def _groups_at_once(self, workers: dict[str, "HostSweep"], points: list[Point]) -> list[Point]:
        """Each group of points (bench/matrix.point_groups) on its arms at once, one group after
        another; the points measured side by side."""
        together: list[Point] = []
        for group in point_groups(points):
            now = [p for p in group if self._wanted(p)]
            if len(now) == 1:
                self.run_point(now[0])
                continue
            errors = _in_threads([(f"sweep-{self.host.name}-{p.arm}", functools.partial(workers[p.arm].run_point, p))
                                  for p in now])
            together += now
            if errors:
                raise errors[0]
        return together

    def _run_jobs(self, points: list[Point]) -> None:
        """Slurm arms: each arm is its own job, on whatever node and GPUs the scheduler
        gives it, so each arm sweeps its points in a thread of its own (arms on different
        nodes at once; an arm whose job must wait for GPUs waits, then runs) and its job is
        cancelled when its points are done. The first error is raised once all have ended.
        A transport is not shared between threads: each arm gets a connection of its own.
        With `nodes: N`, allocations 2..N run the same sweep at once as hosts `H#2`..`H#N`."""
        sweeps = [self] + [self._replica(k) for k in range(2, replicas(next(iter(self.plans.values()))) + 1)]

        def arm_sweep(owner: HostSweep, arm: str, arm_points: list[Point]) -> None:
            mine = self._connected(owner)
            failed: BaseException | None = None
            try:
                mine._up([arm])
                for point in arm_points:
                    if mine._wanted(point):
                        mine.run_point(point)
            except BaseException as exc:  # noqa: BLE001 - the sweep's error wins over the stop's
                failed = exc
            try:
                mine._down([arm])
            except BaseException as exc:  # noqa: BLE001
                failed = failed or exc
            finally:
                mine.transport.close()
            if failed is not None:
                raise failed

        tasks: list[tuple[str, Callable[[], object]]] = []
        for owner in sweeps:
            for arm in self.settings.arms:
                arm_points = [p for p in points if p.arm == arm]
                if arm_points:
                    tasks.append((f"sweep-{owner.host.name}-{arm}", functools.partial(arm_sweep, owner, arm, arm_points)))
        try:
            errors = _in_threads(tasks)
        finally:
            for owner in sweeps:
                owner.stop_launched()
        if errors:
            raise errors[0]

    def _replica(self, k: int) -> "HostSweep":
        """The sweep on allocation k of a `nodes: N` Slurm host: host `H#k` in the results,
        arms `baseline#k` (own jobs, state files, logs and ports)."""
        twin = copy.copy(self)
        twin.host = dataclasses.replace(self.host, name=f"{self.host.name}#{k}")
        twin.plans = {arm: replica_plan(plan, k) for arm, plan in self.plans.items()}
        twin.pool = self.pool.replica(twin.host.name, twin.plans)
        return twin


def _tps(record: ResultRecord) -> float | None:
    """An ok record's output tok/s; None for a failed point."""
    tput = record.output_throughput if record.ok else None
    return float(tput) if isinstance(tput, (int, float)) else None


def _in_threads(tasks: list[tuple[str, Callable[[], object]]]) -> list[BaseException]:
    """Run each (name, task) in a thread of its own and wait for all; the errors they raised,
    for the caller to raise in the step's thread (one shape for Slurm arms and side-by-side points)."""
    errors: list[BaseException] = []

    def guarded(task: Callable[[], object]) -> None:
        try:
            task()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller, in the step's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(task,), daemon=True, name=name) for name, task in tasks]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    return errors


def matrix_for(settings: BenchSettings, run_dir: Path, host: str) -> list[Point]:
    """The points this host still has to run (all of them on a fresh run). With several
    lengths a point is done when an ok record of its arm, level, repeat and length exists
    (records carry input_len/output_len), so `--extend` adding a length keeps the old points."""
    rule = settings.repeat_rule()
    matrix = settings.plan(rule.most)
    if all(p.input_len is None for p in matrix):
        missing = missing_points(run_dir, matrix, host=host)
    else:
        done = {(r.arm, r.concurrency, r.rate, r.repeat, r.input_len, r.output_len)
                for r in load_results(run_dir) if r.ok and r.host == host}
        missing = [p for p in matrix
                   if (p.arm, p.concurrency, p.rate, p.repeat, p.input_len, p.output_len) not in done]
    return unsettled(settings, missing, load_results(run_dir), host) if rule.auto else missing


def unsettled(settings: BenchSettings, points: list[Point], records: list[ResultRecord], host: str) -> list[Point]:
    """With `--repeats auto`: the points whose arm and level still need a repeat
    (bench/repeats.py); the rest are settled by the records so far."""
    rule = settings.repeat_rule()
    values = throughputs(records, host)
    return [p for p in points if p.repeat < rule.least or settled(rule, values, settings.arms, p.arm, level_key(p)) is None]


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


def gpu_facts(transport: Transport) -> dict[str, Any]:
    """What the manifest records of the host's GPUs: the model and count for the report's
    header, and everything nvidia-smi said (memory, driver, CUDA) for whoever reads it later."""
    inventory = read_gpus(transport)
    if inventory.error or not inventory.gpus:
        return {"gpu": "none (CPU host)", "gpu_count": 0}
    return {"gpu": inventory.gpus[0].name, "gpu_count": len(inventory.gpus), "gpus": inventory.to_dict()}


#: the facts of device_facts that the manifest also keeps at its top (the report's header)
HEADER_FACTS = ("gpu", "gpu_count", "device", "cpu", "cpu_cores")


def device_facts(transport: Transport, device: str = "gpu") -> dict[str, Any]:
    """What the manifest records of what the arms ran on: gpu_facts, or on a CPU host
    (`device: cpu`) the CPU's model, cores and memory (never "GPU: none")."""
    if device != "cpu":
        return gpu_facts(transport)
    cpu = read_cpu(transport)
    return {"device": "cpu", "cpu": cpu.describe(), "cpu_cores": cpu.cores, "cpu_facts": cpu.to_dict()}


def tree_commit(transport: Transport, tree: str) -> str | None:
    r = transport.run(["git", "-C", tree, "rev-parse", "HEAD"], timeout=30)
    return r.stdout.strip() if r.ok else None


def specops_version() -> str:
    return __version__
