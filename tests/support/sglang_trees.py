"""Fixtures: real SGLang source trees from the PyPI wheels, as throwaway git repos.

The wheels are fetched once into the specops cache (see specops.sglang.source); each test
gets its own copy, committed, so it can assert byte-for-byte restores with `git status`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from specops.sglang.source import ensure_tree

CLASSIC_VERSIONS = ["0.4.10.post2", "0.5.4", "0.5.10.post1"]
NATIVE_ADAPTIVE_VERSION = "0.5.14"


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def sglang_tree(tmp_path: Path) -> Callable[[str], Path]:
    """Factory: `sglang_tree("0.5.4")` -> a fresh, committed copy of that version's tree."""

    def make(version: str) -> Path:
        src = ensure_tree(version)
        dest = tmp_path / f"sglang-{version}"
        shutil.copytree(src, dest, symlinks=True)
        _git(dest, "init", "-q")
        _git(dest, "add", "-A")
        _git(dest, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "wheel")
        return dest

    return make


def tree_is_pristine(tree: Path) -> bool:
    """True when the working tree matches its commit byte for byte (no stray files either)."""
    return _git(tree, "status", "--porcelain", "--untracked-files=all") == ""
