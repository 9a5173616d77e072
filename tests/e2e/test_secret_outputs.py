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


# ----- issue 55: JSON output masked after encoding (a secret holding `"` and `\`) ----------

#: A password that JSON escapes: `Pa\"ss\\w0rd-Zq81x` in a document, which a mask run on the
#: encoded text never matched. The canary looks for the pieces of both forms.
PASSWORD = 'Pa"ss\\w0rd-Zq81x'


def _declared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECOPS_T_DB_PASSWORD", PASSWORD)
    return sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w"),
                                    "secrets": {"DB_PASSWORD": {"env": "SPECOPS_T_DB_PASSWORD"}}})


def test_deploy_json_masks_a_secret_json_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`deploy --json` printed `***` as text but the escaped password under --json."""
    from tests.support import canary

    inv = _declared(tmp_path, monkeypatch)
    pb = write_yaml(tmp_path / "p.yaml", {"name": "d", "steps": [
        {"name": "fail", "shell": "printf 'password %s\\n' \"$SPECOPS_T_DB_PASSWORD\"; exit 3"}]})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb), "--json",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1, res.output
    assert "***" in json.dumps(json.loads(res.stdout))
    canary.assert_clean(canary.texts({"deploy --json": res.output}, PASSWORD),
                        canary.files([tmp_path / "runs"], PASSWORD))


def test_logs_follow_errors_json_masks_a_secret_json_escapes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`logs -f --errors --json`: each line a JSON object, written to the masked stdout, whose
    mask ran on the encoded line and missed the escaped password."""
    from specops.cli.options import console
    from specops.render.logs import LogSource, show
    from specops.secrets import remember
    from specops.transport.local import LocalTransport
    from tests.support import canary

    remember(PASSWORD, declared=True)
    log = tmp_path / "eagle3.log"
    log.write_text(f"starting\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                   f"RuntimeError: login with {PASSWORD} refused\n")
    show([LogSource(LocalTransport(), str(log), "eagle3", host="gpu", arm="eagle3")], errors_only=True,
         json_lines=True, console=console)
    out = capsys.readouterr().out
    assert any("***" in json.loads(ln)["line"] for ln in out.splitlines())
    canary.assert_clean(canary.texts({"logs -f --errors --json": out}, PASSWORD))


def test_status_json_masks_a_secret_json_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specops.servers.records import ArmStatus
    from tests.support import canary

    class Supervisor:
        def status(self, transport: object, workdir: str) -> list[ArmStatus]:
            return [ArmStatus(arm="eagle3", state="stopped", command=f"serve --db-url 'pg://u:{PASSWORD}@db'")]

    inv = _declared(tmp_path, monkeypatch)
    monkeypatch.setattr("specops.cli.servers.supervisor_for", lambda host: Supervisor())
    res = run_cli("status", "--host", "gpu", "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    assert "***" in json.loads(res.stdout)["gpu"][0]["command"]
    canary.assert_clean(canary.texts({"status --json": res.output}, PASSWORD))


def test_hosts_check_json_masks_a_secret_json_escapes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specops.transport.base import HostFacts
    from tests.support import canary

    inv = _declared(tmp_path, monkeypatch)
    monkeypatch.setattr("specops.render.hosts._facts",
                        lambda host: HostFacts(reachable=False, error=f"login with {PASSWORD} refused"))
    res = run_cli("hosts", "check", "--host", "gpu", "-i", str(inv), "--json")
    assert "***" in json.loads(res.stdout)["gpu"]["error"]
    canary.assert_clean(canary.texts({"hosts check --json": res.output}, PASSWORD))
