"""`connection: local`: the same Transport interface over subprocess, for the `local` host."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from specops.errors import TransportError
from specops.fsutil import WriteError, atomic_write
from specops.transport.base import TIMEOUT_RC, Command, CommandResult, OutputBuffer, command_line


def _argv(cmd: Command) -> list[str]:
    """A script runs in one bash that reads no rc file (this process's environment is the
    user's already); argv runs as is."""
    return ["bash", "--norc", "--noprofile", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]


def _kill_group(pgid: int, grace_s: float = 5.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """TERM the whole group, then KILL what is left after `grace_s`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is None:
            time.sleep(0.05)
            continue
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _pump(proc: subprocess.Popen[bytes], stdin: bytes | None, deadline: float,
          out: OutputBuffer, err: OutputBuffer) -> bool:
    """Feed stdin and read both pipes into their bounded buffers until each is at EOF
    (True) or `deadline` passes (False); what `communicate` does, without keeping it all."""
    readers = {p.fileno(): buf for p, buf in ((proc.stdout, out), (proc.stderr, err)) if p is not None and not p.closed}
    pending = memoryview(stdin or b"")
    writer = proc.stdin.fileno() if proc.stdin is not None and not proc.stdin.closed else None
    if writer is not None and not pending:
        proc.stdin.close()  # type: ignore[union-attr]
        writer = None
    while readers or writer is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready_r, ready_w, _ = select.select(list(readers), [writer] if writer is not None else [], [], left)
        for fd in ready_r:
            data = os.read(fd, 1 << 16)
            if data:
                readers[fd].add(data)
            else:
                del readers[fd]
        if ready_w and writer is not None:
            try:
                pending = pending[os.write(writer, pending[:1 << 16]):]
            except BrokenPipeError:
                pending = memoryview(b"")
            if not pending:
                proc.stdin.close()  # type: ignore[union-attr]
                writer = None
    return True


def _drain(proc: subprocess.Popen[bytes], out: OutputBuffer, err: OutputBuffer, grace_s: float = 2.0) -> None:
    """What a killed command wrote. A process that left the group (its own `setsid`) may
    still hold the pipes open: give up on them after `grace_s` rather than hang."""
    _pump(proc, None, time.monotonic() + grace_s, out, err)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()


class LocalTransport:
    """Runs commands on this machine. Each command leads its own process group."""

    def __init__(self, name: str = "local", home: str | None = None):
        self.name = name
        self._home = home or os.path.expanduser("~")
        #: process groups of commands running now, so `close` can end them
        self._running: set[int] = set()
        self._lock = threading.Lock()

    @property
    def home(self) -> str:
        return self._home

    def run(self, cmd: Command, *, timeout: float, cwd: str | None = None,
            env: dict[str, str] | None = None, stdin: bytes | None = None) -> CommandResult:
        line = command_line(cmd)
        full_env = dict(os.environ, **(env or {}))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                _argv(cmd), cwd=self.expand(cwd) if cwd else self.home, env=full_env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            return CommandResult(line, 127, "", str(exc), time.monotonic() - started)
        timed_out = False
        with self._lock:
            self._running.add(proc.pid)
        out, err = OutputBuffer(), OutputBuffer()
        deadline = started + timeout
        try:
            try:
                if not _pump(proc, stdin, deadline, out, err):
                    raise subprocess.TimeoutExpired(line, timeout)
                proc.wait(max(0.0, deadline - time.monotonic()))
                for pipe in (proc.stdout, proc.stderr):
                    if pipe is not None:
                        pipe.close()
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid, proc=proc)
                _drain(proc, out, err)
        finally:
            with self._lock:
                self._running.discard(proc.pid)
        rc = TIMEOUT_RC if timed_out else proc.returncode
        return CommandResult(line, rc, out.value().decode(errors="replace"), err.value().decode(errors="replace"),
                             time.monotonic() - started, timed_out)

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        target = Path(self.expand(path))
        try:
            atomic_write(target, data, mode=mode, fsync=False)
        except WriteError as exc:
            raise TransportError(exc.message, where=f"host {self.name}", hint=exc.hint) from None

    def get(self, path: str) -> bytes:
        try:
            return Path(self.expand(path)).read_bytes()
        except OSError as exc:
            raise TransportError(f"cannot read {path}: {exc.strerror}", where=f"host {self.name}") from exc

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            with open(self.expand(path), "rb") as fh:
                fh.seek(offset)
                return fh.read(length)
        except OSError as exc:
            raise TransportError(f"cannot read {path}: {exc.strerror}", where=f"host {self.name}") from exc

    def stat_size(self, path: str) -> int | None:
        try:
            return os.stat(self.expand(path)).st_size
        except OSError:
            return None

    def expand(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            path = self.home + path[1:]
        if not os.path.isabs(path):
            path = os.path.join(self.home, path)
        return os.path.normpath(path)

    @contextmanager
    def forward(self, port: int) -> Iterator[str]:
        yield f"http://127.0.0.1:{port}"

    def notes(self) -> list[str]:
        return []

    def identity(self) -> str:
        return "n/a (local)"

    def close(self) -> None:
        """End commands still running (a run interrupted mid-step); servers a command
        started detached (their own session) are not ours to end here."""
        with self._lock:
            groups = list(self._running)
        for pgid in groups:
            _kill_group(pgid, grace_s=2.0)

    def __enter__(self) -> "LocalTransport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
