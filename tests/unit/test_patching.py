"""The dynamic-spec-disable set against real SGLang trees from the wheels."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import (
    APPLIED,
    NEW,
    PatchError,
    apply,
    load_patchset,
    parse_patchset,
    plan,
    revert,
)
from specops.patching.applier import STATE_DIR
from specops.sglang.layout import detect_layout
from specops.transport.local import LocalTransport
from tests.support.sglang_trees import CLASSIC_VERSIONS, NATIVE_ADAPTIVE_VERSION, tree_is_pristine

SA = "python/sglang/srt/server_args.py"
W1 = "python/sglang/srt/speculative/eagle_worker.py"
W2 = "python/sglang/srt/speculative/eagle_worker_v2.py"
FLAG = "--speculative-disable-batch-threshold"


@pytest.fixture(scope="module")
def dsd():
    return load_patchset("dynamic-spec-disable")


def _changed(tree: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(tree), "diff", "--name-only"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def _server_args_class(tree: Path) -> tuple[ast.ClassDef, str]:
    src = (tree / SA).read_text()
    mod = ast.parse(src)
    return next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), src


def _fn(path: Path, name: str):
    """Load one top-level function from a (patched) file without importing its module."""
    mod = ast.parse(path.read_text())
    node = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == name)
    ns: dict = {}
    exec(compile(ast.Module([node], []), str(path), "exec"), ns)
    return ns[name]


@pytest.mark.parametrize("version", CLASSIC_VERSIONS)
def test_apply_idempotent_revert(sglang_tree, dsd, version):
    tree = sglang_tree(version)
    files = LocalTreeFiles(tree)
    report = apply(dsd, files, LocalTransport())
    changed = _changed(tree)
    assert SA in changed and W1 in changed
    assert (W2 in changed) == (tree / W2).exists()
    for rel in changed:
        compile((tree / rel).read_bytes(), rel, "exec")

    cls, src = _server_args_class(tree)
    assert src.count("speculative_disable_batch_threshold: int = 0  # 0 = always speculate") == 1
    names = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    assert names.count("speculative_disable_batch_threshold") == 1
    assert names[names.index("speculative_accept_threshold_acc") + 1] == "speculative_disable_batch_threshold"

    # the flag: exactly one add_argument call, starting on the line after the
    # accept-threshold-acc call's closing parenthesis
    calls = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            calls.setdefault(node.args[0].value, []).append(node)
    assert len(calls[FLAG]) == 1
    acc = calls["--speculative-accept-threshold-acc"][0]
    assert calls[FLAG][0].lineno == acc.end_lineno + 1
    assert src.splitlines()[acc.end_lineno - 1].strip() == ")"
    assert "0 = always speculate" in ast.get_source_segment(src, calls[FLAG][0])

    layout = detect_layout(files)
    assert layout.dynamic_spec_disable_applied and FLAG in layout.server_flags

    before = {rel: (tree / rel).read_bytes() for rel in changed}
    again = apply(dsd, files, LocalTransport())
    assert not again.changed and all(r.status in (APPLIED, "skipped") for r in again.results)
    assert {rel: (tree / rel).read_bytes() for rel in changed} == before

    rev = revert(dsd, files)
    assert set(rev.changed_files) == set(changed)
    assert tree_is_pristine(tree)
    assert not (tree / ".specops").exists(), "revert leaves no state folders behind"
    assert report.verify  # the set's verify commands ran


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.10.post1"])
def test_revert_without_backups_removes_exactly_the_inserted_text(sglang_tree, dsd, version):
    tree = sglang_tree(version)
    files = LocalTreeFiles(tree)
    apply(dsd, files, LocalTransport())
    shutil.rmtree(tree / ".specops")  # backups and manifest gone
    revert(dsd, files)
    assert tree_is_pristine(tree)


def test_decision_function_from_the_patched_workers(sglang_tree, dsd):
    tree = sglang_tree("0.5.4")
    apply(dsd, LocalTreeFiles(tree), LocalTransport())
    for rel in (W1, W2):
        should = _fn(tree / rel, "should_speculate")
        assert should(1, 0) and should(500, 0)  # 0 = always speculate
        assert should(16, 16) and should(1, 16)
        assert not should(17, 16) and not should(64, 1)


def test_native_adaptive_tree_is_refused_with_a_pointer(sglang_tree, dsd):
    tree = sglang_tree(NATIVE_ADAPTIVE_VERSION)
    files = LocalTreeFiles(tree)
    assert detect_layout(files).adaptive_zero_steps
    with pytest.raises(PatchError) as err:
        apply(dsd, files, LocalTransport())
    assert "--speculative-adaptive" in str(err.value) and "candidate_steps" in str(err.value)
    with pytest.raises(PatchError):
        plan(dsd, files)
    assert tree_is_pristine(tree)


def _one_edit_set(edit_yaml: str, verify: str = "") -> str:
    return "name: probe\nedits:\n" + edit_yaml + (f"verify:\n{verify}" if verify else "")


def test_anchor_on_a_missing_call_changes_nothing(sglang_tree, dsd):
    tree = sglang_tree("0.5.4")
    ps = parse_patchset(_one_edit_set(f"""\
  - name: field
    file: {SA}
    op: insert_after
    anchor: {{class: ServerArgs, field: speculative_accept_threshold_acc}}
    text: "x_new: int = 0"
  - name: flag
    file: {SA}
    op: insert_after
    anchor: {{call: parser.add_argument, arg: "--speculative-accept-threshold-typo"}}
    text: "parser.add_argument('--x-new', type=int)"
"""), "probe.yaml")
    with pytest.raises(PatchError) as err:
        apply(ps, LocalTreeFiles(tree), LocalTransport())
    msg = str(err.value)
    assert "probe" in msg and SA in msg and "--speculative-accept-threshold-typo" in msg and "matches nothing" in msg
    assert tree_is_pristine(tree)


def test_edit_inside_a_multiline_call_is_refused(sglang_tree):
    """The seed failure: a new add_argument pasted inside another, multi-line one."""
    tree = sglang_tree("0.5.10.post1")
    ps = parse_patchset(_one_edit_set(f"""\
  - name: flag-in-the-wrong-place
    file: {SA}
    op: insert_after
    anchor: {{text: '            "--speculative-accept-threshold-acc",'}}
    text: |
      parser.add_argument("--speculative-disable-batch-threshold", type=int, default=0)
"""), "seed.yaml")
    p = plan(ps, LocalTreeFiles(tree))
    assert p.blocked and "does not compile" in p.blocked[0].reason
    with pytest.raises(PatchError) as err:
        apply(ps, LocalTreeFiles(tree), LocalTransport())
    assert "SyntaxError" in str(err.value)
    assert tree_is_pristine(tree)


def test_failing_verify_restores_every_file(sglang_tree, dsd):
    tree = sglang_tree("0.5.4")
    text = Path(dsd.source).read_text().split("\nverify:")[0] + "\nverify:\n  - name: always fails\n    run: [\"false\"]\n"
    ps = parse_patchset(text, "failing.yaml")
    with pytest.raises(PatchError) as err:
        apply(ps, LocalTreeFiles(tree), LocalTransport())
    assert "always fails" in str(err.value)
    assert tree_is_pristine(tree)


def test_check_plan_shows_diff_and_status(sglang_tree, dsd):
    tree = sglang_tree("0.4.10.post2")
    p = plan(dsd, LocalTreeFiles(tree))
    assert not p.blocked and {r.status for r in p.results} == {NEW, "skipped"}
    assert f"+            \"{FLAG}\"," in p.diff and "+++ b/" + SA in p.diff
    assert tree_is_pristine(tree)
    assert not (tree / STATE_DIR).exists()
