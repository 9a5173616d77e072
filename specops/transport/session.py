"""One long-lived remote shell per host, through which commands run framed.

Over SSH every new channel makes sshd start the user's login shell, rc files and all
(~100 ms here, more with conda/pyenv); a step's command itself often takes a few ms. So
each host keeps one `bash --noprofile --norc` on one channel and sends it commands:

- each command arrives base64-encoded (no quoting to get wrong) and runs in a fresh
  `bash` of its own (its `cd`, exports and `exit` stay inside), with stdin from
  /dev/null, under the same group-killing `timeout` wrapper as a one-off command;
- its stdout and stderr go to two files, and the reply is a header line carrying a random
  per-command token, the exit code and both lengths, then exactly that many bytes. Output
  that imitates the framing cannot confuse the reader (it is counted, not scanned), binary
  output survives, and a child left in the background cannot write into the next reply.

A session that does not answer in time is closed and its command's processes killed; the
next command starts a new session. Callers fall back to a channel per command where a
session cannot start, for commands that need stdin, and when the session is busy.
"""

from __future__ import annotations

import base64
import secrets
import select
import time
from dataclasses import dataclass
from typing import Callable

import paramiko

#: Defined once per session. $1: token, $2: base64 of the command line.
PRELUDE = r"""
__specops_d=$(mktemp -d "${TMPDIR:-/tmp}/specops-session.XXXXXX") || exit 97
trap 'rm -rf "$__specops_d"' EXIT
__specops_run() {
  printf %s "$2" | base64 -d > "$__specops_d/cmd" || { printf '%s 98 0 0\n' "$1"; return; }
  bash --norc --noprofile "$__specops_d/cmd" < /dev/null > "$__specops_d/o" 2> "$__specops_d/e"
  __specops_rc=$?
  printf '%s %s %s %s\n' "$1" "$__specops_rc" $(stat -c %s "$__specops_d/o" "$__specops_d/e")
  cat "$__specops_d/o" "$__specops_d/e"
  rm -f "$__specops_d/o" "$__specops_d/e"
}
printf 'specops-session-ready\n'
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

    def __init__(self, open_channel: Callable[[], paramiko.Channel], start_timeout: float = 15.0):
        self._chan = open_channel()
        self._buf = b""
        try:
            self._chan.exec_command("exec bash --noprofile --norc")
            self._chan.sendall(PRELUDE.encode())
            self._read_until(READY, time.monotonic() + start_timeout)
        except BaseException:
            self.close()
            raise
        self._buf = self._buf.split(READY, 1)[1]

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
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def run(self, remote_line: str, deadline: float) -> Reply:
        """Run one host command line; raise SessionBroken when no full reply comes by `deadline`."""
        token = "SO" + secrets.token_hex(12)
        encoded = base64.b64encode(remote_line.encode()).decode()
        try:
            self._chan.sendall(f"__specops_run {token} {encoded}\n".encode())
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise SessionBroken(f"cannot send to the session: {exc}") from exc
        marker = token.encode() + b" "
        self._read_until(marker, deadline)
        # anything before our token is stray output; the header ends at the next newline
        self._buf = self._buf[self._buf.index(marker):]
        self._read_until(b"\n", deadline)
        header, self._buf = self._buf.split(b"\n", 1)
        try:
            _, rc, n_out, n_err = header.decode().split()
            rc_i, n_out_i, n_err_i = int(rc), int(n_out), int(n_err)
        except ValueError as exc:
            raise SessionBroken(f"malformed reply header {header[:80]!r}") from exc
        stdout = self._read_exact(n_out_i, deadline)
        stderr = self._read_exact(n_err_i, deadline)
        return Reply(rc_i, stdout, stderr)
