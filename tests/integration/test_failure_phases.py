"""Each failure line names the phase that failed and what was seen, through real failures:
a connection killed under a probe (check) and under a command (apply) over the sshd
fixture, a refused connection (connect), a failed verification, a failed rollback."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Callable

import pytest

from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml

HOST = 4


def _killer(before: Callable[[], set[int]]) -> tuple[int, threading.Thread, list[int]]:
    """A loopback listener that, once something on the host connects to it (the command
    is running there), kills the sshd children that appeared since `before`, i.e. drops
    the connection mid-command, deterministically."""
    known = before()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(60)
    killed: list[int] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        for pid in before() - known:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, killed


def _deploy(tmp_path: Path, sshd, steps: list[dict], host: dict | None = None):
    inv = inventory(tmp_path, {"box": host or sshd.host_entry(HOST, workdir=str(tmp_path / "w"))})
    pb = write_yaml(tmp_path / "p.yaml", {"steps": steps})
    res = run_cli("deploy", "--host", "box", "-p", str(pb), "-i", str(inv))
    fails = [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "fail"]
    return res, fails


def test_connection_lost_in_apply_says_apply_failed_and_may_have_run_partly(tmp_path, sshd):
    port, thread, killed = _killer(sshd.session_pids)
    connect = f"import socket, time; socket.create_connection(('127.0.0.1', {port})); time.sleep(20)"
    res, (fail,) = _deploy(tmp_path, sshd, [{"name": "long", "shell": ["{{ python }}", "-c", connect]}])
    thread.join(5)
    assert killed and res.exit_code == 1
    assert fail["phase"] == "apply"
    assert fail["error"].startswith("apply failed: host box: connection to ")
    assert "lost while running a command; it may have run partly" in fail["error"]
    assert "box: step 1 'long' (shell): apply failed: host box: connection to" in res.output


def test_connection_lost_in_a_probe_says_check_failed(tmp_path, sshd):
    port, thread, killed = _killer(sshd.session_pids)
    # the step's state check runs before apply (is it already done?): the probe hangs on the listener
    res, (fail,) = _deploy(tmp_path, sshd, [{"name": "served", "shell": ["true"],
                                              "verify": {"http_status": f"http://127.0.0.1:{port}/"}}])
    thread.join(5)
    assert killed and res.exit_code == 1
    assert fail["phase"] == "check" and fail["error"].startswith("check failed: host box: connection to ")
    assert not [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "apply"], "nothing applied"
    assert "(shell): check failed: " in res.output


def test_unreachable_host_says_connect_failed(tmp_path, sshd):
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    host = {"address": "127.0.0.1", "port": port, "connect_timeout": 3, "workdir": str(tmp_path / "w")}
    res, (fail,) = _deploy(tmp_path, sshd, [{"shell": ["true"]}], host=host)
    assert res.exit_code == 1 and fail["phase"] == "connect" and fail["step"] is None
    assert fail["error"].startswith(f"connect failed: host box: cannot connect to box (127.0.0.1:{port})")
    assert "box: connect failed: host box: cannot connect" in res.output


@pytest.mark.parametrize("rollback,tail", [
    ("exit 0", " (rolled back: rollback command exited 0)"),
    ("echo cannot undo; exit 4", " (rollback failed: rollback command exited 4: cannot undo)"),
])
def test_verify_and_rollback_failures_are_named(tmp_path, sshd, rollback, tail):
    res, (fail,) = _deploy(tmp_path, sshd, [{"name": "bad", "shell": "echo seen; exit 3", "retries": 1,
                                              "delay": 0, "rollback": rollback}])
    assert res.exit_code == 1 and fail["phase"] == "verify"
    assert fail["error"] == "verify failed (2 tries): exit code 3: seen" + tail
    assert fail.get("rollback_failed", False) == ("failed" in tail)
