"""Playbook model: named steps, each of one kind, with the step contract's common keys.

Validation happens at load time, before any host is touched: unknown keys (with a
suggestion), wrong types, unknown step kinds and malformed `verify:` blocks are errors
that name the file and line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.config.schema import check_keys, expect, suggest, where_of
from specops.config.templating import check_script
from specops.config.yamlfile import Mapping, load_file
from specops.errors import ConfigError

PLAYBOOK_KEYS = ["name", "vars", "steps", "any_errors_fatal", "description"]
COMMON_STEP_KEYS = ["name", "when", "verify", "retries", "delay", "timeout", "rollback",
                    "register", "ignore_errors", "changed"]
#: the placeholder step that stands for each host's engine's own steps (`ServingEngine.deploy_steps`):
#: expanded at load into those steps, each run only where the host's `engine` is theirs
ENGINE_STEPS = "engine_steps"
VERIFY_KEYS = ["rc", "stdout_contains", "stdout_matches", "file_exists", "file_contains", "http_status"]
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class Step:
    """One step of a playbook; `args` is the kind's own mapping (or string), not yet templated."""

    index: int
    name: str
    kind: str
    args: Any
    where: str
    when: str | None = None
    verify: dict[str, Any] = field(default_factory=dict)
    retries: int = 0
    delay: float = 1.0
    timeout: float = DEFAULT_TIMEOUT_S
    rollback: Any = None
    register: str | None = None
    ignore_errors: bool = False
    #: `changed: false` (Ansible's changed_when): a read-only step reports ok, never changed
    changed: bool | None = None

    @property
    def label(self) -> str:
        return f"step {self.index + 1} '{self.name}'"


@dataclass
class Playbook:
    path: Path
    name: str
    steps: list[Step]
    vars: dict[str, Any] = field(default_factory=dict)
    any_errors_fatal: bool = False

    def find_step(self, ref: str) -> int:
        """`--from-step` value: a 1-based number or a step name -> 0-based index."""
        if ref.isdigit():
            n = int(ref)
            if not 1 <= n <= len(self.steps):
                raise ConfigError(f"--from-step {n}: the playbook has steps 1..{len(self.steps)}", where=str(self.path))
            return n - 1
        for step in self.steps:
            if step.name == ref:
                return step.index
        names = [s.name for s in self.steps]
        listing = "; ".join(f"{s.index + 1} {s.name}" for s in self.steps)
        raise ConfigError(f"--from-step: no step named '{ref}'{suggest(ref, names)}; the steps are: {listing}",
                          where=str(self.path))


def _check_verify(node: Any, where: str) -> dict[str, Any]:
    if node is None:
        return {}
    check_keys(node, VERIFY_KEYS, "verify")
    if "rc" in node:
        expect(node, "rc", int, "verify")
    for key in ("stdout_contains", "stdout_matches", "file_exists"):
        if key in node:
            expect(node, key, str, "verify")
    pattern = node.get("stdout_matches")
    if isinstance(pattern, str) and "{{" not in pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"'stdout_matches' in verify is not a valid regex: {exc}",
                              where=where_of(node, "stdout_matches")) from None
    if "file_contains" in node:
        check_keys(node["file_contains"], ["path", "regex"], "verify.file_contains", required=["path", "regex"])
    if "http_status" in node:
        fc = node["http_status"]
        if not isinstance(fc, str):
            check_keys(fc, ["url", "status", "timeout"], "verify.http_status", required=["url"])
            for key, types in (("url", str), ("status", int), ("timeout", (int, float))):
                if key in fc and not (isinstance(fc[key], str) and "{{" in fc[key]):
                    expect(fc, key, types, "verify.http_status")
    return dict(node)


def _step_kind(node: Any, i: int, where: str, kinds: dict[str, Any]) -> str:
    """The one key of a step that is not a common key: its kind."""
    kind_keys = [k for k in node if k not in COMMON_STEP_KEYS]
    if not kind_keys:
        raise ConfigError(f"step {i + 1} has no step kind (one of: {', '.join(sorted(kinds))})", where=where)
    if len(kind_keys) > 1:
        unknown = [k for k in kind_keys if k not in kinds]
        bad = unknown[0] if unknown else kind_keys[1]
        allowed = COMMON_STEP_KEYS + sorted(kinds)
        raise ConfigError(
            f"unknown key '{bad}' in step {i + 1}{suggest(bad, allowed)}; allowed: {', '.join(allowed)}"
            if unknown else f"step {i + 1} has two step kinds: {', '.join(kind_keys)}",
            where=where_of(node, bad),
        )
    kind = kind_keys[0]
    if not isinstance(kind, str) or kind not in kinds:  # kinds are named by strings only
        raise ConfigError(
            f"step {i + 1}: unknown step kind '{kind}'{suggest(kind, list(kinds) + COMMON_STEP_KEYS)}; "
            f"kinds: {', '.join(sorted(kinds))}",
            where=where_of(node, kind),
        )
    return kind


def _common_keys(step: Step, node: Any) -> None:
    """The step contract's own keys (retries, delay, timeout, rollback, register, ...), checked."""
    name = step.name
    if "retries" in node:
        step.retries = expect(node, "retries", int, f"step '{name}'")
        if step.retries < 0:
            raise ConfigError(f"step '{name}': retries must be 0 or more", where=where_of(node, "retries"))
    if "delay" in node:
        step.delay = float(expect(node, "delay", (int, float), f"step '{name}'"))
        if step.delay < 0:
            raise ConfigError(f"step '{name}': delay must be 0 or more", where=where_of(node, "delay"))
    if "timeout" in node:
        step.timeout = float(expect(node, "timeout", (int, float), f"step '{name}'"))
        if step.timeout <= 0:
            raise ConfigError(f"step '{name}': timeout must be positive", where=where_of(node, "timeout"))
    if "rollback" in node:
        step.rollback = node["rollback"]
        if not isinstance(step.rollback, (str, list)):
            raise ConfigError(f"step '{name}': rollback must be a shell script or an argv list",
                              where=where_of(node, "rollback"))
    if "register" in node:
        step.register = expect(node, "register", str, f"step '{name}'")
        if not step.register.isidentifier():
            raise ConfigError(f"step '{name}': register {step.register!r} must be a variable name "
                              "(letters, digits, _)", where=where_of(node, "register"))
    if "ignore_errors" in node:
        step.ignore_errors = expect(node, "ignore_errors", bool, f"step '{name}'")
    if "changed" in node:
        step.changed = expect(node, "changed", bool, f"step '{name}'")


def _check_scripts(step: Step, node: Any, kind: Any, playbook_vars: MappingABC[str, Any]) -> None:
    """Each shell script of the step (its kind's, a rollback script) checked as a template:
    `raw_shell` of playbook literals only, no eval or arithmetic of values."""
    scripts: list[tuple[str, str, str]] = [(text, where, step.label) for text, where in kind.scripts(step)]
    if isinstance(step.rollback, str):  # rendered in shell mode, as a shell step's script
        scripts.append((step.rollback, where_of(node, "rollback"), f"{step.label} rollback"))
    for text, where, what in scripts:
        check_script(text, where, what, playbook_vars)


#: {engine name: (the engine in words for errors, e.g. its plugin; its deploy step mappings)}
EngineSteps = MappingABC[str, tuple[str, list[Any]]]


def _engine_steps(node: Any, where: str, kinds: dict[str, Any], engine_steps: EngineSteps) -> list[Step]:
    """The placeholder `engine_steps: {}` expanded: each engine's own steps, validated as a
    playbook's are, guarded by `engine == NAME` (and the placeholder's own `when`)."""
    check_keys(node, ["name", "when", ENGINE_STEPS], "an engine_steps step")
    if node[ENGINE_STEPS] not in (None, {}):
        raise ConfigError("'engine_steps' takes no arguments: write engine_steps: {}", where=where_of(node, ENGINE_STEPS))
    guard = f" and ({node['when']})" if "when" in node else ""
    out: list[Step] = []
    for name, (who, nodes) in sorted(engine_steps.items()):
        try:
            own = parse_steps(nodes, who, kinds)
        except ConfigError as exc:
            raise ConfigError(f"{who}'s deploy_steps: {exc.message}", where=where, hint=exc.hint) from None
        for step in own:
            step.when = f"engine == {name!r}" + (f" and ({step.when})" if step.when else "") + guard
        out.extend(own)
    return out


def parse_steps(nodes: Any, source: str, kinds: dict[str, Any],
                playbook_vars: MappingABC[str, Any] | None = None,
                engine_steps: EngineSteps | None = None) -> list[Step]:
    """Validate a list of step mappings against the registered kinds; `playbook_vars` are
    the playbook's own `vars:`, the only source `raw_shell` may paste. A placeholder
    `engine_steps: {}` becomes `engine_steps`' steps (none: nothing)."""
    steps: list[Step] = []
    if not isinstance(nodes, list):
        raise ConfigError("'steps' must be a list", where=where_of(nodes, where=source))
    for i, node in enumerate(nodes):
        where = nodes.where(i) if hasattr(nodes, "where") else source
        if not isinstance(node, dict):
            raise ConfigError(f"step {i + 1} must be a mapping", where=where)
        if ENGINE_STEPS in node:
            steps.extend(_engine_steps(node, where, kinds, engine_steps or {}))
            continue
        kind = _step_kind(node, i, where, kinds)
        if "name" in node:
            expect(node, "name", (str, int), f"step {i + 1}")
        if "when" in node:
            expect(node, "when", (str, bool), f"step {i + 1}")
        name = str(node.get("name") or f"{kind} {i + 1}")
        step = Step(index=i, name=name, kind=kind, args=node[kind], where=where_of(node, kind, where))
        if "when" in node:
            step.when = str(node["when"])
        step.verify = _check_verify(node.get("verify"), where)
        _common_keys(step, node)
        kinds[kind].validate(step)
        _check_scripts(step, node, kinds[kind], playbook_vars or {})
        steps.append(step)
    for index, step in enumerate(steps):  # an expanded placeholder moves the steps after it
        step.index = index
    return steps


def load_playbook(path: Path | str, kinds: dict[str, Any], engine_steps: EngineSteps | None = None) -> Playbook:
    """Load and validate a playbook file against the step kinds (`specops.steps.KINDS`;
    passed in, since the kinds import this module's Step); `engine_steps` fill its
    `engine_steps` placeholder (`specops.steps.load` passes the hosts' engines')."""
    path = Path(path)
    data = load_file(path, "playbook")
    if not isinstance(data, dict):
        raise ConfigError("a playbook must be a mapping with 'steps:'", where=f"{path}:1")
    check_keys(data, PLAYBOOK_KEYS, "the playbook", required=["steps"])
    pvars = expect(data, "vars", dict, "the playbook") if data.get("vars") is not None else Mapping()
    steps = parse_steps(data["steps"], str(path), kinds, pvars, engine_steps)
    if not steps:
        raise ConfigError("the playbook has no steps", where=where_of(data, "steps"))
    fatal = expect(data, "any_errors_fatal", bool, "the playbook") if "any_errors_fatal" in data else False
    return Playbook(path=path, name=str(data.get("name") or path.stem), steps=steps, vars=dict(pvars),
                    any_errors_fatal=fatal)
