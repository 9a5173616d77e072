"""The canary scan (issue 35): a recognisable secret goes through a route of the product, and
afterwards nothing specops wrote, printed or started may hold it, whole or in part.

- `files(roots, secret, allowed)`: every file under the roots (run directory, workdir with
  its `.specops` state and lease files, Slurm's spool and output), names included, for
  the value or any 8-character piece of it; `allowed` names the files meant to hold it
  (the 0600 env files the servers' environment is loaded from).
- `Scans`: `files` again after each step of a route, so a file a later step removes is
  scanned while it exists.
- `ArgvSampler`: a background thread reading every process's argv (/proc/*/cmdline) while
  the route runs, since `ps` shows argv to every user of a host.
- `texts(...)`: what the CLI printed.
- `on_a_terminal(...)`: the CLI run under a pseudo-terminal, so the live view draws, and
  every byte the terminal received kept for `texts`.
- `rewritten(before, after, ...)`: a file specops rewrote (hosts.yaml after `tune --write`)
  holds a secret in clear only where the user's own text already did.

Every scan takes one secret or several (`Secret`).

Each returns findings as lines ("where: piece"); `assert_clean` fails with all of them.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence, Union

PIECE = 8
#: one secret, or several scanned for at once
Secret = Union[str, Sequence[str]]


def pieces(secret: Secret, size: int = PIECE) -> list[str]:
    """Every `size`-character piece of each secret (the whole value when shorter), of its
    JSON-escaped, shell-quoted and Python-repr'd forms: a `"` or `\\` in the value is written
    `\\"` or `\\\\` in a JSON document, a `'` is `'"'"'` in a shell word and `\\'` in a repr,
    where no piece of the plain value may be left to find."""
    values = [secret] if isinstance(secret, str) else list(secret)
    forms = {form for value in values
             for form in (value, json.dumps(value)[1:-1], shlex.quote(value), repr(value)[1:-1])}
    return sorted({p for form in forms for p in _pieces(form, size)})


def _pieces(value: str, size: int) -> set[str]:
    if len(value) <= size:
        return {value}
    return {value[i:i + size] for i in range(len(value) - size + 1)}


def _found(data: bytes, needles: Sequence[bytes]) -> bytes | None:
    return next((n for n in needles if n in data), None)


def _walk(root: Path) -> Iterator[Path]:
    """Every regular file under root (hidden ones too; links are not followed)."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*filenames, *dirnames]:
            yield Path(dirpath) / name


def files(roots: Iterable[Path], secret: Secret, allowed: Iterable[Path] = (),
          seen: dict[Path, tuple[int, int, int]] | None = None) -> list[str]:
    """Files (and file names) under `roots` that hold the secret or a piece of it. `seen`:
    files already scanned, by (inode, size, mtime), skipped while unchanged (a route scans
    after each step; an unpacked SGLang tree is read once)."""
    needles = [p.encode() for p in pieces(secret)]
    skip = {Path(p).resolve() for p in allowed}
    hits: list[str] = []
    for root in roots:
        if not Path(root).exists():
            continue
        for path in _walk(Path(root)):
            try:
                st = path.lstat()
            except OSError:
                continue  # removed meanwhile
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if seen is not None:
                if seen.get(path) == key:
                    continue
                seen[path] = key
            piece = _found(str(path).encode(), needles)
            if piece is not None:
                hits.append(f"file name {path}: {piece.decode()}")
            if not stat.S_ISREG(st.st_mode) or path.resolve() in skip:
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            piece = _found(data, needles)
            if piece is not None:
                hits.append(f"file {path}: {piece.decode()}")
    return hits


def texts(named: Mapping[str, str | bytes], secret: Secret) -> list[str]:
    """Which of the named texts (a command's output) hold the secret or a piece of it."""
    needles = [p.encode() for p in pieces(secret)]
    hits = []
    for name, text in named.items():
        data = text if isinstance(text, bytes) else text.encode(errors="replace")
        piece = _found(data, needles)
        if piece is not None:
            hits.append(f"output of {name}: {piece.decode()}")
    return hits


def specops_argv(*args: str) -> list[str]:
    """The CLI as a process of its own (`python -m specops ARGS`)."""
    return [sys.executable, "-m", "specops", *args]


def on_a_terminal(argv: Sequence[str], env: Mapping[str, str], columns: int = 100,
                  timeout: float = 300.0) -> tuple[int, bytes]:
    """`argv` (specops_argv) with a pseudo-terminal as its stdin, stdout and stderr: the live
    view and colours are drawn only on a terminal, and a pipe would never see them.
    Returns the exit code and every byte the terminal received."""
    master, slave = pty.openpty()
    full_env = {**env, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    full_env.pop("NO_COLOR", None)
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave,
                            env=full_env, close_fds=True, start_new_session=True)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                received += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, bytes(received)


def rewritten(name: str, before: str, after: str, in_clear: Sequence[str], never: Sequence[str]) -> list[str]:
    """A file specops rewrote: each `in_clear` secret the user wrote there is kept no more
    often than before, and no piece of any secret is left once those are taken out; a
    `never` secret (read from an environment variable or a file) is not there at all."""
    hits = [f"{name}: {value[:PIECE]}... now {after.count(value)} times, {before.count(value)} before"
            for value in in_clear if after.count(value) > before.count(value)]
    rest, rest_before = after, before
    for value in in_clear:
        rest, rest_before = rest.replace(value, ""), rest_before.replace(value, "")
    return hits + [f"{name} (rewritten): {piece}" for piece in pieces([*in_clear, *never])
                   if piece in rest and piece not in rest_before]


class ArgvSampler:
    """Reads every process's argv in a background thread until stopped; `hits` lists the
    processes whose argv held the secret or a piece of it. A process living for less than
    one pass can be missed: the scan samples, as `ps` would."""

    def __init__(self, secret: Secret):
        self._needles = [p.encode() for p in pieces(secret)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="canary-argv", daemon=True)
        self.hits: dict[int, str] = {}
        self.passes = 0

    def __enter__(self) -> "ArgvSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        """One pass over /proc."""
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    argv = fh.read()
            except OSError:
                continue  # gone, or not ours to read
            piece = _found(argv, self._needles)
            if piece is not None:
                shown = argv.replace(b"\0", b" ").decode(errors="replace")[:300]
                self.hits.setdefault(int(entry.name), f"argv of pid {entry.name} ({piece.decode()}): {shown}")
        self.passes += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.01)

    @property
    def findings(self) -> list[str]:
        return sorted(self.hits.values())


class Scans:
    """`files` run again after each step of a route (`after(step)`), findings kept with the
    step they were first seen after: a file a later step removes (a server's state file at
    `stop`) is still scanned while it exists."""

    def __init__(self, secret: Secret, roots: Iterable[Path], allowed: Callable[[], Iterable[Path]] = lambda: ()):
        self.secret, self.roots, self.allowed = secret, list(roots), allowed
        self._seen: dict[str, str] = {}
        self._scanned: dict[Path, tuple[int, int, int]] = {}

    def after(self, step: str) -> None:
        for hit in files(self.roots, self.secret, self.allowed(), self._scanned):
            self._seen.setdefault(hit, f"{hit} (after {step})")

    @property
    def findings(self) -> list[str]:
        return list(self._seen.values())


#: what a cache root holds that other tests share: SGLang and vLLM trees, their wheels
SHARED_CACHE = ("sglang", "vllm", "wheels", "sdists", "build-wheels")


def own_cache_root(folder: Path) -> Path:
    """A cache root for one route (set SPECOPS_CACHE to it), scanned like the run directory:
    specops saves tracebacks there. The shared trees and wheels are linked in, read where they
    are and never scanned (the scan follows no link)."""
    from specops.hostfiles.cache import cache_root

    shared = cache_root()
    folder.mkdir(parents=True)
    for name in SHARED_CACHE:
        if (shared / name).is_dir():
            (folder / name).symlink_to(shared / name)
    return folder


def allowed_env_files(workdir: Path) -> list[Path]:
    """The files meant to hold secrets: the host's 0600 secrets file and each arm's 0600 env file."""
    specops = Path(workdir) / ".specops"
    return [specops / "secrets.env", *sorted((specops / "servers").glob("*.env"))]


def assert_clean(*findings: Sequence[str]) -> None:
    found = [line for group in findings for line in group]
    assert not found, "the canary secret leaked:\n" + "\n".join(found)
