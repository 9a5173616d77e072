"""Ctrl-C during deploy stops the servers that run launched and exits 130 without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.arms import arm_vars
from tests.support.deploy import inventory
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _launched(runs: Path) -> dict | None:
    """The `server` event of the baseline launch in the run's journal, once written (a line
    still being written is not read)."""
    for journal in runs.glob("*/events.jsonl"):
        for line in journal.read_text().splitlines(keepends=True):
            if line.endswith("\n") and '"event": "server"' in line:
                ev = json.loads(line)
                if ev.get("arm") == "baseline":
                    return ev
    return None


@pytest.mark.parametrize("keep", [False, True])
def test_ctrl_c_during_deploy(tmp_path: Path, keep: bool) -> None:
    variables = arm_vars()
    variables["arms"] = {"baseline": variables["arms"]["baseline"]}
    variables["sim"] = {"time_scale": 0.05, "slow_start": 60}  # still "loading" when we interrupt
    inv = inventory(tmp_path, {"lab": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}},
                    variables)
    argv = [sys.executable, "-m", "specops", "deploy", "--host", "lab", "-i", str(inv),
            "-p", str(REPO / "playbooks/deploy.yaml")] + (["--keep-servers"] if keep else [])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, COLUMNS="200"))
    # Ctrl-C once the run has recorded the launch (its journal's `server` line comes after
    # it): pressed earlier, the run has no server of its own to stop or keep yet
    launch = wait_until(lambda: _launched(tmp_path / "runs"), "the run's journal recording the launch", proc=proc)
    pid = launch["pid"]
    assert pid == json.loads((tmp_path / "w/.specops/servers/baseline.json").read_text())["pid"]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err
    assert "interrupted" in out
    resume = f"to resume: specops deploy --host lab -i {inv} -p {REPO / 'playbooks/deploy.yaml'}"
    assert resume + (" --keep-servers" if keep else "") + " --resume" in out, out
    try:
        if keep:
            assert _alive(pid) and "leaving baseline running" in out
        else:
            assert "stopped baseline" in out
            wait_until(lambda: not _alive(pid), "the stopped server gone")
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
