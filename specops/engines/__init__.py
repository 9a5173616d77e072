"""The serving engines, and the one place that chooses one.

A host's `engine:` in hosts.yaml (checked where the file is read against
`config.engine_registry.names()`) names a registered engine; `engine_for(host)` returns it, once
per host, as `servers.supervisor.supervisor_for` returns the host's supervisor: callers ask the
engine, never which one it is. Callers that hold a server's state rather than its host (the
running-batch sampler) ask `engine_of(argv, name)`: the engine its state file names, else the
one that started that argv.

The registry is one: the built-ins (`BUILTIN`) and every engine a package registers under the
entry-point group `specops.engines` (`config.engine_registry`), loaded the first time it is
named. `ENGINES` reads it as a mapping. A new engine is a `base.ServingEngine` subclass with a
`spec` (docs/engines.md).
"""

from __future__ import annotations

import re
from typing import Iterator, Mapping, Sequence

from specops.config import engine_registry
from specops.config.engine_registry import EngineSpec, Feature
from specops.config.inventory import Host
from specops.engines.base import BatchMetrics, CrashMessage, ServingEngine
from specops.engines.schedule import Schedule, ScheduleForm
from specops.engines.sglang import SGLang, Simulator
from specops.engines.vllm import VLLM, SimulatedVLLM
from specops.errors import ConfigError

__all__ = ["BUILTIN", "ENGINES", "DEFAULT", "BatchMetrics", "EngineSpec", "Feature", "ServingEngine", "crash_messages",
           "engine_for", "engine_named", "engine_of", "log_prefixes", "ready_lines", "schedule_forms"]

#: the engines specops ships, by hosts.yaml's `engine:` value (config.engine_registry.BUILTIN's order)
BUILTIN: dict[str, ServingEngine] = {e.name: e for e in (SGLang(), Simulator(), VLLM(), SimulatedVLLM())}
#: the engine of a host without `engine:` (config.inventory's default)
DEFAULT: ServingEngine = BUILTIN[Host.engine]
_plugins: dict[str, ServingEngine] = {}


def _plugin(name: str, where: str | None) -> ServingEngine:
    """The plugin engine registered as `name`: its entry point's instance, or its class made one."""
    if name not in _plugins:
        spec = engine_registry.spec(name, where)  # unknown or broken: refused, naming it
        obj = engine_registry.load_plugin(name)
        engine = obj() if isinstance(obj, type) and issubclass(obj, ServingEngine) else obj
        if not isinstance(engine, ServingEngine):
            raise ConfigError(f"engine plugin {spec.plugin} registered as {name!r} is not a ServingEngine "
                              f"({type(engine).__name__})", where=where,
                              hint="subclass specops.engines.ServingEngine")
        if gaps := engine.missing_members():
            raise ConfigError(f"engine plugin {spec.plugin} registered as {name!r} does not set "
                              f"{', '.join(gaps)}", where=where, hint="docs/engines.md says what each member is for")
        _plugins[name] = engine
    return _plugins[name]


def engine_named(name: str, where: str | None = None) -> ServingEngine:
    """The engine called `name` (a host's `engine:`, or a playbook's `engine` variable)."""
    if name in BUILTIN:
        return BUILTIN[name]
    return _plugin(name, where)


class _Registry(Mapping[str, ServingEngine]):
    """Every registered engine by name, built-ins first; a plugin loads when it is first read."""

    def __getitem__(self, name: str) -> ServingEngine:
        if name not in engine_registry.names():
            raise KeyError(name)
        return engine_named(name)

    def __iter__(self) -> Iterator[str]:
        return iter(engine_registry.names())

    def __len__(self) -> int:
        return len(engine_registry.names())


#: hosts.yaml's `engine:` value -> the engine (the built-ins, then the plugins')
ENGINES: Mapping[str, ServingEngine] = _Registry()


def engine_for(host: Host) -> ServingEngine:
    """The host's engine: its `engine:` in hosts.yaml."""
    return engine_named(host.engine, where=f"host {host.name}")


def engine_of(argv: Sequence[str] | None, name: str = "") -> ServingEngine:
    """The engine that started a server: `name`, the engine its state file records, when it is
    registered; else (an older state file, or an engine since uninstalled) the first engine that
    recognises `argv`, else the default. The name comes first because engines may share a launch
    command (a plugin subclassing the simulator starts what the simulator starts)."""
    if name and name in engine_registry.names():
        return engine_named(name)
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


def log_prefixes() -> tuple[re.Pattern[str], ...]:
    """Every engine's log prefix, once each: the crash reader sets any of them aside."""
    return tuple(dict.fromkeys(e.log_prefix for e in _faces() if e.log_prefix is not None))


def crash_messages() -> tuple[tuple[str, CrashMessage], ...]:
    """(face, message) for every engine's crash messages, once per face."""
    return tuple((e.face, m) for e in _faces() for m in e.crash_messages)


def schedule_forms(schedule: Schedule, *, draft_model: str, max_batch: int) -> list[ScheduleForm]:
    """`schedule` in every engine route's own form (a simulator's are its engine's, not repeated)."""
    return [form for engine in ENGINES.values() if not engine.simulated
            for form in engine.schedule_forms(schedule, draft_model=draft_model, max_batch=max_batch)]
