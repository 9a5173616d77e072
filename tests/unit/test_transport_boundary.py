"""Nothing outside specops/transport asks which transport it holds (pyinfra's connectors:
callers never do); they use what the Transport protocol declares."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import specops

SPECOPS = Path(specops.__file__).parent
CONCRETE = {"LocalTransport", "SSHTransport"}


def _calls_outside_transport() -> Iterator[tuple[Path, ast.Call, str]]:
    """(file, call, called name) for every call of a plain name outside transport/."""
    for path in SPECOPS.rglob("*.py"):
        if path.relative_to(SPECOPS).parts[0] == "transport":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                yield path, node, node.func.id


def test_no_isinstance_of_a_concrete_transport_or_getattr_on_one() -> None:
    found = []
    for path, node, name in _calls_outside_transport():
        if name == "isinstance" and len(node.args) == 2:
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & CONCRETE
            if names:
                found.append(f"{path}:{node.lineno}: isinstance(..., {', '.join(sorted(names))})")
        if name in ("getattr", "hasattr") and node.args:
            target = ast.unparse(node.args[0])
            if "transport" in target:
                found.append(f"{path}:{node.lineno}: {name}({target}, ...)")
    assert found == []


def test_no_module_outside_transport_imports_a_concrete_transport() -> None:
    """Which transport a host gets is transport.connect's choice alone (open_transport,
    this_machine): a module elsewhere that imports LocalTransport or SSHTransport, or their
    modules, has started choosing for itself."""
    concrete_modules = {"specops.transport.local", "specops.transport.ssh"}
    found = []
    for path in SPECOPS.rglob("*.py"):
        if path.relative_to(SPECOPS).parts[0] == "transport":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in concrete_modules:
                found.append(f"{path}:{node.lineno}: from {node.module} import ...")
            elif isinstance(node, ast.ImportFrom) and node.module == "specops.transport":
                found += [f"{path}:{node.lineno}: {a.name}" for a in node.names if a.name in ("local", "ssh", *CONCRETE)]
            elif isinstance(node, ast.Import):
                found += [f"{path}:{node.lineno}: import {a.name}" for a in node.names if a.name in concrete_modules]
    assert found == []
