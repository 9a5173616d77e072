"""What an SGLang checkout contains, judged from its own source rather than a version table,
so untested versions are handled by what they actually have.

The flags come from the one reader (`specops.sglang.flags`); this module adds what else a
launch needs to know: the EAGLE workers, whether adaptive tiers may use zero steps, which
file builds the CUDA-graph capture list, the readiness endpoint and the benchmark module.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from specops import pysource
from specops.hostfiles.treefiles import TreeFiles
from specops.sglang.flags import ARG_GROUPS, TreeFlags, module_path, read_flags
from specops.sglang.paths import ADAPTIVE_PARAMS, EAGLE_WORKERS, PKG, SERVER_ARGS
from specops.sglang.treeversion import tree_version as read_tree_version

HTTP_SERVER = f"{PKG}/srt/entrypoints/http_server.py"
#: Where the speculative CUDA-graph capture list is built: server_args.py up to 0.5.18,
#: arg_groups/cuda_graph_hook.py from 0.5.19 on. The first that has it wins.
BUCKET_SOURCES = (SERVER_ARGS, f"{PKG}/srt/arg_groups/cuda_graph_hook.py")
#: `python -m` modules of SGLang's serving benchmark, newest first (0.5.16 moved it).
BENCH_MODULES = ("sglang.benchmark.serving", "sglang.bench_serving")
DISABLE_FLAG = "--speculative-disable-batch-threshold"
ADAPTIVE_FLAGS = ("--speculative-adaptive", "--speculative-adaptive-config")


@dataclass
class SGLangLayout:
    version: str | None
    args_layout: str  # "classic" | "arg_groups" | "unknown"
    flags_derived_from_fields: bool  # flags built from annotated ServerArgs fields (0.5.14-style)
    eagle_workers: list[str]
    has_adaptive: bool
    adaptive_zero_steps: bool
    cuda_graph_flag: str | None  # the decode CUDA-graph max batch size flag; None: the tree has none
    dynamic_spec_disable_applied: bool
    server_flags: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    ready_path: str = "/health"  # "/ready" where the tree serves it (0.5.20+)
    bench_module: str | None = None
    flags: TreeFlags | None = None  # None when server_args.py cannot be read (see notes)

    @property
    def flags_layout(self) -> str:
        """classic | annotated | arg_groups | unknown: how the tree declares its flags."""
        return self.flags.layout if self.flags is not None else "unknown"

    @property
    def adaptive_mechanism(self) -> str:
        """native-adaptive | dynamic-spec-disable-patch | needs-patch | none."""
        if self.has_adaptive and self.adaptive_zero_steps:
            return "native-adaptive"
        if self.dynamic_spec_disable_applied:
            return "dynamic-spec-disable-patch"
        if self.args_layout == "classic" and self.eagle_workers:
            return "needs-patch"
        return "none"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("flags")
        d["server_flags"] = sorted(self.server_flags)
        d["flags_layout"] = self.flags_layout
        d["adaptive_mechanism"] = self.adaptive_mechanism
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
        return pysource.parse(data.decode("utf-8", errors="replace"))
    except SyntaxError:
        return None


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


_READY_ROUTE = re.compile(rb"""@app\.(?:get|api_route)\(\s*['"]/ready['"]""")


def ready_path(files: TreeFiles) -> str:
    """`/ready` where the tree's HTTP server defines it (0.5.20+), else `/health`."""
    data = files.read(HTTP_SERVER)
    return "/ready" if data is not None and _READY_ROUTE.search(data) else "/health"


def bench_module(files: TreeFiles) -> str | None:
    """The serving benchmark's module: `sglang.benchmark.serving` (0.5.16+), else
    `sglang.bench_serving`; None when the tree has neither."""
    return next((m for m in BENCH_MODULES if files.exists(module_path(m))), None)


def detect_layout(files: TreeFiles) -> SGLangLayout:
    """Read the tree's own files and say what it has."""
    notes: list[str] = []
    flags: TreeFlags | None = None
    try:
        flags = read_flags(files)
    except FileNotFoundError:
        notes.append(f"{SERVER_ARGS} missing")
    except SyntaxError as exc:
        notes.append(f"{exc.filename or SERVER_ARGS}:{exc.lineno}: does not compile: SyntaxError: {exc.msg}")
    # literal version, else the checkout's release tag, else the wheel marker (one reader)
    version, version_source = read_tree_version(files)
    if version is None:
        notes.append(f"version unknown: {version_source}")
    if flags is None:
        args_layout = "unknown"
    else:
        args_layout = "arg_groups" if flags.layout == ARG_GROUPS else "classic"
    names = flags.option_names() if flags is not None else set()
    workers = [p for p in EAGLE_WORKERS if files.exists(p)]
    has_adaptive = all(f in names for f in ADAPTIVE_FLAGS)
    zero = False
    if has_adaptive and files.exists(ADAPTIVE_PARAMS):
        zero = _params_allow_zero(_parse(files, ADAPTIVE_PARAMS)) and _worker_has_zero_step_branch(
            _parse(files, EAGLE_WORKERS[1]))
    cuda_flag = flags.flag_for_dest("cuda_graph_max_bs_decode", "cuda_graph_max_bs") if flags is not None else None
    if flags is not None and cuda_flag is None:
        notes.append("no decode CUDA-graph max batch size flag (--cuda-graph-max-bs[-decode]) in the tree")
    return SGLangLayout(
        version=version,
        args_layout=args_layout,
        flags_derived_from_fields=flags is not None and flags.layout != "classic",
        eagle_workers=workers,
        has_adaptive=has_adaptive,
        adaptive_zero_steps=zero,
        cuda_graph_flag=cuda_flag,
        dynamic_spec_disable_applied=DISABLE_FLAG in names,
        server_flags=names,
        notes=notes,
        ready_path=ready_path(files),
        bench_module=bench_module(files),
        flags=flags,
    )


_MECHANISMS = {
    "native-adaptive": "native: --speculative-adaptive with a zero-step tier",
    "dynamic-spec-disable-patch": f"patched: {DISABLE_FLAG} (dynamic-spec-disable applied)",
    "needs-patch": "needs the dynamic-spec-disable patch set",
    "none": "none known for this layout",
}


def layout_summary(layout: SGLangLayout) -> str:
    """A few lines for `specops patch detect`."""
    if layout.has_adaptive:
        adaptive = "yes" + (" (zero-step tiers supported)" if layout.adaptive_zero_steps
                            else " (zero-step tiers not supported)")
    else:
        adaptive = "no"
    lines = [
        f"sglang version:        {layout.version or 'unknown'}",
        f"server args layout:    {layout.flags_layout}",
        f"eagle workers:         {', '.join(layout.eagle_workers) or 'none'}",
        f"--speculative-adaptive: {adaptive}",
        f"cuda graph max bs flag: {layout.cuda_graph_flag or 'none'}",
        f"dynamic-spec-disable:  {'applied' if layout.dynamic_spec_disable_applied else 'not applied'}",
        f"adaptive arm mechanism: {_MECHANISMS[layout.adaptive_mechanism]}",
        f"readiness endpoint:    {layout.ready_path}",
        f"benchmark module:      {layout.bench_module or 'none'}",
        f"server flags found:    {len(layout.server_flags)}"
        + (f" ({len(layout.flags.flags)} arguments)" if layout.flags is not None else ""),
    ]
    lines += [f"note: {n}" for n in layout.notes]
    return "\n".join(lines)
