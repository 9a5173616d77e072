"""SSHTransport against a real OpenSSH server on loopback (tests/support/sshd.py)."""

from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest

from specops.errors import TransportError
from specops.sim.testing import free_port
from specops.transport import hostkeys
from specops.transport.probes import gather_facts
from specops.transport.ssh import SSHTransport
from tests.support.waiting import processes, wait_gone, wait_until


@pytest.fixture
def make(sshd, tmp_path):
    """Build SSHTransports to test host i with a known_hosts file private to the test."""
    made: list[SSHTransport] = []

    def factory(i: int = 0, **kw) -> SSHTransport:
        args = dict(name=f"h{i}", address=sshd.address(i), port=sshd.port, user=sshd.user,
                    key_filename=sshd.key_path, known_hosts=str(tmp_path / "known_hosts"),
                    connect_timeout=5.0)
        args.update(kw)
        t = SSHTransport(**args)
        made.append(t)
        return t

    yield factory
    for t in made:
        t.close()


def _survivors(secs: int) -> list[str]:
    """Processes `sleep <secs>` still alive on this machine (the sshd is local)."""
    return processes(f"^sleep {secs}$")


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, capture_output=True)
    return path


# ---------------------------------------------------------------- commands

def test_injection_values_are_literal(make, sshd, tmp_path):
    t = make()
    wd = Path(sshd.workdir(0)) / "inj dir 'q'"
    wd.mkdir(parents=True, exist_ok=True)
    evil = "x; touch PWNED; echo $(id)"
    r = t.run(["echo", evil], timeout=10, cwd=str(wd))
    assert r.stdout == evil + "\n"
    r = t.run(["printenv", "EVIL"], timeout=10, cwd=str(wd), env={"EVIL": "a'b\"; touch PWNED2 `id`"})
    assert r.stdout == "a'b\"; touch PWNED2 `id`\n"
    r = t.run(["pwd"], timeout=10, cwd=str(wd))
    assert r.stdout.strip() == str(wd)
    assert sorted(os.listdir(wd)) == []  # nothing ran: no PWNED files anywhere we could look
    assert not (Path(sshd.workdir(0)) / "PWNED").exists()
    with pytest.raises(ValueError):
        t.run(["true"], timeout=10, env={"A;touch PWNED": "1"})


def test_detached_child_does_not_hold_a_session_command(make):
    """Through the shell session the command's output goes to files: a child it detached
    on purpose (as a server launch does) neither blocks the call nor is killed."""
    t = make()
    secs = random.randint(4000, 4999)
    started = time.monotonic()
    r = t.run(f"setsid sleep {secs} & echo started", timeout=30)
    try:
        assert time.monotonic() - started < 25  # not held until the 30 s timeout (loose: a loaded machine is slow)
        assert r.ok and r.stdout == "started\n" and t.session_commands == 1
        # the detached child may not have exec'd sleep yet on a busy box
        assert len(wait_until(lambda: _survivors(secs), "the detached child running")) == 1
    finally:
        subprocess.run(["pkill", "-f", f"^sleep {secs}$"])


def test_leftover_holding_output_is_killed_at_the_timeout(make):
    """Channel per command: the command exits but a child it detached (own session) keeps
    stdout open: the call ends at its timeout, not never, and the child is killed."""
    t = make(use_session=False)
    secs = random.randint(4000, 4999)
    started = time.monotonic()
    r = t.run(f"setsid sleep {secs} & echo started", timeout=1.5)
    assert time.monotonic() - started < 60  # ended at its timeout, not with the child's hour-long sleep
    assert r.timed_out and r.rc == 124 and r.stdout == "started\n"
    assert "still held its output" in r.stderr
    wait_gone(f"^sleep {secs}$", "the detached child killed")  # the kill was sent; it lands when it lands
    assert t.run(["true"], timeout=10).ok


def test_home_hint_is_used_before_connecting():
    assert SSHTransport("h", "127.0.0.9", home_hint="/home/u/").expand("w") == "/home/u/w"


def test_parallel_commands_share_one_connection(make):
    t = make()
    results: list = [None] * 8

    def work(i: int) -> None:
        results[i] = t.run(["echo", str(i)], timeout=20)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(8)]
    assert t.connects == 1


# ---------------------------------------------------------------- files

# ---------------------------------------------------------------- host keys

def test_accept_new_records_key_then_reuses_it(make, sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    t = make(1)
    assert t.run(["true"], timeout=10).ok
    assert t.host_key_status == f"recorded in {kh}"
    assert kh.read_text() == sshd.known_hosts_line(1)
    assert t.host_key_fingerprint.startswith("ssh-ed25519 SHA256:")
    t2 = make(1)
    assert t2.run(["true"], timeout=10).ok
    assert t2.host_key_status == "known"
    assert kh.read_text() == sshd.known_hosts_line(1)  # not recorded twice


def test_accept_new_parallel_hosts_all_recorded(make, sshd, tmp_path):
    ts = [make(i) for i in range(4)]
    threads = [threading.Thread(target=t.connect) for t in ts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    lines = sorted((tmp_path / "known_hosts").read_text().splitlines(keepends=True))
    assert lines == sorted(sshd.known_hosts_line(i) for i in range(4))


def test_changed_host_key_is_refused(make, sshd, tmp_path):
    other = _keygen(tmp_path / "other_key")
    other_pub = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[{sshd.address(2)}]:{sshd.port} {other_pub}\n")
    for mode in ("accept-new", "strict"):
        t = make(2, host_key=mode)
        with pytest.raises(TransportError) as err:
            t.run(["true"], timeout=10)
        msg = str(err.value)
        assert "CHANGED" in msg and "Refusing" in msg and str(kh) in msg, msg
        assert f"h2 ({sshd.address(2)}:{sshd.port})" in msg
        assert hostkeys.fingerprint(_pubkey(sshd.host_pubkey)) in msg
        assert "ssh-keygen -R" in msg
    assert kh.read_text() == f"[{sshd.address(2)}]:{sshd.port} {other_pub}\n"  # untouched


def _pubkey(line: str) -> paramiko.PKey:
    kind, b64 = line.split()[:2]
    return paramiko.PKey.from_type_string(kind, base64.b64decode(b64))


def test_strict_refuses_unknown_host_and_accepts_known(make, sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    t = make(3, host_key="strict")
    with pytest.raises(TransportError) as err:
        t.run(["true"], timeout=10)
    msg = str(err.value)
    assert "unknown host key" in msg and "strict" in msg and f"{sshd.address(3)}:{sshd.port}" in msg
    assert not kh.exists() or kh.read_text() == ""
    kh.write_text(sshd.known_hosts_line(3))
    t2 = make(3, host_key="strict")
    assert t2.run(["true"], timeout=10).ok and t2.host_key_status == "known"


def test_hashed_known_hosts_entry_is_honoured(make, sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd.known_hosts_line(4))
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert sshd.address(4) not in kh.read_text()
    t = make(4, host_key="strict")
    assert t.run(["true"], timeout=10).ok


# ---------------------------------------------------------------- failures

def test_unreachable_port_is_clear_and_fast(make, sshd):
    port = free_port()  # nothing listens there: outside the ephemeral range, no client takes it meanwhile
    t = SSHTransport("gpu-x", "127.0.0.1", port, user=sshd.user, key_filename=sshd.key_path,
                     connect_timeout=2)
    started = time.monotonic()
    with pytest.raises(TransportError) as err:
        t.run(["true"], timeout=10)
    assert time.monotonic() - started < 9  # refused at once, not the run's 10 s timeout
    assert str(err.value).startswith(f"host gpu-x: cannot connect to gpu-x (127.0.0.1:{port}) within 2 s")


def test_silent_server_times_out_within_connect_timeout(sshd, tmp_path):
    with socket.socket() as listener:  # accepts TCP (backlog) but never says a word
        listener.bind(("127.0.0.1", 0))
        listener.listen(5)
        port = listener.getsockname()[1]
        t = SSHTransport("gpu-y", "127.0.0.1", port, user=sshd.user, key_filename=sshd.key_path,
                         known_hosts=str(tmp_path / "kh"), connect_timeout=1)
        started = time.monotonic()
        with pytest.raises(TransportError) as err:
            t.run(["true"], timeout=10)
        took = time.monotonic() - started
    assert took < 9, took  # the 1 s connect timeout, not the run's 10 s
    assert f"cannot connect to gpu-y (127.0.0.1:{port}) within 1 s" in str(err.value)


def test_auth_failure_names_user_and_key(make, sshd, tmp_path):
    wrong = _keygen(tmp_path / "wrong_key")
    t = make(0, key_filename=str(wrong))
    with pytest.raises(TransportError) as err:
        t.run(["true"], timeout=10)
    msg = str(err.value)
    assert f"authentication failed for user {sshd.user}" in msg and str(wrong) in msg
    t = make(0, key_filename=str(tmp_path / "absent_key"))
    with pytest.raises(TransportError) as err:
        t.run(["true"], timeout=10)
    assert "absent_key not found" in str(err.value)


def test_reconnects_after_sshd_session_killed(make, sshd):
    t = make(5)
    before = sshd.session_pids()
    assert t.run(["true"], timeout=10).ok
    mine = sshd.session_pids() - before
    assert mine
    connection = t.connect()  # the open one (connect() opens only when there is none)
    for pid in mine:
        os.kill(pid, signal.SIGKILL)
    # the kill has landed once this side sees the connection dropped: a command sent
    # before then goes down the dying connection (and is rightly an error, not a retry)
    wait_until(lambda: not connection.is_active(), "the client to see its connection dropped")
    r = t.run(["echo", "back"], timeout=10)
    assert r.stdout == "back\n" and t.connects == 2
    t.connection.transport.sock.shutdown(socket.SHUT_RDWR)  # drop it under paramiko
    assert t.get(os.devnull) == b""
    assert t.run(["echo", "again"], timeout=10).stdout == "again\n" and t.connects == 3


def test_connection_lost_mid_command_is_an_error(make, sshd, tmp_path):
    t = make(6)
    before = sshd.session_pids()
    t.connect()
    mine = sshd.session_pids() - before
    started = tmp_path / "started"

    def kill_once_running() -> None:
        # Kill the connection only once the command runs on the host: killed any earlier
        # (a loaded machine), the transport rightly reconnects and the command succeeds.
        wait_until(started.exists, "the command running on the host")
        for p in mine:
            os.kill(p, signal.SIGKILL)

    killer = threading.Thread(target=kill_once_running)
    killer.start()
    secs = random.randint(3000, 3999)
    try:
        with pytest.raises(TransportError) as err:
            # the command outlasts any stall between its start and the kill: it ends only by the kill
            t.run(["bash", "-c", f'touch "$0"; sleep {secs}', str(started)], timeout=600)
    finally:
        killer.join()
        subprocess.run(["pkill", "-f", f"^sleep {secs}$"])  # the lost connection's command, orphaned
    assert "lost while running" in str(err.value)
    assert t.run(["true"], timeout=10).ok  # and the next call reconnects


# ---------------------------------------------------------------- facts

def test_gather_facts_over_ssh(make, sshd):
    t = make(7)
    facts = gather_facts(t, "~/specops-facts-none/deeper", python=sys.executable)
    assert facts.reachable and facts.error == ""
    assert facts.python == sys.version.split()[0]
    assert facts.git and facts.git != "missing"
    assert "GiB free on" in facts.free_disk and "does not exist yet" in facts.free_disk
    assert facts.host_key.startswith("recorded in") and "SHA256:" in facts.host_key
    has_smi = subprocess.run(["bash", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0
    assert (facts.gpus != []) == has_smi
    missing = gather_facts(make(7), "/tmp", python="python-nope")
    assert missing.python == "missing" and missing.host_key.startswith("known")


def test_gather_facts_unreachable(sshd):
    port = free_port()
    facts = gather_facts(SSHTransport("gone", "127.0.0.1", port, connect_timeout=1), "~/w")
    assert not facts.reachable and "cannot connect to gone" in facts.error


def test_notes_say_why_it_runs_slower(make):
    t = make(0, python="/nonexistent/python3")
    assert t.run(["true"], timeout=10).ok
    notes = t.notes()
    assert len(notes) == 1 and "/nonexistent/python3" in notes[0] and "channel per command" in notes[0]
