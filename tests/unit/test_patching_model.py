"""Patch-set validation as the user reads it: every refusal's message, file:line and hint;
what a valid set becomes; how a set is found by name."""

from __future__ import annotations

import pytest

from specops.errors import ConfigError
from specops.patching import load_patchset, parse_patchset
from specops.patching.model import diff_files, resolve_patchset_path

EDIT = "edits:\n  - name: e\n    file: a.py\n    op: insert_after\n    anchor: {class: A, field: b}\n    text: y\n"


def _err(doc: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_patchset(doc, "s.yaml")
    return err.value


@pytest.mark.parametrize("doc,where,message,hint", [
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{class: A, field: 3}"), 's.yaml:6',
     "'field' in the anchor of edit 'e' must be a string, got an integer", None),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{field: b}"), 's.yaml:6',
     "a field anchor (the anchor of edit 'e') needs exactly 'class' and 'field'", None),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{call: f, text: b}"), 's.yaml:6',
     "a call anchor (the anchor of edit 'e') takes 'call' and optionally 'arg'", None),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{function: f, position: body_end, statement: x}"),
     's.yaml:6', "a function anchor (the anchor of edit 'e') takes 'function' and at most one of 'position', 'statement'", None),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{function: f, position: middle}"), 's.yaml:6',
     "'position' in the anchor of edit 'e' must be one of body_start, body_end, got 'middle'", None),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{function: f, statement: '('}"), 's.yaml:6',
     "'statement' in the anchor of edit 'e' is not a valid regex: missing ), unterminated subpattern at position 0", None),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{arg: b}"), 's.yaml:6',
     "cannot tell what kind of anchor the anchor of edit 'e' is (keys: arg)",
     'use {class, field}, {call, arg}, {function[, position|statement]}, {assign} or {text}'),
    ("name: x\n" + EDIT.replace("op: insert_after", "op: frobnicate"), 's.yaml:5',
     "'op' in edit 'e' must be one of insert_after, insert_before, replace, delete, diff, got 'frobnicate'", None),
    ("name: x\n" + EDIT.replace("    file: a.py\n", ""), 's.yaml:3', "edit 'e' is missing required key 'file'", None),
    ("name: x\n" + EDIT.replace("text: y", "text: '  '"), 's.yaml:7', "'text' in edit 'e' is empty", None),
    ("name: x\n" + EDIT.replace("text: y", "optional: yes please"), 's.yaml:7',
     "'optional' in edit 'e' must be a boolean, got a string", None),
    ("name: x\n" + EDIT.replace("op: insert_after", "op: delete"), 's.yaml:7', "'text' in edit 'e': a delete edit takes no text", None),
    ("name: x\nedits:\n  - {name: d, op: diff}\n", 's.yaml:3', "edit 'd' is missing required key 'diff'", None),
    ("name: x\nedits:\n  - {name: d, op: diff, diff: 'x'}\n", 's.yaml:3',
     "'diff' in edit 'd': no '+++ path' line found in the unified diff", None),
    ("name: x\nedits:\n  - {name: d, op: diff, diff: \"+++ b/a.py\\n\", text: y}\n", 's.yaml:3',
     "'text' in edit 'd': a diff edit takes no anchor or text", None),
    ("name: x\n" + EDIT.replace("file: a.py", "file: python/../../x.py"), 's.yaml:4',
     "'file' in edit 'e': path 'python/../../x.py' leaves the tree", None),
    ("name: x\n" + EDIT.replace("file: a.py", "file: /etc/a.py"), 's.yaml:4',
     "'file' in edit 'e': path '/etc/a.py' is absolute; give it relative to the tree root (e.g. python/sglang/...)",
     None),
    ("name: x\nedits:\n  - {name: d, op: diff, diff: \"--- a/x.py\\n+++ b/../x.py\\n\"}\n", 's.yaml:3',
     "'diff' in edit 'd': path '../x.py' leaves the tree", None),
    ("name: x\nedits:\n  - {name: d, op: diff, diff: \"--- /etc/passwd\\n+++ b/x.py\\n\"}\n", 's.yaml:3',
     "'diff' in edit 'd': path '/etc/passwd' is absolute; give it relative to the tree root (e.g. python/sglang/...)",
     None),
    ("name: x\nedits:\n  - {name: d, op: diff, file: y.py, diff: \"+++ b/x.py\\n\"}\n", 's.yaml:3',
     "'file' in edit 'd': y.py is not a file the diff changes (x.py)", None),
    ("name: x\n" + EDIT.replace("file: a.py", "file: notes.txt"), 's.yaml:6',
     "edit 'e': a field anchor is a syntax-tree anchor and needs a .py file, not notes.txt",
     "use a text anchor ({text: LINE}) in other files"),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{function: f, position: body_start}"), 's.yaml:5',
     "edit 'e': op insert_after does not fit a body_start anchor (it marks where to insert; use op insert_before)",
     "to change a statement of the function, anchor it with {function, statement}"),
    ("name: x\n" + EDIT.replace("{class: A, field: b}", "{function: f, position: body_end}")
     .replace("op: insert_after", "op: replace"), 's.yaml:5',
     "edit 'e': op replace does not fit a body_end anchor (it marks where to insert; use op insert_after)",
     "to change a statement of the function, anchor it with {function, statement}"),
    ("name: x\nedits: []\n", 's.yaml:2', 'a patch set needs at least one edit', None),
    ("name: x\n" + EDIT + EDIT.replace("edits:\n", ""), 's.yaml:8', "edit name 'e' is used twice (first at line 3)", None),
    ("edits: []\n", 's.yaml:1', "the patch set is missing required key 'name'", None),
    ("name: 3\n" + EDIT, 's.yaml:1', "'name' in the patch set must be a string, got an integer", None),
    ("name: x\n" + EDIT + "verify: {a: 1}\n", 's.yaml:8', "'verify' in the patch set must be a list, got a mapping", None),
    ("name: x\n" + EDIT + "verify:\n  - []\n", 's.yaml:9', "'run' in verify #1: an argv list must be a non-empty list of strings", None),
    ("name: x\n" + EDIT + "verify:\n  - {run: [a, {b: 1}]}\n", 's.yaml:9',
     "'run' in verify #1: an argv list must be a non-empty list of strings", None),
    ("name: x\n" + EDIT + "verify:\n  - {run: '  '}\n", 's.yaml:9',
     "'run' in verify #1 must be an argv list or a non-empty bash script string", None),
    ("name: x\n" + EDIT + "verify:\n  - {run: x, timeout: 0}\n", 's.yaml:9', "'timeout' in verify #1 must be positive, got 0", None),
    ("name: x\n" + EDIT + "verify:\n  - {run: x, timeout: true}\n", 's.yaml:9',
     "'timeout' in verify #1 must be an integer or a number, got a boolean", None),
    ("name: x\n" + EDIT + "verify:\n  - {run: x, tmeout: 3}\n", 's.yaml:9', "unknown key 'tmeout' in verify #1 (did you mean 'timeout'?); allowed: name, run, check, timeout",
     None),
    ("name: x\napplies_to: {requires: eagle_workers}\n" + EDIT, 's.yaml:2',
     "'requires' in applies_to names unknown layout feature 'eagle_workers' (did you mean 'eagle_worker'?); known: eagle_worker, adaptive, adaptive_zero_steps, dynamic_spec_disable_applied",
     None),
    ("name: x\napplies_to: {refuse_if: [zzz]}\n" + EDIT, 's.yaml:2', "'refuse_if' in applies_to names unknown layout feature 'zzz'; known: eagle_worker, adaptive, adaptive_zero_steps, dynamic_spec_disable_applied",
     None),
    ("name: x\napplies_to: {args_layout: [1]}\n" + EDIT, 's.yaml:2', "'args_layout' in applies_to must be a list of strings", None),
    ("name: x\napplies_to: {max: 1}\n" + EDIT, 's.yaml:2', "unknown key 'max' in applies_to; allowed: args_layout, requires, refuse_if, min_version, max_version, hint",
     None),
    ("name: [x\n", 's.yaml:2', "YAML syntax error: expected ',' or ']', but got '<stream end>'", None),
    ("", 's.yaml', 'empty patch set', None),
])
def test_refusals(doc, where, message, hint):
    err = _err(doc)
    assert (err.where, err.message, err.hint) == (where, message, hint)


@pytest.mark.parametrize("doc,where,message,hint", [
    ("name: x\nedits:\n  - {name: e, file: a.py, anchor: {assign: x}}\n", "s.yaml:3",
     "edit 'e' is missing required key 'op'", None),
    ("name: x\napplies_to: {min_version: abc}\nedits:\n  - {name: e, file: a.py, op: delete, anchor: {assign: x}}\n",
     "s.yaml:2", "'min_version' in applies_to is not a version: 'abc'",
     "write it as SGLang numbers its releases, e.g. 0.5.13 or 0.5.10.post1"),
    ("name: x\nedits:\n  - name: d\n    op: diff\n    diff: x\n", "s.yaml:5",
     "'diff' in edit 'd': no '+++ path' line found in the unified diff", None),
])
def test_more_refusals(doc, where, message, hint):
    err = _err(doc)
    assert (err.where, err.message, err.hint) == (where, message, hint)


def test_a_valid_set():
    ps = parse_patchset("""\
name: x
description: d
applies_to: {args_layout: classic, requires: [eagle_worker], min_version: 0.5, max_version: '0.6', hint: h}
edits:
  - file: a.py
    op: insert_after
    anchor: {call: p.add, arg: '--a'}
    text: y
  - name: d
    op: diff
    diff: "--- a/b.py\\n+++ b/b.py\\t2020-01-01\\n@@ -1 +1 @@\\n-a\\n+b\\n"
    optional: true
verify:
  - [python, -c, pass]
  - {name: named, run: 'echo {tree}', timeout: 5}
""", "s.yaml")
    assert (ps.name, ps.description, ps.source) == ("x", "d", "s.yaml")
    ap = ps.applies_to
    assert (ap.args_layout, ap.requires, ap.refuse_if, ap.min_version, ap.max_version, ap.hint) == \
        (["classic"], ["eagle_worker"], [], "0.5", "0.6", "h")
    first, diff = ps.edits
    assert (first.name, first.file, first.op, first.text, first.optional, first.line) == \
        ("edit-1", "a.py", "insert_after", "y", False, 5)
    assert first.anchor.describe() == "call p.add('--a', ...)"
    assert (diff.name, diff.file, diff.optional, diff.anchor.describe()) == ("d", "b.py", True, "unified diff")
    assert [(v.name, v.run, v.timeout) for v in ps.verify] == [
        ("verify-1", ["python", "-c", "pass"], 120.0), ("named", "echo {tree}", 5.0)]
    assert ps.files == ["a.py", "b.py"]


@pytest.mark.parametrize("anchor,text", [
    ("{class: A, field: b}", "field b of class A"),
    ("{call: f}", "call f(...)"),
    ("{function: f}", "function f"),
    ("{function: f, position: body_end}", "function f at body_end"),
    ("{function: f, statement: 'x ='}", "statement /x =/ in function f"),
    ("{assign: X}", "module assignment X"),
    ("{text: '  a'}", "text line '  a'"),
])
def test_anchor_descriptions(anchor, text):
    ps = parse_patchset("name: x\n" + EDIT.replace("{class: A, field: b}", anchor), "s.yaml")
    assert ps.edits[0].anchor.describe() == text


def test_diff_files():
    diff = ("--- a/gone.py\n+++ /dev/null\n--- a/x.py\n+++ b/x.py\t2020-01-01 00:00\n"
            "--- a/y.py\n+++ y.py\n+++ a/z.py\n+++ not a header\n")
    assert diff_files(diff) == ["x.py", "y.py", "z.py", "not a header"]


def test_sets_are_found_by_name_path_or_suggestion(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sets = tmp_path / "sets"
    sets.mkdir()
    (sets / "alpha.yaml").write_text("name: alpha\n" + EDIT)
    (sets / "beta.yml").write_text("name: beta\n" + EDIT)
    assert resolve_patchset_path("alpha", sets) == sets / "alpha.yaml"
    assert resolve_patchset_path("beta", sets) == sets / "beta.yml"
    assert load_patchset(str(sets / "alpha.yaml")).name == "alpha"
    with pytest.raises(ConfigError) as err:
        resolve_patchset_path("alpah", sets)
    assert err.value.message.startswith(f"no patch set named 'alpah' in {sets}, {tmp_path}/playbooks/patches, ")
    assert err.value.hint == "did you mean 'alpha'?"
    with pytest.raises(ConfigError) as err:
        resolve_patchset_path("zzz", sets)
    assert (err.value.hint or "").startswith("known sets: alpha, beta")
    with pytest.raises(ConfigError) as err:
        resolve_patchset_path(str(sets / "nope.yaml"))
    assert err.value.message == f"patch set file {sets / 'nope.yaml'} does not exist"
    with pytest.raises(ConfigError) as err:
        resolve_patchset_path("nope.yml")
    assert err.value.message == "patch set file nope.yml does not exist"
