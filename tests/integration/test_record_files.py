"""State and lease files are host files anyone with the workdir may write (issue 35, finding 6),
and the arm claim lock is shared by every run (finding 7): through LocalTransport on a real
folder, a hostile or damaged file is skipped with a warning naming it, never run as code,
and a lock is only ever removed by its owner (or broken when stale, by rename)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from specops.errors import SpecopsError
from specops.hostfiles import paths
from specops.servers import lease
from specops.servers.lease import LeaseBook, LeasePolicy
from specops.servers.lifecycle import read_states, server_status, stop_arms
from specops.servers.recordfile import BadRecord
from specops.servers.records import ServerState, read_state
from specops.transport.local import LocalTransport

GOOD = {"arm": "good", "kind": "sim", "pid": 2 ** 22 + 7, "pgid": 2 ** 22 + 7, "proc_start": "1", "port": 1,
        "command": "x", "argv": ["x"], "env": {}, "args_hash": "h", "log_path": "/w/.specops/logs/x.log",
        "state_path": "/w/.specops/servers/good.json", "mechanism": "none", "started_at": 0.0, "workdir": "/w"}


def _on_host(wd: str, arm: str) -> dict:
    """GOOD as the state file of `arm` under the work directory `wd`."""
    return {**GOOD, "arm": arm, "workdir": wd, "log_path": paths.server_log(wd, arm),
            "state_path": paths.server_state(wd, arm)}


def _state_file(wd: str, arm: str, content: str) -> Path:
    p = Path(paths.server_state(wd, arm))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content)
    return p


@pytest.mark.parametrize("content", ["[]", "null", "7", "{", json.dumps({**GOOD, "pid": "1; touch X #"}),
                                     json.dumps({**GOOD, "env": {"K": 1}}), json.dumps({"arm": "a"}),
                                     json.dumps({**GOOD, "slurm": {"job_id": "--signal=KILL"}})])
def test_a_state_file_that_does_not_fit_is_refused(content: str) -> None:
    with pytest.raises(BadRecord):
        ServerState.from_json(content)


def test_the_good_record_fits() -> None:
    """What the refusals above are measured against."""
    assert ServerState.from_json(json.dumps(GOOD)).pid == GOOD["pid"]


def test_hostile_state_files_are_skipped_naming_them_and_never_run(tmp_path: Path, caplog) -> None:
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    marker = tmp_path / "INJECTED"
    evil = _state_file(wd, "evil", json.dumps({**_on_host(wd, "evil"), "pid": f"1; touch {marker} #",
                                               "pgid": f"1; touch {marker} #"}))
    listed = _state_file(wd, "list", "[]")
    _state_file(wd, "none", "null")
    _state_file(wd, "good", json.dumps(_on_host(wd, "good")))
    with caplog.at_level(logging.WARNING):
        assert sorted(read_states(t, wd)) == ["good"]
        assert read_state(t, wd, "evil") is None
        status = {s.arm: s.state for s in server_status(t, wd)}
        stop_arms(t, wd, grace_s=0.1, port_wait_s=0.1, gpu_wait_s=0.1)
    assert status == {"good": "dead"}
    assert not marker.exists()
    text = caplog.text
    assert f"host h0: skipping {evil}: 'pid' is " in text and f"skipping {listed}: a JSON list, not an object" in text


def test_a_hostile_lease_file_is_skipped_and_the_claim_goes_on(tmp_path: Path, caplog) -> None:
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    d = Path(paths.leases_dir(wd, "baseline"))
    d.mkdir(parents=True)
    (d / "x.json").write_text("[]")
    (d / "y.json").write_text(json.dumps({"run_id": "r", "pid": "1; id"}))
    (d / "y.revoked").write_text("null")
    book = LeaseBook("run-a", "bench", LeasePolicy("refuse", 5.0))
    try:
        with caplog.at_level(logging.WARNING):
            assert book.claim(t, "h0", wd, "baseline", "hash-a").lead
        assert f"skipping {d / 'x.json'}: a JSON list" in caplog.text
        assert f"skipping {d / 'y.revoked'}: a JSON NoneType" in caplog.text
    finally:
        book._stop.set()


def test_a_state_file_naming_another_file_never_has_it_removed(tmp_path: Path, caplog) -> None:
    """`stop` removes the state file a record names: one naming another file is skipped."""
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    _state_file(wd, "good", json.dumps({**_on_host(wd, "good"), "state_path": str(victim)}))
    with caplog.at_level(logging.WARNING):
        stop_arms(t, wd, grace_s=0.1, port_wait_s=0.1, gpu_wait_s=0.1)
    assert victim.read_text() == "keep me"
    assert f"state_path '{victim}' names another file" in caplog.text


# ---------------------------------------------------------------- the claim lock (finding 7)

def _lock(wd: str) -> Path:
    return Path(paths.leases_dir(wd, "baseline")) / ".lock"


def test_unlock_removes_only_its_own_lock(tmp_path: Path) -> None:
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    lease.read_arm(t, wd, "baseline", lock="owner-a")
    lease.unlock(t, wd, "baseline", "owner-b")
    assert os.readlink(_lock(wd)) == "owner-a"  # another run's unlock left it
    lease.unlock(t, wd, "baseline", "owner-a")
    assert not os.path.lexists(_lock(wd))


def test_breaking_a_stale_lock_spares_one_taken_since(tmp_path: Path, monkeypatch) -> None:
    """The interleaving of finding 7, made certain: the breaker reads the lock's age (old),
    and before it acts another run breaks that lock too and takes a fresh one. A `stat` on
    PATH answers "ancient" once and, in between, does what that other run would."""
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    lock = _lock(wd)
    lease.read_arm(t, wd, "baseline", lock="dead-run")  # left by a CLI that died
    other = lease._lock_script(str(lock.parent), "owner-b")
    shim = tmp_path / "bin"
    shim.mkdir()
    (tmp_path / "hook.sh").write_text(f"rm -rf {lock}\n{other}\n")
    (shim / "stat").write_text(
        f"#!/bin/bash\nif [ ! -e {tmp_path}/once ]; then touch {tmp_path}/once; "
        f"bash {tmp_path}/hook.sh >/dev/null 2>&1; echo 0; exit 0; fi\nexec /usr/bin/stat \"$@\"\n")
    (shim / "stat").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    monkeypatch.setattr(lease, "LOCK_WAIT_S", 0.5)  # a count of tries, not a time asserted on
    with pytest.raises(SpecopsError, match="its claim lock stayed taken"):
        lease.read_arm(t, wd, "baseline", lock="owner-a")
    assert os.readlink(lock) == "owner-b"


def test_a_stale_lock_is_broken(tmp_path: Path) -> None:
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    lease.read_arm(t, wd, "baseline", lock="dead-run")
    os.utime(_lock(wd), (1, 1), follow_symlinks=False)
    lease.read_arm(t, wd, "baseline", lock="owner-a")
    assert os.readlink(_lock(wd)) == "owner-a"
    assert sorted(p.name for p in _lock(wd).parent.iterdir()) == [".lock"]  # the broken one is gone


def test_a_dead_lease_whose_key_is_a_path_writes_and_removes_nothing_outside(tmp_path: Path, caplog) -> None:
    """A lease's key and arm name the files a claim removes and the revoked marker it writes
    for a dead holder: `../../../escaped` would put that marker beside the workdir."""
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    d = Path(paths.leases_dir(wd, "baseline"))
    d.mkdir(parents=True)
    dead = {"run_id": "r", "arm": "baseline", "key": "../../../../escaped", "args_hash": "h", "pid": 2 ** 22 + 7,
            "pid_start": "", "user": "u", "cli_host": lease.this_host(), "since": 0.0, "heartbeat": 0.0}
    (d / "x.json").write_text(json.dumps(dead))
    book = LeaseBook("run-a", "bench", LeasePolicy("refuse", 5.0))
    try:
        with caplog.at_level(logging.WARNING):
            assert book.claim(t, "h0", wd, "baseline", "hash-a").lead
    finally:
        book._stop.set()
    assert sorted(p.name for p in tmp_path.rglob("*.revoked")) == []
    assert "'key' '../../../../escaped' is not a plain name" in caplog.text
