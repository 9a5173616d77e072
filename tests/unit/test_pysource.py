"""specops.pysource: one parse and one compile per distinct text, errors as the interpreter
gives them (a broken file is never remembered as parsed)."""

from __future__ import annotations

import ast

import pytest

from specops import pysource
from specops.sglang.flags import parse_source


def test_the_same_text_is_parsed_once_and_another_text_again() -> None:
    src = "x = 1\ndef f():\n    return x\n"
    first = pysource.parse(src, "a.py")
    assert pysource.parse(src, "a.py") is first
    assert isinstance(first.body[1], ast.FunctionDef)
    assert pysource.parse(src + "y = 2\n", "a.py") is not first


def test_the_same_text_in_another_folder_is_not_parsed_again() -> None:
    """Every checkout of a release is a new folder holding the same files (issue 36: keyed by
    path too, every deploy into a new folder parsed them all again)."""
    src = "z = 3\n" * 50
    assert pysource.parse(src, "/tmp/a/server_args.py") is pysource.parse(src, "/tmp/b/server_args.py")
    assert pysource.compile_error("def g(:\n", "/tmp/a/x.py") == pysource.compile_error("def g(:\n", "/tmp/b/x.py")


def test_compile_error_names_the_line_and_a_good_text_has_none() -> None:
    assert pysource.compile_error("def f(:\n    pass\n", "b.py") == "SyntaxError at line 1: invalid syntax"
    assert pysource.compile_error("return 1\n", "c.py") == "SyntaxError at line 1: 'return' outside function"
    assert pysource.compile_error("x = 1\n", "d.py") is None


def test_parse_source_raises_the_interpreters_error_every_time() -> None:
    for _ in range(2):
        with pytest.raises(SyntaxError) as exc:
            parse_source(b"x = (\n", "broken.py")
        assert exc.value.filename == "broken.py"
    with pytest.raises(SyntaxError):
        pysource.parse("x = (\n", "broken.py")
