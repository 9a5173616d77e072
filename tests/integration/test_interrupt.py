"""Ctrl-C during deploy stops the servers that run launched and exits 130 without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.arms import arm_vars
from tests.support.deploy import inventory

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


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
    state = tmp_path / "w/.specops/servers/baseline.json"
    deadline = time.monotonic() + 60
    while not state.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert state.exists(), proc.communicate(timeout=10)
    pid = json.loads(state.read_text())["pid"]
    time.sleep(0.5)
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
            deadline = time.monotonic() + 15
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not _alive(pid) and "stopped baseline" in out
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
