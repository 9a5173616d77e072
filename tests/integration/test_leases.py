"""Arm leases (servers.lease) on a real host directory, through LocalTransport and through the
sshd fixture: two "runs" here are two LeaseBooks with their own run ids, as two CLIs would be."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from specops.hostfiles import paths
from specops.run.state import Run
from specops.servers import lease
from specops.servers.lease import LeaseBook, LeaseHeld, LeasePolicy, TakenOver
from specops.transport.base import Transport
from specops.transport.local import LocalTransport
from specops.transport.ssh import SSHTransport
from tests.support.waiting import wait_until

ARGV_A = ["python3", "-m", "sglang.launch_server", "--port", "30000", "--max-running-requests", "64"]
ARGV_B = ["python3", "-m", "sglang.launch_server", "--port", "30000", "--max-running-requests", "32"]


@pytest.fixture(params=["local", "ssh"])
def host(request, tmp_path) -> Iterator[tuple[Transport, str]]:
    workdir = tmp_path / "w"
    workdir.mkdir()
    if request.param == "local":
        yield LocalTransport("h0"), str(workdir)
        return
    sshd = request.getfixturevalue("sshd")
    t = SSHTransport("h0", sshd.address(0), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                     known_hosts=str(tmp_path / "known_hosts"), connect_timeout=5.0)
    try:
        yield t, str(workdir)
    finally:
        t.close()


_BOOKS: list[LeaseBook] = []


@pytest.fixture(autouse=True)
def _end_books() -> Iterator[None]:
    """Every book's heartbeat thread ends with its test."""
    yield
    while _BOOKS:
        _BOOKS.pop()._stop.set()


def book(run_id: str, mode: lease.Mode = "refuse", wait_s: float = 5.0) -> LeaseBook:
    made = LeaseBook(run_id, "bench", LeasePolicy(mode, wait_s))
    _BOOKS.append(made)
    return made


def lease_files(workdir: str, arm: str = "baseline") -> list[str]:
    d = Path(paths.leases_dir(workdir, arm))
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_other_arguments_are_refused_naming_the_holder_and_identical_ones_share(host) -> None:
    transport, wd = host
    a, b, c = book("run-a"), book("run-b"), book("run-c")
    first = a.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    assert first.lead and first.shared_with == []
    with pytest.raises(LeaseHeld) as refused:
        b.claim(transport, "h0", wd, "baseline", "hash-b", ARGV_B)
    text = str(refused.value)
    assert "arm baseline is in use by run run-a (user " in text and f"pid {os.getpid()}, since " in text
    assert "--max-running-requests 64 -> 32" in text and "--wait" in text and "--take-over" in text
    assert lease_files(wd) == [a.key + ".json"]  # the refused run left nothing behind
    shared = c.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    assert not shared.lead and shared.shared_with == ["run-a"]
    assert a.release("h0", "baseline")[0].run_id == "run-c"  # run-a leaves; run-c still uses the arm
    assert c.release("h0", "baseline") == []
    assert lease_files(wd) == []


def test_take_over_revokes_the_holder_which_learns_it_at_its_next_check(host) -> None:
    transport, wd = host
    a, b = book("run-a"), book("run-b", "take_over")
    a.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    assert a.check(transport, "h0", "baseline").state is None
    assert b.claim(transport, "h0", wd, "baseline", "hash-b", ARGV_B).lead
    with pytest.raises(TakenOver, match=r"arm baseline taken over by run run-b \(user .+ on .+\)"):
        a.check(transport, "h0", "baseline")
    a.beat()  # a late heartbeat of the revoked holder does not write its lease back
    assert lease_files(wd) == sorted([b.key + ".json", a.key + ".revoked"])
    assert [x.run_id for x in lease.read_arm(transport, wd, "baseline").live()] == ["run-b"]
    a.release("h0", "baseline")
    assert lease_files(wd) == [b.key + ".json"]


def test_holders_are_read_per_arm_and_guard_the_tree(host) -> None:
    """`status` and the tree guard read every arm at once: a marker revoking run-a's lease
    of one arm (its key is the same for every arm) must not hide its lease of another."""
    transport, wd = host
    a, b = book("run-a"), book("run-b", "take_over")
    a.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    a.claim(transport, "h0", wd, "eagle3", "hash-e", ARGV_A)
    b.claim(transport, "h0", wd, "baseline", "hash-b", ARGV_B)  # takes baseline over
    held = {arm: [x.run_id for x in leases] for arm, leases in lease.holders(transport, wd).items()}
    assert held == {"baseline": ["run-b"], "eagle3": ["run-a"]}
    with pytest.raises(LeaseHeld, match=r"step 'x' \(git\) would change the SGLang that run run-a \(user .+\) is "
                                        r"measuring \(arm eagle3\)"):
        book("run-c").guard_tree(transport, "h0", wd, "step 'x' (git)")
    b.guard_tree(transport, "h0", wd, "step 'x' (git)")  # --take-over goes ahead
    a.release("h0", "eagle3")
    book("run-b").guard_tree(transport, "h0", wd, "step 'x' (git)")  # a run's own lease is no obstacle to it...
    with pytest.raises(LeaseHeld, match="run run-b"):  # ...but is to anyone else
        book("run-d").guard_tree(transport, "h0", wd, "step 'x' (git)")


def test_wait_waits_for_the_holder_then_claims_and_gives_up_after_its_timeout(host, monkeypatch) -> None:
    transport, wd = host
    monkeypatch.setattr(lease, "WAIT_POLL_S", 0.1)
    a = book("run-a")
    a.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    with pytest.raises(LeaseHeld, match=r"gave up after waiting 0s for arm baseline, still in use by run run-a"):
        book("run-x", "wait", 0.0).claim(transport, "h0", wd, "baseline", "hash-b", ARGV_B)
    seen: list[str] = []
    done = threading.Timer(0.8, lambda: a.release("h0", "baseline"))
    done.start()
    t0 = time.monotonic()
    claim = book("run-b", "wait").claim(transport, "h0", wd, "baseline", "hash-b", ARGV_B, on_wait=seen.append)
    done.join(10)
    assert claim.lead and time.monotonic() - t0 >= 0.7
    assert len(seen) == 1 and seen[0].startswith("waiting for arm baseline: in use by run run-a (user ")


def test_a_dead_holder_does_not_block_and_a_silent_one_expires(host) -> None:
    transport, wd = host
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = book("run-dead")
    dead.pid = gone.pid  # its CLI ran on this machine and has exited
    dead.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    silent = book("run-silent")
    silent.cli_host = "elsewhere"  # a CLI on another machine: only its heartbeat tells
    silent.claim(transport, "h0", wd, "eagle3", "hash-a", ARGV_A)
    old = time.time() - lease.EXPIRE_S - 5
    os.utime(paths.lease_file(wd, "eagle3", silent.key), (old, old))
    b = book("run-b")
    assert b.claim(transport, "h0", wd, "baseline", "hash-b", ARGV_B).lead
    assert b.claim(transport, "h0", wd, "eagle3", "hash-b", ARGV_B).lead
    # the dead leases are gone; each holder finds a marker saying who took its arm, and why
    assert lease_files(wd) == sorted([b.key + ".json", dead.key + ".revoked"])
    with pytest.raises(TakenOver, match="this run's lease had expired"):
        silent.check(transport, "h0", "eagle3")


def test_two_runs_claiming_at_once_with_other_arguments_never_both_win(host) -> None:
    transport, wd = host
    won: list[str] = []
    refused: list[str] = []

    def claim(run_id: str, args_hash: str) -> None:
        try:
            book(run_id).claim(transport, "h0", wd, "baseline", args_hash, ARGV_A)
            won.append(run_id)
        except LeaseHeld:
            refused.append(run_id)

    threads = [threading.Thread(target=claim, args=(f"run-{i}", f"hash-{i}")) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(won) == 1 and len(refused) == 2, (won, refused)


def test_the_heartbeat_refreshes_held_leases(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(lease, "HEARTBEAT_S", 0.1)
    wd = str(tmp_path)
    a = book("run-a")
    a.claim(LocalTransport("h0"), "h0", wd, "baseline", "hash-a", ARGV_A)
    path = paths.lease_file(wd, "baseline", a.key)
    os.utime(path, (1, 1))
    wait_until(lambda: os.stat(path).st_mtime >= 2, "the heartbeat refreshing the lease")
    assert os.stat(path).st_mtime > time.time() - 60  # refreshed to now, not merely moved
    a.release_all()
    assert lease_files(wd) == []


def test_ctrl_c_leaves_an_arm_another_run_still_uses_and_releases_this_runs_lease(tmp_path: Path) -> None:
    wd, transport = str(tmp_path), LocalTransport("h0")
    run = Run(tmp_path / "run-a", leases=book("run-a"))
    run.leases.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    other = book("run-b")
    other.claim(transport, "h0", wd, "baseline", "hash-a", ARGV_A)
    run.launched("h0", ["baseline"])
    assert run.stop_launched({"h0": transport}, {"h0": wd}) == []  # nothing stopped: run-b measures on it
    assert lease_files(wd) == [other.key + ".json"]
