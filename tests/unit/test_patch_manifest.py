"""The patch manifest's one reader and one writer: a manifest the applier wrote before it
was typed (tests/data/patch_manifest_main/manifest.json, made by applying the set below to
the tree below, then a grown version of it) reads typed and writes back byte for byte, and
today's applier writes the same bytes for the same trees and sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import PatchError, apply, parse_patchset, revert
from specops.patching.manifest import PatchManifest, parse, read, render
from specops.transport.local import LocalTransport

OLD = Path(__file__).resolve().parents[1] / "data" / "patch_manifest_main" / "manifest.json"
STATE = ".specops/patches/small"
MOD = ("import os\nHEAD = 1\n\n\nclass Args:\n    alpha: int = 1\n    beta: int = 2\n\n    def check(self):\n"
       "        return True\n\n    def drop(self):\n        x = 1\n        return x\n")
EDITS = """\
  - name: field
    file: m.py
    op: insert_after
    anchor: {class: Args, field: alpha}
    text: |
      gamma: int = 3
  - name: first
    file: m.py
    op: insert_before
    anchor: {assign: HEAD}
    text: "# head"
  - name: swap
    file: m.py
    op: replace
    anchor: {function: Args.check, statement: return True}
    text: return self.alpha > 0
  - name: gone
    file: m.py
    op: delete
    anchor: {function: Args.drop, statement: x = 1}
  - name: txt
    file: notes.txt
    op: insert_after
    anchor: {text: two}
    text: "two and a half"
  - name: patch
    file: d.txt
    op: diff
    diff: |
      --- a/d.txt
      +++ b/d.txt
      @@ -1,2 +1,2 @@
       a
      -b
      +c
"""
GROWN = EDITS + """\
  - name: more
    file: m.py
    op: insert_after
    anchor: {class: Args, field: beta}
    text: "epsilon: int = 5"
"""


def _tree(tmp_path: Path) -> LocalTreeFiles:
    (tmp_path / "m.py").write_text(MOD)
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "d.txt").write_text("a\nb\n")
    return LocalTreeFiles(tmp_path)


def _apply(files: LocalTreeFiles, edits: str) -> None:
    apply(parse_patchset(f"name: small\nedits:\n{edits}", "small.yaml"), files, LocalTransport(),
          run_verify_cmds=False)


def test_an_old_manifest_reads_typed_and_writes_back_the_same_bytes() -> None:
    data = OLD.read_bytes()
    manifest = parse(data)
    assert manifest.set == "small" and set(manifest.files) == {"m.py", "notes.txt", "d.txt"}
    assert [e.edit for e in manifest.edits] == ["field", "first", "swap", "gone", "txt", "patch", "more"]
    swap = manifest.edits[2]
    assert (swap.op, swap.at, swap.added, swap.removed) == ("replace", 12, "        return self.alpha > 0\n",
                                                             "        return True\n")
    assert manifest.edits[5].diff is not None and manifest.edits[5].at is None
    assert manifest.files["m.py"].backup == f"{STATE}/backups/m.py"
    assert not manifest.extra and not any(e.extra for e in manifest.edits)
    assert render(manifest) == data


def test_todays_applier_writes_what_the_old_one_wrote(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    _apply(files, EDITS)
    _apply(files, GROWN)   # a set that grew: its new edit goes on top of the recorded ones
    assert (tmp_path / STATE / "manifest.json").read_bytes() == OLD.read_bytes()
    # and the records are what revert undoes from, once the backups are gone
    for backup in (tmp_path / STATE / "backups").iterdir():
        backup.unlink()
    report = revert(parse_patchset(f"name: small\nedits:\n{GROWN}", "small.yaml"), files)
    assert report.changed and (tmp_path / "m.py").read_text() == MOD and (tmp_path / "d.txt").read_text() == "a\nb\n"


def test_unknown_keys_nulls_and_other_types_are_kept_as_they_were() -> None:
    odd = {"zz": [1], "set": "s", "files": {"a.py": {"original_sha256": None, "backup": "b", "note": 1}},
           "edits": [{"edit": "e", "at": True, "added": None, "x": {}}]}
    manifest = parse(json.dumps(odd).encode())
    assert manifest.files["a.py"].original_sha256 is None and manifest.edits[0].at is None
    assert render(manifest) == json.dumps(odd, indent=1).encode()
    manifest.edits[0].at = 3   # a value set since replaces the one that did not fit
    assert json.loads(render(manifest))["edits"][0]["at"] == 3


def test_a_manifest_of_another_shape_stops_the_apply_and_changes_nothing(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    (tmp_path / STATE).mkdir(parents=True)
    (tmp_path / STATE / "manifest.json").write_text('{"set": "small", "files": [], "edits": []}')
    with pytest.raises(PatchError, match="manifest.json cannot be read"):
        _apply(files, EDITS)
    assert (tmp_path / "m.py").read_text() == MOD
    assert read(files, "small") is None   # planning treats it as no manifest, as before
    with pytest.raises(ValueError):
        PatchManifest.from_dict({"edits": [1]})
