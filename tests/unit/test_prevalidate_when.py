"""Prevalidation and `when:`: a variable only a step whose `when` is already false before the
run uses is not required (Ansible does not require it either; issue 23), while a step that
will run, or whose `when` is only decided at run time, still has its variables checked
before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.data import shipped_playbooks
from specops.errors import ConfigError
from specops.run.engine import Engine
from specops.steps import KINDS
from tests.support.arms import arm_vars
from tests.support.deploy import inventory, run_cli, write_yaml


def _engine(tmp_path: Path, host: dict, variables: dict, playbook: Path, check: bool = False) -> Engine:
    inv = load_inventory(inventory(tmp_path, {"local": host}, variables))
    return Engine(inv, load_playbook(playbook, KINDS), [inv.hosts["local"]], runs_dir=tmp_path / "runs", check=check)


def _deploy_vars() -> dict:
    variables = {**arm_vars(), "sglang_ref": "v0.5.10.post1"}
    variables.pop("sglang_repo", None)
    return variables


def test_a_variable_only_a_skipped_step_uses_is_not_required(tmp_path: Path) -> None:
    """Before: `deploy --host local` on a sim host without `sglang_repo` failed with
    "undefined variable 'sglang_repo'", though the git step has `when: engine != 'sim'`.
    Now prevalidation passes, writing nothing, and the run (as --check) skips that step for
    its `when` and goes on past it."""
    host = {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}
    variables = _deploy_vars()
    assert "sglang_repo" not in variables  # the git step's variable really is undefined
    engine = _engine(tmp_path, host, variables, shipped_playbooks() / "deploy.yaml", check=True)
    engine.prevalidate()
    assert [p.name for p in tmp_path.iterdir()] == ["hosts.yaml"]  # nothing written before the run
    engine.run()
    report = engine.reports["local"]
    steps = {step.name: status for step, status in zip(engine.playbook.steps, report.steps, strict=True)}
    git = steps["check out sglang"]
    assert (git.status, git.detail) == ("skipped", "when: engine_face == 'sglang' and not simulated is false")
    assert steps["sglang source from its wheel"].status == "would run"
    assert report.failed_step is None


def test_a_variable_a_step_that_will_run_uses_is_still_checked_before_anything_starts(tmp_path: Path) -> None:
    host = {"connection": "local", "engine": "sglang", "workdir": str(tmp_path / "w")}
    with pytest.raises(ConfigError, match=r"step 2 'check out sglang': undefined variable 'sglang_repo' \(host local\)"):
        _engine(tmp_path, host, _deploy_vars(), shipped_playbooks() / "deploy.yaml").prevalidate()


def test_a_when_that_cannot_be_decided_before_the_run_keeps_the_check(tmp_path: Path) -> None:
    """A `when` on what an earlier step registers is only known at run time: its step's
    variables are still required (a typo there would otherwise surface halfway)."""
    pb = write_yaml(tmp_path / "p.yaml", {"name": "t", "steps": [
        {"name": "first", "shell": "true", "register": "first"},
        {"name": "maybe", "shell": "echo {{ nope }}", "when": "first.rc == 1"},
    ]})
    host = {"connection": "local", "workdir": str(tmp_path / "w")}
    with pytest.raises(ConfigError, match="step 2 'maybe': undefined variable 'nope'"):
        _engine(tmp_path, host, {}, pb).prevalidate()
    # and a `when` that itself names an undefined variable is still an error
    pb2 = write_yaml(tmp_path / "p2.yaml", {"name": "t", "steps": [
        {"name": "typo", "shell": "true", "when": "engin == 'sim'"}]})
    with pytest.raises(ConfigError, match="undefined variable 'engin' in when"):
        _engine(tmp_path, host, {}, pb2).prevalidate()


def test_the_run_skips_the_step_and_runs_the_rest(tmp_path: Path) -> None:
    pb = write_yaml(tmp_path / "p.yaml", {"name": "t", "steps": [
        {"name": "only on real hosts", "shell": "git clone {{ sglang_repo }} x", "when": "engine != 'sim'"},
        {"name": "always", "shell": ["touch", "{{ workdir }}/ran"]},
    ]})
    inv = inventory(tmp_path, {"local": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}})
    res = run_cli("deploy", "--host", "local", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w" / "ran").exists()
