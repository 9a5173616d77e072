"""decide/ returns numbers and enums; report/ turns them into sentences (issue 56 point 4).

The rule, checked on the syntax tree of every module under specops/decide/:
- no f-string, no `str.format`, no `%` formatting of a string: building text is report/'s job;
- no string literal that contains a space: a sentence, or a separator that joins one
  (`", "`), is words;
except
- docstrings (they document the code, nobody reads them in a report);
- everything inside a `raise` statement: an error's message is said where the error
  happens, with what it knows (decide/summary.py refuses points of one arm measured under
  different launch arguments);
- a `where=` or `hint=` keyword argument: where a check that may fail points its error
  (`where="manifest.json: bench"`), the same words as a raise's;
- the values in RECORD_VALUES: a value the records store and other programs match on (as
  summary.json's `threshold_unit`), which is data, whatever its spelling.

A name or identifier built from a number (`adaptive-t4`, `in256-out64`) is allowed: it has
no space, so an f-string without one in its literal text is one too.
"""

from __future__ import annotations

import ast
from pathlib import Path

DECIDE = Path(__file__).resolve().parents[2] / "specops" / "decide"

#: (module, constant) -> why its value, though it holds a space, is data
RECORD_VALUES = {
    ("threshold.py", "UNIT_RUNNING"): "summary.json's and tune.json's threshold_unit: 'running batch'",
}


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def _allowed(tree: ast.Module, module: str) -> set[int]:
    """ids of nodes the rule leaves alone: docstrings, raise statements' insides, error
    locations, record values."""
    out = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise):
            out.update(id(n) for n in ast.walk(node))
        elif isinstance(node, ast.keyword) and node.arg in ("where", "hint"):
            out.update(id(n) for n in ast.walk(node.value))
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if any((module, name) in RECORD_VALUES for name in names) and node.value is not None:
                out.update(id(n) for n in ast.walk(node.value))
    return out


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, (ast.JoinedStr, ast.Constant)) and (
        isinstance(node, ast.JoinedStr) or isinstance(node.value, str))


def sentence_building(path: Path) -> list[str]:
    """file:line: what, for every place the module builds words."""
    tree = ast.parse(path.read_text())
    allowed = _allowed(tree, path.name)
    inside_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n)}
    found = []
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        where = f"{path.relative_to(DECIDE.parents[1])}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            if " " in text:
                found.append(f"{where}: f-string {ast.unparse(node)[:60]}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value \
                and id(node) not in inside_fstring:
            found.append(f"{where}: string literal {node.value[:60]!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
                and _is_str(node.func.value):
            found.append(f"{where}: str.format")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
            found.append(f"{where}: % formatting")
    return found


def test_decide_builds_no_sentences():
    found = [line for path in sorted(DECIDE.rglob("*.py")) for line in sentence_building(path)]
    assert found == [], "decide/ builds words; move them to specops/report/ (words.py, tune.py, ...):\n" + \
        "\n".join(found)


def test_every_record_value_is_still_there():
    """An entry of RECORD_VALUES whose constant is gone is dropped, so the list stays the truth."""
    names = set()
    for path in DECIDE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign):
                names |= {(path.name, t.id) for t in node.targets if isinstance(t, ast.Name)}
    assert sorted(set(RECORD_VALUES) - names) == []


def test_the_rule_catches_each_form(tmp_path):
    """The walk finds each way of building words, and leaves docstrings, errors and names alone."""
    sample = tmp_path / "sample.py"
    sample.write_text('"""A docstring with spaces."""\n'
                      'def f(x):\n'
                      '    """Its docstring."""\n'
                      '    a = f"{x} levels"\n'
                      '    b = "{} levels".format(x)\n'
                      '    c = "%d levels" % x\n'
                      '    d = ", ".join([a, b, c])\n'
                      '    e = f"adaptive-t{x}"\n'
                      '    if x:\n'
                      '        raise ValueError(f"bad {x}: " + ", ".join(a))\n'
                      '    return d + e\n')
    global DECIDE
    saved, DECIDE = DECIDE, tmp_path / "specops" / "decide"
    try:
        found = sentence_building(sample)
    finally:
        DECIDE = saved
    lines = sorted((int(line.split(":")[1]), line.split(": ", 1)[1].split(" ")[0]) for line in found)
    assert lines == [(4, "f-string"), (5, "str.format"), (5, "string"), (6, "%"), (6, "string"), (7, "string")], found
