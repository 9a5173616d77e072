"""Every transport specops opens is closed by its opener (issue 22): `with open_transport(...)`,
or, where one outlives a block (the engine's per-host connections, a sweep thread's own), a
`close()` in a `finally` of the function that opens it. Read from the source, so a new
caller that forgets fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from specops.transport.local import LocalTransport

PACKAGE = Path(__file__).resolve().parents[2] / "specops"


#: openers that keep a transport past the opening function, and the line that closes it:
#: the engine's per-host connections (closed by Engine.close, in the CLI's finally) and a
#: sweep thread's own connection (closed in the finally of the thread that asked for it)
OWNERS = {"run/engine.py:_run_host": "for transport in list(self.transports.values()):",
          "bench/sweep.py:_connected": "worker.transport.close()"}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _closes_in_finally(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Try):
            for stmt in node.finalbody:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "close":
                        return True
    return False


def _opens(fn: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id == "open_transport"]


def test_every_open_transport_is_closed_by_its_opener():
    unclosed = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        in_with = {id(item.context_expr) for n in ast.walk(tree) if isinstance(n, (ast.With, ast.AsyncWith))
                   for item in n.items}
        for fn in _functions(tree):
            inner = {id(c) for f in _functions(fn) if f is not fn for c in _opens(f)}
            for call in _opens(fn):
                if id(call) in inner or id(call) in in_with:
                    continue
                where = f"{path.relative_to(PACKAGE).as_posix()}:{fn.name}"
                if not _closes_in_finally(fn) and where not in OWNERS:
                    unclosed.append(f"{where} (line {call.lineno})")
    assert not unclosed, unclosed
    for where, closer in OWNERS.items():  # and each owner's closer is there
        assert closer in (PACKAGE / where.split(":")[0]).read_text(), (where, closer)


def test_a_transport_is_a_context_manager_that_closes():
    closed: list[bool] = []

    class Counting(LocalTransport):
        def close(self) -> None:
            closed.append(True)
            super().close()

    with Counting("here") as transport:
        assert transport.run(["true"], timeout=10).ok
    assert closed == [True]
