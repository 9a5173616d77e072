"""One place knows where specops keeps its state on a host (hostfiles/paths.py) and one what an
SGLang tree holds (sglang/paths.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import specops
from specops.hostfiles import paths
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.render.logs import sources_for
from specops.servers.arms import arms_from_vars
from specops.servers.launch import build_launch
from specops.sglang import paths as tree_paths
from specops.sglang.layout import detect_layout
from specops.sglang.source import ensure_tree
from specops.transport.local import LocalTransport

PACKAGE = Path(specops.__file__).parent
STATE_DIR = re.compile(r"(^|/)\.specops(/|$)")


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in [tree, *ast.walk(tree)]:
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            ids.add(id(body[0].value))
    return ids


def test_no_module_but_paths_builds_a_specops_state_path() -> None:
    """The state paths were built by hand in six modules; a seventh copy would drift."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "hostfiles" / "paths.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and STATE_DIR.search(node.value):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert offenders == []


def test_launch_plan_status_and_logs_agree_on_where_things_are(tmp_path: Path) -> None:
    tree = ensure_tree("0.5.14")
    arm = arms_from_vars({"model": "m", "draft_model": "d", "arms": {"adaptive": {"threshold": 4}}})["adaptive"]
    plan = build_launch(arm, detect_layout(LocalTreeFiles(tree)), workdir=str(tmp_path))
    assert plan.state_path == f"{tmp_path}/.specops/servers/adaptive.json" == paths.server_state(str(tmp_path), "adaptive")
    assert plan.log_path == f"{tmp_path}/.specops/logs/adaptive.log"
    assert plan.config_path == f"{tmp_path}/.specops/servers/adaptive.adaptive.json"
    (log,) = sources_for(LocalTransport(), str(tmp_path), ["adaptive"])
    assert log.path == plan.log_path
    assert (tree / tree_paths.SERVER_ARGS).is_file() and any((tree / p).is_file() for p in tree_paths.VERSION_FILES)
