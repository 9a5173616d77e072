"""Issue 12: `--check` tells the truth. Steps a real run would skip say `already verified`
(is_done runs in check mode, read-only), and a `changed: false` step never reports changed."""

from __future__ import annotations

import json
from pathlib import Path

from specops.config.playbook import load_playbook
from specops.data import shipped_playbooks
from specops.steps import KINDS
from tests.support.deploy import inventory, run_cli, write_yaml


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    inv = inventory(tmp_path, {"h": {"connection": "local", "workdir": str(tmp_path / "w")}})
    book = write_yaml(tmp_path / "p.yaml", {"name": "truth", "steps": [
        {"name": "marker", "copy": {"content": "hello\n", "dest": "{{ workdir }}/m.txt"}},
        {"name": "read it", "shell": "cat {{ workdir }}/m.txt", "verify": {"stdout_contains": "hello"},
         "changed": False},
        {"name": "made once", "shell": {"cmd": "touch {{ workdir }}/once", "creates": "{{ workdir }}/once"}},
    ]})
    return inv, book


def _statuses(res) -> dict[str, str]:
    assert res.exit_code == 0, res.output
    return {s["name"]: s["status"] for s in json.loads(res.output)["hosts"]["h"]["steps"]}


def test_check_says_already_verified_and_read_only_steps_never_change(tmp_path: Path) -> None:
    inv, book = _setup(tmp_path)
    args = ("deploy", "--host", "h", "-i", str(inv), "-p", str(book))
    assert _statuses(run_cli(*args, "--check", "--json")) == {
        "marker": "would run", "read it": "would run", "made once": "would run"}
    assert _statuses(run_cli(*args, "--json")) == {"marker": "changed", "read it": "ok", "made once": "changed"}
    checked = run_cli(*args, "--check")
    assert checked.exit_code == 0, checked.output
    assert "1. marker [copy] — skipped: already verified" in checked.output
    assert "3. made once [shell] — skipped: already verified" in checked.output
    assert "read-only (changed: false)" in checked.output
    assert _statuses(run_cli(*args, "--check", "--json")) == {
        "marker": "skipped", "read it": "would run", "made once": "skipped"}
    assert _statuses(run_cli(*args, "--json")) == {"marker": "skipped", "read it": "ok", "made once": "skipped"}


def test_changed_must_be_a_bool_and_the_shipped_smoke_step_is_read_only(tmp_path: Path) -> None:
    inv, _ = _setup(tmp_path)
    book = write_yaml(tmp_path / "bad.yaml", {"name": "bad", "steps": [
        {"name": "x", "shell": "true", "changed": "nope"}]})
    res = run_cli("deploy", "--host", "h", "-i", str(inv), "-p", str(book))
    assert res.exit_code == 2 and "changed" in res.output, res.output
    deploy = load_playbook(shipped_playbooks() / "deploy.yaml", KINDS)
    assert next(s for s in deploy.steps if s.name == "smoke request").changed is False
