"""One long-lived helper per host, through which commands run framed.

Over SSH every new channel makes sshd start the user's login shell, rc files and all
(~100 ms here, more with conda/pyenv), while a step's command itself often takes a few
ms. So each host keeps one small Python helper (`python3 -u -c HELPER`, started once on
one channel) and sends it commands:

- each command arrives as a header line (a random per-command token, its timeout, its
  length) and the command line's bytes, so no quoting can go wrong; it runs as
  `bash --norc --noprofile -c LINE` in a new session (its `cd`, exports and `exit` stay
  inside, stdin is /dev/null), and on timeout its whole process group gets TERM, then KILL
  5 s later, as `timeout -k 5` would do;
- its stdout and stderr go to two files, and the reply is a header line carrying the
  token, the exit code and both lengths, then exactly that many bytes (each file's first
  and last `base.MAX_OUTPUT`/2 bytes at most, as `base.OutputBuffer` keeps them). Output that imitates
  the framing cannot confuse the reader (it is counted, not scanned), binary output
  survives, and a child left in the background cannot write into the next reply;
- one program starts per command (bash), against eight for a shell-only framing and a
  login shell for a channel per command.

A helper that does not answer in time is closed and its command's processes killed; the
next command starts a new one. Callers fall back to a channel per command where the
helper cannot start (no python3 on the host), for commands that need stdin, and while
the helper is busy with another thread's command.
"""

from __future__ import annotations

import secrets
import select
import shlex
import time
from dataclasses import dataclass
from typing import Callable

import paramiko

from specops.transport import base

#: The host side. Reads "TOKEN TIMEOUT LENGTH\n" + LENGTH bytes; answers
#: "TOKEN RC LEN_OUT LEN_ERR\n" + stdout + stderr.
HELPER = r"""
import os, shutil, signal, subprocess, sys, tempfile
inp, out = sys.stdin.buffer, sys.stdout.buffer
d = tempfile.mkdtemp(prefix="specops-session.")
LIMIT, GUARD = int(sys.argv[1]), int(sys.argv[2])
def bounded(fh, size):
    # base.OutputBuffer's rule: the first and last LIMIT/2 bytes, GUARD more dropped each side of the cut
    half = LIMIT // 2
    if size <= 2 * half:
        return fh.read()
    guard = min(GUARD, half)
    head = fh.read(half - guard)
    fh.seek(size - half + guard)
    note = b"\n[specops: %d bytes of output cut here]\n" % (size - 2 * half + 2 * guard)
    return head + note + fh.read(half - guard)
def killpg(pid, sig):
    try:
        os.killpg(pid, sig)
    except OSError:
        pass
try:
    out.write(b"specops-session-ready\n"); out.flush()
    while True:
        header = inp.readline()
        if not header:
            break
        token, timeout, n = header.split()
        line = inp.read(int(n))
        paths = [os.path.join(d, token.decode() + ext) for ext in (".o", ".e")]
        with open(paths[0], "wb") as o, open(paths[1], "wb") as e:
            p = subprocess.Popen(["bash", "--norc", "--noprofile", "-c", line], stdin=subprocess.DEVNULL,
                                 stdout=o, stderr=e, start_new_session=True)
        try:
            rc = p.wait(float(timeout))
        except subprocess.TimeoutExpired:
            killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
            killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = 124
        if rc < 0:
            rc = 128 - rc
        data = []
        for path in paths:
            with open(path, "rb") as fh:
                data.append(bounded(fh, os.fstat(fh.fileno()).st_size))
            os.unlink(path)
        out.write(b"%s %d %d %d\n" % (token, rc, len(data[0]), len(data[1])) + data[0] + data[1])
        out.flush()
finally:
    shutil.rmtree(d, ignore_errors=True)
"""
READY = b"specops-session-ready\n"
READ_SIZE = 1 << 16


class SessionBroken(Exception):
    """The session stopped answering or its channel closed; it must be replaced."""


@dataclass
class Reply:
    rc: int
    stdout: bytes
    stderr: bytes


class ShellSession:
    """A `bash --noprofile --norc` on one SSH channel. Not thread-safe: one caller at a time."""

    def __init__(self, open_channel: Callable[[], paramiko.Channel], start_timeout: float = 15.0,
                 python: str = "python3"):
        self._chan = open_channel()
        self._buf = bytearray()  # amortized appends: a 10 MB reply must not be copied per read
        try:
            self._chan.exec_command(shlex.join(["exec", python, "-u", "-c", HELPER, str(base.MAX_OUTPUT), str(base.CUT_GUARD)]))
            self._read_until(READY, time.monotonic() + start_timeout)
        except BaseException:
            self.close()
            raise
        del self._buf[:self._buf.index(READY) + len(READY)]

    @property
    def alive(self) -> bool:
        return not (self._chan.closed or self._chan.exit_status_ready())

    def close(self) -> None:
        try:
            self._chan.close()
        except Exception:  # noqa: BLE001 - closing a broken channel is best effort
            pass

    def _fill(self, deadline: float) -> None:
        """Read whatever arrives (stderr is drained and dropped: bash's own chatter)."""
        while self._chan.recv_stderr_ready():
            self._chan.recv_stderr(READ_SIZE)
        if self._chan.recv_ready():
            data = self._chan.recv(READ_SIZE)
            if not data:
                raise SessionBroken("the session's channel closed")
            self._buf += data
            return
        if self._chan.closed or self._chan.eof_received:
            raise SessionBroken("the session's channel closed")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SessionBroken("the session did not answer in time")
        select.select([self._chan], [], [], min(remaining, 1.0))

    def _read_until(self, needle: bytes, deadline: float) -> None:
        while needle not in self._buf:
            self._fill(deadline)

    def _read_exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._fill(deadline)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def run(self, line: str, timeout: float, deadline: float) -> Reply:
        """Run one command line under `timeout` (its process group is killed then); raise
        SessionBroken when no full reply comes by `deadline`."""
        token = "SO" + secrets.token_hex(12)
        body = line.encode()
        try:
            self._chan.sendall(f"{token} {max(0.1, timeout):.3f} {len(body)}\n".encode() + body)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise SessionBroken(f"cannot send to the session: {exc}") from exc
        marker = token.encode() + b" "
        self._read_until(marker, deadline)
        # anything before our token is stray output; the header ends at the next newline
        del self._buf[:self._buf.index(marker)]
        self._read_until(b"\n", deadline)
        end = self._buf.index(b"\n")
        header = bytes(self._buf[:end])
        del self._buf[:end + 1]
        try:
            _, rc, n_out, n_err = header.decode().split()
            rc_i, n_out_i, n_err_i = int(rc), int(n_out), int(n_err)
        except ValueError as exc:
            raise SessionBroken(f"malformed reply header {header[:80]!r}") from exc
        if max(n_out_i, n_err_i) > base.MAX_OUTPUT + 256:
            raise SessionBroken(f"reply header {header[:80]!r} announces more than the helper sends")
        stdout = self._read_exact(n_out_i, deadline)
        stderr = self._read_exact(n_err_i, deadline)
        return Reply(rc_i, stdout, stderr)
