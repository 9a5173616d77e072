"""A secret from `secrets` in hosts.yaml, and a token given as arm env, through deploy, a
short bench, status and --check on a simulated host over the real sshd: the values appear
in no file specops writes (run directory, host workdir) but the 0600 secrets file, in no
terminal output and in no process's arguments, while the servers have them in their
environment."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

REPO = Path(__file__).resolve().parents[2]
HF = "hf_fakeSecretValue0123456789"
WANDB = "wandb-secret-abcdef987654"


def _files_with(root: Path, needle: str, skip: set[Path]) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and path not in skip and needle.encode() in path.read_bytes():
            hits.append(str(path))
    return hits


@pytest.mark.slow
def test_secrets_never_leak_and_reach_the_servers(tmp_path, sshd, monkeypatch):
    monkeypatch.setenv("SPECOPS_TEST_HF", HF)
    workdir = tmp_path / "w"
    inv = sim_inventory(tmp_path, sshd.host_entry(1, workdir=str(workdir)))
    data = yaml.safe_load(inv.read_text())
    data["hosts"]["gpu"]["secrets"] = {"HF_TOKEN": {"env": "SPECOPS_TEST_HF"}}
    data["vars"]["arms"]["baseline"]["env"] = {"WANDB_API_KEY": WANDB}
    inv.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    outputs = []
    try:
        for args in (["deploy", "--host", "gpu", "-i", str(inv), "--runs-dir", str(runs)],
                     ["deploy", "--host", "gpu", "-i", str(inv), "--runs-dir", str(runs), "--check"],
                     ["status", "--host", "gpu", "-i", str(inv), "-v"]):
            res = run_cli(*args)
            outputs.append(res.output)
            assert res.exit_code == 0, res.output
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        assert HF not in ps and WANDB not in ps
        state_text = (workdir / ".specops/servers/baseline.json").read_text()
        state = yaml.safe_load(state_text)
        environ = Path(f"/proc/{state['pid']}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={HF}".encode() in environ and f"WANDB_API_KEY={WANDB}".encode() in environ
        bench = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline", "--concurrency", "1",
                        "--repeats", "1", "--num-prompts", "4", "--runs-dir", str(runs), "--keep-servers")
        outputs.append(bench.output)
        assert bench.exit_code == 0, bench.output
    finally:
        outputs.append(run_cli("stop", "--host", "gpu", "-i", str(inv)).output)
    secrets_file = workdir / ".specops" / "secrets.env"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600 and HF in secrets_file.read_text()
    arm_env = workdir / ".specops" / "servers" / "baseline.env"
    assert stat.S_IMODE(arm_env.stat().st_mode) == 0o600
    for value in (HF, WANDB):
        assert not any(value in out for out in outputs)
        assert _files_with(runs, value, set()) == []
        assert _files_with(workdir, value, {secrets_file, arm_env}) == []
    assert '"WANDB_API_KEY": "***"' in state_text  # the arm's env, masked in its state file


def test_a_missing_secret_is_said_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECOPS_TEST_ABSENT", raising=False)
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    data = yaml.safe_load(inv.read_text())
    data["secrets"] = {"HF_TOKEN": {"env": "SPECOPS_TEST_ABSENT"}}
    inv.write_text(yaml.safe_dump(data))
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 2
    assert "secret HF_TOKEN: environment variable SPECOPS_TEST_ABSENT is not set on this machine" in res.output
    assert not (tmp_path / "w").exists() and not (tmp_path / "runs").exists()
