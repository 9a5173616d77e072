"""Step kinds by name. Each module holds one kind (or two closely related ones); an engine may
bring its own (`ServingEngine.step_kinds`), joined to these when a playbook is loaded for its
hosts (`load`), which also fills the playbook's `engine_steps` placeholder with its steps."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from specops.config import engine_registry
from specops.config.inventory import Host
from specops.config.playbook import Playbook, load_playbook
from specops.engines import ServingEngine, engine_for
from specops.errors import ConfigError
from specops.steps.base import StepKind
from specops.steps.bench import Bench
from specops.steps.files import Copy, Fetch
from specops.steps.git import Git
from specops.steps.gpus import GPUPreflight
from specops.steps.patch import Patch
from specops.steps.server import Server, Stop
from specops.steps.sglang_install import SGLangInstall
from specops.steps.sglang_wheel import SGLangWheel
from specops.steps.shell import Shell
from specops.steps.vllm_install import VLLMInstall
from specops.steps.vllm_wheel import VLLMWheel
from specops.steps.wait import Wait
from specops.steps.weights import Weights

T = TypeVar("T")

#: the step kinds specops ships
BUILTIN: dict[str, StepKind] = {k.name: k for k in (Shell(), Git(), Copy(), Fetch(), Wait(), SGLangWheel(), Patch(),
                                                   SGLangInstall(), Server(), Stop(), Bench(), Weights(),
                                                   GPUPreflight(), VLLMWheel(), VLLMInstall())}
#: every kind a step may name: the built-ins, and the kinds of the engines a playbook was loaded
#: for (`load` adds them; the run engine looks a step's kind up here)
KINDS: dict[str, StepKind] = dict(BUILTIN)


def engine_words(engine: ServingEngine) -> str:
    """The engine as its errors name it: its plugin (package and entry point), or its name."""
    plugin = engine_registry.spec(engine.name).plugin
    return f"engine plugin {plugin}" if plugin else f"engine {engine.name}"


def _declared(engine: ServingEngine, member: Callable[[], T], what: str) -> T:
    """What `member` returns; a plugin's failure (its kinds' import, say) as one line naming it."""
    try:
        return member()
    except Exception as exc:  # a plugin's code may fail any way: say which plugin, not a traceback
        raise ConfigError(f"{engine_words(engine)}: {what}() failed: {type(exc).__name__}: {exc}") from exc


def engine_kinds(engine: ServingEngine, taken: Mapping[str, StepKind]) -> dict[str, StepKind]:
    """The engine's own step kinds, checked: each a StepKind (class or instance) named by its
    key; a name a built-in kind or another engine's kind (in `taken`) has is refused, naming the plugin."""
    who = engine_words(engine)
    out: dict[str, StepKind] = {}
    for name, given in _declared(engine, engine.step_kinds, "step_kinds").items():
        kind = given() if isinstance(given, type) and issubclass(given, StepKind) else given
        if not isinstance(kind, StepKind):
            raise ConfigError(f"{who}: step kind {name!r} is not a specops.steps.base.StepKind "
                              f"({type(given).__name__})", hint="subclass specops.steps.base.StepKind")
        if kind.name != name:
            raise ConfigError(f"{who}: step kind {name!r} is named {kind.name!r} (its `name`)")
        if name in BUILTIN:
            raise ConfigError(f"{who}: step kind {name!r} collides with specops's built-in step kind {name!r}",
                              hint="name the engine's step kinds after the engine (e.g. acme_install)")
        if name in taken and type(taken[name]) is not type(kind):
            raise ConfigError(f"{who}: step kind {name!r} collides with another engine's step kind {name!r}")
        out[name] = kind
    return out


def load(path: Path | str, hosts: Iterable[Host]) -> Playbook:
    """The playbook at `path`, validated for these hosts: their engines' step kinds joined to
    KINDS, its `engine_steps` placeholder filled with their `deploy_steps`."""
    engines = {e.name: e for e in (engine_for(h) for h in hosts)}
    kinds = dict(KINDS)
    for engine in engines.values():
        kinds.update(engine_kinds(engine, kinds))
    own = {name: (engine_words(e), _declared(e, e.deploy_steps, "deploy_steps")) for name, e in engines.items()}
    book = load_playbook(path, kinds, {name: steps for name, steps in own.items() if steps[1]})
    KINDS.update(kinds)  # once the playbook is valid: the run engine runs its steps by these
    return book
