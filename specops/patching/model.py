"""Patch sets: the YAML model, its validation (file:line:key, "did you mean"), and errors.

A patch set (`playbooks/patches/<name>.yaml`)::

    name: dynamic-spec-disable
    description: ...
    applies_to: {args_layout: [classic], requires: [eagle_worker],
                 refuse_if: [adaptive_zero_steps], hint: "..."}
    edits:
      - name: field
        file: python/sglang/srt/server_args.py
        op: insert_after            # insert_before | replace | delete | diff
        anchor: {class: ServerArgs, field: speculative_accept_threshold_acc}
        text: |
          speculative_disable_batch_threshold: int = 0  # 0 = always speculate
        optional: false             # true: skip when the file is absent
    verify:
      - name: compile
        run: ["{python}", "-m", "py_compile", "{files}"]   # argv, or a bash script string
        timeout: 120
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specops.data import shipped_patches
from specops.errors import ConfigError, SpecopsError

DEFAULT_SEARCH_DIR = Path("playbooks/patches")

OPS = ("insert_after", "insert_before", "replace", "delete", "diff")
ANCHOR_KEYS = ("class", "field", "call", "arg", "function", "position", "statement", "assign", "text")
POSITIONS = ("body_start", "body_end")
LAYOUT_FEATURES = ("eagle_worker", "adaptive", "adaptive_zero_steps", "dynamic_spec_disable_applied")


class PatchError(SpecopsError):
    """A patch set could not be applied, checked or reverted; nothing was left changed."""


# --------------------------------------------------------------------------- yaml with lines


class _LDict(dict):
    line: int = 0
    key_lines: dict


class _LList(list):
    line: int = 0


def _construct(node: yaml.Node) -> Any:
    """yaml node -> plain Python values that remember their 1-based line numbers."""
    if isinstance(node, yaml.MappingNode):
        out = _LDict()
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for knode, vnode in node.value:
            key = _construct(knode)
            out[key] = _construct(vnode)
            out.key_lines[key] = knode.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        seq = _LList(_construct(v) for v in node.value)
        seq.line = node.start_mark.line + 1
        return seq
    return _scalar(node)


def _scalar(node: yaml.ScalarNode) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _line(obj: Any, key: str | None = None) -> int:
    if key is not None and isinstance(obj, _LDict):
        return obj.key_lines.get(key, obj.line)
    return getattr(obj, "line", 0)


class _Ctx:
    """Builds errors that name the file, the line and the key."""

    def __init__(self, path: str):
        self.path = path

    def err(self, obj: Any, key: str | None, message: str, hint: str | None = None) -> ConfigError:
        where = f"{self.path}:{_line(obj, key)}"
        return ConfigError(f"{key + ': ' if key else ''}{message}", where=where, hint=hint)

    def check_keys(self, obj: Any, allowed: tuple[str, ...], what: str) -> None:
        if not isinstance(obj, dict):
            raise self.err(obj, None, f"{what} must be a mapping, got {type(obj).__name__}")
        for key in obj:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
                raise self.err(obj, str(key), f"unknown key in {what}", hint=hint)

    def want(self, obj: dict, key: str, typ: type | tuple, what: str, required: bool = True) -> Any:
        if key not in obj:
            if required:
                raise self.err(obj, None, f"{what} is missing required key '{key}'")
            return None
        value = obj[key]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            names = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise self.err(obj, key, f"must be {names}, got {type(value).__name__} {value!r}")
        return value


# --------------------------------------------------------------------------- model


@dataclass
class Anchor:
    """Where an edit lands. Exactly one of: class+field, call(+arg), function(+position|statement),
    assign, text."""

    kind: str  # "field" | "call" | "function" | "assign" | "text" | "none" (diff edits)
    cls: str | None = None
    field: str | None = None
    call: str | None = None
    arg: str | None = None
    function: str | None = None
    position: str | None = None
    statement: str | None = None
    assign: str | None = None
    text: str | None = None

    def describe(self) -> str:
        if self.kind == "field":
            return f"field {self.field} of class {self.cls}"
        if self.kind == "call":
            return f"call {self.call}({self.arg!r}, ...)" if self.arg is not None else f"call {self.call}(...)"
        if self.kind == "function":
            base = f"function {self.function}"
            if self.position:
                return f"{base} at {self.position}"
            if self.statement:
                return f"statement /{self.statement}/ in {base}"
            return base
        if self.kind == "assign":
            return f"module assignment {self.assign}"
        if self.kind == "text":
            return f"text line {self.text!r}"
        return "unified diff"


@dataclass
class Edit:
    name: str
    file: str
    op: str
    anchor: Anchor
    text: str = ""
    diff: str = ""
    optional: bool = False
    line: int = 0  # line of the edit in the set file, for messages


@dataclass
class VerifyCommand:
    name: str
    run: list[str] | str
    timeout: float = 120.0


@dataclass
class AppliesTo:
    args_layout: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    refuse_if: list[str] = field(default_factory=list)
    min_version: str | None = None
    max_version: str | None = None
    hint: str | None = None


@dataclass
class PatchSet:
    name: str
    description: str
    applies_to: AppliesTo
    edits: list[Edit]
    verify: list[VerifyCommand]
    source: str = ""

    @property
    def files(self) -> list[str]:
        """Every file the set may touch, in first-edit order."""
        seen: list[str] = []
        for e in self.edits:
            for f in ([e.file] if e.op != "diff" else diff_files(e.diff)):
                if f not in seen:
                    seen.append(f)
        return seen


def diff_files(diff: str) -> list[str]:
    """Paths (tree-relative, a/ b/ prefixes dropped) named by `+++` lines of a unified diff."""
    out = []
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            if path == "/dev/null":
                continue
            if path.startswith(("a/", "b/")):
                path = path[2:]
            out.append(path)
    return out


def _parse_anchor(ctx: _Ctx, raw: Any) -> Anchor:
    ctx.check_keys(raw, ANCHOR_KEYS, "anchor")
    for key, value in raw.items():
        if not isinstance(value, str):
            raise ctx.err(raw, key, f"must be a string, got {type(value).__name__} {value!r}")
    keys = set(raw)
    if "class" in keys or "field" in keys:
        if keys != {"class", "field"}:
            raise ctx.err(raw, None, "a field anchor needs exactly 'class' and 'field'")
        return Anchor("field", cls=raw["class"], field=raw["field"])
    if "call" in keys:
        if not keys <= {"call", "arg"}:
            raise ctx.err(raw, None, "a call anchor takes 'call' and optionally 'arg'")
        return Anchor("call", call=raw["call"], arg=raw.get("arg"))
    if "function" in keys:
        if not keys <= {"function", "position", "statement"} or {"position", "statement"} <= keys:
            raise ctx.err(raw, None, "a function anchor takes 'function' and at most one of 'position', 'statement'")
        if "position" in raw and raw["position"] not in POSITIONS:
            close = difflib.get_close_matches(raw["position"], POSITIONS, n=1)
            raise ctx.err(raw, "position", f"unknown position {raw['position']!r}",
                          hint=f"did you mean '{close[0]}'?" if close else f"one of {', '.join(POSITIONS)}")
        if "statement" in raw:
            import re
            try:
                re.compile(raw["statement"])
            except re.error as exc:
                raise ctx.err(raw, "statement", f"bad regex: {exc}") from exc
        return Anchor("function", function=raw["function"], position=raw.get("position"),
                      statement=raw.get("statement"))
    if keys == {"assign"}:
        return Anchor("assign", assign=raw["assign"])
    if keys == {"text"}:
        return Anchor("text", text=raw["text"])
    raise ctx.err(raw, None, f"cannot tell what kind of anchor this is (keys: {', '.join(sorted(keys))})",
                  hint="use {class, field}, {call, arg}, {function[, position|statement]}, {assign} or {text}")


def _parse_edit(ctx: _Ctx, raw: Any, index: int) -> Edit:
    ctx.check_keys(raw, ("name", "file", "op", "anchor", "text", "diff", "optional"), f"edit #{index + 1}")
    op = ctx.want(raw, "op", str, f"edit #{index + 1}")
    if op not in OPS:
        close = difflib.get_close_matches(op, OPS, n=1)
        raise ctx.err(raw, "op", f"unknown op {op!r}",
                      hint=f"did you mean '{close[0]}'?" if close else f"one of {', '.join(OPS)}")
    name = ctx.want(raw, "name", str, f"edit #{index + 1}", required=False) or f"edit-{index + 1}"
    optional = ctx.want(raw, "optional", bool, f"edit {name}", required=False) or False
    if op == "diff":
        diff = ctx.want(raw, "diff", str, f"edit {name}")
        if not diff_files(diff):
            raise ctx.err(raw, "diff", "no '+++ path' line found in the unified diff")
        for key in ("anchor", "text"):
            if key in raw:
                raise ctx.err(raw, key, "a diff edit takes no anchor or text")
        return Edit(name, raw.get("file") or diff_files(diff)[0], op, Anchor("none"), diff=diff,
                    optional=optional, line=_line(raw))
    file = ctx.want(raw, "file", str, f"edit {name}")
    anchor = _parse_anchor(ctx, ctx.want(raw, "anchor", dict, f"edit {name}"))
    if op == "delete":
        if "text" in raw:
            raise ctx.err(raw, "text", "a delete edit takes no text")
        text = ""
    else:
        text = ctx.want(raw, "text", str, f"edit {name}")
        if not text.strip():
            raise ctx.err(raw, "text", "is empty")
    if anchor.kind == "text" and not file.endswith(".py") and anchor.text is None:
        raise ctx.err(raw, "anchor", "text anchor without text")
    return Edit(name, file, op, anchor, text=text, optional=optional, line=_line(raw))


def _parse_verify(ctx: _Ctx, raw: Any, index: int) -> VerifyCommand:
    if isinstance(raw, (str, list)):
        raw_d: dict = {"run": raw}
        line_obj = raw
    else:
        ctx.check_keys(raw, ("name", "run", "timeout"), f"verify #{index + 1}")
        raw_d, line_obj = raw, raw
    run = raw_d.get("run")
    if isinstance(run, list):
        if not run or not all(isinstance(a, (str, int, float)) for a in run):
            raise ctx.err(line_obj, "run" if isinstance(line_obj, dict) else None,
                          "an argv list must be a non-empty list of strings")
        run = [str(a) for a in run]
    elif not isinstance(run, str) or not run.strip():
        raise ctx.err(line_obj, "run" if isinstance(line_obj, dict) else None,
                      "must be an argv list or a non-empty bash script string")
    timeout = raw_d.get("timeout", 120)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ctx.err(line_obj, "timeout", f"must be a positive number, got {timeout!r}")
    name = raw_d.get("name") or f"verify-{index + 1}"
    return VerifyCommand(str(name), run, float(timeout))


def _parse_applies(ctx: _Ctx, raw: Any) -> AppliesTo:
    if raw is None:
        return AppliesTo()
    ctx.check_keys(raw, ("args_layout", "requires", "refuse_if", "min_version", "max_version", "hint"),
                   "applies_to")
    out = AppliesTo()
    for key in ("args_layout", "requires", "refuse_if"):
        value = raw.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ctx.err(raw, key, "must be a list of strings")
        if key != "args_layout":
            for v in value:
                if v not in LAYOUT_FEATURES:
                    close = difflib.get_close_matches(v, LAYOUT_FEATURES, n=1)
                    raise ctx.err(raw, key, f"unknown layout feature {v!r}",
                                  hint=f"did you mean '{close[0]}'?" if close else
                                  f"one of {', '.join(LAYOUT_FEATURES)}")
        setattr(out, key, list(value))
    for key in ("min_version", "max_version", "hint"):
        if key in raw:
            setattr(out, key, str(ctx.want(raw, key, (str, int, float), "applies_to")))
    return out


def parse_patchset(text: str, path: str = "<patchset>") -> PatchSet:
    """Validate a patch set document; errors name `path:line` and the key."""
    ctx = _Ctx(path)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise ConfigError(f"not valid YAML: {getattr(exc, 'problem', exc)}", where=where) from exc
    if node is None:
        raise ConfigError("empty patch set", where=path)
    raw = _construct(node)
    ctx.check_keys(raw, ("name", "description", "applies_to", "edits", "verify"), "patch set")
    name = ctx.want(raw, "name", str, "patch set")
    description = ctx.want(raw, "description", str, "patch set", required=False) or ""
    edits_raw = ctx.want(raw, "edits", list, "patch set")
    if not edits_raw:
        raise ctx.err(raw, "edits", "a patch set needs at least one edit")
    edits = [_parse_edit(ctx, e, i) for i, e in enumerate(edits_raw)]
    names = [e.name for e in edits]
    for e in edits:
        if names.count(e.name) > 1:
            raise ConfigError(f"edit name {e.name!r} is used twice", where=f"{path}:{e.line}")
    verify_raw = raw.get("verify") or []
    if not isinstance(verify_raw, list):
        raise ctx.err(raw, "verify", "must be a list")
    verify = [_parse_verify(ctx, v, i) for i, v in enumerate(verify_raw)]
    return PatchSet(name, description, _parse_applies(ctx, raw.get("applies_to")), edits, verify, source=path)


def _package_search_dirs() -> list[Path]:
    return [Path.cwd() / DEFAULT_SEARCH_DIR, shipped_patches()]


def resolve_patchset_path(name_or_path: str | Path, search_dir: Path | None = None) -> Path:
    """A path to a YAML file, or a name looked up in search_dir, ./playbooks/patches and
    the playbooks/patches folder beside the installed package."""
    candidate = Path(name_or_path).expanduser()
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file() or "/" in str(name_or_path):
        if candidate.is_file():
            return candidate
        raise ConfigError(f"patch set file {candidate} does not exist")
    dirs = ([search_dir] if search_dir else []) + _package_search_dirs()
    for d in dirs:
        for ext in (".yaml", ".yml"):
            p = Path(d) / f"{name_or_path}{ext}"
            if p.is_file():
                return p
    known = sorted({p.stem for d in dirs if Path(d).is_dir() for p in Path(d).glob("*.y*ml")})
    close = difflib.get_close_matches(str(name_or_path), known, n=1)
    hint = f"did you mean '{close[0]}'?" if close else (f"known sets: {', '.join(known)}" if known else None)
    raise ConfigError(f"no patch set named {name_or_path!r} in {', '.join(str(d) for d in dirs)}", hint=hint)


def load_patchset(name_or_path: str | Path, search_dir: Path | None = None) -> PatchSet:
    """Find and validate a patch set by name or path."""
    path = resolve_patchset_path(name_or_path, search_dir)
    return parse_patchset(path.read_text(encoding="utf-8"), str(path))
