"""A tree patched by an earlier version of a set (an older specops's) takes the new version:
planned from the originals the earlier apply kept, so the result is byte for byte what the
new set makes of a pristine tree, and revert still gives the pristine tree back. Measured
first: the new dynamic-spec-disable over a tree the previous one had patched was blocked
("anchor function specops_one_token_backend ... matches 2 places"), which failed `specops
demo` for anyone who had run an older one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import apply, load_patchset, revert
from specops.patching.applier import plan
from specops.patching.model import PatchError
from specops.transport.local import LocalTransport
from tests.support.sglang_trees import apply_set, copy_tree

SET = "dynamic-spec-disable"
VERSION_FILE = "python/sglang/srt/utils/common.py"  # a file the new set leaves alone


def _git_tree(tmp: Path, name: str) -> Path:
    tree = tmp / name
    copy_tree("0.5.10.post1", tree, committed=True)
    return tree


def _status(tree: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tree, capture_output=True,
                          text=True, check=True).stdout


def _earlier(tmp: Path) -> Path:
    """The shipped set as an earlier release of specops might have had it: a helper block
    worded differently, one edit fewer, and an edit of a file the new set leaves alone."""
    doc = yaml.safe_load(load_patchset(SET).source and Path(load_patchset(SET).source).read_text())
    edits = [e for e in doc["edits"] if e["name"] != "worker-v1-backend-guard"]
    for e in edits:
        if e["name"] == "worker-v1-helpers":
            e["text"] = e["text"].replace("# ---- specops dynamic-spec-disable:", "# ---- specops (older) dynamic-spec-disable:")
    edits.append({"name": "version-note", "file": VERSION_FILE, "op": "insert_after",
                  "anchor": {"assign": "logger"}, "text": "# patched by an older specops\n"})
    doc["edits"] = edits
    doc["verify"] = []
    path = tmp / "older.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_new_version_replaces_an_earlier_one_whole(tmp_path):
    old = load_patchset(str(_earlier(tmp_path)))
    new = load_patchset(SET)
    tree = _git_tree(tmp_path, "upgraded")
    apply(old, LocalTreeFiles(tree), LocalTransport(), run_verify_cmds=False)
    assert "patched by an older specops" in (tree / VERSION_FILE).read_text()
    report = apply(new, LocalTreeFiles(tree), LocalTransport(), python="python3", tree=str(tree))
    assert any("another version of this set" in n for n in report.notes), report.notes
    # byte for byte what the new set makes of a pristine tree
    fresh = _git_tree(tmp_path, "fresh")
    apply(new, LocalTreeFiles(fresh), LocalTransport(), run_verify_cmds=False)
    for rel in new.files + [VERSION_FILE]:
        assert (tree / rel).read_bytes() == (fresh / rel).read_bytes(), rel
    again = plan(new, LocalTreeFiles(tree))
    assert not again.new_contents and not again.blocked and not again.replaces_earlier  # applied: nothing to do
    revert(new, LocalTreeFiles(tree))
    assert _status(tree) == ""  # pristine, no state folder, no stray backup


def test_a_file_edited_after_the_earlier_apply_is_not_overwritten(tmp_path):
    """Then the originals cannot stand for the tree: the plan is the plain one, which is
    blocked here (the old helper block is in the way) and changes nothing."""
    old = load_patchset(str(_earlier(tmp_path)))
    tree = _git_tree(tmp_path, "edited")
    apply(old, LocalTreeFiles(tree), LocalTransport(), run_verify_cmds=False)
    worker = tree / "python/sglang/srt/speculative/eagle_worker.py"
    worker.write_text(worker.read_text() + "\n# a local change\n")
    before = {p: p.read_bytes() for p in tree.rglob("*.py") if "speculative" in str(p) or "server_args" in p.name}
    with pytest.raises(PatchError, match="nothing was changed"):
        apply_set(SET, tree)
    assert {p: p.read_bytes() for p in before} == before
