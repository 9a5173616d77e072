"""The Transport contract, run against both transports: LocalTransport on this machine and
SSHTransport through the real sshd fixture. Whatever a step does must behave the same
on either, so every scenario here runs twice; transport-specific behaviour (host keys,
reconnects, the session helper, escaped children) stays in test_transport_local/_ssh."""

from __future__ import annotations

import hashlib
import http.server
import os
import random
import shlex
import stat
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from specops.errors import TransportError
from specops.transport.base import Transport
from specops.transport.local import LocalTransport
from specops.transport.probes import gather_facts
from specops.transport.ssh import SSHTransport
from tests.support.waiting import wait_gone


@dataclass
class Subject:
    transport: Transport
    base: Path   # a writable directory on the "host" (this machine, either way)
    home: str    # what `~` expands to there


@pytest.fixture(params=["local", "ssh"])
def subject(request, tmp_path) -> Iterator[Subject]:
    if request.param == "local":
        home = tmp_path / "home"
        home.mkdir()
        yield Subject(LocalTransport("h0", home=str(home)), home, str(home))
        return
    sshd = request.getfixturevalue("sshd")
    t = SSHTransport("h0", sshd.address(0), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                     known_hosts=str(tmp_path / "known_hosts"), connect_timeout=5.0)
    base = tmp_path / "remote"
    base.mkdir()
    try:
        yield Subject(t, base, os.path.expanduser("~"))
    finally:
        t.close()


def test_run_argv_and_script_exit_codes_and_streams(subject):
    t = subject.transport
    r = t.run(["echo", "hello", "world"], timeout=10)
    assert (r.rc, r.stdout, r.stderr, r.timed_out, r.ok) == (0, "hello world\n", "", False, True)
    r = t.run("echo out; echo err >&2; exit 3", timeout=10)
    assert (r.rc, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
    assert r.command == "bash -c 'echo out; echo err >&2; exit 3'"
    r = t.run(["no-such-command-xyz"], timeout=10)
    assert r.rc == 127 and "no-such-command-xyz" in r.stderr
    r = t.run(["printf", "\\xff\\xfeok"], timeout=10)  # undecodable bytes are replaced, not fatal
    assert r.stdout.endswith("ok") and "\ufffd" in r.stdout
    r = t.run("exit 124", timeout=30)  # a command's own 124 is not a timeout
    assert r.rc == 124 and not r.timed_out
    assert t.run(["pwd"], timeout=10).stdout.strip() == subject.home  # default cwd: the home


def test_values_are_literal_in_argv_cwd_and_env(subject):
    t = subject.transport
    wd = subject.base / "dir with 'quotes'"
    wd.mkdir()
    evil = "x; touch PWNED; echo $(id)"
    assert t.run(["echo", evil], timeout=10, cwd=str(wd)).stdout == evil + "\n"
    r = t.run(["printenv", "EVIL"], timeout=10, cwd=str(wd), env={"EVIL": "a'b\"; touch PWNED2 `id`"})
    assert r.stdout == "a'b\"; touch PWNED2 `id`\n"
    assert t.run(["pwd"], timeout=10, cwd=str(wd)).stdout.strip() == str(wd)
    assert os.listdir(wd) == [] and not (Path(subject.home) / "PWNED").exists()
    assert t.run(["true"], timeout=10, cwd=str(subject.base / "absent")).rc != 0
    rel = Path(subject.home) / f"contract-rel-{os.getpid()}"
    rel.mkdir(exist_ok=True)
    try:  # a relative cwd resolves against the home, as ssh would
        assert t.run(["pwd"], timeout=10, cwd=rel.name).stdout.strip() == str(rel)
    finally:
        rel.rmdir()


#: run on the host while the command runs: does any process's argv hold the value it got?
_ARGV_SCAN = ("import glob, os, sys\n"
              "v = os.environ['SPECOPS_T_SECRET'].split()[0].encode()\n"  # the part no quoting changes
              "seen = []\n"
              "for p in glob.glob('/proc/[0-9]*/cmdline'):\n"
              "    try:\n"
              "        if v in open(p, 'rb').read():\n"
              "            seen.append(p)\n"
              "    except OSError:\n"
              "        pass\n"
              "sys.stdout.write(os.environ['SPECOPS_T_SECRET'] + '|' + str(seen))\n")


@pytest.mark.parametrize("via", ["script", "argv", "stdin"])
def test_env_values_reach_the_command_but_no_process_argv(subject, via):
    """Issue 35, finding 4: over SSH a command's `env:` was `export K=V` inside the `bash -c`
    argument, visible to every user's `ps` on the host for as long as the command ran."""
    value = f"hf_envArgvScan{via}0123456789 it's \"$(id)\" `x`\nline2"
    env = {"SPECOPS_T_SECRET": value}
    if via == "script":
        r = subject.transport.run(f"{sys.executable} -c {shlex.quote(_ARGV_SCAN)}; exit $?", timeout=30, env=env)
    elif via == "argv":
        r = subject.transport.run([sys.executable, "-c", _ARGV_SCAN], timeout=30, env=env)
    else:  # a command given stdin: the values must not take its place
        r = subject.transport.run(["bash", "-c", f'cat > /dev/null; exec {sys.executable} -c "$1"', "_", _ARGV_SCAN],
                                  timeout=30, env=env, stdin=b"input\n")
    assert r.ok, r
    assert r.stdout == value + "|[]", r.stdout
    assert value not in r.command
    leftovers = list(Path(subject.home).glob(".specops-env/*"))
    assert not leftovers, leftovers


def test_stdin_round_trip_beyond_a_window(subject):
    t = subject.transport
    data = os.urandom(3 * 1024 * 1024)
    r = t.run(["sha256sum"], timeout=30, stdin=data)
    assert r.rc == 0 and r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    r = t.run(["cat"], timeout=10)  # no stdin: EOF at once, no hang
    assert r.ok and r.stdout == ""


def test_timeout_kills_the_whole_process_group(subject):
    t = subject.transport
    secs = random.randint(5000, 5999)
    started = time.monotonic()
    r = t.run(f"sleep {secs} & sleep {secs}; echo never", timeout=1)
    assert time.monotonic() - started < 60  # the timeout, not the hour-long sleeps
    assert r.timed_out and r.rc == 124 and "never" not in r.stdout
    wait_gone(f"^sleep {secs}$", "the timed-out command's process group killed")
    assert t.run(["echo", "still here"], timeout=10).stdout == "still here\n"


def test_put_get_are_atomic_keep_modes_and_make_parents(subject):
    t = subject.transport
    target = subject.base / "a" / "b" / "run.sh"
    t.put(b"#!/bin/sh\necho hi\n", str(target), mode=0o755)
    assert target.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    t.put(b"#!/bin/sh\necho bye\n", str(target))  # no mode: the existing one is kept
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert t.get(str(target)) == b"#!/bin/sh\necho bye\n"
    assert os.listdir(target.parent) == ["run.sh"]  # no temp files left behind
    plain = subject.base / "plain.txt"
    t.put(b"x", str(plain))
    assert stat.S_IMODE(plain.stat().st_mode) == 0o644
    big = os.urandom(1_500_000)
    t.put(big, str(subject.base / "big.bin"))
    assert t.get(str(subject.base / "big.bin")) == big
    with pytest.raises(TransportError) as err:
        t.get(str(subject.base / "missing.txt"))
    assert "missing.txt" in str(err.value) and err.value.where == "host h0"
    blocker = subject.base / "blocker"
    blocker.write_text("a file, not a dir")
    with pytest.raises(TransportError) as err:
        t.put(b"x", str(blocker / "sub" / "f.txt"))
    assert "cannot write" in str(err.value) and "blocker/sub/f.txt" in str(err.value)
    assert blocker.read_text() == "a file, not a dir"


def test_read_range_stat_size_and_expand(subject):
    t = subject.transport
    path = subject.base / "log.txt"
    data = bytes(range(256)) * 1000  # 256000 bytes: beyond one SFTP request
    path.write_bytes(data)
    assert t.read_range(str(path), 10, 5) == data[10:15]
    assert t.read_range(str(path), 1000, 100_000) == data[1000:101_000]
    assert t.read_range(str(path), len(data) - 3, 100) == data[-3:]
    assert t.read_range(str(path), len(data) + 10, 100) == b""
    assert t.stat_size(str(path)) == len(data)
    assert t.stat_size(str(path) + ".nope") is None
    with pytest.raises(TransportError):
        t.read_range(str(path) + ".nope", 0, 10)
    assert t.expand("~") == subject.home
    assert t.expand("~/specops/x") == f"{subject.home}/specops/x"
    assert t.expand("specops") == f"{subject.home}/specops"
    assert t.expand("/a/b/../c") == "/a/c"


def test_gather_facts(subject):
    facts = gather_facts(subject.transport, "~/specops-facts-none/deeper", python=sys.executable)
    assert facts.reachable and facts.error == ""
    assert facts.python == sys.version.split()[0]
    assert facts.git and facts.git != "missing"
    assert "GiB free on" in facts.free_disk
    missing = gather_facts(subject.transport, "/tmp", python="python-nope")
    assert missing.python == "missing"


# ---------------------------------------------------------------- the rest of the protocol


@pytest.fixture
def http_port() -> Iterator[int]:
    """A tiny HTTP server on 127.0.0.1 (the sshd "hosts" are this machine)."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the stdlib's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello " + self.path.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_home_is_a_property_on_both(subject):
    t = subject.transport
    assert t.home == subject.home and t.expand("~") == subject.home
    assert t.run(["pwd"], timeout=10).stdout.strip() == subject.home  # commands start there


def test_forward_reaches_a_port_on_the_host(subject, http_port):
    with subject.transport.forward(http_port) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "/x", timeout=10) as resp:
            assert resp.read() == b"hello /x"


def test_notes_and_identity(subject):
    t = subject.transport
    assert t.run(["true"], timeout=10).ok
    assert t.notes() == []
    if isinstance(t, SSHTransport):
        assert t.identity().startswith(("known ", "recorded in ")) and "SHA256:" in t.identity()
    else:
        assert t.identity() == "n/a (local)"


def test_command_output_is_bounded_keeping_head_and_tail(subject, monkeypatch):
    """Issue 35, finding 8: 8 MiB of output against a 1 MiB limit (set before the session
    helper starts) keeps the first and last half MiB around a note; a secret the cut goes
    through leaves no piece (the cut drops a guard on each side), through the session, a
    channel (stdin) and either stream."""
    from specops.transport import base
    monkeypatch.setattr(base, "MAX_OUTPUT", 1 << 20)
    secret = "hf_cutCANARY0123456789abcdef"
    half = 1 << 19
    script = (f"{{ head -c {half - 10} /dev/zero | tr '\\0' a; printf %s {secret}; "
              f"head -c {8 << 20} /dev/zero | tr '\\0' b; printf END; }} | tee /dev/stderr")
    t = subject.transport
    for kw in ({}, {"stdin": b"x"}):
        r = t.run(script, timeout=60, **kw)
        for text in (r.stdout, r.stderr):
            assert text.startswith("aaaa") and text.endswith("bbbEND") and "bytes of output cut here" in text
            assert len(text) <= (1 << 20) + 100
            assert not any(secret[i:i + 8] in text for i in range(len(secret) - 7))
