"""What `revert` reports for each edit and leaves on disk, with and without the backups and
the manifest: statuses, notes and refusals as the user sees them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import PatchError, apply, parse_patchset, revert
from specops.transport.local import LocalTransport

SRC = b"import os\n\nlogger = object()\n\n\nclass Args:\n    alpha: int = 1\n\n    def check(self):\n        return True\n"

SET = """\
name: small
edits:
  - name: field
    file: m.py
    op: insert_after
    anchor: {class: Args, field: alpha}
    text: "gamma: int = 0"
  - name: swap
    file: m.py
    op: replace
    anchor: {function: Args.check, statement: return True}
    text: return bool(self.alpha)
  - name: drop
    file: m.py
    op: delete
    anchor: {assign: logger}
"""
PATCHED = b"import os\n\n\n\nclass Args:\n    alpha: int = 1\n    gamma: int = 0\n\n    def check(self):\n        return bool(self.alpha)\n"
STATE = ".specops/patches/small"


def _tree(tmp_path: Path, data: bytes = SRC) -> LocalTreeFiles:
    (tmp_path / "m.py").write_bytes(data)
    return LocalTreeFiles(tmp_path)


def _applied(tmp_path: Path, text: str = SET):
    files = _tree(tmp_path)
    ps = parse_patchset(text, "small.yaml")
    apply(ps, files, LocalTransport())
    if text == SET:
        assert (tmp_path / "m.py").read_bytes() == PATCHED
    return ps, files


def _statuses(report) -> list[tuple[str, str, str]]:
    return [(r.edit, r.status, r.reason) for r in report.results]


def test_from_the_backups(tmp_path):
    ps, files = _applied(tmp_path)
    rev = revert(ps, files)
    assert _statuses(rev) == [(e, "reverted", "from backup") for e in ("field", "swap", "drop")]
    assert rev.changed_files == ["m.py"] and rev.notes == []
    assert (tmp_path / "m.py").read_bytes() == SRC and not (tmp_path / ".specops").exists()


def test_from_the_manifest_alone(tmp_path):
    ps, files = _applied(tmp_path)
    (tmp_path / STATE / "backups/m.py").unlink()
    rev = revert(ps, files)
    assert _statuses(rev) == [("field", "reverted", "inserted text removed"),
                              ("swap", "reverted", "manifest text swapped back"),
                              ("drop", "reverted", "manifest text swapped back")]
    assert rev.notes == [] and (tmp_path / "m.py").read_bytes() == SRC
    assert not (tmp_path / ".specops").exists()


def test_manifest_text_found_after_the_file_moved(tmp_path):
    """Lines added above the patch after applying: the recorded line is off, the text is searched."""
    ps, files = _applied(tmp_path, SET.split("  - name: drop")[0])
    (tmp_path / STATE / "backups/m.py").unlink()
    patched = (tmp_path / "m.py").read_bytes()
    (tmp_path / "m.py").write_bytes(b"# added later\n# and more\n" + patched)
    rev = revert(ps, files)
    assert _statuses(rev) == [("field", "reverted", "inserted text removed"),
                              ("swap", "reverted", "manifest text swapped back")]
    assert (tmp_path / "m.py").read_bytes() == b"# added later\n# and more\n" + SRC
    assert rev.notes == ["m.py: text removed, but the result differs from the recorded original"]


def test_without_backups_or_manifest_a_replace_is_blocked_not_reverted(tmp_path):
    ps, files = _applied(tmp_path, SET.split("  - name: drop")[0])
    shutil.rmtree(tmp_path / ".specops")
    patched = (tmp_path / "m.py").read_bytes()
    with pytest.raises(PatchError) as err:
        revert(ps, files)
    assert err.value.message == ("revert of small, file m.py, edit swap: needs the backup or the manifest to undo "
                                 "a replace/delete; nothing was changed")
    assert (tmp_path / "m.py").read_bytes() == patched


def test_without_backups_or_manifest_a_delete_is_blocked(tmp_path):
    ps, files = _applied(tmp_path)
    shutil.rmtree(tmp_path / ".specops")
    with pytest.raises(PatchError) as err:
        revert(ps, files)
    assert "edit swap: needs the backup or the manifest" in err.value.message
    ps = parse_patchset("name: small\nedits:\n" + SET.split("  - name: drop\n")[1].join(["  - name: drop\n", ""]),
                        "small.yaml")
    with pytest.raises(PatchError) as err:
        revert(ps, files)
    assert err.value.message == ("revert of small, file m.py, edit drop: needs the backup or the manifest to undo "
                                 "a replace/delete; nothing was changed")
    assert (tmp_path / "m.py").read_bytes() == PATCHED


def test_a_set_never_applied_is_not_applied(tmp_path):
    files = _tree(tmp_path)
    rev = revert(parse_patchset(SET, "small.yaml"), files)
    assert _statuses(rev) == [(e, "not applied", "") for e in ("field", "swap", "drop")]
    assert not rev.changed and (tmp_path / "m.py").read_bytes() == SRC


def test_backup_equal_to_the_file_is_not_applied(tmp_path):
    ps, files = _applied(tmp_path)
    (tmp_path / "m.py").write_bytes(SRC)  # someone restored it by hand
    rev = revert(ps, files)
    assert _statuses(rev) == [(e, "not applied", "from backup") for e in ("field", "swap", "drop")]
    assert not rev.changed and not (tmp_path / ".specops").exists()


def test_file_changed_after_the_patch_gets_the_backup_and_a_note(tmp_path):
    ps, files = _applied(tmp_path)
    (tmp_path / "m.py").write_bytes(PATCHED + b"# edited later\n")
    rev = revert(ps, files)
    assert rev.notes == ["m.py changed after the patch; restored the backup anyway"]
    assert (tmp_path / "m.py").read_bytes() == SRC


def test_a_backup_that_is_not_the_recorded_original_is_not_used(tmp_path):
    ps, files = _applied(tmp_path)
    (tmp_path / STATE / "backups/m.py").write_bytes(b"x = 'not the original'\n")
    rev = revert(ps, files)
    assert _statuses(rev)[0] == ("field", "reverted", "inserted text removed")
    assert (tmp_path / "m.py").read_bytes() == SRC


def test_a_missing_file_is_skipped(tmp_path):
    ps, files = _applied(tmp_path)
    (tmp_path / "m.py").unlink()
    rev = revert(ps, files)
    assert _statuses(rev) == [(e, "skipped", "file not in this tree") for e in ("field", "swap", "drop")]


def test_a_revert_that_would_not_compile_changes_nothing(tmp_path):
    ps, files = _applied(tmp_path)
    (tmp_path / STATE / "backups/m.py").unlink()
    broken = PATCHED.replace(b"        return bool(self.alpha)\n", b"        return bool(self.alpha)\n    x = (\n")
    manifest = json.loads((tmp_path / STATE / "manifest.json").read_text())
    manifest["files"]["m.py"]["original_sha256"] = None
    (tmp_path / STATE / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "m.py").write_bytes(broken)
    with pytest.raises(PatchError) as err:
        revert(ps, files)
    assert err.value.message.startswith("revert of small: m.py would not compile after removing the inserted text "
                                        "(result does not compile: SyntaxError at line ")
    assert err.value.message.endswith("); nothing was changed")
    assert (tmp_path / "m.py").read_bytes() == broken and (tmp_path / STATE / "manifest.json").exists()


def test_the_manifest_records_what_was_inserted_and_removed(tmp_path):
    _applied(tmp_path)
    manifest = json.loads((tmp_path / STATE / "manifest.json").read_text())
    assert manifest["set"] == "small"
    assert [(r["edit"], r["op"], r["at"], r["added"], r["removed"]) for r in manifest["edits"]] == [
        ("field", "insert_after", 8, "    gamma: int = 0\n", ""),
        ("swap", "replace", 11, "        return bool(self.alpha)\n", "        return True\n"),
        ("drop", "delete", 3, "", "logger = object()\n")]
    assert manifest["files"]["m.py"]["backup"] == f"{STATE}/backups/m.py"


def test_a_set_whose_anchors_and_texts_are_both_absent_is_not_applied(tmp_path):
    files = _tree(tmp_path, b"x = 1\n")
    rev = revert(parse_patchset(SET.split("  - name: drop")[0], "small.yaml"), files)
    assert _statuses(rev) == [("field", "not applied", ""), ("swap", "not applied", "")]


def test_deleting_the_only_statement_and_reverting_from_the_manifest(tmp_path):
    files = _tree(tmp_path, b"x = 1\n")
    ps = parse_patchset("name: small\nedits:\n  - {name: d, file: m.py, op: delete, anchor: {assign: x}}\n", "s.yaml")
    apply(ps, files, LocalTransport())
    assert (tmp_path / "m.py").read_bytes() == b""
    (tmp_path / STATE / "backups/m.py").unlink()
    assert _statuses(revert(ps, files)) == [("d", "reverted", "manifest text swapped back")]
    assert (tmp_path / "m.py").read_bytes() == b"x = 1\n"


def test_a_diff_reverted_to_an_empty_file(tmp_path):
    files = _tree(tmp_path, b"")
    ps = parse_patchset("name: small\nedits:\n  - name: d\n    op: diff\n    diff: |\n"
                        "      --- a/m.py\n      +++ b/m.py\n      @@ -0,0 +1 @@\n      +x = 1\n", "s.yaml")
    apply(ps, files, LocalTransport())
    assert (tmp_path / "m.py").read_bytes() == b"x = 1\n"
    shutil.rmtree(tmp_path / ".specops")
    assert _statuses(revert(ps, files)) == [("d", "reverted", "git apply --reverse")]
    assert (tmp_path / "m.py").read_bytes() == b""
