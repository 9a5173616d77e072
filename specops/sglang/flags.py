"""Which launch flags an SGLang checkout accepts, read from its own source (never imported).

The simulator must accept exactly what the given tree's `launch_server` would: an unpatched
tree rejects `--speculative-disable-batch-threshold`, a patched one accepts it, and a tree
whose `server_args.py` no longer compiles dies with that SyntaxError. SGLang is not
installed here, so we read the syntax tree:

* classic (<= 0.5.x): `@dataclass class ServerArgs` fields plus hand-written
  `parser.add_argument("--x", ...)` calls in `ServerArgs.add_cli_args`;
* annotated (0.5.14-style): fields written `name: A[T, "help" | Arg(...)] = default`, turned
  into flags by `add_cli_args_from_dataclass`, plus a few hand-written calls;
* fields (>= 0.5.20): `srt/arg_groups/fields/*.py` structs whose fields become `--field-name`.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.sglang.paths import ARG_GROUPS_DIR, FIELDS_DIR, SERVER_ARGS
from specops.sglang.version import declared_version

DEFAULT_PROG = "launch_server.py"

_MISSING = object()


@dataclass
class FlagSpec:
    """One `add_argument` call, as far as it can be known without running SGLang."""

    names: list[str]
    dest: str
    nargs: int | str | None = None  # 0 = a switch (store_true-like)
    const: Any = True
    type: Any = str
    choices: list[Any] | None = None
    required: bool = False
    boolean_optional: bool = False
    default: Any = None


@dataclass
class TreeFlags:
    """What a tree's launcher accepts, and the defaults its ServerArgs would resolve to."""

    tree: Path
    layout: str  # classic | annotated | fields
    version: str
    prog: str
    flags: list[FlagSpec]
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)

    def option_names(self) -> set[str]:
        return {n for f in self.flags for n in f.names}

    def has_flag(self, name: str) -> bool:
        return name in self.option_names()

    def parser(self) -> argparse.ArgumentParser:
        """A fresh argparse parser behaving like the tree's (errors: exit 2, 'unrecognized arguments')."""
        return _build_parser(self)

    def parse(self, argv: list[str]) -> dict[str, Any]:
        """Parse argv like SGLang's launcher and return resolved server args (defaults + given)."""
        ns = self.parser().parse_args(argv)
        resolved = dict(self.defaults)
        for spec in self.flags:
            resolved.setdefault(spec.dest, spec.default)
        resolved.update(vars(ns))
        return resolved

    def given(self, argv: list[str]) -> dict[str, Any]:
        """Only the args that argv sets explicitly (by dest)."""
        return vars(self.parser().parse_args(argv))


class _Switch(argparse.Action):
    """A zero-argument flag (store_true, SGLang's Deprecated*Store*Action ...)."""

    def __init__(self, option_strings, dest, const=True, **kwargs):
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const)


# --------------------------------------------------------------------------- compile check


def source_files(tree: Path) -> list[Path]:
    """The files whose syntax decides whether the launcher can even import its args."""
    files = [tree / SERVER_ARGS]
    fields_dir = tree / FIELDS_DIR
    if fields_dir.is_dir():
        files += sorted(fields_dir.glob("*.py"))
    return [f for f in files if f.exists()]


def compile_or_raise(path: Path) -> ast.Module:
    """Compile like the interpreter would at import: a broken file raises the real SyntaxError."""
    src = path.read_text(encoding="utf-8")
    compile(src, str(path), "exec", dont_inherit=True)
    return ast.parse(src, filename=str(path))


# --------------------------------------------------------------------------- version


def tree_version(tree: Path) -> str:
    """The version string a tree declares (read as `specops.sglang.layout` reads it), else 'unknown'."""
    return declared_version(lambda rel: (tree / rel).read_bytes() if (tree / rel).is_file() else None) or "unknown"


# --------------------------------------------------------------------------- AST helpers


def _literal(node: ast.AST | None, default: Any = _MISSING) -> Any:
    if node is None:
        return default
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return default


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


_TYPES = {"int": int, "float": float, "str": str}


def _type_of(node: ast.AST | None) -> Any:
    """`type=int` -> int; any custom converter is taken as str (lenient, like a string check)."""
    return _TYPES.get(_dotted(node) if node is not None else "str", str)


def _action_arity(tree_classes: dict[str, ast.ClassDef], name: str) -> int | None:
    """nargs default of a custom argparse.Action subclass's __init__ (DeprecatedAction -> 0)."""
    cls = tree_classes.get(name.split(".")[-1])
    if cls is None:
        lowered = name.lower()
        return 0 if ("storetrue" in lowered or "storeconst" in lowered or name.endswith("DeprecatedAction")) else None
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args
            positional = args.args[len(args.args) - len(args.defaults):]
            for arg, dflt in list(zip(positional, args.defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)):
                if arg.arg == "nargs":
                    return _literal(dflt, None)
    return None


def _spec_from_call(call: ast.Call, classes: dict[str, ast.ClassDef], field_defaults: dict[str, Any]) -> FlagSpec | None:
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not names or not all(n.startswith("-") for n in names):
        return None
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    longs = [n for n in names if n.startswith("--")] or names
    dest = _literal(kw.get("dest"), None) or longs[0].lstrip("-").replace("-", "_")
    default = _literal(kw.get("default"), _MISSING)
    if default is _MISSING:
        ref = kw.get("default")
        default = field_defaults.get(ref.attr) if isinstance(ref, ast.Attribute) else None
    spec = FlagSpec(names=names, dest=dest, type=_type_of(kw.get("type")), default=default)
    spec.required = bool(_literal(kw.get("required"), False))
    choices = _literal(kw.get("choices"), None)
    spec.choices = list(choices) if isinstance(choices, (list, tuple)) else None
    nargs = _literal(kw.get("nargs"), _MISSING)
    action_node = kw.get("action")
    action = _literal(action_node, None) if isinstance(action_node, ast.Constant) else _dotted(action_node) if action_node else None
    if action in ("store_true", "store_false"):
        spec.nargs, spec.const = 0, action == "store_true"
        spec.default = action == "store_false" if default in (_MISSING, None) else default
    elif action in ("store_const", "append_const", "count"):
        spec.nargs, spec.const = 0, _literal(kw.get("const"), True)
    elif action and action.endswith("BooleanOptionalAction"):
        spec.boolean_optional = True
    elif action:
        arity = _action_arity(classes, action)
        if nargs is _MISSING and arity is not None:
            spec.nargs = arity
        spec.const = _literal(kw.get("const_value"), _literal(kw.get("const"), True))
    if nargs is not _MISSING and spec.nargs != 0:
        spec.nargs = nargs if isinstance(nargs, (int, str)) else "*"
    return spec


def _unwrap_annotation(node: ast.AST) -> tuple[ast.AST, list[ast.AST]]:
    """`A[T, meta...]` / `Annotated[T, ...]` -> (T, [meta...]); anything else -> (node, [])."""
    if isinstance(node, ast.Subscript) and _dotted(node.value).split(".")[-1] in ("A", "Annotated"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return elts[0], list(elts[1:])
    return node, []


def _strip_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript) and _dotted(node.value).split(".")[-1] == "Optional":
        return node.slice
    if isinstance(node, ast.Subscript) and _dotted(node.value).split(".")[-1] == "Union":
        elts = [e for e in getattr(node.slice, "elts", [node.slice]) if _literal(e, 0) is not None]
        return elts[0] if len(elts) == 1 else node
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(b, ast.Constant) and b.value is None:
                return a
    return node


def _spec_from_field(name: str, annotation: ast.AST, value: ast.AST | None, classes, *, require_meta: bool) -> FlagSpec | None:
    """A dataclass/struct field -> its derived flag (mirrors sglang's add_cli_args_from_dataclass)."""
    inner, metas = _unwrap_annotation(annotation)
    meta: dict[str, ast.AST] = {}
    has_meta = False
    for m in metas:
        if isinstance(m, ast.Constant) and isinstance(m.value, str):
            has_meta = True
            break
        if isinstance(m, ast.Call) and _dotted(m.func).split(".")[-1] == "Arg":
            has_meta = True
            meta = {k.arg: k.value for k in m.keywords if k.arg}
            break
    if (require_meta and not has_meta) or _literal(meta.get("no_cli"), False):
        return None
    if _dotted(inner).split(".")[-1] == "ClassVar" or (isinstance(inner, ast.Subscript) and _dotted(inner.value).endswith("ClassVar")):
        return None
    cli = _literal(meta.get("cli_name"), None) or "--" + name.replace("_", "-")
    names = [cli] + list(_literal(meta.get("aliases"), None) or [])
    default = _literal(value, None) if value is not None else _MISSING
    spec = FlagSpec(names=names, dest=name, default=None if default is _MISSING else default)
    base = _strip_optional(inner)
    base_name = _dotted(base.value if isinstance(base, ast.Subscript) else base).split(".")[-1]
    choices = _literal(meta.get("choices"), None)
    spec.choices = list(choices) if isinstance(choices, (list, tuple)) else None
    if "action" in meta:
        arity = _action_arity(classes, _dotted(meta["action"]))
        spec.nargs = arity if arity is not None else _literal(meta.get("nargs"), None)
        if spec.nargs != 0:
            spec.type = _type_of(base) if base_name in _TYPES else str
        return spec
    if base_name == "Literal":
        vals = _literal(base.slice, None)
        vals = list(vals) if isinstance(vals, tuple) else [vals]
        spec.choices = spec.choices or vals
        spec.type = type(vals[0]) if vals and type(vals[0]) in (int, float, str) else str
    elif base_name in ("List", "list") and "type_parser" not in meta:
        elem = base.slice if isinstance(base, ast.Subscript) else None
        spec.type = _type_of(elem) if elem is not None and _dotted(elem) in _TYPES else str
        spec.nargs = _literal(meta.get("nargs"), None) or "+"
    elif base_name == "bool":
        spec.nargs, spec.const = 0, True
        spec.default = False if default is _MISSING else default
        return spec
    else:
        spec.type = _TYPES.get(base_name, str) if "type_parser" not in meta else str
        spec.nargs = _literal(meta.get("nargs"), None)
    req = _literal(meta.get("required"), None)
    spec.required = bool(req) if req is not None else default is _MISSING
    return spec


def _find_class(module: ast.Module, name: str) -> ast.ClassDef | None:
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _class_fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    return [n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def _field_default(node: ast.AnnAssign) -> Any:
    if node.value is None:
        return None
    if isinstance(node.value, ast.Call) and _dotted(node.value.func).split(".")[-1] == "field":
        kw = {k.arg: k.value for k in node.value.keywords}
        return _literal(kw.get("default"), None)
    return _literal(node.value, None)


def _add_argument_calls(func: ast.AST) -> list[ast.Call]:
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"]
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def _collect_classes(modules: list[ast.Module]) -> dict[str, ast.ClassDef]:
    out: dict[str, ast.ClassDef] = {}
    for mod in modules:
        for node in mod.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, node)
    return out


def _prog(module: ast.Module) -> str:
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "prepare_server_args":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and _dotted(call.func).endswith("ArgumentParser"):
                    kw = {k.arg: k.value for k in call.keywords}
                    prog = _literal(kw.get("prog"), None)
                    return prog if isinstance(prog, str) else DEFAULT_PROG
    return DEFAULT_PROG


# --------------------------------------------------------------------------- extraction


def _extract(tree: Path) -> TreeFlags:
    server_args = tree / SERVER_ARGS
    if not server_args.exists():
        raise FileNotFoundError(f"{server_args}: not an SGLang checkout (no {SERVER_ARGS})")
    module = compile_or_raise(server_args)
    fields_dir = tree / FIELDS_DIR
    field_modules = [(p, compile_or_raise(p)) for p in sorted(fields_dir.glob("*.py"))] if fields_dir.is_dir() else []
    aux = [ast.parse(p.read_text(encoding="utf-8")) for p in sorted((tree / ARG_GROUPS_DIR).glob("*.py"))] if (tree / ARG_GROUPS_DIR).is_dir() else []
    classes = _collect_classes([module, *aux, *[m for _, m in field_modules]])

    sa_cls = _find_class(module, "ServerArgs")
    defaults: dict[str, Any] = {}
    specs: list[FlagSpec] = []
    seen: set[str] = set()

    def add(spec: FlagSpec | None) -> None:
        if spec is None or any(n in seen for n in spec.names):
            return
        seen.update(spec.names)
        specs.append(spec)

    add_cli = None
    if sa_cls is not None:
        for node in _class_fields(sa_cls):
            defaults[node.target.id] = _field_default(node)
        add_cli = next((n for n in sa_cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"), None)

    if field_modules:
        layout = "fields"
        # ServerArgs collects the fields of every class carrying `_NS_PATH` (fields/__init__.py),
        # then derives flags with add_cli_args_from_dataclass: only annotated fields get one.
        field_classes = [n for _, mod in field_modules for n in mod.body if isinstance(n, ast.ClassDef)]
        namespaced = [c for c in field_classes if any(
            isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_NS_PATH" for t in s.targets)
            for s in c.body)]
        for cls in namespaced or field_classes:
            for node in _class_fields(cls):
                name = node.target.id
                defaults.setdefault(name, _field_default(node))
                add(_spec_from_field(name, node.annotation, node.value, classes, require_meta=True))
    elif add_cli is not None and any(
        isinstance(c, ast.Call) and _dotted(c.func).endswith("add_cli_args_from_dataclass") for c in ast.walk(add_cli)
    ):
        layout = "annotated"
        for node in _class_fields(sa_cls):
            add(_spec_from_field(node.target.id, node.annotation, node.value, classes, require_meta=True))
    else:
        layout = "classic"

    if add_cli is not None:
        for call in _add_argument_calls(add_cli):
            add(_spec_from_call(call, classes, defaults))
    return TreeFlags(
        tree=tree, layout=layout, version=tree_version(tree), prog=_prog(module), flags=specs,
        defaults=defaults, sources=[server_args, *[p for p, _ in field_modules]],
    )


def _build_parser(info: TreeFlags) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=info.prog, argument_default=argparse.SUPPRESS)
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
            continue  # a duplicate or odd declaration SGLang resolves at runtime; skip, stay lenient
    return parser


_CACHE: dict[tuple[str, tuple[int, ...]], TreeFlags] = {}


def _stamp(tree: Path) -> tuple[int, ...]:
    return tuple(p.stat().st_mtime_ns for p in source_files(tree))


def tree_flags(tree: str | Path) -> TreeFlags:
    """Read (or reuse, keyed on the source files' mtimes) what `tree` accepts.

    Raises SyntaxError exactly as the interpreter reports it when a source does not compile,
    and FileNotFoundError when `tree` is not an SGLang checkout.
    """
    tree = Path(tree).resolve()
    key = (str(tree), _stamp(tree))
    if key not in _CACHE:
        _CACHE[key] = _extract(tree)
    return _CACHE[key]


def build_parser(tree: str | Path) -> argparse.ArgumentParser:
    """The argparse parser SGLang's launcher in `tree` would build (flags only, no runtime checks)."""
    return tree_flags(tree).parser()
