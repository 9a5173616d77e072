"""Helpers to write inventories/playbooks and run `specops` the way a user does."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

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


@contextmanager
def deployed(inventory: Path, runs: Path, host: str = "cpu") -> Iterator[Result]:
    """`specops deploy --host host` (it must succeed), then `stop` whatever happened: the
    module fixture of a tier that deploys once and runs its tests on the servers."""
    res = run_cli("deploy", "--host", host, "-i", str(inventory), "--runs-dir", str(runs))
    try:
        assert res.exit_code == 0, res.output
        yield res
    finally:
        run_cli("stop", "--host", host, "-i", str(inventory))


@dataclass
class VerifyRun:
    """What `specops verify --json` said: its exit code and document, each check by name."""

    exit_code: int
    doc: dict[str, Any]

    @property
    def verdicts(self) -> dict[str, str]:
        return {c["name"]: c["verdict"] for c in self.doc["checks"]}

    def check(self, name: str) -> dict[str, Any]:
        found = [c for c in self.doc["checks"] if c["name"] == name]
        assert found, f"no check {name!r} in {sorted(self.verdicts)}"
        return found[0]


def verify_json(inventory: Path, *args: str, host: str = "cpu") -> VerifyRun:
    """`specops verify --host host -i inventory ARGS --json`, its document parsed."""
    res = run_cli("verify", "--host", host, "-i", str(inventory), *args, "--json")
    try:
        doc = json.loads(res.output)
    except ValueError:
        raise AssertionError(f"verify printed no JSON document (exit {res.exit_code}):\n{res.output[-4000:]}") from None
    return VerifyRun(res.exit_code, doc)
