"""The serving engines, and the one place that chooses one.

A host's `engine:` in hosts.yaml (`config.inventory.ENGINES`, checked where the file is read)
names its entry in `ENGINES`; `engine_for(host)` returns it, once per host, as
`servers.supervisor.supervisor_for` returns the host's supervisor: callers ask the engine, never
which one it is. Callers that hold a server's state rather than its host (the running-batch
sampler) ask `engine_of(argv)`: the engine that started that argv.

A second engine is a module in this package implementing `base.ServingEngine`, a line in
`ENGINES`, and its name in `config.inventory.ENGINES` (tests/unit/test_engines.py checks the two
lists agree).
"""

from __future__ import annotations

from typing import Sequence

from specops.config.inventory import Host
from specops.engines.base import BatchMetrics, CrashMessage, ServingEngine
from specops.engines.schedule import Schedule, ScheduleForm
from specops.engines.sglang import SGLang, Simulator
from specops.engines.vllm import VLLM, SimulatedVLLM
from specops.errors import ConfigError

__all__ = ["ENGINES", "DEFAULT", "BatchMetrics", "ServingEngine", "crash_messages", "engine_for", "engine_named",
           "engine_of", "ready_lines", "schedule_forms"]

#: hosts.yaml's `engine:` value -> the engine
ENGINES: dict[str, ServingEngine] = {"sglang": SGLang(), "sim": Simulator(), "vllm": VLLM(),
                                     "sim-vllm": SimulatedVLLM()}
#: the engine of a host without `engine:` (config.inventory's default)
DEFAULT: ServingEngine = ENGINES[Host.engine]


def engine_named(name: str, where: str | None = None) -> ServingEngine:
    """The engine called `name` (a host's `engine:`, or a playbook's `engine` variable)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigError(f"unknown engine {name!r} ({' or '.join(ENGINES)})", where=where) from None


def engine_for(host: Host) -> ServingEngine:
    """The host's engine: its `engine:` in hosts.yaml."""
    return engine_named(host.engine, where=f"host {host.name}")


def engine_of(argv: Sequence[str] | None) -> ServingEngine:
    """The engine that started a server with `argv` (a state file's), else the default."""
    return next((e for e in ENGINES.values() if argv and e.launched(argv)), DEFAULT)


def _faces() -> list[ServingEngine]:
    """One engine per face: engines that share a face log the same lines."""
    seen: dict[str, ServingEngine] = {}
    for engine in ENGINES.values():
        seen.setdefault(engine.face, engine)
    return list(seen.values())


def ready_lines() -> tuple[str, ...]:
    """Every engine's ready line, once each: the readiness watch looks for any of them."""
    return tuple(dict.fromkeys(e.ready_line for e in _faces()))


def crash_messages() -> tuple[tuple[str, CrashMessage], ...]:
    """(face, message) for every engine's crash messages, once per face."""
    return tuple((e.face, m) for e in _faces() for m in e.crash_messages)


def schedule_forms(schedule: Schedule, *, draft_model: str, max_batch: int) -> list[ScheduleForm]:
    """`schedule` in every engine route's own form (a simulator's are its engine's, not repeated)."""
    return [form for engine in ENGINES.values() if not engine.simulated
            for form in engine.schedule_forms(schedule, draft_model=draft_model, max_batch=max_batch)]
