"""LocalTransport: the same contract as SSHTransport, on this machine."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specops.errors import TransportError
from specops.transport.base import group_wrapped
from specops.transport.local import LocalTransport
from specops.transport.probes import gather_facts
from tests.support.waiting import processes, wait_gone


@pytest.fixture
def local(tmp_path) -> LocalTransport:
    home = tmp_path / "home"
    home.mkdir()
    return LocalTransport("local", home=str(home))


def _survivors(secs: int) -> list[str]:
    return processes(f"^sleep {secs}$")


def test_injection_cwd_env_stdin(local, tmp_path):
    wd = tmp_path / "dir with 'quotes'"
    wd.mkdir()
    evil = "x; touch PWNED; echo $(id)"
    assert local.run(["echo", evil], timeout=10, cwd=str(wd)).stdout == evil + "\n"
    r = local.run(["printenv", "EVIL"], timeout=10, env={"EVIL": "a'b; touch PWNED2 `id`"})
    assert r.stdout == "a'b; touch PWNED2 `id`\n"
    assert os.listdir(wd) == [] and not (Path(local.home) / "PWNED").exists()
    data = os.urandom(3 * 1024 * 1024)
    r = local.run(["sha256sum"], timeout=30, stdin=data)
    assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    (Path(local.home) / "sub").mkdir()
    r = local.run(["pwd"], timeout=10, cwd="sub")
    assert r.stdout.strip() == f"{local.home}/sub"  # relative cwd resolves against home
    r = local.run(["true"], timeout=10, cwd=str(tmp_path / "absent"))
    assert r.rc == 127 and "absent" in r.stderr


def test_escaped_child_holding_output_does_not_hang(local):
    """A child in its own session survives the group kill but holds stdout: the call
    still returns soon after the timeout (the child is outside our reach locally)."""
    secs = random.randint(6000, 6999)
    started = time.monotonic()
    r = local.run(f"setsid sleep {secs} & echo started", timeout=1)
    took = time.monotonic() - started
    for line in _survivors(secs):  # clean up the one we started, by pid
        os.kill(int(line.split()[0]), 9)
    assert took < 60, took  # not the child's hour-long sleep
    assert r.timed_out and r.stdout == "started\n"


def test_group_wrapped_kills_children_on_timeout():
    """The wrapper SSHTransport runs on the host: its timeout reaches grandchildren."""
    secs = random.randint(7000, 7999)
    line = group_wrapped(f"sleep {secs} & sleep {secs}", 1)
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", line], capture_output=True, timeout=20)
    assert proc.returncode == 124 and time.monotonic() - started < 15
    wait_gone(f"^sleep {secs}$", "the wrapped group killed at its timeout")
    assert subprocess.run(["bash", "-c", group_wrapped("exit 7", 5)]).returncode == 7


def test_put_failure_leaves_no_temp_file(local):
    d = Path(local.home) / "d"
    d.mkdir()
    (d / "f").mkdir()  # the target is a directory: rename fails after the temp is written
    with pytest.raises(TransportError):
        local.put(b"data", "d/f")
    assert os.listdir(d) == ["f"]


def test_gather_facts_local(local):
    facts = gather_facts(local, "~/not/yet", python=sys.executable)
    assert facts.reachable and facts.python == sys.version.split()[0]
    assert facts.host_key == "n/a (local)"
    assert "GiB free on" in facts.free_disk


@pytest.mark.parametrize("script, gpus, error", [
    ('echo "NVIDIA H200, 143771 MiB"; echo "NVIDIA H200, 143771 MiB"',
     ["NVIDIA H200 (143771 MiB)", "NVIDIA H200 (143771 MiB)"], ""),
    ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver"; exit 9',
     [], "nvidia-smi failed: NVIDIA-SMI has failed"),
])
def test_gather_facts_gpus(local, tmp_path, monkeypatch, script, gpus, error):
    """No GPU in CI: a stand-in nvidia-smi on PATH prints what the real one prints."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{script}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    facts = gather_facts(local, local.home)
    assert facts.gpus == gpus
    assert facts.error.startswith(error)


def test_close_ends_commands_still_running(local):
    """An interrupted run closes its transports: a step's command must not outlive it."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(local.run("sleep 30", timeout=60)))
    thread.start()
    while not local._running:  # the command has started
        thread.join(0.05)
    local.close()
    thread.join(20)
    assert not thread.is_alive() and result and result[0].rc != 0
