"""State files are untrusted input (issue 55, point 3). A file that passes the type check
used to drive commands all the same: its container runtime ran, its config_path was
removed wherever it pointed, a pgid of 1 became `kill -TERM -- -1`, a dead pid beside a
live pgid killed an unrelated process group. Each case is planted in the workdir of the
simulated local host and run through `specops stop`, `specops status` and a launch (what
`deploy` does for an arm): the file is skipped with a warning naming it and the field,
and nothing runs for it.

Every command the local transport is asked to run is recorded, and one that would signal
process group 1 is never run (these tests run as root on CI machines: `kill -- -1` there
ends every process but init)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from specops.config.slurm import SlurmSettings
from specops.hostfiles import paths
from specops.servers import lifecycle, slurm
from specops.servers.container import container_name
from specops.servers.launch import LaunchPlan
from specops.servers.lease import LeaseBook, LeasePolicy
from specops.servers.records import ServerState, read_state
from specops.sim.testing import free_ports
from specops.transport.base import CommandResult, command_line
from specops.transport.local import LocalTransport
from tests.support.deploy import inventory, run_cli
from tests.support.waiting import alive_after_signals

DEAD_PID = 2 ** 22 + 7
#: a script that would signal every process or init's group (`-1`), or its own group (`-0`)
_GROUP_ONE = re.compile(r"kill -\w+ -- -[01]\b|PG=\([^)]*\]=[01][ )]")


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every command LocalTransport runs, in order; one that targets group 1 or 0 is refused here."""
    seen: list[str] = []
    real = LocalTransport.run

    def run(self: LocalTransport, cmd: Any, **kw: Any) -> CommandResult:
        line = command_line(cmd)
        seen.append(line)
        if _GROUP_ONE.search(line):
            return CommandResult(line, 99, "", "refused by the test: it signals group 1", 0.0)
        return real(self, cmd, **kw)

    monkeypatch.setattr(LocalTransport, "run", run)
    yield seen


def _state(wd: Path, arm: str, **over: Any) -> dict[str, Any]:
    """A state file's content that passes every check, with `over` on top."""
    return {"arm": arm, "kind": arm, "pid": DEAD_PID, "pgid": DEAD_PID, "proc_start": "1", "port": 1,
            "command": "x", "argv": ["x"], "env": {}, "args_hash": "h",
            "log_path": paths.server_log(str(wd), arm), "state_path": paths.server_state(str(wd), arm),
            "mechanism": "none", "started_at": 0.0, "workdir": str(wd), **over}


def _plant(wd: Path, arm: str, **over: Any) -> Path:
    path = Path(paths.server_state(str(wd), arm))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_state(wd, arm, **over), indent=1))
    return path


def _host(tmp_path: Path) -> tuple[Path, Path]:
    wd = tmp_path / "w"
    return inventory(tmp_path, {"box": {"connection": "local", "workdir": str(wd)}}), wd


def _stop_and_status(inv: Path) -> str:
    out = run_cli("stop", "--host", "box", "-i", str(inv)).output
    return out + run_cli("status", "--host", "box", "-i", str(inv)).output


def _runtime(tmp_path: Path, marker: Path) -> Path:
    rt = tmp_path / "rt.sh"
    rt.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\n")
    rt.chmod(0o755)
    return rt


def test_a_planted_container_runtime_never_runs(tmp_path: Path, commands: list[str], caplog) -> None:
    inv, wd = _host(tmp_path)
    marker = tmp_path / "RUNTIME-RAN"
    rt = _runtime(tmp_path, marker)
    evil = _plant(wd, "evil", container={"runtime": str(rt), "name": container_name(str(wd), "evil")})
    with caplog.at_level(logging.WARNING):
        _stop_and_status(inv)
    assert not marker.exists(), marker.read_text()
    assert not [c for c in commands if str(rt) in c]
    assert f"skipping {evil}: 'container.runtime' is \"{rt}\", not one of podman, docker" in caplog.text


def test_a_planted_container_name_is_refused(tmp_path: Path) -> None:
    """`stop` runs `<runtime> rm -f NAME`: another container's name would remove that one."""
    wd = tmp_path / "w"
    path = _plant(wd, "evil", container={"runtime": "podman", "name": "someone-elses-db"})
    with pytest.raises(ValueError, match="'container.name' 'someone-elses-db' is not this arm's container"):
        ServerState.from_json(path.read_bytes(), str(path))


@pytest.mark.parametrize("field", ["config_path", "log_path"])
def test_a_path_outside_the_workdir_is_never_removed_or_read(tmp_path: Path, commands: list[str], caplog,
                                                             field: str) -> None:
    inv, wd = _host(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    escape = str(wd / ".specops" / ".." / ".." / "victim.txt")  # normalised, it is tmp_path/victim.txt
    evil = _plant(wd, "evil", **{field: escape})
    with caplog.at_level(logging.WARNING):
        _stop_and_status(inv)
    assert victim.read_text() == "keep me"
    assert not [c for c in commands if "victim.txt" in c]
    assert f"skipping {evil}: '{field}' '{escape}' is not under the work directory {wd}" in caplog.text


@pytest.mark.parametrize("pid,pgid,why", [(1, 1, "'pid' is 1, not a process id"),
                                          (DEAD_PID, 1, "'pgid' is 1, not a process id"),
                                          (0, 0, "'pid' is 0, not a process id"),
                                          (-1, -1, "'pid' is -1, not a process id")])
def test_process_group_one_is_never_signalled(tmp_path: Path, commands: list[str], caplog, pid: int, pgid: int,
                                              why: str) -> None:
    inv, wd = _host(tmp_path)
    evil = _plant(wd, "evil", pid=pid, pgid=pgid, proc_start="")
    with caplog.at_level(logging.WARNING):
        _stop_and_status(inv)
    assert not [c for c in commands if _GROUP_ONE.search(c)]
    assert f"skipping {evil}: {why} (> 1)" in caplog.text


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process group (the test's own `sleep`), ended at the end."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_dead_pid_beside_a_live_group_leaves_the_group_alone(tmp_path: Path, commands: list[str], caplog,
                                                              bystander: subprocess.Popen[bytes]) -> None:
    """The pid is checked to be the server (its start time), the group was not: a dead pid
    made any live group fair game. specops starts each server as its group's leader."""
    inv, wd = _host(tmp_path)
    evil = _plant(wd, "evil", pid=DEAD_PID, pgid=bystander.pid)
    with caplog.at_level(logging.WARNING):
        _stop_and_status(inv)
    assert alive_after_signals(bystander), "an unrelated process group was killed"
    assert f"skipping {evil}: 'pgid' {bystander.pid} is not its 'pid' {DEAD_PID}" in caplog.text


def _start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_another_users_process_group_is_not_signalled(tmp_path: Path) -> None:
    """A file may name a group exactly, start time included (anyone can read /proc): as root,
    `kill` would reach another user's processes; the stop script checks their owner first."""
    other = subprocess.Popen(["sleep", "120"], start_new_session=True, user=65534)
    try:
        wd = tmp_path / "w"
        _plant(wd, "evil", pid=other.pid, pgid=other.pid, proc_start=_start_time(other.pid))
        t = LocalTransport("h0")
        with pytest.raises(Exception, match=f"process group {other.pid} has processes of another user"):
            lifecycle.stop_arms(t, str(wd), grace_s=0.1, port_wait_s=0.1, gpu_wait_s=0.1)
        assert alive_after_signals(other), "another user's process group was signalled"
    finally:
        other.kill()
        other.wait()


def test_status_probes_nothing_of_a_refused_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 bystander: subprocess.Popen[bytes]) -> None:
    """`status` used to read pid and port out of every file with sed and probe them before
    any check: a refused file's port got a request, its pid a signal 0."""
    inv, wd = _host(tmp_path)
    shim, asked = tmp_path / "bin", tmp_path / "curl-asked"
    shim.mkdir()
    (shim / "curl").write_text(f"#!/bin/sh\necho \"$@\" >> {asked}\necho 000\n")
    (shim / "curl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    _plant(wd, "evil", pid=bystander.pid, pgid=bystander.pid, proc_start=_start_time(bystander.pid), port=54321,
           container={"runtime": "sh", "name": container_name(str(wd), "evil")})
    run_cli("status", "--host", "box", "-i", str(inv))
    assert not asked.exists() or "54321" not in asked.read_text()


def test_a_refused_file_is_named_to_the_user(tmp_path: Path) -> None:
    """The warning reaches the terminal of a real `specops status` (not only the log)."""
    inv, wd = _host(tmp_path)
    evil = _plant(wd, "evil", pgid=1)
    proc = subprocess.run([sys.executable, "-m", "specops", "status", "--host", "box", "-i", str(inv)],
                          capture_output=True, text=True, timeout=120)
    assert f"skipping {evil}: 'pgid' is 1, not a process id (> 1)" in proc.stdout + proc.stderr


# ---------------------------------------------------------------- a launch reads the arm's file first

def _sleeper(wd: Path, arm: str, port: int) -> LaunchPlan:
    """A plan whose server is a sleeping python: enough for launch's read, stop and start."""
    return LaunchPlan(arm=arm, kind=arm, port=port, argv=[sys.executable, "-c", "import time; time.sleep(120)"],
                      env={}, mechanism="none", workdir=str(wd), log_path=paths.server_log(str(wd), arm),
                      state_path=paths.server_state(str(wd), arm), cwd=str(wd / "cwd"))


def test_a_launch_over_a_planted_state_runs_nothing_of_it(tmp_path: Path, commands: list[str], caplog) -> None:
    """`deploy` launches an arm after reading its state file (reuse, or stop the old server):
    a planted one is skipped there too, its runtime never run, its config never removed."""
    wd = tmp_path / "w"
    marker, victim = tmp_path / "RUNTIME-RAN", tmp_path / "victim.txt"
    victim.write_text("keep me")
    rt = _runtime(tmp_path, marker)
    evil = _plant(wd, "baseline", container={"runtime": str(rt), "name": container_name(str(wd), "baseline")},
                  config_path=str(victim))
    t = LocalTransport("h0")
    try:
        with caplog.at_level(logging.WARNING):
            out = lifecycle.launch_arm(t, _sleeper(wd, "baseline", free_ports(1)[0]))
        assert out.action == "launched"
        assert not marker.exists() and victim.read_text() == "keep me"
        assert read_state(t, str(wd), "baseline") == out.state, "the state specops wrote passes its own checks"
        assert _mode(Path(out.state.state_path)) == 0o600
        assert f"skipping {evil}: 'config_path' '{victim}' is not under the work directory" in caplog.text
    finally:
        lifecycle.stop_arms(t, str(wd), grace_s=1, port_wait_s=2, gpu_wait_s=1)


# ---------------------------------------------------------------- files that hold argv or env are private

@pytest.fixture
def open_umask() -> Iterator[None]:
    """The umask most hosts have (022): a file created without a mode is world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_lease_files_and_revoked_markers_are_0600(tmp_path: Path, open_umask: None) -> None:
    """A lease holds its run's argv; the heartbeat rewrites it (temp file, then mv)."""
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    mine = LeaseBook("run-a", "bench", LeasePolicy("refuse", 5.0))
    theirs = LeaseBook("run-b", "bench", LeasePolicy("take_over", 5.0))
    try:
        mine.claim(t, "h0", wd, "baseline", "hash-a", ["python", "--api-key", "x"])
        mine.beat()
        (held,) = Path(paths.leases_dir(wd, "baseline")).glob("*.json")
        assert _mode(held) == 0o600
        theirs.claim(t, "h0", wd, "baseline", "hash-b")  # revokes run-a's lease: a marker for it
        (marker,) = Path(paths.leases_dir(wd, "baseline")).glob("*.revoked")
        assert _mode(marker) == 0o600
    finally:
        mine._stop.set()
        theirs._stop.set()


def test_a_slurm_job_script_is_0700_and_its_state_and_env_0600(tmp_path: Path, open_umask: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster here: a fake `sbatch` records the mode of the script it was given. Real
    sbatch reads the script as its owner and sends a copy: 0700 is all it needs (the Slurm
    e2e tests submit through the real one where Slurm is installed)."""
    shim, seen = tmp_path / "bin", tmp_path / "sbatch-saw"
    shim.mkdir()
    (shim / "sbatch").write_text(f"#!/bin/sh\nfor a; do last=$a; done\nstat -c %a \"$last\" > {seen}\necho 42\n")
    (shim / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    wd = tmp_path / "w"
    plan = slurm.adapt_plan(_sleeper(wd, "eagle3", 30001), SlurmSettings())
    plan.env = {"HF_TOKEN": "hf_secret"}
    t = LocalTransport("h0")
    state = slurm.submit(t, plan)
    assert seen.read_text().strip() == "700"
    assert _mode(Path(slurm.script_path(plan))) == 0o700
    assert _mode(Path(paths.server_env(str(wd), "eagle3"))) == 0o600
    assert _mode(Path(state.state_path)) == 0o600
    assert read_state(t, str(wd), "eagle3") == state, "the state specops wrote passes its own checks"
