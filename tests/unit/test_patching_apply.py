"""What applying a set does to the bytes on disk and what each edit reports: line endings,
files without a final line break, the line an edit lands on, every refusal's message,
unified diffs, compile checks, re-applying a grown set, and the applicability checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.errors import SpecopsError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import APPLIED, BLOCKED, NEW, PatchError, apply, check_applicable, parse_patchset, plan, revert
from specops.patching.applier import SKIPPED
from specops.sglang.layout import SGLangLayout
from specops.transport.local import LocalTransport
from tests.support.sglang_trees import tree_is_pristine

MOD = "import os\n\n\nclass Args:\n    alpha: int = 1\n    beta: int = 2\n\n    def check(self):\n        return True\n"

EDITS = """\
  - name: field
    file: m.py
    op: insert_after
    anchor: {class: Args, field: alpha}
    text: |
      gamma: int = 3
      delta: int = 4
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
"""


def _ps(edits: str, name: str = "small", extra: str = "") -> object:
    return parse_patchset(f"name: {name}\nedits:\n{edits}{extra}", f"{name}.yaml")


def _write(tmp_path: Path, rel: str, data: bytes) -> LocalTreeFiles:
    (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / rel).write_bytes(data)
    return LocalTreeFiles(tmp_path)


def _results(report) -> list[tuple[str, str, str, int]]:
    return [(r.edit, r.status, r.reason, r.line) for r in report.results]


# ------------------------------------------------------------------ line endings


@pytest.mark.parametrize("nl", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_line_endings_are_kept(tmp_path, nl):
    src = ("HEAD = 0\n" + MOD).replace("\n", nl).encode()
    files = _write(tmp_path, "m.py", src)
    ps = _ps(EDITS)
    report = apply(ps, files, LocalTransport())
    want = ("# head\nHEAD = 0\nimport os\n\n\nclass Args:\n    alpha: int = 1\n    gamma: int = 3\n    delta: int = 4\n"
            "    beta: int = 2\n\n    def check(self):\n        return self.alpha > 0\n").replace("\n", nl).encode()
    assert (tmp_path / "m.py").read_bytes() == want
    assert _results(report) == [("field", NEW, "", 8), ("first", NEW, "", 1), ("swap", NEW, "", 13)]  # final lines
    again = apply(ps, files, LocalTransport())
    assert _results(again) == [("field", APPLIED, "", 8), ("first", APPLIED, "", 1), ("swap", APPLIED, "", 13)]
    assert again.notes == ["already applied; nothing to do"] and not again.changed
    assert (tmp_path / "m.py").read_bytes() == want
    (tmp_path / ".specops/patches/small/backups/m.py").unlink()  # the manifest alone
    rev = revert(ps, files)
    assert (tmp_path / "m.py").read_bytes() == src
    assert [(r.edit, r.status, r.reason) for r in rev.results] == [
        ("field", "reverted", "inserted text removed"), ("first", "reverted", "inserted text removed"),
        ("swap", "reverted", "manifest text swapped back")]
    assert rev.notes == []


def test_crlf_text_file_with_a_text_anchor(tmp_path):
    files = _write(tmp_path, "notes.txt", b"one\r\ntwo\r\nthree\r\n")
    ps = _ps("  - name: n\n    file: notes.txt\n    op: insert_after\n    anchor: {text: two}\n    text: |\n      2a\n      2b\n")
    apply(ps, files, LocalTransport())
    assert (tmp_path / "notes.txt").read_bytes() == b"one\r\ntwo\r\n2a\r\n2b\r\nthree\r\n"


def test_a_form_feed_is_not_a_line_break(tmp_path):
    """Python counts lines at \\n, \\r\\n and \\r only; str.splitlines() also splits at ^L."""
    src = b"x = 1\n\x0c\ndef f():\n    return 1\n\x0c\ny = 2\n"
    files = _write(tmp_path, "m.py", src)
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {function: f}\n    text: 'z = 3'\n"
             "  - name: g\n    file: m.py\n    op: insert_after\n    anchor: {text: 'y = 2'}\n    text: 'w = 4'\n")
    assert _results(apply(ps, files, LocalTransport())) == [("e", NEW, "", 5), ("g", NEW, "", 8)]
    assert (tmp_path / "m.py").read_bytes() == b"x = 1\n\x0c\ndef f():\n    return 1\nz = 3\n\x0c\ny = 2\nw = 4\n"


# ------------------------------------------------------------------ no final line break


@pytest.mark.parametrize("edit,want", [
    ("op: insert_after\n    anchor: {assign: x}\n    text: 'n = 0'", b"x = 1\nn = 0\ny = 2"),
    ("op: insert_after\n    anchor: {assign: y}\n    text: 'n = 0'", b"x = 1\ny = 2\nn = 0"),
    ("op: replace\n    anchor: {assign: y}\n    text: 'y = 3'", b"x = 1\ny = 3"),
    ("op: delete\n    anchor: {assign: y}", b"x = 1"),
], ids=["middle", "end", "replace-last", "delete-last"])
def test_a_file_without_a_final_line_break_keeps_it_that_way(tmp_path, edit, want):
    src = b"x = 1\ny = 2"
    files = _write(tmp_path, "m.py", src)
    ps = _ps(f"  - name: e\n    file: m.py\n    {edit}\n")
    assert [r.status for r in apply(ps, files, LocalTransport()).results] == [NEW]
    assert (tmp_path / "m.py").read_bytes() == want
    assert [r.status for r in apply(ps, files, LocalTransport()).results] == [APPLIED]
    (tmp_path / ".specops/patches/small/backups/m.py").unlink()
    revert(ps, files)
    assert (tmp_path / "m.py").read_bytes() == src


# ------------------------------------------------------------------ refusals


def test_text_already_elsewhere_is_refused_with_its_line(tmp_path):
    files = _write(tmp_path, "m.py", b"n = 0\nx = 1\ny = 2\n")
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: 'n = 0'\n")
    assert _results(plan(ps, files, check_layout=False)) == [
        ("e", BLOCKED, "its text is already in m.py at line 1, not at its anchor (module assignment x in m.py)", 0)]
    files = _write(tmp_path, "m.py", b"x = 1\ny = 2\nn = 0\n")
    assert _results(plan(ps, files, check_layout=False)) == [
        ("e", BLOCKED, "its text is already in m.py at line 3, not at its anchor (module assignment x in m.py)", 0)]


def test_a_block_at_line_one_before_its_anchor_is_applied(tmp_path):
    files = _write(tmp_path, "m.py", b"n = 0\nm = 0\nx = 1\n")
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_before\n    anchor: {assign: x}\n    text: |\n      n = 0\n      m = 0\n")
    assert _results(plan(ps, files, check_layout=False)) == [("e", APPLIED, "", 1)]


def test_a_tree_file_that_does_not_compile_is_not_touched(tmp_path):
    files = _write(tmp_path, "m.py", b"x = (\n")
    ps = _ps("  - name: a\n    file: m.py\n    op: insert_after\n    anchor: {text: 'x = ('}\n    text: '1)'\n"
             "  - name: b\n    file: m.py\n    op: delete\n    anchor: {assign: x}\n")
    assert _results(plan(ps, files, check_layout=False)) == [
        ("a", BLOCKED, "m.py does not compile before patching", 0),
        ("b", BLOCKED, "m.py does not compile before patching", 0)]
    with pytest.raises(PatchError) as err:
        apply(ps, files, LocalTransport())
    assert err.value.message == ("patch set small, file m.py, edit a: m.py does not compile before patching "
                                 "(and 1 more blocked edit(s)); nothing was changed")
    assert (tmp_path / "m.py").read_bytes() == b"x = (\n" and not (tmp_path / ".specops").exists()


def test_a_result_that_does_not_compile_is_refused_with_the_error(tmp_path):
    files = _write(tmp_path, "m.py", b"def f():\n    return 1\n")
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {text: 'def f():'}\n    text: 'x = 1'\n")
    assert _results(plan(ps, files, check_layout=False)) == [
        ("e", BLOCKED, "result does not compile: IndentationError at line 2: expected an indented block after "
                       "function definition on line 1 (edit at text line 'def f():' in m.py)", 2)]


def test_a_compile_value_error_is_not_taken_as_compiling(tmp_path):
    """compile() raises ValueError (not SyntaxError) on a NUL byte in Python 3.11."""
    files = _write(tmp_path, "m.py", b"x = 1\n")
    ps = _ps('  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: "y = \'\\0\'"\n')
    (res,) = plan(ps, files, check_layout=False).results
    assert res.status == BLOCKED and res.reason.startswith("result does not compile: ")
    assert "null bytes" in res.reason and res.reason.endswith(" (edit at module assignment x in m.py)")


def test_missing_optional_and_non_utf8_file(tmp_path):
    """(A syntax-tree anchor on a file that is not Python is refused when the set loads:
    test_patching_model.)"""
    files = _write(tmp_path, "latin.py", "x = 'é'\n".encode("latin-1"))
    ps = _ps("""\
  - name: gone
    file: gone.py
    op: insert_after
    anchor: {assign: x}
    text: y = 1
  - name: maybe
    file: maybe.py
    op: insert_after
    anchor: {assign: x}
    text: y = 1
    optional: true
  - name: latin
    file: latin.py
    op: insert_after
    anchor: {assign: x}
    text: y = 1
""")
    assert [r.file for r in plan(ps, files, check_layout=False).results] == ["gone.py", "maybe.py", "latin.py"]
    assert _results(plan(ps, files, check_layout=False)) == [
        ("gone", BLOCKED, "gone.py does not exist in the tree", 0),
        ("maybe", SKIPPED, "file not in this tree", 0),
        ("latin", BLOCKED, "latin.py is not UTF-8 text", 0)]


def test_a_refusal_names_set_file_edit_and_count(tmp_path):
    files = _write(tmp_path, "m.py", b"x = 1\n")
    ps = _ps("  - name: a\n    file: m.py\n    op: delete\n    anchor: {assign: nope}\n")
    with pytest.raises(PatchError) as err:
        apply(ps, files, LocalTransport())
    assert err.value.message == ("patch set small, file m.py, edit a: anchor module assignment nope in m.py "
                                 "matches nothing; nothing was changed")
    assert err.value.where == "small.yaml"


# ------------------------------------------------------------------ unified diffs


def _diff_edit(diff: str, name: str = "d") -> str:
    return f"  - name: {name}\n    op: diff\n    diff: |\n" + "".join(f"      {ln}\n" for ln in diff.splitlines())


SUB_DIFF = "--- a/pkg/sub/m.py\n+++ b/pkg/sub/m.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"


def test_diff_edit_in_a_subfolder(tmp_path):
    files = _write(tmp_path, "pkg/sub/m.py", b"x = 1\ny = 2\n")
    ps = _ps(_diff_edit(SUB_DIFF))
    report = apply(ps, files, LocalTransport())
    assert _results(report) == [("d", NEW, "", 0)] and report.changed_files == ["pkg/sub/m.py"]
    assert (tmp_path / "pkg/sub/m.py").read_bytes() == b"x = 1\ny = 3\n"
    assert _results(apply(ps, files, LocalTransport())) == [("d", APPLIED, "", 0)]
    rev = revert(ps, files)
    assert [(r.edit, r.file, r.status, r.reason) for r in rev.results] == [("d", "pkg/sub/m.py", "reverted", "from backup")]
    assert (tmp_path / "pkg/sub/m.py").read_bytes() == b"x = 1\ny = 2\n"


def test_diff_that_does_not_apply_shows_gits_error(tmp_path):
    files = _write(tmp_path, "pkg/sub/m.py", b"x = 1\ny = 5\n")
    ps = _ps(_diff_edit(SUB_DIFF))
    assert _results(plan(ps, files, check_layout=False)) == [
        ("d", BLOCKED, "git apply --check: error: patch failed: pkg/sub/m.py:1", 0)]


def test_diff_whose_result_does_not_compile_is_refused(tmp_path):
    files = _write(tmp_path, "pkg/sub/m.py", b"x = 1\ny = 2\n")
    ps = _ps(_diff_edit(SUB_DIFF.replace("+y = 3", "+y = (")))
    assert _results(plan(ps, files, check_layout=False)) == [
        ("d", BLOCKED, "result does not compile: SyntaxError at line 2: '(' was never closed (edit at unified diff "
                       "in pkg/sub/m.py)", 0)]


def test_reverting_a_diff_that_is_not_applied(tmp_path):
    files = _write(tmp_path, "pkg/sub/m.py", b"x = 1\ny = 2\n")
    rev = revert(_ps(_diff_edit(SUB_DIFF)), files)
    assert [(r.edit, r.status, r.reason) for r in rev.results] == [("d", "not applied", "")]
    assert not rev.changed and (tmp_path / "pkg/sub/m.py").read_bytes() == b"x = 1\ny = 2\n"


# ------------------------------------------------------------------ growing a set, failed verify


def test_applying_a_grown_set_keeps_the_first_backup(tmp_path):
    src = b"x = 1\ny = 2\n"
    files = _write(tmp_path, "m.py", src)
    one = "  - name: a\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: a = 0\n"
    two = one + "  - name: b\n    file: m.py\n    op: insert_after\n    anchor: {assign: y}\n    text: b = 0\n"
    apply(_ps(one), files, LocalTransport())
    assert _results(apply(_ps(two), files, LocalTransport())) == [("a", APPLIED, "", 2), ("b", NEW, "", 4)]
    assert (tmp_path / "m.py").read_bytes() == b"x = 1\na = 0\ny = 2\nb = 0\n"
    assert (tmp_path / ".specops/patches/small/backups/m.py").read_bytes() == src
    manifest = json.loads((tmp_path / ".specops/patches/small/manifest.json").read_text())
    assert [e["edit"] for e in manifest["edits"]] == ["a", "b"]
    revert(_ps(two), files)
    assert (tmp_path / "m.py").read_bytes() == src and not (tmp_path / ".specops").exists()


def test_failed_verify_of_a_grown_set_puts_the_first_state_back(tmp_path):
    files = _write(tmp_path, "m.py", b"x = 1\ny = 2\n")
    one = "  - name: a\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: a = 0\n"
    two = one + "  - name: b\n    file: m.py\n    op: insert_after\n    anchor: {assign: y}\n    text: b = 0\n"
    apply(_ps(one), files, LocalTransport())
    state = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(PatchError) as err:
        apply(_ps(two, extra="verify:\n  - name: nope\n    run: ['false']\n"), files, LocalTransport())
    assert "verify 'nope' failed (exit 1)" in err.value.message
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == state


def test_a_write_that_fails_restores_the_files_written_before(tmp_path):
    _write(tmp_path, "a.py", b"x = 1\n")
    files = _write(tmp_path, "b.py", b"x = 1\n")

    class Failing(LocalTreeFiles):
        def write(self, relpath: str, data: bytes) -> None:
            if relpath == "b.py" and data != b"x = 1\n":  # the patched content; restoring works
                raise SpecopsError("disk full")
            super().write(relpath, data)

    ps = _ps("  - name: a\n    file: a.py\n    op: insert_after\n    anchor: {assign: x}\n    text: y = 1\n"
             "  - name: b\n    file: b.py\n    op: insert_after\n    anchor: {assign: x}\n    text: y = 1\n")
    with pytest.raises(SpecopsError, match="disk full"):
        apply(ps, Failing(files.root), LocalTransport())
    assert (tmp_path / "a.py").read_bytes() == b"x = 1\n" and (tmp_path / "b.py").read_bytes() == b"x = 1\n"
    assert not (tmp_path / ".specops/patches/small/manifest.json").exists()
    assert not list((tmp_path / ".specops").rglob("*.py"))


def test_plan_diff_and_report_summary(tmp_path):
    files = _write(tmp_path, "m.py", b"x = 1\ny = 2")
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: n = 0\n"
             "  - name: f\n    file: m.py\n    op: delete\n    anchor: {assign: gone}\n    optional: true\n")
    p = plan(ps, files, check_layout=False)
    assert p.diff == "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n x = 1\n+n = 0\n y = 2\n"
    assert [r.edit for r in p.blocked] == ["f"]
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: n = 0\n")
    report = apply(ps, files, LocalTransport())
    assert report.summary() == "apply small: 1 file(s) changed\n  e                            new"
    rev = revert(ps, files)
    assert rev.summary() == "revert small: 1 file(s) changed\n  e                            reverted: from backup"


# ------------------------------------------------------------------ applicability


def _layout(version: str | None = "0.5.4", **kw) -> SGLangLayout:
    base = dict(version=version, args_layout="classic", flags_derived_from_fields=False,
                eagle_workers=["python/sglang/srt/speculative/eagle_worker.py"], has_adaptive=False,
                adaptive_zero_steps=False, cuda_graph_flag="--cuda-graph-max-bs", dynamic_spec_disable_applied=False)
    base.update(kw)
    return SGLangLayout(**base)  # type: ignore[arg-type]


def _applies(applies_to: str):
    return parse_patchset(f"name: s\napplies_to: {applies_to}\nedits:\n"
                          "  - {name: e, file: m.py, op: delete, anchor: {assign: x}}\n", "s.yaml")


@pytest.mark.parametrize("applies_to,layout,reason", [
    ("{args_layout: [arg_groups]}", _layout(), "server-args layout is 'classic', the set needs arg_groups"),
    ("{args_layout: [arg_groups, unknown]}", _layout(),
     "server-args layout is 'classic', the set needs arg_groups or unknown"),
    ("{args_layout: [classic, arg_groups]}", _layout(), None),
    ("{requires: [eagle_worker]}", _layout(eagle_workers=[]), "the tree has no eagle worker"),
    ("{requires: [eagle_worker, adaptive]}", _layout(), "the tree has no adaptive"),
    ("{requires: [adaptive]}", _layout(has_adaptive=True), None),
    ("{refuse_if: [adaptive_zero_steps]}", _layout(adaptive_zero_steps=True), "the tree has adaptive zero steps"),
    ("{refuse_if: [adaptive_zero_steps]}", _layout(), None),
    ("{min_version: 0.5.5}", _layout("0.5.4"), "version 0.5.4 is older than 0.5.5"),
    ("{min_version: 0.5.4}", _layout("0.5.4"), None),
    ("{min_version: 0.5.4}", _layout("0.5.4+cu124"), None),
    ("{min_version: 0.5.9}", _layout("0.5.10"), None),
    ("{max_version: 0.5.4}", _layout("0.5.4"), None),  # max_version is inclusive
    ("{max_version: 0.5.4}", _layout("0.5.5"), "version 0.5.5 is newer than 0.5.4"),
    ("{max_version: 0.5.9}", _layout("0.5.10"), "version 0.5.10 is newer than 0.5.9"),
    ("{max_version: 0.5.4}", _layout("0.5.5+local.1"), "version 0.5.5+local.1 is newer than 0.5.4"),
    ("{max_version: 0.5.4}", _layout("0.5.4+local.9"), None),
    ("{min_version: 0.5.5, max_version: 0.5.4}", _layout(None), None),  # no version read: not judged by it
])
def test_check_applicable(applies_to, layout, reason):
    assert check_applicable(_applies(applies_to), layout) == reason


def test_applicability_on_a_real_tree(sglang_tree):
    tree = sglang_tree("0.5.4")
    files = LocalTreeFiles(tree)
    with pytest.raises(PatchError) as err:
        plan(_applies("{min_version: 0.5.5, hint: use the other set}"), files)
    assert err.value.message == "patch set s does not apply to this tree (sglang 0.5.4): version 0.5.4 is older than 0.5.5"
    assert err.value.where == "s.yaml" and err.value.hint == "use the other set"
    ps = parse_patchset("name: s\napplies_to: {max_version: 0.5.4, requires: [eagle_worker]}\nedits:\n"
                        "  - {name: e, file: python/sglang/version.py, op: insert_after, anchor: {assign: __version__},"
                        " text: 'MARK = 1'}\n", "s.yaml")
    p = plan(ps, files)
    assert [r.status for r in p.results] == [NEW] and p.layout is not None and p.layout.version == "0.5.4"
    assert tree_is_pristine(tree)


def test_a_refusal_without_a_version_says_so(tmp_path):
    files = _write(tmp_path, "m.py", b"x = 1\n")
    with pytest.raises(PatchError) as err:
        plan(_applies("{args_layout: [arg_groups]}"), files, layout=_layout(None))
    assert err.value.message == ("patch set s does not apply to this tree (sglang unknown version): "
                                 "server-args layout is 'classic', the set needs arg_groups")


# ------------------------------------------------------------------ more edges the mutants found


def test_a_replacement_already_elsewhere_is_not_taken_as_applied(tmp_path):
    """`return x + 1` exists in g; replacing f's `return x` with it is still a new edit."""
    src = b"def f(x):\n    return x\n\n\ndef g(x):\n    return x + 1\n"
    files = _write(tmp_path, "m.py", src)
    ps = _ps("  - name: r\n    file: m.py\n    op: replace\n    anchor: {function: f, statement: 'return x$'}\n"
             "    text: return x + 1\n")
    assert _results(apply(ps, files, LocalTransport())) == [("r", NEW, "", 2)]
    assert (tmp_path / "m.py").read_bytes() == src.replace(b"    return x\n", b"    return x + 1\n", 1)


def test_a_multi_line_replacement_applied_twice_is_applied(tmp_path):
    files = _write(tmp_path, "m.py", b"def f(x):\n    return x\n")
    ps = _ps("  - name: r\n    file: m.py\n    op: replace\n    anchor: {function: f, statement: 'return x'}\n"
             "    text: |\n      if x:\n          return 1\n      return x\n")
    apply(ps, files, LocalTransport())
    assert (tmp_path / "m.py").read_bytes() == b"def f(x):\n    if x:\n        return 1\n    return x\n"
    assert _results(apply(ps, files, LocalTransport())) == [("r", APPLIED, "", 2)]


def test_a_diff_given_without_a_final_newline(tmp_path):
    files = _write(tmp_path, "pkg/sub/m.py", b"x = 1\ny = 2\n")
    ps = _ps('  - name: d\n    op: diff\n    diff: "' + SUB_DIFF.rstrip("\n").replace("\n", "\\n") + '"\n')
    assert _results(apply(ps, files, LocalTransport())) == [("d", NEW, "", 0)]
    assert (tmp_path / "pkg/sub/m.py").read_bytes() == b"x = 1\ny = 3\n"


def test_blocked_results_name_their_file(tmp_path):
    files = _write(tmp_path, "pkg/sub/m.py", b"x = 1\ny = 5\nn = 0\n")
    ps = _ps(_diff_edit(SUB_DIFF) + "  - name: e\n    file: pkg/sub/m.py\n    op: insert_after\n"
             "    anchor: {assign: x}\n    text: 'n = 0'\n")
    p = plan(ps, files, check_layout=False)
    assert p.patchset is ps
    assert [(r.edit, r.file, r.status) for r in p.results] == [("d", "pkg/sub/m.py", BLOCKED),
                                                               ("e", "pkg/sub/m.py", BLOCKED)]


def test_verify_commands_run_in_the_tree_with_the_files_quoted(tmp_path):
    _write(tmp_path, "a b/m.py", b"x = 1\n")
    files = LocalTreeFiles(tmp_path)
    root = files.root  # {tree} is it, quoted; {files} are quoted too ("a b"), the script runs in the tree
    verify = (f"verify:\n  - name: where\n    run: 'test {{tree}} = \"{root}\" && test \"$(pwd -P)\" = \"{root}\""
              f" && test \"$(basename {{files}})\" = m.py'\n"
              "  - name: argv\n    run: ['test', '-f', '{files}']\n")
    ps = _ps("  - name: e\n    file: a b/m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: y = 2\n",
             extra=verify)
    report = apply(ps, files, LocalTransport())
    assert [c.rc for c in report.verify] == [0, 0]
    assert report.summary().endswith("\n  verify ok: " + report.verify[1].command[:100])


def test_verify_can_be_left_to_the_caller(tmp_path):
    files = _write(tmp_path, "m.py", b"x = 1\n")
    ps = _ps("  - name: e\n    file: m.py\n    op: insert_after\n    anchor: {assign: x}\n    text: y = 2\n",
             extra="verify:\n  - name: nope\n    run: ['false']\n")
    report = apply(ps, files, LocalTransport(), run_verify_cmds=False)
    assert report.verify == [] and (tmp_path / "m.py").read_bytes() == b"x = 1\ny = 2\n"
