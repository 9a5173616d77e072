"""Where each kind of anchor lands, asserted as the bytes of the patched file: definitions
under `if`/`try`, fields of one class among several, nested classes, decorators, body
start/end, and the innermost statement a regex matches."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import APPLIED, BLOCKED, NEW, apply, parse_patchset, plan
from specops.patching.anchors import Span, resolve_python
from specops.patching.model import Anchor
from specops.transport.local import LocalTransport

SRC = '''\
import typing

if typing.TYPE_CHECKING:
    def helper(x):
        return x
else:
    def helper(x):
        return x + 1

try:
    class Fast:
        mode: str = "fast"

        def run(self):
            return 1
except ImportError:
    pass


class A:
    size: int = 1

    class Inner:
        size: int = 2


class B:
    obj.attr: int = 0
    size = 3
    other, size2 = 4, 5

    class Inner:
        depth: int = 4


def decide(flag):
    if flag:
        return True
    return False


@typing.no_type_check
def decorated(a):
    return a
'''


def _set(anchor: str, text: str = "NEW_LINE = 1", op: str = "insert_after") -> str:
    body = f"    text: {text!r}\n" if op != "delete" else ""
    return f"name: anchors\nedits:\n  - name: e\n    file: m.py\n    op: {op}\n    anchor: {anchor}\n{body}"


def _apply(tmp_path: Path, doc: str, source: str = SRC) -> str:
    (tmp_path / "m.py").write_bytes(source.encode())
    report = apply(parse_patchset(doc, "anchors.yaml"), LocalTreeFiles(tmp_path), LocalTransport())
    assert [r.status for r in report.results] == [NEW]
    return (tmp_path / "m.py").read_bytes().decode()


def _reason(tmp_path: Path, doc: str, source: str = SRC) -> str:
    (tmp_path / "m.py").write_bytes(source.encode())
    p = plan(parse_patchset(doc, "anchors.yaml"), LocalTreeFiles(tmp_path), check_layout=False)
    assert [r.status for r in p.results] == [BLOCKED]
    return p.results[0].reason


def test_functions_defined_under_if_and_else_are_both_found(tmp_path):
    assert _reason(tmp_path, _set("{function: helper}")) == \
        "anchor function helper in m.py matches 2 places (lines 4, 7)"


def test_method_of_a_class_defined_under_try(tmp_path):
    got = _apply(tmp_path, _set("{function: Fast.run, position: body_start}", "assert self", "insert_before"))
    assert got == SRC.replace("        def run(self):\n            return 1\n",
                              "        def run(self):\n            assert self\n            return 1\n")


def test_field_of_a_class_defined_under_try(tmp_path):
    got = _apply(tmp_path, _set("{class: Fast, field: mode}", "speed: int = 0"))
    assert got == SRC.replace('        mode: str = "fast"\n', '        mode: str = "fast"\n        speed: int = 0\n')


def test_field_anchor_takes_the_named_class_only(tmp_path):
    """A, B, A.Inner all have a `size`; only A's is the anchor."""
    got = _apply(tmp_path, _set("{class: A, field: size}", "extra: int = 9"))
    assert got == SRC.replace("class A:\n    size: int = 1\n", "class A:\n    size: int = 1\n    extra: int = 9\n")


def test_field_anchor_on_a_plain_assignment(tmp_path):
    got = _apply(tmp_path, _set("{class: B, field: size}", "extra = 9"))
    assert got == SRC.replace("    size = 3\n", "    size = 3\n    extra = 9\n")


def test_a_tuple_target_is_not_a_field(tmp_path):
    assert _reason(tmp_path, _set("{class: B, field: size2}")) == \
        "anchor field size2 of class B in m.py matches nothing"


def test_nested_class_by_qualified_and_by_bare_name(tmp_path):
    want = SRC.replace("        size: int = 2\n", "        size: int = 2\n        extra: int = 9\n")
    assert _apply(tmp_path, _set("{class: A.Inner, field: size}", "extra: int = 9")) == want
    assert _apply(tmp_path, _set("{class: Inner, field: size}", "extra: int = 9")) == want
    got = _apply(tmp_path, _set("{class: B.Inner, field: depth}", "extra: int = 9"))
    assert got == SRC.replace("        depth: int = 4\n", "        depth: int = 4\n        extra: int = 9\n")
    assert _reason(tmp_path, _set("{class: B.Inner, field: size}")) == \
        "anchor field size of class B.Inner in m.py matches nothing"


def test_statement_regex_matches_the_innermost_statement_only(tmp_path):
    """`if flag: return True` contains the text too; only the `return` is replaced."""
    got = _apply(tmp_path, _set("{function: decide, statement: 'return True'}", "return flag is True", "replace"))
    assert got == SRC.replace("        return True\n", "        return flag is True\n")


def test_statement_regex_matching_two_statements_is_ambiguous(tmp_path):
    assert _reason(tmp_path, _set("{function: decide, statement: '^return'}")) == \
        "anchor statement /^return/ in function decide in m.py matches 2 places (lines 38, 39)"


def test_decorated_function_spans_its_decorators(tmp_path):
    before = _apply(tmp_path, _set("{function: decorated}", "MARK = 1", "insert_before"))
    assert before.endswith("\n\nMARK = 1\n@typing.no_type_check\ndef decorated(a):\n    return a\n")
    after = _apply(tmp_path, _set("{function: decorated}", "MARK = 1"))
    assert after == SRC + "MARK = 1\n"


def test_body_end_goes_after_the_last_statement(tmp_path):
    got = _apply(tmp_path, _set("{function: decide, position: body_end}", "unreachable = 1"))
    assert got == SRC.replace("    return False\n", "    return False\n    unreachable = 1\n")


def test_body_start_skips_the_docstring_and_goes_before_leading_comments(tmp_path):
    src = 'def f():\n    """Doc."""\n    # why\n    # more\n    x = 1\n'
    got = _apply(tmp_path, _set("{function: f, position: body_start}", "y = 0", "insert_before"), src)
    assert got == 'def f():\n    """Doc."""\n    y = 0\n    # why\n    # more\n    x = 1\n'
    # a comment right under the def line is led by the new text too
    src = "def f():\n    # why\n    x = 1\n"
    got = _apply(tmp_path, _set("{function: f, position: body_start}", "y = 0", "insert_before"), src)
    assert got == "def f():\n    y = 0\n    # why\n    x = 1\n"


def test_body_start_of_a_docstring_only_function(tmp_path):
    src = 'def f():\n    """Doc."""\n'
    got = _apply(tmp_path, _set("{function: f, position: body_start}", "y = 0", "insert_before"), src)
    assert got == 'def f():\n    y = 0\n    """Doc."""\n'


def test_call_anchor_on_an_attribute_chain_and_not_on_a_subscript(tmp_path):
    src = ("class P:\n    def add(self, parsers):\n        self.parser.add('--a')\n"
           "        parsers[0].add('--a')\n        add('--a')\n")
    got = _apply(tmp_path, _set("{call: self.parser.add, arg: '--a'}", "self.parser.add('--b')"), src)
    assert got == src.replace("        self.parser.add('--a')\n",
                              "        self.parser.add('--a')\n        self.parser.add('--b')\n")
    got = _apply(tmp_path, _set("{call: add, arg: '--a'}", "add('--b')"), src)
    assert got == src + "        add('--b')\n"


def test_call_anchor_arg_must_be_the_first_positional_string(tmp_path):
    src = "f('--a', '--b')\nf('--b')\nf(x='--a')\nf()\n"
    assert _apply(tmp_path, _set("{call: f, arg: '--b'}", "g()"), src) == \
        "f('--a', '--b')\nf('--b')\ng()\nf(x='--a')\nf()\n"


def test_call_anchor_twice_in_one_statement_is_one_place(tmp_path):
    src = "x = f('--a') + f('--a')\ny = 2\n"
    assert _apply(tmp_path, _set("{call: f, arg: '--a'}", "z = 1"), src) == "x = f('--a') + f('--a')\nz = 1\ny = 2\n"


def test_module_assignment_anchor_is_top_level_only(tmp_path):
    src = "LIMIT = 1\n\n\ndef f():\n    LIMIT = 2\n"
    assert _apply(tmp_path, _set("{assign: LIMIT}", "OTHER = 2"), src) == "LIMIT = 1\nOTHER = 2\n\n\ndef f():\n    LIMIT = 2\n"


def test_text_anchor_ignores_trailing_whitespace_and_keeps_indentation(tmp_path):
    src = "def f():\n    x = 1   \n    return x\n"
    assert _apply(tmp_path, _set("{text: '    x = 1'}", "y = 2"), src) == "def f():\n    x = 1   \n    y = 2\n    return x\n"


def test_applied_insert_is_recognised_on_either_side_of_a_body_anchor(tmp_path):
    """body_start resolves to the inserted block itself once applied: still 'already applied'."""
    (tmp_path / "m.py").write_text(SRC)
    files = LocalTreeFiles(tmp_path)
    ps = parse_patchset(_set("{function: decide, position: body_start}", "flag = bool(flag)", "insert_before"), "a.yaml")
    assert apply(ps, files, LocalTransport()).results[0].line == 37
    again = plan(ps, files, check_layout=False)
    assert [(r.status, r.line) for r in again.results] == [(APPLIED, 37)]


@pytest.mark.parametrize("anchor,first,last,indent", [
    ("{class: A, field: size}", 21, 21, "    "),
    ("{function: Fast.run}", 14, 15, "        "),
    ("{function: decorated}", 42, 44, ""),
    ("{function: decide, position: body_end}", 39, 39, "    "),
])
def test_spans(anchor, first, last, indent):
    raw = parse_patchset(_set(anchor), "s.yaml").edits[0].anchor
    span, = resolve_python(raw, SRC)
    assert (span.first, span.last, span.indent) == (first, last, indent)


def test_a_text_anchor_through_the_python_resolver():
    assert resolve_python(Anchor("text", text="    size = 3"), SRC) == [Span(29, 29, "    ")]


def test_an_anchor_without_a_span_is_refused():
    with pytest.raises(ValueError, match="anchor kind none has no span"):
        resolve_python(Anchor("none"), SRC)
