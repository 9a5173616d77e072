"""The patch engine on small trees: set validation, every op, idempotency, remote-style
file access, the CLI, and generated-Python properties of the anchor resolver."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specops.cli.patch import patch
from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles, TransportTreeFiles
from specops.patching import (
    APPLIED,
    NEW,
    PatchError,
    apply,
    parse_patchset,
    revert,
)
from specops.patching.anchors import resolve_python
from specops.patching.model import Anchor
from specops.transport.local import LocalTransport
from tests.support.sglang_trees import tree_is_pristine

MOD = '''\
import argparse

logger = object()


class Args:
    alpha: int = 1
    beta: float = 2.0

    @staticmethod
    def add(parser):
        parser.add_argument(
            "--alpha",
            type=int,
        )
        parser.add_argument("--beta", type=float)

    def check(self):
        """Docstring."""
        # leading comment
        assert self.alpha >= 0
        return True
'''


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "t"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg/mod.py").write_text(MOD)
    (tree / "notes.txt").write_text("one\ntwo\nthree\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(tree), *args], check=True)
    return tree


def _set(edits: str, extra: str = "") -> str:
    return f"name: small\nedits:\n{edits}{extra}"


ALL_OPS = """\
  - name: field
    file: pkg/mod.py
    op: insert_after
    anchor: {class: Args, field: alpha}
    text: "gamma: int = 0  # new"
  - name: flag
    file: pkg/mod.py
    op: insert_after
    anchor: {call: parser.add_argument, arg: "--alpha"}
    text: |
      parser.add_argument(
          "--gamma",
          type=int,
      )
  - name: check
    file: pkg/mod.py
    op: insert_before
    anchor: {function: Args.check, position: body_start}
    text: |
      if self.gamma < 0:
          raise ValueError("gamma")
  - name: swap
    file: pkg/mod.py
    op: replace
    anchor: {function: Args.check, statement: 'return True'}
    text: return bool(self.alpha)
  - name: drop
    file: pkg/mod.py
    op: delete
    anchor: {assign: logger}
  - name: notes
    file: notes.txt
    op: insert_after
    anchor: {text: two}
    text: two and a half
"""


def test_every_op_apply_again_and_revert(tmp_path):
    tree = _tree(tmp_path)
    ps = parse_patchset(_set(ALL_OPS), "small.yaml")
    files = LocalTreeFiles(tree)
    report = apply(ps, files, LocalTransport())
    assert [r.status for r in report.results] == [NEW] * 6
    src = (tree / "pkg/mod.py").read_text()
    assert "    alpha: int = 1\n    gamma: int = 0  # new\n" in src
    assert '            type=int,\n        )\n        parser.add_argument(\n            "--gamma",' in src
    assert '        """Docstring."""\n        if self.gamma < 0:' in src
    assert "        return bool(self.alpha)\n" in src and "return True" not in src
    assert "logger" not in src
    assert (tree / "notes.txt").read_text() == "one\ntwo\ntwo and a half\nthree\n"
    snapshot = {p: (tree / p).read_bytes() for p in ("pkg/mod.py", "notes.txt")}
    again = apply(ps, files, LocalTransport())
    assert [r.status for r in again.results] == [APPLIED] * 6
    assert snapshot == {p: (tree / p).read_bytes() for p in snapshot}
    revert(ps, files)
    assert tree_is_pristine(tree)


def test_revert_from_manifest_only_handles_replace_and_delete(tmp_path):
    tree = _tree(tmp_path)
    ps = parse_patchset(_set(ALL_OPS), "small.yaml")
    apply(ps, LocalTreeFiles(tree), LocalTransport())
    for p in (tree / ".specops/patches/small/backups").rglob("*"):
        if p.is_file():
            p.unlink()
    revert(ps, LocalTreeFiles(tree))
    assert tree_is_pristine(tree)


def test_unified_diff_edit(tmp_path):
    tree = _tree(tmp_path)
    diff = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
    ps = parse_patchset(_set("  - name: d\n    op: diff\n    diff: |\n" +
                             "".join(f"      {ln}\n" if ln else "\n" for ln in diff.splitlines())), "d.yaml")
    files = LocalTreeFiles(tree)
    assert apply(ps, files, LocalTransport()).results[0].status == NEW
    assert (tree / "notes.txt").read_text() == "one\nTWO\nthree\n"
    assert apply(ps, files, LocalTransport()).results[0].status == APPLIED
    (tree / ".specops/patches/small/backups/notes.txt").unlink()
    revert(ps, files)
    assert tree_is_pristine(tree)


def test_ambiguous_anchor_names_set_file_and_anchor(tmp_path):
    tree = _tree(tmp_path)
    ps = parse_patchset(_set("""\
  - name: any-call
    file: pkg/mod.py
    op: insert_after
    anchor: {call: parser.add_argument}
    text: pass
"""), "amb.yaml")
    with pytest.raises(PatchError) as err:
        apply(ps, LocalTreeFiles(tree), LocalTransport())
    assert "small" in str(err.value) and "pkg/mod.py" in str(err.value) and "matches 2 places" in str(err.value)
    assert tree_is_pristine(tree)


def test_over_a_transport_with_failing_verify(tmp_path):
    """The remote path: files moved through a Transport; verify fails -> all restored."""
    tree = _tree(tmp_path)
    transport = LocalTransport(home=str(tmp_path))
    files = TransportTreeFiles(transport, "t")
    ps = parse_patchset(_set(ALL_OPS, "verify:\n  - name: compile\n    run: ['{python}', '-m', 'py_compile', '{files}']\n"
                             "  - name: nope\n    run: 'test -f {tree}/missing'\n"), "v.yaml")
    with pytest.raises(PatchError) as err:
        apply(ps, files, transport=transport)
    assert "nope" in str(err.value)
    subprocess.run(["git", "-C", str(tree), "clean", "-qfdX"], check=False)  # py_compile's __pycache__
    (tree / ".gitignore").unlink(missing_ok=True)
    assert subprocess.run(["git", "-C", str(tree), "diff", "--quiet"]).returncode == 0
    assert not (tree / ".specops/patches/small/manifest.json").exists()


@pytest.mark.parametrize("doc,where,needle", [
    ("name: x\nedits:\n  - file: a.py\n    op: insert_afer\n    anchor: {class: A, field: b}\n    text: y\n",
     ":4", "did you mean 'insert_after'"),
    ("name: x\nedits:\n  - file: a.py\n    op: insert_after\n    anchr: {class: A, field: b}\n",
     ":5", "did you mean 'anchor'"),
    ("name: x\nedits:\n  - file: a.py\n    op: insert_after\n    anchor: {clas: A, field: b}\n    text: y\n",
     ":5", "did you mean 'class'"),
    ("name: x\ndescripton: y\nedits: []\n", ":2", "did you mean 'description'"),
    ("name: x\nedits:\n  - file: a.py\n    op: insert_after\n    anchor: {function: f, position: body_strat}\n"
     "    text: y\n", ":5", "did you mean 'body_start'"),
])
def test_set_validation_names_file_line_key(doc, where, needle):
    with pytest.raises(ConfigError) as err:
        parse_patchset(doc, "bad.yaml")
    assert f"bad.yaml{where}" in str(err.value) and needle in str(err.value)


def test_cli_check_apply_revert(tmp_path):
    tree = _tree(tmp_path)
    (tree / "python/sglang").mkdir(parents=True)
    (tree / "python/sglang/__init__.py").write_text("")
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(tree), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "y"], check=True)
    setfile = tmp_path / "small.yaml"
    setfile.write_text(_set(ALL_OPS))
    runner = CliRunner()
    res = runner.invoke(patch, ["check", str(setfile), "--tree", str(tree)])
    assert res.exit_code == 0, res.output
    assert "+    gamma: int = 0  # new" in res.output and "field" in res.output and "new" in res.output
    assert tree_is_pristine(tree)
    assert runner.invoke(patch, ["apply", str(setfile), "--tree", str(tree)]).exit_code == 0
    assert not tree_is_pristine(tree)
    assert runner.invoke(patch, ["revert", str(setfile), "--tree", str(tree)]).exit_code == 0
    assert tree_is_pristine(tree)
    bad = tmp_path / "bad.yaml"
    bad.write_text(_set(ALL_OPS.replace('arg: "--alpha"', 'arg: "--alpah"')))
    res = runner.invoke(patch, ["check", str(bad), "--tree", str(tree)])
    assert res.exit_code == 1 and "blocked" in res.output and "--alpah" in res.output
    res = runner.invoke(patch, ["apply", "no-such-set", "--tree", str(tree)])
    assert res.exit_code != 0 and "no patch set named" in res.output


# ---------------------------------------------------------------- properties

names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda s: s not in {"if", "in", "is", "or", "as", "def", "for", "and", "not", "del", "try"})


@st.composite
def modules(draw):
    """A module with several multi-line calls `f("--k", ...)` of random shapes, nested in
    functions/classes at random depths."""
    keys = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    out, depth = [], 0
    for k in keys:
        if draw(st.booleans()) and depth < 3:
            out.append("    " * depth + f"def fn_{k}():")
            depth += 1
        ind = "    " * depth
        nargs = draw(st.integers(0, 3))
        args = "".join(f"{ind}    x{i}=({i},\n{ind}        {i}),\n" for i in range(nargs))
        out.append(f'{ind}parser.add_argument(\n{ind}    "--{k}",\n{args}{ind})')
    return "\n".join(out) + "\n", keys


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules(), st.data())
def test_insert_after_call_always_lands_after_its_closing_paren(mod, data):
    source, keys = mod
    key = data.draw(st.sampled_from(keys))
    spans = resolve_python(Anchor("call", call="parser.add_argument", arg=f"--{key}"), source)
    assert len(spans) == 1
    lines = source.splitlines(True)
    new = "".join(lines[:spans[0].last] + [spans[0].indent + "parser.add_argument('--new')\n"] + lines[spans[0].last:])
    tree = ast.parse(new)  # never inside the call
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
                and getattr(n.args[0], "value", None) == f"--{key}")
    assert lines[spans[0].last - 1].strip() == ")" and call.end_lineno == spans[0].last
