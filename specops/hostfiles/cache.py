"""This machine's cache of engines' wheels and unpacked trees (sglang/source.py, vllm/source.py)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Where trees are cached: $SPECOPS_CACHE or ~/.cache/specops."""
    base = os.environ.get("SPECOPS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "specops"
    )
    return Path(base)
