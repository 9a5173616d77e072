"""Issue 23's two config defects: a variable only a `when`-skipped step uses is not required
before the run (Ansible does not require it either), and a relative `secrets: {NAME: {file:
PATH}}` resolves against the inventory file's folder, as `key:` and `known_hosts:` do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.data import shipped_playbooks
from specops.errors import ConfigError
from specops.run.engine import Engine
from specops.steps import KINDS
from tests.support.arms import arm_vars
from tests.support.deploy import run_cli, write_yaml


def _engine(tmp_path: Path, host: dict, variables: dict, playbook: Path) -> Engine:
    inv = load_inventory(write_yaml(tmp_path / "hosts.yaml", {"hosts": {"local": host}, "vars": variables}))
    return Engine(inv, load_playbook(playbook, KINDS), [inv.hosts["local"]], runs_dir=tmp_path / "runs")


def _deploy_vars() -> dict:
    variables = {**arm_vars(), "sglang_ref": "v0.5.10.post1"}
    variables.pop("sglang_repo", None)
    return variables


def test_a_variable_only_a_skipped_step_uses_is_not_required(tmp_path: Path) -> None:
    """Before: `deploy --host local` on a sim host without `sglang_repo` failed with
    "undefined variable 'sglang_repo'", though the git step has `when: engine != 'sim'`."""
    host = {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}
    _engine(tmp_path, host, _deploy_vars(), shipped_playbooks() / "deploy.yaml").prevalidate()


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
    inv = write_yaml(tmp_path / "hosts.yaml", {"hosts": {"local": {
        "connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}}})
    res = run_cli("deploy", "--host", "local", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w" / "ran").exists()


# ------------------------------------------------------------------ secrets


def test_a_relative_secret_file_is_read_beside_the_inventory(tmp_path: Path, monkeypatch) -> None:
    """Before: resolved against the current directory (unlike `key:` and `known_hosts:`)."""
    (tmp_path / "conf" / "tokens").mkdir(parents=True)
    (tmp_path / "conf" / "tokens" / "hf").write_text("hf_from_beside_the_inventory\n")
    inv_path = write_yaml(tmp_path / "conf" / "hosts.yaml", {
        "hosts": {"gpu": {"address": "10.0.0.5", "key": "keys/id", "secrets": {"HF_TOKEN": {"file": "tokens/hf"}}}},
        "groups": {"g": {"hosts": ["gpu"], "secrets": {"G_TOKEN": {"file": "tokens/hf"}}}},
        "secrets": {"TOP_TOKEN": {"file": "./tokens/hf"}}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    host = load_inventory(inv_path).hosts["gpu"]
    assert host.key == str(tmp_path / "conf" / "keys" / "id")
    for name in ("HF_TOKEN", "G_TOKEN", "TOP_TOKEN"):
        assert host.secrets[name].file in ("tokens/hf", "./tokens/hf")  # shown as written
        assert host.secrets[name].path == tmp_path / "conf" / "tokens" / "hf", name
        assert host.secrets[name].read() == "hf_from_beside_the_inventory"


def test_a_missing_relative_secret_file_names_where_it_was_looked_for(tmp_path: Path) -> None:
    inv_path = write_yaml(tmp_path / "hosts.yaml", {"hosts": {"gpu": {"address": "10.0.0.5", "secrets": {
        "HF_TOKEN": {"file": "nope/hf"}}}}})
    with pytest.raises(ConfigError, match=rf"secret HF_TOKEN: cannot read nope/hf \({tmp_path}/nope/hf\): No such file"):
        load_inventory(inv_path).hosts["gpu"].secrets["HF_TOKEN"].read()


def test_absolute_and_home_secret_files_stay_as_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    inv_path = write_yaml(tmp_path / "hosts.yaml", {"hosts": {"gpu": {"address": "10.0.0.5", "secrets": {
        "A_TOKEN": {"file": "/etc/specops/a"}, "B_TOKEN": {"file": "~/b"}, "C_TOKEN": {"env": "C_TOKEN"}}}}})
    secrets = load_inventory(inv_path).hosts["gpu"].secrets
    assert str(secrets["A_TOKEN"].path) == "/etc/specops/a"
    assert str(secrets["B_TOKEN"].path) == os.path.join(str(tmp_path / "home"), "b")
    assert secrets["C_TOKEN"].env == "C_TOKEN" and secrets["C_TOKEN"].file is None
