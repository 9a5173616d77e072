"""The package's import graph: no cycles among specops modules, and no import inside a
function unless it is listed here with its reason (an optional or heavy dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "specops"

#: module -> names imported inside functions on purpose, and why.
LAZY_ALLOWED = {
    "specops.transport.connect": {"specops.transport.ssh", "specops.transport.sshconfig"},  # paramiko costs ~0.2 s
    "specops.sim.testing": {"aiohttp"},                       # only the streaming test helper needs it
    # the on-host client imports aiohttp after without_tls() (specops/plainhttp.py): ~50 ms a point
    "specops.bench.__main__": {"specops.bench.client"},
    # Issue 26: what a light command (`status`, `logs`, `deploy` of a plain playbook) would load
    # for nothing; tests/unit/test_cli_imports.py checks that they stay unloaded.
    "specops.bench.client": {"specops.config.yamlfile"},      # yaml, ~25 ms in every point's client process
    "specops.bench.settings": {"specops.bench.client"},       # aiohttp + asyncio, 0.1-0.4 s; only where a point is measured
    "specops.bench.runners": {"specops.bench.client"},        # the same; only where the builtin client measures a point
    "specops.report.plots": {"matplotlib.backends.backend_agg", "matplotlib.figure"},  # 0.5 s; only where a plot is drawn
    "specops.config.templating": {"jinja2", "jinja2.nativetypes"},  # 0.1 s; only where a `{{ }}` renders
    "specops.transport.forward": {"paramiko"},                # 0.2 s; only an SSH forward's errors need it
    "specops.cli.exits": {"specops.run.state"},               # the servers package (50 ms); only Ctrl-C needs it
    "specops.cli.options": {"specops.servers.lease"},         # the same; only commands that claim arms need it
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(tree: ast.Module, module: str) -> list[tuple[str, bool]]:
    """(imported module, inside a function) for every import, TYPE_CHECKING blocks skipped."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, in_function))
                if not in_function:  # `from pkg import module` makes an edge to that module too
                    found.extend((f"{child.module}.{a.name}", False) for a in child.names)
            visit(child, nested)

    visit(tree, False)
    return found


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    lazy: list[str] = []
    for name, path in mods.items():
        for target, in_function in _imports(ast.parse(path.read_text()), name):
            if in_function and target.split(".")[0] != "__future__":
                base = target if target in mods or not target.startswith("specops") else target.rsplit(".", 1)[0]
                if base not in LAZY_ALLOWED.get(name, set()) and target not in LAZY_ALLOWED.get(name, set()):
                    lazy.append(f"{name} imports {base} inside a function")
            if target in mods and target != name:
                edges[name].add(target)
    return edges, sorted(set(lazy))


def test_no_import_cycles():
    edges, _ = _graph()
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            dfs(node)
    assert cycles == []


def test_imports_inside_functions_are_only_the_listed_ones():
    _, lazy = _graph()
    assert lazy == []


def test_no_private_name_is_imported_from_another_module():
    """A `_name` is its module's own: another module that needs it gets a public name (issue 22).
    `import x as _y` aliases are fine (the alias is private, not the name)."""
    crossing = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specops"):
                crossing += [f"{name} imports {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert crossing == []


#: module -> modules it must not reach, even through others, and why.
FORBIDDEN = {
    # issue 22: the two supervisors know nothing of each other; servers.supervisor chooses one per host
    "specops.servers.lifecycle": {"specops.servers.slurm", "specops.servers.supervisor"},
    "specops.servers.slurm": {"specops.servers.lifecycle", "specops.servers.supervisor"},
}


def test_forbidden_imports_are_not_reached():
    edges, _ = _graph()
    crossing = []
    for module, banned in FORBIDDEN.items():
        seen, todo = set(), [module]
        while todo:
            for nxt in edges[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        crossing += [f"{module} reaches {b}" for b in sorted(banned & seen)]
    assert crossing == []


# ----- the layers, package by package (issue 33 point 1) -----------------------------------

#: specops's packages from the bottom up: a module imports from its own package or from one
#: listed before it, never after. The first tier (`specops` itself for `__version__`, errors,
#: fsutil, secrets, pysource, launchargs, ports, data) is shared by every layer; its members may import
#: each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("specops", "errors", "fsutil", "secrets", "pysource", "launchargs", "plainhttp", "ports", "data"),
    ("records",),     # a run's records and their files: ResultRecord, manifest.json, the run directory
    ("config",),      # hosts.yaml, playbooks, variable precedence, the SLO/objective/cost options
    ("transport",),
    ("hostfiles",),   # specops's own names on a host and in a tree, file access to a tree, the local cache: any engine's
    ("sglang", "vllm"),  # what specops knows about each engine itself, read from its source trees
    ("patching",),
    ("sim",),
    ("engines",),     # the serving engine behind one protocol (SGLang, the simulator): flags, launch, lines, metrics
    ("servers",),
    ("bench",),       # measuring: points, sweeps, arm pools, runners, clients
    ("decide",),      # deciding, as numbers and enums (test_decide_words.py): threshold, goodput, summary math, tune's search, verify's verdicts
    ("steps",),
    ("run",),
    ("render",),      # the console: progress, bars, tables, hosts, logs
    ("report",),      # reporting what decide computed, in words: report.md, report.html, summary.json, plots, compare, verify.md
    ("flows",),       # command flows above run/: a playbook's run, tune, tune's reuse, host actions
    ("cli",),
    ("__main__",),
)

#: (importing package, imported module) pairs that go up the order, and why. Nothing else may.
LAYER_EXCEPTIONS = {
    # the run's records, which every step writes: the engine that drives the steps is above them
    ("steps", "specops.run.events"): "a step journals its events",
    ("steps", "specops.run.journal"): "StepContext carries the run's Journal",
    ("steps", "specops.run.state"): "StepContext carries the Run (arms launched, leases, progress)",
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer_of() -> dict[str, int]:
    return {pkg: i for i, tier in enumerate(LAYERS) for pkg in tier}


def _module_imports(tree: ast.Module, mods: dict[str, Path]) -> set[str]:
    """The specops modules a module imports (inside functions too; TYPE_CHECKING blocks
    skipped): `from pkg import module` is an import of that module, not of pkg."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name in mods)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for a in child.names:
                    sub = f"{child.module}.{a.name}"
                    found.add(sub if sub in mods else child.module)
            visit(child)

    visit(tree)
    return {m for m in found if m in mods}


def _upward_imports() -> list[str]:
    mods = _modules()
    layer = _layer_of()
    up = []
    for name, path in sorted(mods.items()):
        mine = _package(name)
        for target in sorted(_module_imports(ast.parse(path.read_text()), mods)):
            theirs = _package(target)
            if layer[theirs] > layer[mine] and (mine, target) not in LAYER_EXCEPTIONS:
                up.append(f"{name} ({mine}) imports {target} ({theirs}, above it)")
    return up


def test_every_package_has_a_layer():
    assert sorted({_package(m) for m in _modules()} - set(_layer_of())) == []


def test_packages_import_only_downward():
    """The package order of LAYERS holds for every module: measuring (bench/) knows nothing
    of deciding, deciding nothing of reporting, and none of them of the command flows."""
    assert _upward_imports() == []


def test_deciding_reaches_no_transport():
    """decide/ is pure functions over records: nothing it imports, even through others,
    opens or names a connection."""
    edges, _ = _graph()
    seen: set[str] = set()
    todo = [m for m in edges if _package(m) == "decide"]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert sorted(m for m in seen if _package(m) == "transport") == []


# ----- cli/ only parses, calls and renders (issue 22 point 4) ------------------------------

#: The longest a function in specops/cli may be, `def` line to last line (decorators not
#: counted). The longest today is `bench` (49: options to settings, the resume command);
#: the logic that moved out was longer (tune's per-length run 68, `run_tune` 53).
CLI_FUNCTION_LINES = 50
#: The cli modules that may import from specops.transport, and what: every other one gets
#: its connections from the layer that does the work (flows.hostops, flows.tune_run,
#: flows.verify_run, ...).
CLI_TRANSPORT_IMPORTS = {
    "specops.cli.servers": {"specops.transport.connect.open_transport"},  # logs/status/stop print per host as read
    "specops.cli.patch": {"specops.transport.connect.this_machine"},      # a local tree's verify runs on this machine
}


def _cli_modules() -> dict[str, Path]:
    return {name: path for name, path in _modules().items() if name.startswith("specops.cli.")}


def test_cli_functions_stay_short():
    """A long function in cli/ is logic that belongs below it (config/, run/, bench/, flows/, render/)."""
    long = []
    for name, path in _cli_modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > CLI_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {size} lines")
    assert long == []


def test_cli_opens_connections_only_where_listed():
    """Opening hosts' connections is the work layers' job: `bench`, `tune`, `deploy` and the
    rest import nothing from specops.transport (the host setup tune had moved to flows/)."""
    found = []
    for name, path in _cli_modules().items():
        allowed = CLI_TRANSPORT_IMPORTS.get(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specops.transport"):
                found += [f"{name} imports {node.module}.{a.name}" for a in node.names
                          if f"{node.module}.{a.name}" not in allowed]
            elif isinstance(node, ast.Import):
                found += [f"{name} imports {a.name}" for a in node.names if a.name.startswith("specops.transport")]
    assert found == []


# ----- no package holds too much of specops (issue 56) -------------------------------------

#: The most of specops's lines (every .py file's, blank and comment lines too) one package may hold.
PACKAGE_SHARE = 0.15


def test_no_package_holds_more_than_its_share_of_the_lines():
    """A package past 15% of specops is doing several jobs (bench/ held 25.5% before measuring,
    deciding, reporting and records became packages of their own): split it by job."""
    lines: dict[str, int] = {}
    for path in ROOT.rglob("*.py"):
        count = len(path.read_bytes().splitlines())
        lines["(total)"] = lines.get("(total)", 0) + count
        parts = path.relative_to(ROOT).parts
        if len(parts) > 1:
            lines[parts[0]] = lines.get(parts[0], 0) + count
    total = lines.pop("(total)")
    assert len(lines) > 10 and total > 10_000  # the tree was found
    over = {pkg: f"{n / total:.1%}" for pkg, n in lines.items() if n > PACKAGE_SHARE * total}
    assert over == {}
