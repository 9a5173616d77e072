"""Patch sets: the YAML model, its validation (with the shared loader and schema checker:
file:line, key, "did you mean"), and errors.

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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.config.schema import check_keys, choice, expect, invalid, optional, suggest, where_of
from specops.config.yamlfile import load_text, read_text
from specops.data import shipped_patches
from specops.errors import ConfigError, SpecopsError
from specops.hostfiles.treefiles import outside_tree
from specops.patching.checks import CHECKS
from specops.sglang.version import try_parse

DEFAULT_SEARCH_DIR = Path("playbooks/patches")

OPS = ("insert_after", "insert_before", "replace", "delete", "diff")
ANCHOR_KEYS = ("class", "field", "call", "arg", "function", "position", "statement", "assign", "text")
POSITIONS = ("body_start", "body_end")
LAYOUT_FEATURES = ("eagle_worker", "adaptive", "adaptive_zero_steps", "dynamic_spec_disable_applied")
SET_KEYS = ("name", "description", "applies_to", "edits", "verify")
EDIT_KEYS = ("name", "file", "op", "anchor", "text", "diff", "optional")


class PatchError(SpecopsError):
    """A patch set could not be applied, checked or reverted; nothing was left changed."""


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
    """One verify entry: a command the host runs in the tree (`run`), or a check specops
    makes itself on the tree's files (`check`, one of patching.checks.CHECKS)."""

    name: str
    run: list[str] | str | None
    timeout: float = 120.0
    check: str | None = None


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


#: which ops a `position` anchor fits: it marks a place to insert, not a statement to change
POSITION_OPS = {"body_start": "insert_before", "body_end": "insert_after"}


def _tree_path(node: Any, key: str, path: str, what: str) -> str:
    """A tree-relative path from the set (an edit's `file`, a diff's `+++`/`---` line),
    refused at load time when it is absolute or leaves the tree."""
    why = outside_tree(path)
    if why:
        raise invalid(node, key, f"'{key}' in {what}: path {path!r} {why}")
    return path


def _diff_paths(diff: str) -> list[str]:
    """Every path a unified diff's `---`/`+++` lines name (a/ b/ dropped; /dev/null left out)."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            path = line[4:].split("\t")[0].strip()
            if path != "/dev/null":
                out.append(path[2:] if path.startswith(("a/", "b/")) else path)
    return out


def _check_fit(raw: Any, op: str, anchor: Anchor, file: str, what: str) -> None:
    """An anchor whose kind does not fit the edit: refused when the set is loaded, not when
    it first meets a tree."""
    if anchor.kind not in ("text", "none") and not file.endswith(".py"):
        raise invalid(raw, "anchor", f"{what}: a {anchor.kind} anchor is a syntax-tree anchor and needs a .py "
                                     f"file, not {file}", hint="use a text anchor ({text: LINE}) in other files")
    if anchor.kind == "function" and anchor.position and POSITION_OPS[anchor.position] != op:
        raise invalid(raw, "op", f"{what}: op {op} does not fit a {anchor.position} anchor (it marks where to "
                                 f"insert; use op {POSITION_OPS[anchor.position]})",
                      hint="to change a statement of the function, anchor it with {function, statement}")


def _parse_anchor(raw: Any, what: str) -> Anchor:
    check_keys(raw, ANCHOR_KEYS, what)
    for key in raw:
        expect(raw, key, str, what)
    keys = set(raw)
    if "class" in keys or "field" in keys:
        if keys != {"class", "field"}:
            raise invalid(raw, None, f"a field anchor ({what}) needs exactly 'class' and 'field'")
        return Anchor("field", cls=raw["class"], field=raw["field"])
    if "call" in keys:
        if not keys <= {"call", "arg"}:
            raise invalid(raw, None, f"a call anchor ({what}) takes 'call' and optionally 'arg'")
        return Anchor("call", call=raw["call"], arg=raw.get("arg"))
    if "function" in keys:
        if not keys <= {"function", "position", "statement"} or {"position", "statement"} <= keys:
            raise invalid(raw, None, f"a function anchor ({what}) takes 'function' and at most one of "
                                     "'position', 'statement'")
        if "position" in raw:
            choice(raw, "position", POSITIONS, what)
        if "statement" in raw:
            try:
                re.compile(raw["statement"])
            except re.error as exc:
                raise invalid(raw, "statement", f"'statement' in {what} is not a valid regex: {exc}") from exc
        return Anchor("function", function=raw["function"], position=raw.get("position"),
                      statement=raw.get("statement"))
    if keys == {"assign"}:
        return Anchor("assign", assign=raw["assign"])
    if keys == {"text"}:
        return Anchor("text", text=raw["text"])
    raise invalid(raw, None, f"cannot tell what kind of anchor {what} is (keys: {', '.join(sorted(keys))})",
                  hint="use {class, field}, {call, arg}, {function[, position|statement]}, {assign} or {text}")


def _required(node: Any, key: str, types: type | tuple[type, ...], what: str) -> Any:
    if key not in node:
        raise invalid(node, None, f"{what} is missing required key '{key}'")
    return expect(node, key, types, what)


def _parse_edit(raw: Any, index: int) -> Edit:
    what = f"edit #{index + 1}"
    if isinstance(raw, dict) and isinstance(raw.get("name"), str):
        what = f"edit '{raw['name']}'"
    check_keys(raw, EDIT_KEYS, what, required=("op",))
    op = choice(raw, "op", OPS, what)
    name = optional(raw, "name", str, what) or f"edit-{index + 1}"
    is_optional = bool(optional(raw, "optional", bool, what, False))
    line = getattr(raw, "line", 0)
    if op == "diff":
        diff = _required(raw, "diff", str, what)
        if not diff_files(diff):
            raise invalid(raw, "diff", f"'diff' in {what}: no '+++ path' line found in the unified diff")
        for key in ("anchor", "text"):
            if key in raw:
                raise invalid(raw, key, f"'{key}' in {what}: a diff edit takes no anchor or text")
        for path in _diff_paths(diff):
            _tree_path(raw, "diff", path, what)
        file = optional(raw, "file", str, what) or diff_files(diff)[0]
        _tree_path(raw, "file", file, what)
        if file not in diff_files(diff):
            raise invalid(raw, "file", f"'file' in {what}: {file} is not a file the diff changes "
                                       f"({', '.join(diff_files(diff))})")
        return Edit(name, file, op, Anchor("none"), diff=diff, optional=is_optional, line=line)
    file = _tree_path(raw, "file", _required(raw, "file", str, what), what)
    anchor = _parse_anchor(_required(raw, "anchor", dict, what), f"the anchor of {what}")
    _check_fit(raw, op, anchor, file, what)
    if op == "delete":
        if "text" in raw:
            raise invalid(raw, "text", f"'text' in {what}: a delete edit takes no text")
        text = ""
    else:
        text = _required(raw, "text", str, what)
        if not text.strip():
            raise invalid(raw, "text", f"'text' in {what} is empty")
    return Edit(name, file, op, anchor, text=text, optional=is_optional, line=line)


def _parse_verify(raw: Any, index: int, where: str) -> VerifyCommand:
    what = f"verify #{index + 1}"
    node: Any = raw
    if isinstance(raw, (str, list)):
        node = {"run": raw}
    else:
        check_keys(raw, ("name", "run", "check", "timeout"), what, where=where)
        if ("run" in raw) == ("check" in raw):
            raise ConfigError(f"{what} needs exactly one of 'run' (a command) and 'check' (a built-in "
                              f"check: {', '.join(CHECKS)})", where=where)
        if "check" in raw:
            check = expect(raw, "check", str, what, where=where)
            if check not in CHECKS:
                raise invalid(raw, "check", f"'check' in {what}: unknown check {check!r}{suggest(check, list(CHECKS))}; "
                                            f"known: {', '.join(CHECKS)}", where=where)
            name = optional(raw, "name", (str, int), what, where=where) or check
            return VerifyCommand(str(name), None, 0.0, check)
    run = node["run"]
    if isinstance(run, list):
        if not run or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in run):
            raise invalid(node, "run", f"'run' in {what}: an argv list must be a non-empty list of strings",
                          where=where)
        run = [str(a) for a in run]
    elif not isinstance(run, str) or not run.strip():
        raise invalid(node, "run", f"'run' in {what} must be an argv list or a non-empty bash script string",
                      where=where)
    timeout = optional(node, "timeout", (int, float), what, 120, where=where)
    if timeout <= 0:
        raise invalid(node, "timeout", f"'timeout' in {what} must be positive, got {timeout!r}", where=where)
    name = optional(node, "name", (str, int), what, where=where) or f"verify-{index + 1}"
    return VerifyCommand(str(name), run, float(timeout))


def _parse_applies(raw: Any) -> AppliesTo:
    if raw is None:
        return AppliesTo()
    what = "applies_to"
    check_keys(raw, ("args_layout", "requires", "refuse_if", "min_version", "max_version", "hint"), what)
    out = AppliesTo()
    for key in ("args_layout", "requires", "refuse_if"):
        value = raw.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise invalid(raw, key, f"'{key}' in {what} must be a list of strings")
        if key != "args_layout":
            for v in value:
                if v not in LAYOUT_FEATURES:
                    raise invalid(raw, key, f"'{key}' in {what} names unknown layout feature {v!r}"
                                            f"{suggest(v, LAYOUT_FEATURES)}; known: {', '.join(LAYOUT_FEATURES)}")
        setattr(out, key, list(value))
    for key in ("min_version", "max_version", "hint"):
        if key in raw:
            setattr(out, key, str(expect(raw, key, (str, int, float), what)))
    for key in ("min_version", "max_version"):
        value = getattr(out, key)
        if value is not None and try_parse(value) is None:
            raise invalid(raw, key, f"'{key}' in {what} is not a version: {value!r}",
                          hint="write it as SGLang numbers its releases, e.g. 0.5.13 or 0.5.10.post1")
    return out


def parse_patchset(text: str, path: str = "<patchset>") -> PatchSet:
    """Validate a patch set document; errors name `path:line` and the key."""
    raw = load_text(text, path)
    if raw is None:
        raise ConfigError("empty patch set", where=path)
    what = "the patch set"
    check_keys(raw, SET_KEYS, what, required=("name", "edits"))
    name = expect(raw, "name", str, what)
    description = optional(raw, "description", str, what, "")
    edits_raw = expect(raw, "edits", list, what)
    if not edits_raw:
        raise invalid(raw, "edits", "a patch set needs at least one edit")
    edits = [_parse_edit(e, i) for i, e in enumerate(edits_raw)]
    first: dict[str, Edit] = {}
    for e in edits:
        if e.name in first:
            raise ConfigError(f"edit name {e.name!r} is used twice (first at line {first[e.name].line})",
                              where=f"{path}:{e.line}")
        first[e.name] = e
    verify_raw = optional(raw, "verify", list, what, [])
    verify = [_parse_verify(v, i, where_of(verify_raw, i, path)) for i, v in enumerate(verify_raw)]
    return PatchSet(name, description, _parse_applies(raw.get("applies_to")), edits, verify, source=path)


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
    return parse_patchset(read_text(path, "patch set"), str(path))
