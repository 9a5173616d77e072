"""`logs`, `stop` with an arm the host never ran: one line naming the arms that exist, exit 2,
nothing read or stopped (it used to be a thread traceback and exit 0)."""

from __future__ import annotations

from pathlib import Path

from specops.servers.lifecycle import ServerState
from tests.support.deploy import inventory, run_cli


def _host(tmp_path: Path) -> tuple[Path, Path]:
    wd = tmp_path / "w"
    (wd / ".specops" / "logs").mkdir(parents=True)
    (wd / ".specops" / "servers").mkdir(parents=True)
    for arm in ("baseline", "eagle3"):
        (wd / ".specops" / "logs" / f"{arm}.log").write_text(f"{arm} says hello\n")
        state = ServerState(arm=arm, kind=arm, pid=999_999, pgid=999_999, proc_start="1", port=1, command="x",
                            argv=["x"], env={}, args_hash="h", log_path=str(wd / ".specops/logs" / f"{arm}.log"),
                            state_path=str(wd / ".specops/servers" / f"{arm}.json"), mechanism="none",
                            started_at=0.0, workdir=str(wd))
        Path(state.state_path).write_bytes(state.to_json())
    inv = inventory(tmp_path, {"box": {"connection": "local", "workdir": str(wd)}})
    return inv, wd


def test_logs_with_a_typo_names_the_arms_that_exist(tmp_path):
    inv, _ = _host(tmp_path)
    res = run_cli("logs", "--host", "box", "-i", str(inv), "--server", "eagle")
    assert res.exit_code == 2, res.output
    assert res.output.strip() == ("error: no arm 'eagle' on box (did you mean 'eagle3'?); "
                                  "arms there: baseline, eagle3")
    ok = run_cli("logs", "--host", "box", "-i", str(inv), "--server", "eagle3")
    assert ok.exit_code == 0 and "eagle3 says hello" in ok.output


def test_stop_with_a_typo_stops_nothing(tmp_path):
    inv, wd = _host(tmp_path)
    res = run_cli("stop", "--host", "box", "-i", str(inv), "--server", "basline")
    assert res.exit_code == 2
    assert "no arm 'basline' on box (did you mean 'baseline'?); arms there: baseline, eagle3" in res.output
    assert sorted(p.name for p in (wd / ".specops" / "servers").iterdir()) == ["baseline.json", "eagle3.json"]
