"""Python source parsed and compiled once per distinct text.

A patch step plans, checks and verifies the same large SGLang files several times in one
run (server_args.py is ~290 KB: 0.13 s to parse, as long again to compile), and a process
that deploys again and again (tune's re-deploys, the test suite's in-process CLI) sees the
same texts each time. The trees handed out are shared: callers read them, never change them.
"""

from __future__ import annotations

import ast
import functools

#: parsed trees kept (server_args.py's is ~7 MB; a patch set's files and their states
#: between edits are a few dozen texts)
PARSED_KEPT = 32
#: compile verdicts kept (a string or None each; the key keeps its text alive)
COMPILED_KEPT = 256


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, shared: do not modify the tree. Raises SyntaxError
    (never cached, naming `filename`) like ast.parse. Keyed by the text alone: the same
    release's files sit in a new folder for every checkout, and a tree does not hold its
    file's name."""
    try:
        return _parsed(source)
    except SyntaxError:
        return ast.parse(source, filename=filename)  # raises again, naming the file


def compile_error(source: str, filename: str) -> str | None:
    """Why `source` would not compile as the interpreter compiles a module at import (the
    exception's class and message, line included), or None when it compiles. The verdict
    does not name the file, so it is kept per text."""
    del filename  # the verdict is the same wherever the text lies
    return _compile_verdict(source)


@functools.lru_cache(maxsize=PARSED_KEPT)
def _parsed(source: str) -> ast.Module:
    return ast.parse(source)


@functools.lru_cache(maxsize=COMPILED_KEPT)
def _compile_verdict(source: str) -> str | None:
    try:
        compile(source, "<source>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"{type(exc).__name__} at line {exc.lineno}: {exc.msg}"
    except ValueError as exc:
        return str(exc)
    return None
