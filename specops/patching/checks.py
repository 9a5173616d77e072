"""Built-in verify checks a patch set can name (`verify: [{check: NAME}]`): facts about the
patched tree that specops reads itself, through the same TreeFiles as the edits (local or
over the transport), rather than a script the host runs.

Each check returns (ok, lines); the lines say what was found, a failure's first.
"""

from __future__ import annotations

from typing import Callable

from specops.hostfiles.treefiles import TreeFiles
from specops.sglang.verify_backends import check_tree


def eagle_attention_backends(files: TreeFiles) -> tuple[bool, list[str]]:
    """Each attention backend the set supports, as this release writes it, sizes its
    TARGET_VERIFY step from a count the one-token verify makes 1 (see verify_backends)."""
    report = check_tree(files)
    lines = report.lines()
    if not report.ok:
        lines = [f"problem: {p}" for p in report.problems] + [ln for ln in lines if not ln.startswith("problem:")]
    return report.ok, lines


CHECKS: dict[str, Callable[[TreeFiles], tuple[bool, list[str]]]] = {
    "eagle-attention-backends": eagle_attention_backends,
}
