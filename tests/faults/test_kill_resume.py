"""Fault tier: the CLI killed with SIGKILL mid-sweep, and the SSH connection's sshd child
killed mid-command; in both cases `--resume` fills exactly the missing points."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import yaml

from tests.support.faults import (
    MATRIX,
    SHORT,
    count_lines,
    inventory,
    local_inventory,
    ok_points,
    spawn,
    specops,
    stop_leftovers,
    wait_until,
    whole_records,
)

pytestmark = pytest.mark.faults


def test_sigkill_mid_sweep_then_resume_fills_exactly_the_gaps(tmp_path: Path, fault_workdir: Path) -> None:
    inv = local_inventory(tmp_path, fault_workdir)
    run = tmp_path / "run"
    try:
        with spawn("bench", "--host", "local", "-i", str(inv), *SHORT, "--out", str(run)) as proc:
            wait_until(lambda: count_lines(run / "results.jsonl") >= 8, "8 points written", proc=proc)
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        before = whole_records(run)
        assert 8 <= len(before) < len(MATRIX), "killed mid-sweep"
        assert len(ok_points(before)) == len(set(ok_points(before))) == len(before)
        kept = (run / "results.jsonl").read_bytes()

        res = specops("bench", "--host", "local", "-i", str(inv), "--resume", str(run))
        assert res.returncode == 0, res.stdout
        assert "Traceback" not in res.stdout
        after = whole_records(run)
        assert (run / "results.jsonl").read_bytes().startswith(kept), "the points written before stay as they were"
        new = ok_points(after[len(before):])
        assert set(new) == MATRIX - set(ok_points(before)), "resume runs exactly the missing points"
        assert len(ok_points(after)) == len(after) == len(MATRIX) == len(set(ok_points(after)))
        assert (run / "report.md").is_file() and (run / "results.csv").read_text().count("\n") == len(MATRIX) + 1
    finally:
        # the killed run could not stop its servers; resume reused them (and leaves them running)
        stop_leftovers(inv, "local", fault_workdir)


def _client_running(port: int) -> bool:
    """The builtin client of a point against `port` runs on the host (here: this machine)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"specops.bench" in argv and f"http://127.0.0.1:{port}".encode() in argv:
            return True
    return False


def test_sshd_child_killed_mid_point_fails_that_point_and_resume_reruns_only_it(tmp_path: Path, fault_workdir: Path, sshd) -> None:
    inv = inventory(tmp_path, sshd.host_entry(3, workdir=str(fault_workdir)), name="gpu")
    port = yaml.safe_load(inv.read_text())["vars"]["arms"]["baseline"]["port"]
    run = tmp_path / "run"
    sweep = ["--arms", "baseline", "--concurrency", "1,2", "--repeats", "2", "--num-prompts", "8",
             "--input-len", "16", "--output-len", "96"]
    before_pids = sshd.session_pids()
    try:
        with spawn("bench", "--host", "gpu", "-i", str(inv), *sweep, "--out", str(run)) as proc:
            wait_until(lambda: count_lines(run / "results.jsonl") >= 1, "the first point written", proc=proc)
            wait_until(lambda: _client_running(port), "the next point's client running on the host", proc=proc)
            mine = sshd.session_pids() - before_pids
            assert mine, "the CLI's connection has an sshd child"
            for pid in mine:
                os.kill(pid, signal.SIGKILL)
            out = proc.communicate(timeout=120)[0]
        assert proc.returncode == 1, out
        assert "Traceback" not in out
        first = whole_records(run)
        failed = [r for r in first if r["status"] != "ok"]
        assert failed and all("may have run partly" in r["error"] and "lost" in r["error"] for r in failed), failed
        assert "may have run partly" in out and "failed point" in out
        done = ok_points(first)
        assert done and len(done) == len(set(done))

        res = specops("bench", "--host", "gpu", "-i", str(inv), "--resume", str(run))
        assert res.returncode == 0, res.stdout
        after = whole_records(run)
        matrix = {("baseline", c, r) for c in (1, 2) for r in (0, 1)}
        assert set(ok_points(after[len(first):])) == matrix - set(done), "resume re-runs only what is missing"
        assert len(after) - len(first) == len(matrix - set(done))
        assert set(ok_points(after)) == matrix and len(ok_points(after)) == len(matrix)
    finally:
        stop_leftovers(inv, "gpu", fault_workdir)
