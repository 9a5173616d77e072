"""Fixtures: real SGLang source trees from the PyPI wheels, as throwaway git repos.

The wheels are fetched once into the specops cache (see specops.sglang.source); each test
gets its own copy, committed, so it can assert byte-for-byte restores with `git status`.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import PatchReport, apply, load_patchset
from specops.sglang.source import ensure_tree
from specops.sglang.wheel import no_auto_gc_options
from specops.transport.local import LocalTransport

CLASSIC_VERSIONS = ["0.4.10.post2", "0.5.4", "0.5.10.post1"]
NATIVE_ADAPTIVE_VERSION = "0.5.14"
CURRENT_VERSION = "0.5.23"


@dataclass(frozen=True)
class Expected:
    """What a release's tree has, from its real parser and its files.

    `actions` / `option_strings`: what SGLang's own `ServerArgs.add_cli_args` registers, counted
    by importing the release's server_args.py with its heavy imports stubbed
    (bench/sglang_real_parser.py, run once per release; the figures do not change)."""

    version: str
    layout: str  # classic | annotated | arg_groups
    actions: int
    option_strings: int
    cuda_graph_flag: str
    mechanism: str  # of an unpatched tree: needs-patch | native-adaptive
    ready_path: str
    bench_module: str


#: The releases CI reads, one per layout change (wheels fetched once per machine, cached).
CI_RELEASES = [
    Expected("0.4.10.post2", "classic", 185, 192, "--cuda-graph-max-bs", "needs-patch", "/health", "sglang.bench_serving"),
    Expected("0.5.4", "classic", 273, 281, "--cuda-graph-max-bs", "needs-patch", "/health", "sglang.bench_serving"),
    Expected("0.5.10.post1", "classic", 354, 365, "--cuda-graph-max-bs", "needs-patch", "/health",
             "sglang.bench_serving"),
    Expected("0.5.14", "annotated", 420, 433, "--cuda-graph-max-bs-decode", "native-adaptive", "/health",
             "sglang.bench_serving"),
    Expected("0.5.19", "annotated", 503, 521, "--cuda-graph-max-bs-decode", "native-adaptive", "/health",
             "sglang.benchmark.serving"),
    Expected("0.5.23", "arg_groups", 531, 559, "--cuda-graph-max-bs-decode", "native-adaptive", "/ready",
             "sglang.benchmark.serving"),
]


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), *args], check=True, capture_output=True, text=True
    ).stdout


def copy_tree(version: str, dest: Path, *, committed: bool = False) -> Path:
    """A copy of that release's tree at `dest` (links kept); `committed`: a git repo of it, so a
    test can assert byte-for-byte restores (`tree_is_pristine`)."""
    shutil.copytree(ensure_tree(version), dest, symlinks=True)
    if committed:
        _git(dest, "init", "-q")
        _git(dest, "add", "-A")
        # no detached `git gc --auto` left writing into the copy (a release is ~6,000 loose objects)
        _git(dest, *no_auto_gc_options(), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "wheel")
    return dest


def apply_set(name: str, root: Path, **options: Any) -> PatchReport:
    """Patch set `name` applied to the local tree at `root` as deploy applies it; its verify
    commands not run unless `options` say (run_verify_cmds, python, tree)."""
    return apply(load_patchset(name), LocalTreeFiles(root), LocalTransport(), **{"run_verify_cmds": False, **options})


@pytest.fixture
def sglang_tree(tmp_path: Path) -> Callable[[str], Path]:
    """Factory: `sglang_tree("0.5.4")` -> a fresh, committed copy of that version's tree."""

    def make(version: str) -> Path:
        return copy_tree(version, tmp_path / f"sglang-{version}", committed=True)

    return make


def tree_is_pristine(tree: Path) -> bool:
    """True when the working tree matches its commit byte for byte (no stray files either)."""
    return _git(tree, "status", "--porcelain", "--untracked-files=all") == ""
