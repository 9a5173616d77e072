"""The per-host shell session (issue 6): framing edge cases over the real sshd."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specops.transport.ssh import SSHTransport
from tests.support.waiting import wait_until


@pytest.fixture
def t(sshd, tmp_path: Path):
    transport = SSHTransport("s", sshd.address(3), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                             known_hosts=str(tmp_path / "kh"), connect_timeout=5.0)
    yield transport
    transport.close()


def test_output_that_imitates_the_framing_is_returned_verbatim(t: SSHTransport) -> None:
    first = t.run(["echo", "warm"], timeout=10)
    assert first.ok and t.session_commands == 1
    fake = "specops-session-ready\nSO0123456789abcdef01234567 0 3 0\nabc"
    r = t.run(["bash", "-c", 'printf "%s" "$1"; printf "%s" "$1" >&2; exit 3', "x", fake], timeout=10)
    assert (r.rc, r.stdout, r.stderr) == (3, fake, fake)
    assert t.run(["echo", "after"], timeout=10).stdout == "after\n"
    assert t.session_commands == 3 and t.channel_commands == 0


def test_binary_output_survives(t: SSHTransport, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 4096 + b"\x00tail"
    path = tmp_path / "blob.bin"
    path.write_bytes(blob)
    r = t.run(["bash", "-c", 'cat "$1" | base64 -w0', "x", str(path)], timeout=30)
    import base64

    assert base64.b64decode(r.stdout) == blob
    raw = t.run(["cat", str(path)], timeout=30)
    assert len(raw.stdout.encode("utf-8", errors="surrogateescape")) > 0 and raw.rc == 0
    assert t.run(["head", "-c", "3", str(path)], timeout=10).stdout == "\x00\x01\x02"


def test_command_reading_stdin_gets_eof_and_session_goes_on(t: SSHTransport) -> None:
    r = t.run(["bash", "-c", "cat; echo done"], timeout=10)
    assert r.ok and r.stdout == "done\n"
    fed = t.run(["cat"], timeout=10, stdin=b"fed through a channel\n")
    assert fed.stdout == "fed through a channel\n", "commands with stdin use a channel of their own"
    assert t.run(["echo", "ok"], timeout=10).stdout == "ok\n"
    assert t.channel_commands == 1


def test_cd_export_and_exit_do_not_leak(t: SSHTransport, tmp_path: Path) -> None:
    assert t.run(f"cd {tmp_path}; export SPECOPS_LEAK=1; exit 7", timeout=10).rc == 7
    r = t.run('pwd; echo "leak=${SPECOPS_LEAK:-none}"', timeout=10)
    assert r.ok and str(tmp_path) not in r.stdout and "leak=none" in r.stdout
    assert t.run(["true"], timeout=10, cwd=str(tmp_path)).ok
    assert t.run(["pwd"], timeout=10, cwd=str(tmp_path)).stdout.strip() == str(tmp_path)


def test_background_child_does_not_write_into_the_next_reply(t: SSHTransport, tmp_path: Path) -> None:
    go, wrote = tmp_path / "go", tmp_path / "wrote"
    # the child writes once the test says so (after the reply came back), then says it has
    # written: the next command runs after the late write, whatever the machine's speed
    await_go = f"for i in $(seq 1200); do test -e {go} && break; sleep 0.05; done"
    r = t.run(f"( {await_go}; (echo LATE); touch {wrote} ) & echo now", timeout=10)
    assert r.stdout == "now\n"
    go.touch()
    wait_until(wrote.exists, "the background child's late write")
    nxt = t.run(["echo", "clean"], timeout=10)
    assert nxt.stdout == "clean\n"


def test_timeout_mid_command_then_a_normal_command(t: SSHTransport) -> None:
    started = time.monotonic()
    r = t.run("echo before; sleep 30; echo never", timeout=1)
    assert r.timed_out and r.rc == 124 and r.stdout == "before\n"
    assert time.monotonic() - started < 25  # the 30 s sleep was cut at the 1 s timeout (loose: a loaded machine is slow)
    assert t.run(["echo", "usable"], timeout=10).stdout == "usable\n"
    assert t.connects == 1


def test_a_killed_session_is_replaced_transparently(t: SSHTransport) -> None:
    assert t.run(["echo", "a"], timeout=10).ok
    # walk up from the command to the session helper while they are all alive
    find = ("p=$PPID; until tr '\\0' ' ' < /proc/$p/cmdline | grep -q specops-session; do "
            "p=$(awk '{print $4}' /proc/$p/stat); [ \"$p\" -gt 1 ] || exit 1; done; echo $p")
    found = t.run(find, timeout=10)
    assert found.ok, found.stderr
    os.kill(int(found.stdout), 9)
    # the kill has landed once this side sees the helper's channel closed (what replacing
    # the session goes by): a command sent before then would go to the dead helper
    wait_until(lambda: not t._session.alive, "the killed session helper's channel closed")
    before = t.session_commands
    r = t.run(["echo", "b"], timeout=10)
    assert r.ok and r.stdout == "b\n"
    assert t.session_commands == before + 1 and t.session_error == "", "a new session, not a fallback"


def test_session_off_uses_a_channel_per_command(sshd, tmp_path: Path) -> None:
    t = SSHTransport("s", sshd.address(3), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                     known_hosts=str(tmp_path / "kh"), use_session=False)
    try:
        assert t.run(["echo", "x"], timeout=10).stdout == "x\n"
        assert t.session_commands == 0 and t.channel_commands == 1
    finally:
        t.close()


def test_no_python_on_the_host_falls_back_to_channels(sshd, tmp_path: Path) -> None:
    t = SSHTransport("s", sshd.address(3), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                     known_hosts=str(tmp_path / "kh"), python="/nonexistent/python3")
    try:
        r = t.run(["echo", "still works"], timeout=10)
        assert r.ok and r.stdout == "still works\n"
        assert t.session_commands == 0 and t.channel_commands == 1
        assert "/nonexistent/python3" in t.session_error
    finally:
        t.close()
