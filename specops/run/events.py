"""Journal events: one dataclass per kind of line in events.jsonl.

Every event a run journals is built from a class here and written by `Journal.emit` (the
one writer, which stamps `ts` and masks secrets). The lines keep the shape they had when
events were free keyword arguments: `to_record` gives the same keys, optional keys are
left out where they were left out (`_OMIT_NONE`, `_OMIT_FALSY`), and the open-ended part
of a few kinds (a step's outcome data, a skipped step's facts) is one `dict[str, Any]`
field flattened into the line (`_FLAT`). `parse` reads a line back, old run directories'
included; a kind it does not know comes back as `Unknown`, never an error.

The envelope: `ts` and `event` on every line; `host` on all but the run's own events;
`step` on a step's events (None on a host's failure outside any step); `step_index` on
the engine's step events.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

#: how a field goes into the line (field metadata "how")
_OMIT_NONE = {"how": "none"}  # left out when None
_OMIT_FALSY = {"how": "falsy"}  # left out when false or empty
_FLAT = {"how": "flat"}  # a dict whose keys are the line's own (after the named fields)
_HIDDEN = {"how": "hidden"}  # not a key of the line (ts, Unknown's name: the envelope's)


@dataclass(kw_only=True)
class Event:
    """What every line has; `ts` is set when the journal writes it."""

    EVENT: ClassVar[str] = ""
    ts: float | None = field(default=None, metadata=_HIDDEN)

    @property
    def name(self) -> str:
        """The `event` key of the line."""
        return self.EVENT

    def fields(self) -> dict[str, Any]:
        """The line's keys after `ts` and `event`, as they were always written."""
        out: dict[str, Any] = {}
        flat: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            how, value = f.metadata.get("how"), getattr(self, f.name)
            if how == "hidden" or (how == "none" and value is None) or (how == "falsy" and not value):
                continue
            if how == "flat":
                flat.update(value)
            else:
                out[f.name] = value
        out.update({k: v for k, v in flat.items() if k not in out and k not in ("ts", "event")})
        return out

    def to_record(self) -> dict[str, Any]:
        return {"ts": self.ts, "event": self.name, **self.fields()}


# ----- the run's own ---------------------------------------------------------------------

@dataclass(kw_only=True)
class RunStart(Event):
    EVENT = "run_start"
    run_id: str
    playbook: str
    hosts: list[str]
    check: bool


@dataclass(kw_only=True)
class Resume(RunStart):
    """A run started with --resume (same fields; the run directory is the earlier run's)."""

    EVENT = "resume"


@dataclass(kw_only=True)
class RunDone(Event):
    EVENT = "run_done"
    ok: bool
    interrupted: bool
    failed: list[str]


# ----- a host's, outside its steps -------------------------------------------------------

@dataclass(kw_only=True)
class HostEvent(Event):
    host: str


@dataclass(kw_only=True)
class Connected(HostEvent):
    EVENT = "connected"
    home: str


@dataclass(kw_only=True)
class Secrets(HostEvent):
    """The host's secrets file was written: the names, never the values."""

    EVENT = "secrets"
    names: list[str]
    path: str
    mode: str


@dataclass(kw_only=True)
class InterruptCleanup(HostEvent):
    EVENT = "interrupt_cleanup"
    arms: list[str]
    action: str
    error: str


@dataclass(kw_only=True)
class Warn(HostEvent):
    """Slower or unusual but correct; `step` is absent for a host's own (its transport's)."""

    EVENT = "warning"
    step: str | None = field(default=None, metadata=_OMIT_NONE)
    message: str


@dataclass(kw_only=True)
class Fail(HostEvent):
    """A host or a step failed. `step` None (present): the host failed before its steps;
    `phase` absent: an internal error (a traceback), not a phase of the step contract."""

    EVENT = "fail"
    step: str | None
    step_index: int | None = field(default=None, metadata=_OMIT_NONE)
    error: str
    phase: str | None = field(default=None, metadata=_OMIT_NONE)
    rollback_failed: bool = field(default=False, metadata=_OMIT_FALSY)


# ----- a step's ----------------------------------------------------------------------------

@dataclass(kw_only=True)
class StepEvent(HostEvent):
    """Something a step did (`step` None: a command run outside any step)."""

    step: str | None


@dataclass(kw_only=True)
class EngineStepEvent(StepEvent):
    """The engine's record of a step's progress through the contract."""

    step: str
    step_index: int


@dataclass(kw_only=True)
class StepStart(EngineStepEvent):
    EVENT = "step_start"
    kind: str


@dataclass(kw_only=True)
class Skip(EngineStepEvent):
    """`reason` "when" (its condition is false) or already verified; `facts` what the
    step's check learnt (a GPU inventory, a tree's commit)."""

    EVENT = "skip"
    reason: str
    facts: dict[str, Any] = field(default_factory=dict, metadata=_FLAT)


@dataclass(kw_only=True)
class CheckPreview(EngineStepEvent):
    """--check: what the step would do (`status`) and the commands it would run."""

    EVENT = "check"
    commands: list[str]
    status: str


@dataclass(kw_only=True)
class Apply(EngineStepEvent):
    EVENT = "apply"
    attempt: int
    changed: bool
    duration_s: float
    data: dict[str, Any] = field(default_factory=dict, metadata=_FLAT)


@dataclass(kw_only=True)
class Verify(EngineStepEvent):
    EVENT = "verify"
    attempt: int
    ok: bool
    seen: str
    phase: str | None = field(default=None, metadata=_OMIT_NONE)


@dataclass(kw_only=True)
class Retry(EngineStepEvent):
    EVENT = "retry"
    attempt: int
    delay_s: float


@dataclass(kw_only=True)
class Done(EngineStepEvent):
    """Finished: `changed`, or `ignored_failure` (what failed, under ignore_errors)."""

    EVENT = "done"
    changed: bool | None = field(default=None, metadata=_OMIT_NONE)
    ignored_failure: str | None = field(default=None, metadata=_OMIT_NONE)


@dataclass(kw_only=True)
class Rollback(EngineStepEvent):
    EVENT = "rollback"
    notes: list[str]
    failed: list[str] = field(default_factory=list, metadata=_OMIT_FALSY)


@dataclass(kw_only=True)
class Command(StepEvent):
    """One command: its exact line, rc and timing; each output inline, or its tail and the
    file under logs/ that holds it whole."""

    EVENT = "command"
    command: str
    rc: int
    duration_s: float
    probe: bool = field(default=False, metadata=_OMIT_FALSY)
    timed_out: bool = field(default=False, metadata=_OMIT_FALSY)
    stdout: str | None = field(default=None, metadata=_OMIT_NONE)
    stdout_tail: str | None = field(default=None, metadata=_OMIT_NONE)
    stdout_file: str | None = field(default=None, metadata=_OMIT_NONE)
    stderr: str | None = field(default=None, metadata=_OMIT_NONE)
    stderr_tail: str | None = field(default=None, metadata=_OMIT_NONE)
    stderr_file: str | None = field(default=None, metadata=_OMIT_NONE)


@dataclass(kw_only=True)
class Put(StepEvent):
    """A file written on the host, as `put_line` shows it."""

    EVENT = "put"
    path: str
    bytes: int
    command: str


@dataclass(kw_only=True)
class Get(StepEvent):
    EVENT = "get"
    path: str
    bytes: int
    command: str


@dataclass(kw_only=True)
class BuiltinCheck(StepEvent):
    """A patch set's own check of the tree (not a host command); shares the kind name
    "check" with --check's CheckPreview, told apart by having no step_index."""

    EVENT = "check"
    check: str
    ok: bool
    lines: list[str]


@dataclass(kw_only=True)
class Lease(StepEvent):
    """Whom the run waits for (--wait), said as the user saw it."""

    EVENT = "lease"
    message: str


@dataclass(kw_only=True)
class Note(StepEvent):
    EVENT = "note"
    message: str


@dataclass(kw_only=True)
class Cpu(StepEvent):
    EVENT = "cpu"
    device: str
    cpu: dict[str, Any]


@dataclass(kw_only=True)
class Gpus(StepEvent):
    EVENT = "gpus"
    gpus: dict[str, Any]
    placement: list[str]


@dataclass(kw_only=True)
class Server(StepEvent):
    """An arm's server launched, restarted or reused by the server step."""

    EVENT = "server"
    arm: str
    action: str
    pid: int
    port: int
    mechanism: str
    command: str
    log: str


@dataclass(kw_only=True)
class SlurmJob(StepEvent):
    """A supervisor's news of an arm's job: queued and why, running on which node."""

    EVENT = "slurm_job"
    arm: str
    job_id: str
    job_state: str
    reason: str | None = None
    node: str | None = None
    gpus: list[int] = field(default_factory=list)


# ----- a bench step's sweep (its log callback, kinds prefixed bench_) ----------------------

@dataclass(kw_only=True)
class BenchLease(StepEvent):
    EVENT = "bench_lease"
    arm: str
    lead: bool
    shared_with: list[str]


@dataclass(kw_only=True)
class BenchServer(StepEvent):
    EVENT = "bench_server"
    arm: str
    action: str
    pid: int
    mechanism: str


@dataclass(kw_only=True)
class BenchRelaunch(StepEvent):
    EVENT = "bench_relaunch"
    arm: str


@dataclass(kw_only=True)
class BenchTakenOver(StepEvent):
    EVENT = "bench_taken_over"
    arm: str
    message: str


@dataclass(kw_only=True)
class BenchClient(StepEvent):
    """Where the benchmark client runs when not beside the server, and why."""

    EVENT = "bench_client"
    where: str
    why: str


@dataclass(kw_only=True)
class BenchPoint(StepEvent):
    EVENT = "bench_point"
    arm: str
    concurrency: int
    repeat: int
    status: str
    output_throughput: float | None
    t0: float
    wall_s: float


@dataclass(kw_only=True)
class BenchScheduling(StepEvent):
    EVENT = "bench_scheduling"
    mode: str
    reason: str


@dataclass(kw_only=True)
class BenchSlurmJob(SlurmJob):
    EVENT = "bench_slurm_job"


@dataclass(kw_only=True)
class Unknown(Event):
    """A line of a kind this version does not know (a newer run's, a free-form one)."""

    kind_name: str = field(default="", metadata=_HIDDEN)
    data: dict[str, Any] = field(default_factory=dict, metadata=_FLAT)

    @property
    def name(self) -> str:
        return self.kind_name


KINDS: tuple[type[Event], ...] = (
    RunStart, Resume, RunDone, Connected, Secrets, InterruptCleanup, Warn, Fail, StepStart, Skip,
    CheckPreview, Apply, Verify, Retry, Done, Rollback, Command, Put, Get, BuiltinCheck, Lease, Note, Cpu,
    Gpus, Server, SlurmJob, BenchLease, BenchServer, BenchRelaunch, BenchTakenOver, BenchClient, BenchPoint,
    BenchScheduling, BenchSlurmJob,
)
#: A registry, module-level on purpose: the classes for each `event` name (the key), in the
#: order `parse` tries them. Built once here at import from KINDS and only read after, so
#: every run and every reader in the process sees the same table; it holds no run's state.
BY_NAME: dict[str, list[type[Event]]] = {}
for _cls in KINDS:
    BY_NAME.setdefault(_cls.EVENT, []).append(_cls)


def build(cls: type[Event], record: Mapping[str, Any]) -> Event | None:
    """`record`'s keys as an instance of `cls`, or None when they do not fit it (a key it
    requires is missing, or one it has no place for is there)."""
    kwargs: dict[str, Any] = {}
    flat: str | None = None
    for f in dataclasses.fields(cls):
        how = f.metadata.get("how")
        if how == "flat":
            flat = f.name
        elif f.name in record:
            kwargs[f.name] = record[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            return None
    rest = {k: v for k, v in record.items() if k not in kwargs and k != "event"}
    if flat is not None:
        kwargs[flat] = rest
    elif rest:
        return None
    return cls(**kwargs)


def parse(record: Mapping[str, Any]) -> Event:
    """A journal line (a dict from events.jsonl) as its typed event."""
    name = str(record.get("event", ""))
    for cls in BY_NAME.get(name, ()):
        ev = build(cls, record)
        if ev is not None:
            return ev
    ts = record.get("ts")
    return Unknown(ts=ts if isinstance(ts, (int, float)) else None, kind_name=name,
                   data={k: v for k, v in record.items() if k not in ("ts", "event")})


def from_callback(name: str, host: str, step: str | None, data: Mapping[str, Any]) -> Event:
    """The event for a lower layer's `(kind, data)` callback (a sweep's log, a supervisor's
    news), e.g. `bench_point`; one whose data does not fit its class is kept as `Unknown`
    rather than stopping the step over a journal line."""
    return parse({"event": name, "host": host, "step": step, **data})
