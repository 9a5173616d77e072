"""Check vLLM's crash messages (`crashdata.MESSAGES`) against a release's source: each message's
literal parts must appear, in order, in its file. vLLM builds some with f-strings and `%s`
arguments, so the check is on the text between the values, not on a parsed call.
`python -m specops.vllm.crashlines TREE` prints what a tree lacks (a new release to add)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from specops.hostfiles.treefiles import LocalTreeFiles, TreeFiles
from specops.vllm.crashdata import MESSAGES


def _pieces(text: str) -> list[str]:
    """A message's literal parts, cut where vLLM joins string literals or puts a value."""
    out: list[str] = []
    for part in text.split("{}"):
        out += [p.strip() for p in part.split(". ") if p.strip()]
    return out


#: the end of one string literal and the start of the next, across a line break: Python joins
#: adjacent literals, and vLLM splits long messages so ("... in a "\n    "background process")
_ADJACENT = re.compile(r"([\"'])\s*\n\s*[rRfF]{0,2}\1")


def joined(source: str) -> str:
    """`source` with adjacent string literals across lines joined, as Python joins them."""
    return _ADJACENT.sub("", source)


def missing(files: TreeFiles) -> list[str]:
    """The messages whose file lacks one of their literal parts (empty: the tree has them all)."""
    out = []
    for text, _process, rel, _releases in MESSAGES:
        data = files.read("vllm/" + rel)
        source = joined(data.decode(errors="replace")) if data else ""
        if not all(p.rstrip(".") in source for p in _pieces(text)):
            out.append(f"{text!r} ({rel})")
    return out


def main(argv: list[str]) -> int:
    gone = missing(LocalTreeFiles(Path(argv[0])))
    print("\n".join(gone) if gone else "every message is in the tree")
    return 1 if gone else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
