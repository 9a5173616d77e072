"""What an SGLang checkout contains, judged from its own source rather than a version table,
so untested versions are handled by what they actually have."""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field

from specops.sglang.paths import ADAPTIVE_PARAMS, ARG_GROUP_FIELDS, EAGLE_WORKERS, SERVER_ARGS
from specops.sglang.treefiles import TreeFiles
from specops.sglang.version import declared_version

DISABLE_FLAG = "--speculative-disable-batch-threshold"


@dataclass
class SGLangLayout:
    version: str | None
    args_layout: str  # "classic" | "arg_groups" | "unknown"
    flags_derived_from_fields: bool  # flags built from annotated ServerArgs fields (0.5.14-style)
    eagle_workers: list[str]
    has_adaptive: bool
    adaptive_zero_steps: bool
    cuda_graph_flag: str
    dynamic_spec_disable_applied: bool
    server_flags: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["server_flags"] = sorted(self.server_flags)
        return d

    def features(self) -> dict[str, bool]:
        """The named booleans a patch set's applies_to can require or refuse."""
        return {
            "eagle_worker": bool(self.eagle_workers),
            "adaptive": self.has_adaptive,
            "adaptive_zero_steps": self.adaptive_zero_steps,
            "dynamic_spec_disable_applied": self.dynamic_spec_disable_applied,
        }


def _parse(files: TreeFiles, relpath: str) -> ast.Module | None:
    data = files.read(relpath)
    if data is None:
        return None
    try:
        return ast.parse(data.decode("utf-8", errors="replace"))
    except SyntaxError:
        return None


def _server_args_class(tree: ast.Module | None) -> ast.ClassDef | None:
    if tree is None:
        return None
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "ServerArgs":
            return stmt
    return None


def _is_dataclass(cls: ast.ClassDef) -> bool:
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    return False


def _flags(tree: ast.Module | None, cls: ast.ClassDef | None) -> tuple[set[str], bool]:
    """Flags the file defines: every '--x' literal given to a call positionally or as
    new_flag=, plus flags derived from annotated fields when the file uses a
    dataclass-to-argparse helper."""
    flags: set[str] = set()
    derived = False
    if tree is None:
        return flags, derived
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if callee.startswith("add_cli_args_from"):
            derived = True
        values = list(node.args) + [k.value for k in node.keywords if k.arg in ("new_flag", "flag")]
        for arg in values:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--") \
                    and " " not in arg.value:
                flags.add(arg.value)
    if derived and cls is not None:
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and isinstance(stmt.annotation, ast.Subscript) \
                    and getattr(stmt.annotation.value, "id", "") in ("A", "Annotated"):
                flags.add("--" + stmt.target.id.replace("_", "-"))
    return flags, derived


def _params_allow_zero(tree: ast.Module | None) -> bool:
    """adaptive_spec_params validates candidate steps with `>= 0` (0.5.14+) rather than >= 1."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            right = node.comparators[0]
            if isinstance(right, ast.Constant) and right.value == 0 and isinstance(node.ops[0], ast.GtE):
                return True
    return False


def _worker_has_zero_step_branch(tree: ast.Module | None) -> bool:
    """The worker branches on `speculative_num_steps == 0` (drafting off, trivial verify)."""
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Attribute) and left.attr == "speculative_num_steps" \
                    and isinstance(right, ast.Constant) and right.value == 0:
                return True
    return False


def detect_layout(files: TreeFiles) -> SGLangLayout:
    """Read the tree's own files and say what it has."""
    notes: list[str] = []
    version = declared_version(files.read)
    if version is None:
        notes.append("no literal version in python/sglang/version.py or _version.py")
    sa_tree = _parse(files, SERVER_ARGS)
    cls = _server_args_class(sa_tree)
    if any(files.exists(p) for p in ARG_GROUP_FIELDS):
        args_layout = "arg_groups"
    elif cls is not None and _is_dataclass(cls):
        args_layout = "classic"
    else:
        args_layout = "unknown"
        notes.append(f"{SERVER_ARGS}: no @dataclass ServerArgs found" if sa_tree is not None
                     else f"{SERVER_ARGS} missing or does not parse")
    flags, derived = _flags(sa_tree, cls)
    workers = [p for p in EAGLE_WORKERS if files.exists(p)]
    has_adaptive = "--speculative-adaptive" in flags
    zero = False
    if files.exists(ADAPTIVE_PARAMS):
        v2 = _parse(files, EAGLE_WORKERS[1])
        zero = _params_allow_zero(_parse(files, ADAPTIVE_PARAMS)) and _worker_has_zero_step_branch(v2)
    cuda_flag = "--cuda-graph-max-bs-decode" if "--cuda-graph-max-bs-decode" in flags else "--cuda-graph-max-bs"
    if "--cuda-graph-max-bs-decode" not in flags and "--cuda-graph-max-bs" not in flags:
        notes.append("neither --cuda-graph-max-bs nor --cuda-graph-max-bs-decode found in server_args.py")
    return SGLangLayout(
        version=version,
        args_layout=args_layout,
        flags_derived_from_fields=derived,
        eagle_workers=workers,
        has_adaptive=has_adaptive,
        adaptive_zero_steps=zero,
        cuda_graph_flag=cuda_flag,
        dynamic_spec_disable_applied=DISABLE_FLAG in flags,
        server_flags=flags,
        notes=notes,
    )


def layout_summary(layout: SGLangLayout) -> str:
    """A few lines for `specops patch detect`."""
    if layout.adaptive_zero_steps:
        mech = "native: --speculative-adaptive with a zero-step tier"
    elif layout.dynamic_spec_disable_applied:
        mech = f"patched: {DISABLE_FLAG} (dynamic-spec-disable applied)"
    elif layout.args_layout == "classic" and layout.eagle_workers:
        mech = "needs the dynamic-spec-disable patch set"
    else:
        mech = "none known for this layout"
    lines = [
        f"sglang version:        {layout.version or 'unknown'}",
        f"server args layout:    {layout.args_layout}"
        + (" (flags derived from annotated fields)" if layout.flags_derived_from_fields else ""),
        f"eagle workers:         {', '.join(layout.eagle_workers) or 'none'}",
        f"--speculative-adaptive: {'yes' if layout.has_adaptive else 'no'}"
        + (" (zero-step tiers supported)" if layout.adaptive_zero_steps else ""),
        f"cuda graph max bs flag: {layout.cuda_graph_flag}",
        f"dynamic-spec-disable:  {'applied' if layout.dynamic_spec_disable_applied else 'not applied'}",
        f"adaptive arm mechanism: {mech}",
        f"server flags found:    {len(layout.server_flags)}",
    ]
    lines += [f"note: {n}" for n in layout.notes]
    return "\n".join(lines)
