"""manifest.json of a bench run as typed records: one reader, one writer, one update.

The file stays what it was (sorted keys, indent 2, secrets masked, written atomically), and
any manifest reads back to the same bytes: a key this module does not know, or a known key
holding a value of another type (an old run's, a hand edit), is kept as it is in the part's
`extra` and written back unchanged; a key that was null stays null, a key that was absent
stays absent. So old runs read, and a rewrite changes only what the writer changed.

Typed where the shape is fixed: the run's facts (`Manifest`), each host's facts
(`HostFacts`), each arm's launch record (`ArmRecord`), the recorded settings (`RunSettings`,
the manifest's `bench`) and the scheduling decision (`Scheduling`, which bench/scheduling.py
makes).
Open-ended, and so `dict[str, Any]`: the client settings (`client`), an arm's
`server_args` (whatever /server_info says), the GPU/CPU inventories and container images.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from specops.errors import ConfigError
from specops.fsutil import atomic_write
from specops.records.checks import Check, is_length, list_of, number_or_dict, of
from specops.secrets import redact

MANIFEST_JSON = "manifest.json"

# Hosts write their parts from threads (and steps from the engine): one read-modify-write
# at a time per process.
_LOCK = threading.Lock()

P = TypeVar("P", bound="_Part")

#: value checks (records/checks.py)
_STR, _INT, _BOOL, _DICT = of(str), of(int), of(bool), of(dict)
_LENGTH = is_length
_NUMBER = of(int, float)


@dataclass
class Scheduling:
    """How a host's arms were scheduled, as the manifest records it (bench/scheduling.py
    decides): the mode, why, and the fairness checks' figures."""

    mode: str
    reason: str
    asked: str = "auto"
    fairness: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True)
class _Part:
    """The shared reading and writing of a typed part (see the module docstring)."""

    PLAIN: ClassVar[dict[str, Check]] = {}     # key -> the check its value must pass to be typed
    NESTED: ClassVar[tuple[str, ...]] = ()      # keys a subclass reads and writes itself

    extra: dict[str, Any] = field(default_factory=dict)   # unknown keys, ill-typed values: kept as read
    nulls: set[str] = field(default_factory=set, repr=False, compare=False)  # typed keys read as null

    @classmethod
    def _split(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """Constructor arguments for the plain keys of `data`; the rest to `extra`."""
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        nulls: set[str] = set()
        for key, value in data.items():
            check = cls.PLAIN.get(key)
            if key in cls.NESTED:
                continue
            if check is not None and value is None:
                nulls.add(key)
            elif check is not None and check(value):
                kwargs[key] = value
            else:
                extra[key] = value
        kwargs["extra"], kwargs["nulls"] = extra, nulls
        return kwargs

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Any]) -> P:
        return cls(**cls._split(data))

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.extra)
        for key in self.PLAIN:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
            elif key in self.nulls:
                out[key] = None
        return out

    def has(self, key: str) -> bool:
        """Whether the file would hold `key` (the test `dict.setdefault` made)."""
        return key in self.extra or key in self.nulls or (key in self.PLAIN and getattr(self, key) is not None)

    def merge(self, data: Mapping[str, Any]) -> None:
        """`dict.update` on the stored form: each key of `data` replaces this part's."""
        incoming = type(self).from_dict({k: v for k, v in data.items() if k not in self.NESTED})
        for key in data:
            if key in self.NESTED:
                raise TypeError(f"{type(self).__name__}.merge: {key!r} is a nested part; set it directly")
            self.extra.pop(key, None)
            self.nulls.discard(key)
            if key in self.PLAIN:
                setattr(self, key, getattr(incoming, key))
        self.extra.update(incoming.extra)
        self.nulls |= incoming.nulls

    def set_default(self, key: str, value: Any) -> None:
        """`dict.setdefault` on the stored form."""
        if not self.has(key):
            self.merge({key: value})


@dataclass(kw_only=True)
class ArmRecord(_Part):
    """One arm as the sweep launched it (`hosts.<host>.arms.<arm>`; a run's top-level
    `arms` in older manifests): command, resolved server args, mechanism, threshold."""

    PLAIN: ClassVar[dict[str, Check]] = {
        "command": _STR, "argv": list_of(str), "mechanism": _STR, "effective_threshold": _INT,
        "threshold": _INT, "notes": list_of(str), "server_args": _DICT, "simulated": _BOOL, "device": _STR,
        "slurm": _DICT, "container": _DICT}

    command: str | None = None
    argv: list[str] | None = None
    mechanism: str | None = None
    effective_threshold: int | None = None
    threshold: int | None = None          # the configured one (older manifests, tests)
    notes: list[str] | None = None
    server_args: dict[str, Any] | None = None   # /server_info as it answered: open-ended
    simulated: bool | None = None
    device: str | None = None
    slurm: dict[str, Any] | None = None         # job id, node and GPU indices
    container: dict[str, Any] | None = None     # the image record (servers.container.image_record)


def _arms_from(value: Any) -> dict[str, ArmRecord] | None:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        return None
    return {str(k): ArmRecord.from_dict(v) for k, v in value.items()}


def _scheduling_from(value: Any) -> Scheduling | None:
    """The recorded decision when it has exactly the shape Scheduling writes, else None
    (then it stays raw in `extra`)."""
    if not isinstance(value, dict) or set(value) != {"mode", "reason", "asked", "fairness"}:
        return None
    if not (_STR(value["mode"]) and _STR(value["reason"]) and _STR(value["asked"])
            and list_of(dict)(value["fairness"])):
        return None
    return Scheduling(mode=value["mode"], reason=value["reason"], asked=value["asked"], fairness=value["fairness"])


@dataclass(kw_only=True)
class HostFacts(_Part):
    """`hosts.<host>`: what the host ran (its engine and that engine's release, GPUs or CPU), its
    arms and its scheduling."""

    PLAIN: ClassVar[dict[str, Check]] = {
        "engine_version": _STR, "sglang_version": _STR, "sglang_commit": _STR, "engine": _STR, "gpu": _STR,
        "gpu_count": _INT, "gpus": _DICT, "device": _STR, "cpu": _STR, "cpu_cores": _INT, "cpu_facts": _DICT,
        "container": _DICT}
    NESTED: ClassVar[tuple[str, ...]] = ("arms", "scheduling")

    engine_version: str | None = None         # the release of `engine` (SGLang's or vLLM's)
    sglang_version: str | None = None         # runs recorded before engine_version: read, never written
    sglang_commit: str | None = None
    engine: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    gpus: dict[str, Any] | None = None        # the nvidia-smi inventory: open-ended
    device: str | None = None                 # "cpu" on a CPU host
    cpu: str | None = None
    cpu_cores: int | None = None
    cpu_facts: dict[str, Any] | None = None
    container: dict[str, Any] | None = None   # servers.container.image_manifest
    arms: dict[str, ArmRecord] | None = None
    scheduling: Scheduling | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostFacts:
        part = cls(**cls._split(data))
        for key, read in (("arms", _arms_from), ("scheduling", _scheduling_from)):
            if key in data:
                value = read(data[key])
                if value is None:
                    part.extra[key] = data[key]
                else:
                    setattr(part, key, value)
        return part

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.arms is not None:
            out["arms"] = {name: arm.to_dict() for name, arm in self.arms.items()}
        if self.scheduling is not None:
            out["scheduling"] = self.scheduling.to_dict()
        return out

    def engine_release(self) -> str | None:
        """The engine's release: `engine_version`, else an older run's `sglang_version`."""
        return self.engine_version or self.sglang_version

    def arm_records(self) -> dict[str, ArmRecord]:
        """The arms, created empty on first use (a writer's `setdefault("arms", {})`)."""
        if self.arms is None:
            self.extra.pop("arms", None)
            self.arms = {}
        return self.arms


def _stored(check: Check) -> Any:
    """A RunSettings field: None until read, and the check its stored value must pass."""
    return field(default=None, metadata={"check": check})


@dataclass(kw_only=True)
class RunSettings(_Part):
    """The manifest's `bench`: the sweep's settings as recorded (bench/settings.py's
    settings_record: BenchSettings plus the dataset hash). Read back by --resume, tune --from,
    the report. Each field's metadata holds the check its stored value must pass to be read
    as typed; bench/settings.py holds the settings schema to these keys, one per field.
    """

    arms: list[str] | None = _stored(list_of(str))
    concurrency: list[int] | None = _stored(list_of(int))
    rate: list[float] | None = _stored(list_of(int, float))  # a rate sweep's levels (requests/s); absent from a concurrency sweep
    arrival: str | None = _stored(_STR)           # its arrival process
    trace: str | None = _stored(_STR)             # a replayed trace (bench --trace): its file and digest
    trace_sha256: str | None = _stored(_STR)
    phases: str | None = _stored(_STR)            # a phase run's timeline (bench --phases)
    repeats: int | None = _stored(_INT)
    repeats_auto: bool | None = _stored(_BOOL)
    num_prompts: int | None = _stored(_INT)
    prompts_per_level: int | None = _stored(_INT)
    input_len: int | list[int] | None = _stored(_LENGTH)
    output_len: int | list[int] | None = _stored(_LENGTH)
    dataset: str | None = _stored(_STR)
    runner: str | None = _stored(_STR)
    seed: int | None = _stored(_INT)
    keep_servers: bool | None = _stored(_BOOL)
    ready_timeout: float | None = _stored(_NUMBER)
    point_timeout: float | None = _stored(_NUMBER)
    slo: dict[str, Any] | None = _stored(_DICT)
    objective: str | None = _stored(_STR)
    gpu_hour_cost: float | dict[str, Any] | None = _stored(number_or_dict)
    scheduling: str | None = _stored(_STR)
    dataset_hash: str | None = _stored(_STR)


RunSettings.PLAIN = {f.name: f.metadata["check"] for f in fields(RunSettings) if "check" in f.metadata}


@dataclass(kw_only=True)
class Manifest(_Part):
    """A run's manifest.json. `Manifest()` is a run that has none yet."""

    PLAIN: ClassVar[dict[str, Check]] = {
        "specops_version": _STR, "run_id": _STR, "client": _DICT, "engine_version": _STR, "sglang_version": _STR,
        "sglang_commit": _STR, "gpu": _STR, "gpu_count": _INT, "device": _STR, "cpu": _STR, "cpu_cores": _INT, "simulated": _BOOL,
        "runner": _STR, "dataset": _STR, "dataset_hash": _STR, "input_len": _LENGTH, "output_len": _LENGTH}
    NESTED: ClassVar[tuple[str, ...]] = ("bench", "hosts", "arms")

    specops_version: str | None = None
    run_id: str | None = None
    client: dict[str, Any] | None = None      # the client's settings (runner, seed, lengths, temperature)
    engine_version: str | None = None         # the first host's engine release (hosts.<h>.engine names it)
    sglang_version: str | None = None         # runs recorded before engine_version: read, never written
    sglang_commit: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    device: str | None = None
    cpu: str | None = None
    cpu_cores: int | None = None
    simulated: bool | None = None
    # the client's settings at the top: older manifests (the report's header still shows them)
    runner: str | None = None
    dataset: str | None = None
    dataset_hash: str | None = None
    input_len: int | list[int] | None = None
    output_len: int | list[int] | None = None
    bench: RunSettings | None = None
    hosts: dict[str, HostFacts] | None = None
    arms: dict[str, ArmRecord] | None = None  # one run's arms at the top: older manifests, tests

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        """The one reader of the JSON object (tolerant: see the module docstring)."""
        part = cls(**cls._split(data))
        if isinstance(data.get("bench"), dict):
            part.bench = RunSettings.from_dict(data["bench"])
        elif "bench" in data:
            part.extra["bench"] = data["bench"]
        hosts = data.get("hosts")
        if isinstance(hosts, dict) and all(isinstance(v, dict) for v in hosts.values()):
            part.hosts = {str(k): HostFacts.from_dict(v) for k, v in hosts.items()}
        elif "hosts" in data:
            part.extra["hosts"] = hosts
        if "arms" in data:
            arms = _arms_from(data["arms"])
            if arms is None:
                part.extra["arms"] = data["arms"]
            else:
                part.arms = arms
        return part

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.bench is not None:
            out["bench"] = self.bench.to_dict()
        if self.hosts is not None:
            out["hosts"] = {name: host.to_dict() for name, host in self.hosts.items()}
        if self.arms is not None:
            out["arms"] = {name: arm.to_dict() for name, arm in self.arms.items()}
        return out

    def host(self, name: str) -> HostFacts:
        """The host's part, created empty on first use."""
        if self.hosts is None:
            self.extra.pop("hosts", None)
            self.hosts = {}
        return self.hosts.setdefault(name, HostFacts())

    def host_facts(self, name: str) -> HostFacts | None:
        """The host's part when the manifest has one (readers: no side effect)."""
        return (self.hosts or {}).get(name)

    def header(self, key: str) -> Any:
        """A run-level fact by its key (the report's header lists them by key);
        `engine_version` is an older run's `sglang_version` where it has no other."""
        if key not in self.PLAIN:
            raise KeyError(key)
        if key == "engine_version":
            return self.engine_release()
        return getattr(self, key)

    def engine_release(self) -> str | None:
        """The engine's release: `engine_version`, else an older run's `sglang_version`."""
        return self.engine_version or self.sglang_version

    def settings(self) -> RunSettings:
        """The recorded settings; empty ones for a run from before they were recorded."""
        return self.bench if self.bench is not None else RunSettings()

    def arm_sets(self) -> list[tuple[str, dict[str, ArmRecord]]]:
        """(label, arms) for the top-level arms and each host's arms (the report's fairness
        check): the label is "" or "host NAME: "."""
        sets: list[tuple[str, dict[str, ArmRecord]]] = []
        if self.arms:
            sets.append(("", self.arms))
        for name in sorted(self.hosts or {}):
            arms = (self.hosts or {})[name].arms
            if arms:
                sets.append((f"host {name}: ", arms))
        return sets


def _check_fields() -> None:
    """Every typed key is a dataclass field (a typo in PLAIN would read as None forever)."""
    for cls in (ArmRecord, HostFacts, RunSettings, Manifest):
        names = {f.name for f in fields(cls)}
        missing = (set(cls.PLAIN) | set(cls.NESTED)) - names
        assert not missing, (cls.__name__, missing)


_check_fields()


#: what the report's entry points take: a Manifest, or the JSON object's dict (tests build those)
ManifestLike = Manifest | Mapping[str, Any] | None


def as_manifest(value: ManifestLike) -> Manifest:
    """A Manifest from a Manifest, the JSON object's dict (tests, callers holding one) or None."""
    if isinstance(value, Manifest):
        return value
    return Manifest.from_dict(value or {})


def render(manifest: Manifest | Mapping[str, Any]) -> str:
    """The file's text: secrets masked, keys sorted (so re-writes diff cleanly)."""
    return json.dumps(redact(as_manifest(manifest).to_dict()), indent=2, sort_keys=True, default=str) + "\n"


def write(run_dir: Path, manifest: Manifest | Mapping[str, Any]) -> Path:
    """The one writer: manifest.json, atomically."""
    path = Path(run_dir) / MANIFEST_JSON
    atomic_write(path, render(manifest))
    return path


def read(run_dir: Path) -> Manifest:
    """The one reader of the file: an empty Manifest when the run has none yet."""
    path = Path(run_dir) / MANIFEST_JSON
    if not path.exists():
        return Manifest()
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"manifest is not valid JSON: {exc}", where=str(path)) from None
    if not isinstance(data, dict):
        raise ConfigError("manifest is not a JSON object", where=str(path))
    return Manifest.from_dict(data)


def update(run_dir: Path, change: Callable[[Manifest], None]) -> Manifest:
    """Read-modify-write manifest.json under the lock (hosts write their parts from threads);
    returns the manifest as written."""
    with _LOCK:
        manifest = read(run_dir)
        change(manifest)
        write(run_dir, manifest)
        return manifest
