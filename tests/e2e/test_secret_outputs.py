"""Issue 35, finding 5: the JSON outputs that printed without masking (`logs --json`,
`bench --json` when the sweep never started), through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.arms import sim_inventory
from tests.support.deploy import inventory, run_cli, write_yaml


def _no_piece(text: str, value: str, n: int = 8) -> None:
    found = [value[i:i + n] for i in range(len(value) - n + 1) if value[i:i + n] in text]
    assert not found, f"pieces of the secret survive: {found[:3]}"


def _inventory(tmp_path: Path, variable: str) -> Path:
    return sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w"),
                                    "secrets": {"HF_TOKEN": {"env": variable}}})


@pytest.mark.parametrize("as_json", [True, False])
def test_logs_mask_the_hosts_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool) -> None:
    """A server that logs its token (a Hub error quoting the request): `logs` shows it masked,
    in text and in JSON, though `logs` itself never sends the secret anywhere."""
    token = f"hf_logsTokenValue{'Json' if as_json else 'Text'}0123456789"
    monkeypatch.setenv("SPECOPS_T_LOGS_TOKEN", token)
    inv = _inventory(tmp_path, "SPECOPS_T_LOGS_TOKEN")
    log = tmp_path / "w" / ".specops" / "logs" / "eagle3.log"
    log.parent.mkdir(parents=True)
    log.write_text(f"starting\n401 Client Error for url with token {token}\nready\n")
    res = run_cli("logs", "--host", "gpu", "-i", str(inv), *(["--json"] if as_json else []))
    assert res.exit_code == 0, res.output
    assert "401 Client Error" in res.output and "***" in res.output
    _no_piece(res.output, token)
    if as_json:
        json.loads(res.output)


def test_bench_json_masks_the_step_report_when_the_sweep_never_started(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_benchJsonTokenValue0123456789"
    monkeypatch.setenv("SPECOPS_T_BENCH_TOKEN", token)
    inv = _inventory(tmp_path, "SPECOPS_T_BENCH_TOKEN")
    pb = write_yaml(tmp_path / "p.yaml", {"name": "b", "steps": [
        {"name": "fail", "shell": f"echo the token is {token}; exit 3"}]})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "-p", str(pb), "--json",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert "***" in json.dumps(doc)
    _no_piece(res.stdout, token)


def test_a_steps_secret_env_value_is_masked_in_the_journal(tmp_path: Path) -> None:
    """Issue 35, finding 4: a step's `env:` values were never registered for masking, so a
    command that printed its token put it in events.jsonl."""
    from tests.support.deploy import only_run_dir

    token = "hf_stepEnvTokenValue0123456789"
    inv = inventory(tmp_path, {"h": {"connection": "local", "workdir": str(tmp_path / "w")}})
    pb = write_yaml(tmp_path / "p.yaml", {"name": "e", "steps": [
        {"name": "uses a key", "shell": {"cmd": 'printf "%s\\n" "$MY_API_KEY"', "env": {"MY_API_KEY": "{{ key }}"}}}]})
    res = run_cli("deploy", "--host", "h", "-p", str(pb), "-i", str(inv), "--var", f"key={token}",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    run_dir = only_run_dir(tmp_path / "runs")
    text = "".join(p.read_text() for p in run_dir.rglob("*") if p.is_file())
    assert "***" in text
    _no_piece(text, token)
