"""No fixed sleep stands for a wait in the tests (issue 53; DESIGN.md, Tests: a test does not
depend on the machine's speed). `time.sleep(0.3)` before looking says "by now it has
happened", which CI's loaded 2 cores break; a test waits for the condition itself
(`tests.support.waiting.wait_until`, a generous deadline), or for an event that proves a
window closed. A sleep is allowed only inside the functions listed below, each with its
reason. A `sleep` inside a string (a script a subprocess runs) is not a call here and does
not count."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: (file under tests/, function) -> why a sleep there is no wait on the clock.
ALLOWED: dict[tuple[str, str], str] = {
    ("support/waiting.py", "wait_until"):
        "the polling helper: its loop naps between looks at the condition, up to a deadline",
    ("support/sshd.py", "_wait_banner"):
        "polls sshd's banner up to a deadline, failing at once when sshd exits",
    ("support/slurm.py", "_wait"):
        "polls a Slurm daemon's readiness up to a deadline, failing at once when it exits",
    ("support/slurm.py", "SlurmCluster.cancel_all"):
        "cleanup: polls squeue until the cancelled jobs are gone, up to a deadline",
    ("support/real_sglang/server.py", "wait_all"):
        "polls every real server's ready line and /health up to a deadline, failing when one exits",
    ("unit/test_real_tier_ready.py", "_SlowHealth.do_GET"):
        "the server under test: it answers as slowly as SGLang's health_generate does, no wait",
}


class _Finder(ast.NodeVisitor):
    """Each reference to time.sleep (`time.sleep`, `import time as t; t.sleep`,
    `from time import sleep [as nap]`), with the function it is in."""

    def __init__(self, modules: set[str], names: set[str]) -> None:
        self.modules, self.names = modules, names
        self.scope: list[str] = []
        self.found: list[tuple[int, str]] = []

    def _nested(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _nested

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "sleep" and isinstance(node.value, ast.Name) and node.value.id in self.modules:
            self.found.append((node.lineno, ".".join(self.scope) or "<module>"))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names and isinstance(node.ctx, ast.Load):
            self.found.append((node.lineno, ".".join(self.scope) or "<module>"))


def time_sleeps(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, enclosing function as Class.method / outer.inner) of each time.sleep in `source`."""
    tree = ast.parse(source, filename)
    modules: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            names |= {a.asname or a.name for a in node.names if a.name == "sleep"}
    finder = _Finder(modules, names)
    finder.visit(tree)
    return finder.found


def fixed_sleeps(root: Path, allowed: dict[tuple[str, str], str]) -> tuple[list[str], set[tuple[str, str]]]:
    """Under `root`: each time.sleep outside the allowed functions, as `file:line in function`;
    and the allowed entries that no longer hold a sleep (the list must not go stale)."""
    bad: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for line, where in time_sleeps(path.read_text(), str(path)):
            if (rel, where) in allowed:
                used.add((rel, where))
            else:
                bad.append(f"{rel}:{line} in {where}")
    return bad, set(allowed) - used


def test_no_test_sleeps_in_place_of_a_wait() -> None:
    bad, stale = fixed_sleeps(TESTS, ALLOWED)
    assert bad == [], ("time.sleep used as a wait; wait for the condition instead "
                       f"(tests.support.waiting.wait_until), or allow-list a polling helper with its reason: {bad}")
    assert stale == set(), f"allow-list entries with no sleep left in them (remove them): {sorted(stale)}"
    assert all(reason.strip() for reason in ALLOWED.values())


PLANTED = '''
import time
import time as clock
from time import sleep, sleep as nap

SCRIPT = "import time; time.sleep(300)"  # a subprocess's source: a string, not a call


def test_waits_on_the_clock():
    time.sleep(0.3)  # planted


def test_aliases():
    clock.sleep(1)  # planted
    sleep(1)  # planted
    nap(0.5)  # planted


class Helper:
    def poll(self, cond):
        while not cond():
            time.sleep(0.05)  # planted

    def later(self):
        def inner():
            return f"{time.sleep}"  # planted
        return inner


def elsewhere():
    import asyncio
    return asyncio.sleep(1), "sleep(2)"
'''
#: the planted lines, found by their comment, with the function each is in
WHERE = ["test_waits_on_the_clock", "test_aliases", "test_aliases", "test_aliases", "Helper.poll", "Helper.later.inner"]


def test_the_guard_fails_on_planted_sleeps(tmp_path: Path) -> None:
    """It has teeth: every form of a planted sleep is found, in the function it is in, and
    an allow-list entry exempts exactly its own function."""
    lines = [n for n, text in enumerate(PLANTED.splitlines(), 1) if text.endswith("# planted")]
    assert time_sleeps(PLANTED) == list(zip(lines, WHERE, strict=True))
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_planted.py").write_text(PLANTED)
    bad, stale = fixed_sleeps(tmp_path, {})
    assert bad == [f"unit/test_planted.py:{n} in {where}" for n, where in zip(lines, WHERE, strict=True)] and stale == set()
    allowed = {("unit/test_planted.py", "Helper.poll"): "a polling helper",
               ("unit/test_planted.py", "gone"): "nothing sleeps here any more"}
    bad, stale = fixed_sleeps(tmp_path, allowed)
    assert bad == [f"unit/test_planted.py:{n} in {where}" for n, where in zip(lines, WHERE, strict=True) if where != "Helper.poll"]
    assert stale == {("unit/test_planted.py", "gone")}
