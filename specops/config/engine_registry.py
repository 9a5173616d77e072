"""Which serving engines exist, and what each declares it can do: the built-ins, and every engine a
package registers under the entry-point group `specops.engines`.

It lives in config (below the engines themselves) because hosts.yaml is checked here: a host's
`engine:` must name a registered engine, and a host's variables (`simulated`, `engine_face`,
`engine_features`, which the playbooks choose steps by) come from its declaration. A built-in's
declaration is data here, so checking hosts.yaml loads no engine; a plugin's is read from the
object its entry point names, loaded the first time that engine is asked for. The engines'
code (`specops.engines.engine_named`) turns a name into the `ServingEngine` itself.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from functools import cache
from importlib import metadata
from typing import Any

from specops.errors import ConfigError

#: the entry-point group a package registers an engine under (its value: a ServingEngine subclass or instance)
GROUP = "specops.engines"


class Feature(enum.Enum):
    """What an engine can do, declared once (`EngineSpec.features`) and checked in one place
    (`ServingEngine.require`), instead of probed by a None, an empty string or an exception."""

    #: the dynamic-spec-disable patch: the adaptive arm as a threshold flag of a patched tree
    PATCH_ROUTE = "patch-route"
    #: native adaptive tiers: a config file of draft-step tiers by padded batch size
    NATIVE_TIERS = "native-tiers"
    #: a per-batch-size draft schedule inside the launch flags (vLLM's)
    BATCH_SCHEDULE = "batch-schedule"
    #: a simulated face: no model, no weights, no GPUs; the builtin client measures it
    SIMULATED = "simulated"
    #: serves on a CPU (`device: cpu`)
    CPU = "cpu"


#: each feature in words, for the refusal of an engine without it
FEATURE_WORDS = {
    Feature.PATCH_ROUTE: "no dynamic-spec-disable patch route",
    Feature.NATIVE_TIERS: "no native adaptive tiers",
    Feature.BATCH_SCHEDULE: "no per-batch-size draft schedule",
    Feature.SIMULATED: "no simulated face",
    Feature.CPU: "no CPU serving",
}


@dataclass(frozen=True)
class EngineSpec:
    """An engine's declaration: its name in hosts.yaml, the face it shows and what it can do."""

    #: hosts.yaml's `engine:` value
    name: str
    #: the server it is or stands in for (log lines, metrics, HTTP API, the tree it reads):
    #: the playbooks' `engine_face` variable; engines that share a face share those lines
    face: str
    features: frozenset[Feature] = frozenset()
    #: the distribution that registered it by an entry point ('' for a built-in)
    plugin: str = ""

    @property
    def simulated(self) -> bool:
        return Feature.SIMULATED in self.features


def _spec(name: str, face: str, *features: Feature) -> EngineSpec:
    return EngineSpec(name, face, frozenset(features))


_SGLANG = (Feature.PATCH_ROUTE, Feature.NATIVE_TIERS, Feature.CPU)
_VLLM = (Feature.BATCH_SCHEDULE, Feature.CPU)
#: the engines specops ships, in the order `unknown engine` lists them (the first is a host's default)
BUILTIN: dict[str, EngineSpec] = {s.name: s for s in (
    _spec("sglang", "sglang", *_SGLANG),
    _spec("sim", "sglang", *_SGLANG, Feature.SIMULATED),
    _spec("vllm", "vllm", *_VLLM),
    _spec("sim-vllm", "vllm", *_VLLM, Feature.SIMULATED),
)}


@cache
def _entry_points() -> dict[str, metadata.EntryPoint]:
    """The engines packages register, by name (a built-in's name stays the built-in's)."""
    found = metadata.entry_points(group=GROUP)
    return {ep.name: ep for ep in found if ep.name not in BUILTIN}


def names() -> tuple[str, ...]:
    """Every engine a host may name: the built-ins, then the plugins' (none is loaded)."""
    return (*BUILTIN, *_entry_points())


def _plugin_name(ep: metadata.EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.metadata['Name']} ({ep.value})" if dist is not None else ep.value


@cache
def load_plugin(name: str) -> Any:
    """The object the entry point `name` names (a ServingEngine subclass or instance), or a
    ConfigError naming the plugin when it cannot be loaded or declares no `EngineSpec`."""
    ep = _entry_points()[name]
    plugin = _plugin_name(ep)
    try:
        obj = ep.load()
    except Exception as exc:  # a plugin's import may fail any way: say which plugin, not a traceback
        raise ConfigError(f"engine plugin {plugin} registered as {name!r} cannot be loaded: "
                          f"{type(exc).__name__}: {exc}",
                          hint=f"fix or uninstall the package that registers it under {GROUP!r}") from exc
    spec = getattr(obj, "spec", None)
    if not isinstance(spec, EngineSpec):
        raise ConfigError(f"engine plugin {plugin} registered as {name!r} declares no EngineSpec "
                          f"(its `spec` attribute): it is not a ServingEngine",
                          hint="point the entry point at a specops.engines.ServingEngine subclass")
    if spec.name != name:
        raise ConfigError(f"engine plugin {plugin} registered as {name!r} names itself {spec.name!r} in its spec",
                          hint="make the entry point's name and the engine's spec.name the same")
    return obj


def spec(name: str, where: str | None = None) -> EngineSpec:
    """The declaration of the engine called `name` (a plugin's is read from its loaded object)."""
    if name in BUILTIN:
        return BUILTIN[name]
    if name not in _entry_points():
        raise ConfigError(f"unknown engine {name!r} ({' or '.join(names())})", where=where)
    try:
        declared: EngineSpec = load_plugin(name).spec
    except ConfigError as exc:  # loaded once, refused wherever it is named
        raise ConfigError(exc.message, where=where or exc.where, hint=exc.hint) from None
    return replace(declared, plugin=_plugin_name(_entry_points()[name]))


def with_feature(feature: Feature) -> tuple[str, ...]:
    """The engines that declare `feature` (every plugin is loaded to read its declaration)."""
    return tuple(n for n in names() if feature in spec(n).features)


def forget() -> None:
    """Read the entry points again (a test that installs a plugin; a long-lived process)."""
    _entry_points.cache_clear()
    load_plugin.cache_clear()
