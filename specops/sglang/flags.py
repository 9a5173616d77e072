"""The one reader of the launch flags an SGLang tree accepts, read from its own source.

Layout detection, launch planning and the simulator all ask this module, so they cannot
disagree. SGLang is never imported (it needs torch and a GPU); the syntax tree is read
through `TreeFiles`, so the same code serves a local tree and one on a host. Three
layouts have shipped:

* classic (0.4.x - 0.5.13): `@dataclass class ServerArgs` plus hand-written
  `parser.add_argument("--x", ...)` calls in `ServerArgs.add_cli_args`;
* annotated (0.5.14 - 0.5.19): fields written `name: A[T, "help" | Arg(...)] = default`,
  turned into flags by `add_cli_args_from_dataclass`, plus a few hand-written calls;
* arg_groups (0.5.20+): ServerArgs assembled from the `_NS_PATH` structs that
  `server_args.py` imports from `srt/arg_groups/fields/*.py` (`_INPUT_NAMESPACES`).

For each flag: its option strings (aliases and BooleanOptionalAction's `--no-` forms),
dest, type, default, choices and nargs. `FlagSet.check(argv)` answers what the tree's
argparse would say about an argv (prefixes, ambiguity, unknown flags, bad values), so a
flag specops would pass is refused before anything is launched.
"""

from __future__ import annotations

import argparse
import ast
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NoReturn, Sequence

from specops import pysource
from specops.hostfiles.treefiles import LocalTreeFiles, TreeFiles
from specops.sglang.paths import SERVER_ARGS
from specops.sglang.version import declared_version

FIELDS_PKG = "sglang.srt.arg_groups.fields"
#: Field modules of 0.5.20 - 0.5.23, read when server_args.py names none (a hand-made tree).
KNOWN_FIELD_MODULES = ("device", "disagg", "exec_", "lora", "memory", "mm", "model", "observability",
                       "parallel", "schedule", "serving", "spec")
DEFAULT_PROG = "launch_server.py"

CLASSIC, ANNOTATED, ARG_GROUPS = "classic", "annotated", "arg_groups"

_MISSING: Any = object()


# --------------------------------------------------------------------------- data


@dataclass
class FlagSpec:
    """One argparse argument, as far as it can be known without running SGLang."""

    names: list[str]
    dest: str
    nargs: int | str | None = None  # 0 = a switch (store_true-like)
    const: Any = True
    type: Any = str
    choices: list[Any] | None = None  # None: any value (or not known from source alone)
    required: bool = False
    boolean_optional: bool = False
    default: Any = None

    @property
    def option_strings(self) -> list[str]:
        """Every string argparse registers: the names, plus `--no-x` for BooleanOptionalAction."""
        if not self.boolean_optional:
            return list(self.names)
        return list(self.names) + ["--no-" + n[2:] for n in self.names if n.startswith("--")]

    @property
    def type_name(self) -> str:
        return "switch" if self.nargs == 0 or self.boolean_optional else getattr(self.type, "__name__", "str")


class _Refused(Exception):
    """argparse's error message, raised instead of printing usage and exiting."""


class _CheckingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)


@dataclass
class FlagSet:
    """The arguments one argparse parser declares (SGLang's server, or its benchmark)."""

    prog: str
    flags: list[FlagSpec]

    def option_names(self) -> set[str]:
        return {n for f in self.flags for n in f.option_strings}

    def has_flag(self, name: str) -> bool:
        return name in self.option_names()

    def find(self, name: str) -> FlagSpec | None:
        """The argument registered under exactly `name` (an alias counts), else None."""
        return next((f for f in self.flags if name in f.option_strings), None)

    def matches(self, option: str) -> list[str]:
        """The option strings argparse would take `option` for: itself when registered, else
        every long option it is a prefix of (one = accepted, several = ambiguous)."""
        name = option.split("=", 1)[0]
        names = self.option_names()
        if name in names:
            return [name]
        if not name.startswith("--"):
            return []
        return sorted(n for n in names if n.startswith(name))

    def parser(self, *, checking: bool = False) -> argparse.ArgumentParser:
        """A fresh parser behaving like the tree's; `checking` raises instead of exiting."""
        return _build_parser(self, _CheckingParser if checking else argparse.ArgumentParser)

    def check(self, argv: list[str]) -> str | None:
        """None when the tree's argparse accepts `argv`, else its error message
        (`ambiguous option: ...`, `unrecognized arguments: ...`, `argument --x: ...`)."""
        try:
            self.parser(checking=True).parse_args(argv)
        except _Refused as exc:
            return str(exc)
        return None

    def given(self, argv: list[str]) -> dict[str, Any]:
        """Only the args that argv sets explicitly (by dest)."""
        return vars(self.parser().parse_args(argv))


@dataclass
class TreeFlags(FlagSet):
    """What a tree's `launch_server` accepts, and the defaults its ServerArgs would resolve to."""

    tree: Path = Path(".")
    layout: str = CLASSIC  # classic | annotated | arg_groups
    version: str = "unknown"
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)  # tree-relative files the flags came from

    def parse(self, argv: list[str]) -> dict[str, Any]:
        """Parse argv like SGLang's launcher and return resolved server args (defaults + given)."""
        ns = self.parser().parse_args(argv)
        resolved = dict(self.defaults)
        for spec in self.flags:
            resolved.setdefault(spec.dest, spec.default)
        resolved.update(vars(ns))
        return resolved

    def flag_for_dest(self, *dests: str) -> str | None:
        """The canonical option string of the first of `dests` the tree declares (its own name
        when a field's flag is named after it, else the first name registered for it)."""
        for dest in dests:
            specs = [f for f in self.flags if f.dest == dest]
            own = "--" + dest.replace("_", "-")
            for spec in specs:
                if own in spec.names:
                    return own
            if specs:
                return specs[0].names[0]
        return None


class _Switch(argparse.Action):
    """A zero-argument flag (store_true, SGLang's Deprecated*Store*Action ...)."""

    def __init__(self, option_strings: Sequence[str], dest: str, const: object = True, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, const=const, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.const)


# --------------------------------------------------------------------------- reading sources


def parse_source(data: bytes | str, path: str) -> ast.Module:
    """Compile like the interpreter would at import: a broken file raises the real SyntaxError."""
    src = data.decode("utf-8") if isinstance(data, bytes) else data
    if pysource.compile_error(src, path) is not None:
        compile(src, path, "exec", dont_inherit=True)  # raises it, as the import would
    return pysource.parse(src, path)


def compile_or_raise(path: Path) -> ast.Module:
    """parse_source for a local file."""
    return parse_source(path.read_bytes(), str(path))


def tree_version(files: TreeFiles) -> str | None:
    """The literal version a tree declares (`sglang.version.declared_version`, one reader)."""
    return declared_version(files.read)


def module_path(module: str) -> str:
    """`sglang.srt.x.y` -> `python/sglang/srt/x/y.py` (tree-relative)."""
    return "python/" + module.replace(".", "/") + ".py"


# --------------------------------------------------------------------------- AST helpers


def _dotted(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _last(node: ast.AST | None) -> str:
    return _dotted(node).split(".")[-1]


class _Scope:
    """Module-level constants (`X = [...]`, `A + B`) so `choices=X` resolves like at import."""

    def __init__(self, modules: Iterable[ast.Module]):
        self.raw: dict[str, ast.AST] = {}
        for mod in modules:
            for node in mod.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.raw.setdefault(node.targets[0].id, node.value)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                    self.raw.setdefault(node.target.id, node.value)

    def value(self, node: ast.AST | None, default: Any = _MISSING, _depth: int = 0) -> Any:
        if node is None or _depth > 8:
            return default
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        if isinstance(node, ast.Name) and node.id in self.raw:
            return self.value(self.raw[node.id], default, _depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.value(node.left, _MISSING, _depth + 1), self.value(node.right, _MISSING, _depth + 1)
            if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
                return list(a) + list(b)
        if isinstance(node, ast.Call) and _last(node.func) in ("list", "tuple", "sorted") and len(node.args) == 1:
            inner = self.value(node.args[0], _MISSING, _depth + 1)
            if isinstance(inner, (list, tuple, set)):
                return sorted(inner, key=str) if _last(node.func) == "sorted" else list(inner)
        return default


_TYPES = {"int": int, "float": float, "str": str}


def _type_of(node: ast.AST | None) -> Any:
    """`type=int` -> int; any custom converter is taken as str (lenient, like a string check)."""
    return _TYPES.get(_dotted(node) if node is not None else "str", str)


def _action_arity(classes: dict[str, ast.ClassDef], name: str) -> int | str | None:
    """nargs default of a custom argparse.Action subclass's __init__ (DeprecatedAction -> 0)."""
    cls = classes.get(name.split(".")[-1])
    if cls is None:
        lowered = name.lower()
        return 0 if ("storetrue" in lowered or "storeconst" in lowered or name.endswith("DeprecatedAction")) else None
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args
            positional = args.args[len(args.args) - len(args.defaults):]
            pairs = list(zip(positional, args.defaults, strict=True)) + list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
            for arg, dflt in pairs:
                if arg.arg == "nargs" and dflt is not None:
                    try:
                        value = ast.literal_eval(dflt)
                    except (ValueError, TypeError, SyntaxError):
                        return None
                    return value if isinstance(value, (int, str)) else None
    return None


def _choices(value: Any) -> list[Any] | None:
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else None


def _spec_from_call(call: ast.Call, classes: dict[str, ast.ClassDef], scope: _Scope,
                    field_defaults: dict[str, Any]) -> FlagSpec | None:
    """`parser.add_argument("--x", ...)` -> its FlagSpec (None for positionals)."""
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not names or not all(n.startswith("-") for n in names):
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    longs = [n for n in names if n.startswith("--")] or names
    dest = scope.value(kw.get("dest"), None) or longs[0].lstrip("-").replace("-", "_")
    default = scope.value(kw.get("default"), _MISSING)
    if default is _MISSING:
        ref = kw.get("default")
        if isinstance(ref, ast.Attribute):
            default = field_defaults.get(ref.attr)
        elif isinstance(ref, ast.Call) and ref.args and isinstance(ref.args[0], ast.Constant):
            default = field_defaults.get(str(ref.args[0].value))  # _declared_default("x")
        else:
            default = None
    spec = FlagSpec(names=names, dest=dest, type=_type_of(kw.get("type")), default=default)
    spec.required = bool(scope.value(kw.get("required"), False))
    spec.choices = _choices(scope.value(kw.get("choices"), None))
    nargs = scope.value(kw.get("nargs"), _MISSING) if "nargs" in kw else _MISSING
    action_node = kw.get("action")
    if isinstance(action_node, ast.Constant):
        action = action_node.value if isinstance(action_node.value, str) else None
    else:
        action = _dotted(action_node) or None
    if action in ("store_true", "store_false"):
        spec.nargs, spec.const = 0, action == "store_true"
        spec.default = action == "store_false" if default in (_MISSING, None) else default
        return spec
    if action in ("store_const", "append_const", "count"):
        spec.nargs, spec.const = 0, scope.value(kw.get("const"), True)
        return spec
    if isinstance(action, str) and action.endswith("BooleanOptionalAction"):
        spec.boolean_optional = True
        return spec
    if action:
        arity = _action_arity(classes, action)
        if nargs is _MISSING and arity is not None:
            spec.nargs = arity
        spec.const = scope.value(kw.get("const_value"), scope.value(kw.get("const"), True))
    if nargs is not _MISSING and spec.nargs != 0:
        spec.nargs = nargs if isinstance(nargs, (int, str)) or nargs is None else "*"
    return spec


def _unwrap_annotation(node: ast.AST) -> tuple[ast.AST, list[ast.AST]]:
    """`A[T, meta...]` / `Annotated[T, ...]` -> (T, [meta...]); anything else -> (node, [])."""
    if isinstance(node, ast.Subscript) and _last(node.value) in ("A", "Annotated"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return elts[0], list(elts[1:])
    return node, []


def _strip_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and _last(node.value) == "Optional":
        return node.slice
    if isinstance(node, ast.Subscript) and _last(node.value) == "Union":
        elts = [e for e in getattr(node.slice, "elts", [node.slice])
                if not (isinstance(e, ast.Constant) and e.value is None) and _dotted(e) != "None"]
        return elts[0] if len(elts) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(b, ast.Constant) and b.value is None:
                return a
    return node


def _spec_from_field(name: str, annotation: ast.AST, value: ast.AST | None, classes: dict[str, ast.ClassDef],
                     scope: _Scope) -> FlagSpec | None:
    """An annotated field -> its derived flag (mirrors SGLang's add_cli_args_from_dataclass)."""
    inner, metas = _unwrap_annotation(annotation)
    meta: dict[str, ast.AST] | None = None
    for m in metas:
        if isinstance(m, ast.Constant) and isinstance(m.value, str):
            meta = {}
            break
        if isinstance(m, ast.Call) and _last(m.func) == "Arg":
            meta = {k.arg: k.value for k in m.keywords if k.arg}
            break
    if meta is None or scope.value(meta.get("no_cli"), False):
        return None  # no Arg metadata: SGLang derives no flag either
    cli = scope.value(meta.get("cli_name"), None) or "--" + name.replace("_", "-")
    names = [cli] + list(scope.value(meta.get("aliases"), None) or [])
    default = _field_default_node(value, scope)
    spec = FlagSpec(names=names, dest=name, default=None if default is _MISSING else default)
    base = _strip_optional(inner)
    base_name = _last(base.value if isinstance(base, ast.Subscript) else base)
    meta_choices = _choices(scope.value(meta.get("choices"), None))
    choices_unknown = "choices" in meta and meta_choices is None
    spec.choices = meta_choices
    action_kwargs = meta.get("action_kwargs")
    if "action" in meta:
        action = _dotted(meta["action"])
        if action.endswith("BooleanOptionalAction"):
            spec.boolean_optional = True
            return spec
        if action in ("store_true", "store_false") or (isinstance(meta["action"], ast.Constant)
                                                       and meta["action"].value in ("store_true", "store_false")):
            spec.nargs = 0
            return spec
        kwargs_nargs = _MISSING
        if isinstance(action_kwargs, ast.Dict):
            for k, v in zip(action_kwargs.keys, action_kwargs.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "nargs":
                    kwargs_nargs = scope.value(v, None)
        arity = _action_arity(classes, action)
        spec.nargs = kwargs_nargs if kwargs_nargs is not _MISSING else arity
        if spec.nargs != 0:
            spec.type = _TYPES.get(base_name, str)
        return spec
    if base_name == "Literal":
        vals = scope.value(base.slice, None) if isinstance(base, ast.Subscript) else None
        vals = list(vals) if isinstance(vals, tuple) else [vals]
        spec.choices = None if choices_unknown else (spec.choices or vals)
        spec.type = type(vals[0]) if vals and type(vals[0]) in (int, float, str) and "type_parser" not in meta else str
    elif base_name in ("List", "list") and "type_parser" not in meta:
        elem = base.slice if isinstance(base, ast.Subscript) else None
        spec.type = _type_of(elem) if elem is not None and _dotted(elem) in _TYPES else str
        spec.nargs = scope.value(meta.get("nargs"), None) or "+"
    elif base_name == "bool":
        spec.nargs, spec.const = 0, True
        spec.default = False if default is _MISSING else default
        return spec
    else:
        spec.type = _TYPES.get(base_name, str) if "type_parser" not in meta else str
        spec.nargs = scope.value(meta.get("nargs"), None)
    req = scope.value(meta.get("required"), None)
    spec.required = bool(req) if req is not None else default is _MISSING
    return spec


def _field_default_node(value: ast.AST | None, scope: _Scope) -> Any:
    """A field's default: the literal, `field(default=...)`, or _MISSING when it has none."""
    if value is None:
        return _MISSING
    if isinstance(value, ast.Call) and _last(value.func) in ("field", "Field"):
        kw = {k.arg: k.value for k in value.keywords}
        if "default" in kw:
            return scope.value(kw["default"], None)
        return None  # default_factory: a value exists, not known statically
    return scope.value(value, None)


def _find_class(module: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _class_fields(cls: ast.ClassDef) -> list[tuple[str, ast.AnnAssign]]:
    return [(n.target.id, n) for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def _add_argument_calls(node: ast.AST) -> list[ast.Call]:
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "add_argument"]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _classes(modules: Iterable[ast.Module]) -> dict[str, ast.ClassDef]:
    out: dict[str, ast.ClassDef] = {}
    for mod in modules:
        for node in mod.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _prog(module: ast.Module, function: str = "prepare_server_args") -> str:
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and _last(call.func) == "ArgumentParser":
                    kw = {k.arg: k.value for k in call.keywords}
                    prog = kw.get("prog")
                    if isinstance(prog, ast.Constant) and isinstance(prog.value, str):
                        return prog.value
                    return DEFAULT_PROG
    return DEFAULT_PROG


def _imports(module: ast.Module, prefix: str) -> dict[str, list[str]]:
    """`from <prefix>.x import A, B` -> {"<prefix>.x": ["A", "B"]}, in source order."""
    out: dict[str, list[str]] = {}
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix) and node.level == 0:
            out.setdefault(node.module, []).extend(a.name for a in node.names)
    return out


def _list_names(module: ast.Module, target: str) -> list[str] | None:
    """The names in a module-level `target = [A, B, ...]`, or None."""
    for node in module.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == target for t in targets) and isinstance(node.value, (ast.List, ast.Tuple)):
                return [e.id for e in node.value.elts if isinstance(e, ast.Name)]
    return None


def _has_ns_path(cls: ast.ClassDef) -> bool:
    return any(isinstance(s, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == "_NS_PATH" for t in (s.targets if isinstance(s, ast.Assign) else [s.target]))
        for s in cls.body)


# --------------------------------------------------------------------------- extraction


Reader = Callable[[str], "ast.Module | None"]


def _field_modules(sa: ast.Module, read: Reader) -> list[tuple[str, ast.Module]]:
    """The fields modules server_args.py imports (else the known names that exist)."""
    imported = [m for m in _imports(sa, FIELDS_PKG + ".")]
    names = imported or [f"{FIELDS_PKG}.{n}" for n in KNOWN_FIELD_MODULES]
    out = []
    for name in names:
        mod = read(module_path(name))
        if mod is not None:
            out.append((module_path(name), mod))
    return out


class _Collector:
    """Flags in registration order; a repeated option string is dropped (argparse would raise)."""

    def __init__(self, classes: dict[str, ast.ClassDef], scope: _Scope):
        self.classes, self.scope = classes, scope
        self.specs: list[FlagSpec] = []
        self.defaults: dict[str, Any] = {}
        self._seen: set[str] = set()

    def add(self, spec: FlagSpec | None) -> None:
        if spec is None or any(n in self._seen for n in spec.option_strings):
            return
        self._seen.update(spec.option_strings)
        self.specs.append(spec)

    def fields(self, cls: ast.ClassDef, *, flags: bool) -> None:
        """Record the class's field defaults and, with `flags`, the flags derived from them."""
        for name, node in _class_fields(cls):
            value = _field_default_node(node.value, self.scope)
            self.defaults.setdefault(name, None if value is _MISSING else value)
            if flags:
                self.add(_spec_from_field(name, node.annotation, node.value, self.classes, self.scope))

    def calls(self, func: ast.AST) -> None:
        for call in _add_argument_calls(func):
            self.add(_spec_from_call(call, self.classes, self.scope, self.defaults))


def _namespace_classes(sa: ast.Module, field_modules: list[tuple[str, ast.Module]]) -> list[ast.ClassDef]:
    """The structs ServerArgs is assembled from: `_INPUT_NAMESPACES`, else every `_NS_PATH` class."""
    field_classes = {n.name: n for _, mod in field_modules for n in mod.body if isinstance(n, ast.ClassDef)}
    wanted = _list_names(sa, "_INPUT_NAMESPACES")
    if wanted:
        return [field_classes[n] for n in wanted if n in field_classes]
    return [c for c in field_classes.values() if _has_ns_path(c)] or list(field_classes.values())


def read_flags(files: TreeFiles) -> TreeFlags:
    """What the tree's launcher accepts, from its files (local or on a host).

    Raises FileNotFoundError when `files` is not an SGLang tree, and the interpreter's own
    SyntaxError when a file the launcher imports does not compile."""
    cache: dict[str, ast.Module | None] = {}

    def read(rel: str) -> ast.Module | None:
        if rel not in cache:
            data = files.read(rel)
            cache[rel] = None if data is None else parse_source(data, posixpath.join(files.root, rel))
        return cache[rel]

    sa = read(SERVER_ARGS)
    if sa is None:
        raise FileNotFoundError(f"{files.root}: not an SGLang checkout (no {SERVER_ARGS})")
    has_fields = bool(_imports(sa, FIELDS_PKG)) or any(
        files.exists(module_path(f"{FIELDS_PKG}.{m}")) for m in ("__init__", "spec"))
    field_modules = _field_modules(sa, read) if has_fields else []
    # argparse Action classes live in server_args.py (<= 0.5.13) or arg_groups/argparse_actions.py,
    # choices lists in arg_groups/choices.py (0.5.20+)
    helpers = [read(module_path(m)) for m in _imports(sa, "sglang.srt.arg_groups.")
               if m.rsplit(".", 1)[-1] in ("argparse_actions", "choices")]
    modules = [sa, *[m for m in helpers if m is not None], *[m for _, m in field_modules]]
    out = _Collector(_classes(modules), _Scope(modules))

    sa_cls = _find_class(sa, "ServerArgs")
    add_cli = next((n for n in sa_cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"),
                   None) if sa_cls is not None else None
    derived = add_cli is not None and any(
        isinstance(c, ast.Call) and _last(c.func) == "add_cli_args_from_dataclass" for c in ast.walk(add_cli))
    layout = ARG_GROUPS if field_modules else ANNOTATED if derived else CLASSIC
    if sa_cls is not None:
        out.fields(sa_cls, flags=False)
    for cls in _namespace_classes(sa, field_modules) if field_modules else []:
        out.fields(cls, flags=True)
    if derived and sa_cls is not None:
        out.fields(sa_cls, flags=True)
    if add_cli is not None:
        out.calls(add_cli)
    return TreeFlags(prog=_prog(sa), flags=out.specs, tree=Path(files.root), layout=layout,
                     version=tree_version(files) or "unknown", defaults=out.defaults,
                     sources=[rel for rel, mod in cache.items() if mod is not None])


def module_flags(source: bytes | str, path: str, prog: str | None = None) -> FlagSet:
    """Every `add_argument` call of a script (SGLang's bench_serving): its FlagSet."""
    module = parse_source(source, path)
    scope = _Scope([module])
    classes = _classes([module])
    specs: list[FlagSpec] = []
    seen: set[str] = set()
    for call in _add_argument_calls(module):
        spec = _spec_from_call(call, classes, scope, {})
        if spec is not None and not any(n in seen for n in spec.option_strings):
            seen.update(spec.option_strings)
            specs.append(spec)
    return FlagSet(prog=prog or posixpath.basename(path), flags=specs)


def _build_parser(info: FlagSet, cls: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    parser = cls(prog=info.prog, argument_default=argparse.SUPPRESS)
    for spec in info.flags:
        kwargs: dict[str, Any] = {"dest": spec.dest}
        if spec.boolean_optional:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif spec.nargs == 0:
            kwargs.update(action=_Switch, const=spec.const)
        else:
            kwargs["type"] = spec.type
            if spec.nargs is not None:
                kwargs["nargs"] = spec.nargs
            if spec.choices:
                kwargs["choices"] = spec.choices
        if spec.required:
            kwargs["required"] = True
        try:
            parser.add_argument(*spec.names, **kwargs)
        except (argparse.ArgumentError, ValueError, TypeError):
            continue  # an odd declaration SGLang resolves at runtime; skip, stay lenient
    return parser


# --------------------------------------------------------------------------- local trees, cached


#: A cache, module-level on purpose: a local tree's flags keyed by (tree, its sources'
#: mtimes), so every launch plan in the process reads a tree's parser once and an edited
#: tree is read again. It holds no run's state: the same tree gives every run the same flags.
_CACHE: dict[tuple[str, tuple[int, ...]], TreeFlags] = {}


def _stamp(tree: Path, sources: Iterable[str]) -> tuple[int, ...]:
    out = []
    for rel in sources:
        try:
            out.append((tree / rel).stat().st_mtime_ns)
        except FileNotFoundError:
            out.append(-1)
    return tuple(out)


def tree_flags(tree: str | Path) -> TreeFlags:
    """read_flags for a local tree, reused while its source files' mtimes stay the same.

    Raises SyntaxError exactly as the interpreter reports it when a source does not compile,
    and FileNotFoundError when `tree` is not an SGLang checkout."""
    tree = Path(tree).resolve()
    for (root, stamp), info in list(_CACHE.items()):
        if root == str(tree) and _stamp(tree, info.sources) == stamp:
            return info
    info = read_flags(LocalTreeFiles(tree))
    _CACHE[(str(tree), _stamp(tree, info.sources))] = info
    return info
