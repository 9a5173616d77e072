"""Issue 15: each point records the server it measured; the report refuses to combine an
arm's points measured under different launch arguments and notes restarts and sharing.
Also the lease pieces that need no host: the argument difference a refusal shows, liveness."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from specops.errors import ConfigError
from specops.records import store
from specops.records.schema import ResultRecord
from specops.report.summary import server_notes, summarize
from specops.servers.launch import LaunchPlan
from specops.servers.lease import EXPIRE_S, Lease, argv_difference, is_live
from tests.support.deploy import run_cli


def point(arm: str, c: int, pid: int, args_hash: str, *, shared: list[str] | None = None, tps: float = 100.0,
          status: str = "ok") -> ResultRecord:
    rec = ResultRecord(host="local", arm=arm, mechanism="m", concurrency=c, completed=16, output_throughput=tps,
                       status=status, input_len=32, output_len=32, num_prompts=16, shared_with=shared or [],
                       server={"pid": pid, "proc_start": str(pid * 10), "args_hash": args_hash,
                               "started_at": 1.0, "launched_by": "run-a"})
    return rec


def test_points_of_one_arm_under_other_arguments_are_refused_by_name() -> None:
    recs = [point("baseline", 1, 11, "aaaa"), point("baseline", 2, 12, "bbbb"), point("baseline", 4, 12, "bbbb")]
    with pytest.raises(ConfigError) as err:
        summarize(recs)
    text = str(err.value)
    assert "arm baseline on host local" in text and "different launch arguments" in text
    assert "aaaa: 1 point, bbbb: 2 points" in text


def test_a_failed_point_on_another_server_is_not_combined_so_it_does_not_count() -> None:
    recs = [point("baseline", 1, 11, "aaaa"), point("baseline", 2, 99, "bbbb", status="failed")]
    assert summarize(recs).servers == []


def test_restarts_with_the_same_arguments_and_sharing_are_noted_in_report_and_summary(tmp_path) -> None:
    recs = [point("baseline", 1, 11, "aaaa", shared=["run-b"]), point("baseline", 2, 12, "aaaa"),
            point("baseline", 4, 13, "aaaa"), point("eagle3", 1, 21, "cccc")]
    assert server_notes(recs) == [
        "baseline restarted twice (same arguments)",
        "baseline shared its server with run run-b (identical arguments): their clients loaded it too, "
        "so these numbers include that load"]
    for rec in recs:
        store.append_result(tmp_path, rec)
    res = run_cli("report", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert "note: baseline restarted twice (same arguments)" in res.output
    assert "## Servers\n\n- baseline restarted twice (same arguments)\n" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["servers"][0] == "baseline restarted twice (same arguments)"


def test_specops_report_on_mixed_configurations_is_one_line_and_exit_2(tmp_path) -> None:
    for rec in (point("eagle3", 1, 11, "aaaa"), point("eagle3", 2, 12, "bbbb")):
        store.append_result(tmp_path, rec)
    res = run_cli("report", str(tmp_path))
    assert res.exit_code == 2
    first = res.output.strip().splitlines()[0]
    assert first.startswith(f"error: {tmp_path / 'results.jsonl'}: arm eagle3 on host local: its points were "
                            "measured on servers started with different launch arguments")
    assert "Traceback" not in res.output and not (tmp_path / "report.md").exists()


def test_argv_difference_names_the_flags_that_differ() -> None:
    mine = ["python3", "-m", "x", "--port", "1", "--max-running-requests", "32", "--new"]
    theirs = ["python3", "-m", "x", "--port", "1", "--max-running-requests", "64", "--old", "v"]
    assert argv_difference(mine, theirs) == ("--max-running-requests 64 -> 32, --new (absent) -> (set), "
                                             "--old v -> (absent)")
    assert argv_difference(mine, mine) == "other launch arguments"


def lease(pid: int, host: str, age: float = 0.0) -> Lease:
    return Lease(run_id="r", arm="baseline", key="k", args_hash="h", pid=pid, pid_start="", user="u",
                 cli_host=host, since=0.0, heartbeat=0.0, age_s=age)


def test_a_lease_is_dead_when_silent_too_long_or_its_process_here_is_gone() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert is_live(lease(os.getpid(), "here"), here="here")
    assert not is_live(lease(gone.pid, "here"), here="here")
    assert is_live(lease(gone.pid, "elsewhere"), here="here")  # another machine's pid says nothing here
    assert not is_live(lease(os.getpid(), "here", age=EXPIRE_S + 1), here="here")


def test_the_config_hash_ignores_the_simulators_injected_faults_and_nothing_else() -> None:
    def plan(*extra: str) -> LaunchPlan:
        return LaunchPlan(arm="eagle3", kind="eagle3", port=1, argv=["python3", "-m", "specops.sim", "--port", "1",
                                                                    *extra], env={}, mechanism="m", workdir="/w",
                          log_path="/w/l", state_path="/w/s")
    clean = plan()
    assert plan("--sim-crash-after", "20").config_hash == clean.config_hash == plan("--sim-fail-at-start").config_hash
    assert plan("--sim-crash-after", "20").args_hash != clean.args_hash
    assert plan("--sim-time-scale", "0.5").config_hash != clean.config_hash
    assert plan("--max-running-requests", "32").config_hash != clean.config_hash


def test_status_reads_the_hosts_clock_to_the_nanosecond_and_never_goes_negative() -> None:
    """CI read an uptime below zero: `date +%s` truncates, so a status read within the
    launch's second was earlier than the launch's float time."""
    from specops.servers.lifecycle import _host_time

    assert _host_time("1796150290.123456789") == 1796150290.123456789
    assert _host_time("1796150290.N") == 1796150290.0  # a date without %N
    assert _host_time("garbage") is None
