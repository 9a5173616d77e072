"""Helpers to write inventories/playbooks and run `specops` the way a user does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result

from specops.cli.main import main

#: The per-test timeout of a whole `specops tune` run against the simulator (pyproject's 300 s
#: default catches a hang; a tune measures dozens of points, about 2.5 min on 2 busy cores).
TUNE_TIMEOUT_S = 600


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def inventory(folder: Path, hosts: dict[str, dict[str, Any]], variables: dict[str, Any] | None = None,
              **sections: Any) -> Path:
    """`folder`/hosts.yaml with these hosts, `vars:` when given and any other top-level section
    (groups, secrets, defaults): the one writer of test inventories, so a test says only
    what its hosts and variables are."""
    doc: dict[str, Any] = {"hosts": hosts}
    if variables is not None:
        doc["vars"] = variables
    return write_yaml(folder / "hosts.yaml", {**doc, **sections})


def run_cli(*args: str, cwd: Path | None = None) -> Result:
    """Invoke the real CLI in-process; output and exit code as a user would see them."""
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args), catch_exceptions=False)
    import os

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def only_run_dir(runs: Path) -> Path:
    dirs = sorted(p for p in runs.iterdir() if p.is_dir())
    assert dirs, f"no run directory in {runs}"
    return dirs[-1]
