"""Issue 33, point 5: one inventory helper. A test says what its hosts and variables are and
`tests.support.deploy.inventory` (or `arms.sim_inventory` on it) writes the hosts.yaml; a test
file outside tests/support that writes a hosts.yaml itself (`write_text`, `write_bytes`,
`open(..., "w")`, `write_yaml` or a `write...` helper of its own) must be in ALLOWED, with the
reason its inventory is text: a line an error names (`hosts.yaml:7`), malformed YAML, comments
kept byte for byte."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: (file under tests/, why its hosts.yaml is written as text)
ALLOWED: set[tuple[str, str]] = {
    ("e2e/test_bad_inputs.py", "bad inventories named by line (latin-hosts.yaml:3); the good one is the shipped text"),
    ("unit/test_cpu_device.py", "device errors name their line (hosts.yaml:5, hosts.yaml:7)"),
    ("unit/test_engines.py", "an unknown engine is refused naming hosts.yaml:2"),
    ("unit/test_inventory.py", "every bad inventory names file, line and key; one is a YAML syntax error"),
    ("unit/test_schema.py", "errors read the same everywhere, each with its file:line"),
    ("unit/test_tune.py", "--write keeps a commented hosts.yaml byte for byte"),
    ("unit/test_writeback_symlink.py", "--write through a linked hosts.yaml keeps its comments byte for byte"),
}


def _names_hosts_yaml(node: ast.AST) -> bool:
    """A string naming a hosts.yaml file ("hosts.yaml", "typo-hosts.yaml"), not a message
    about one ("hosts.yaml:7: ...")."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith("hosts.yaml") \
        and not any(c in node.value for c in ": ")


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(_names_hosts_yaml(n) or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(node))


def _writes(call: ast.Call) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name == "open":  # open(path, "w") or path.open("w"): a mode that writes
        modes = [a.value for a in call.args + [k.value for k in call.keywords if k.arg == "mode"]
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return any(c in m for m in modes for c in "wax+")
    return name.startswith("write")


def _scope_names(scope: ast.AST) -> set[str]:
    """Names that scope assigns a hosts.yaml path to (`path = tmp_path / "hosts.yaml"`)."""
    return {t.id for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
            and _mentions(n.value, set())
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}


def own_writes(source: str) -> list[int]:
    """The lines where this source writes a hosts.yaml itself."""
    tree = ast.parse(source)
    module_names = {t.id for n in tree.body if isinstance(n, ast.Assign) and _mentions(n.value, set())
                    for t in n.targets if isinstance(t, ast.Name)}
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    lines = set()
    for scope in scopes:
        names = module_names | (_scope_names(scope) if scope is not tree else set())
        for call in ast.walk(scope):
            if isinstance(call, ast.Call) and _writes(call) and _mentions(call, names):
                lines.add(call.lineno)
    return sorted(lines)


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "support" not in p.relative_to(TESTS).parts)


def test_test_inventories_are_written_by_the_one_helper() -> None:
    allowed = {file for file, _ in ALLOWED}
    found = {str(p.relative_to(TESTS)): own_writes(p.read_text()) for p in _test_files()}
    offenders = [f"tests/{file}:{lines[0]}" for file, lines in found.items() if lines and file not in allowed]
    assert not offenders, ("these write a hosts.yaml themselves; say the hosts and variables to "
                           "tests.support.deploy.inventory (or add the file to ALLOWED with the reason "
                           f"its inventory must be text): {offenders}")
    stale = sorted(file for file in allowed if not found.get(file))
    assert not stale, f"ALLOWED names files that no longer write a hosts.yaml of their own: {stale}"


def test_the_scan_sees_each_way_of_writing_one() -> None:
    """What the scan counts, so a file cannot pass it by a small change of spelling."""
    caught = [
        '(tmp_path / "hosts.yaml").write_text("hosts: {}")',
        'write_yaml(tmp_path / "hosts.yaml", {"hosts": {}})',
        'def f(tmp_path):\n    path = tmp_path / "hosts.yaml"\n    path.write_text("hosts: {}")',
        'def f(tmp_path):\n    with open(tmp_path / "hosts.yaml", "w") as out:\n        out.write("hosts: {}")',
        'FILES = {"typo-hosts.yaml": "x"}\ndef f(root):\n    (root / "typo-hosts.yaml").write_bytes(b"x")',
        'write(tmp_path, "hosts.yaml", "hosts: {}")',
    ]
    passed = [
        'inventory(tmp_path, {"local": {"connection": "local"}})',
        'sim_inventory(tmp_path, {"connection": "local"})',
        'text = (tmp_path / "hosts.yaml").read_text()',
        'def f(tmp_path):\n    with open(tmp_path / "hosts.yaml") as f:\n        return f.read()',
        'assert "hosts.yaml:7: duplicate key" in out.write_text("x") or True',
    ]
    assert [own_writes(src) for src in caught] == [[1], [1], [3], [2], [3], [1]]
    assert [own_writes(src) for src in passed] == [[]] * len(passed)
