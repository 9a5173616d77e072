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

Each returns findings as lines ("where: piece"); `assert_clean` fails with all of them.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

PIECE = 8


def pieces(secret: str, size: int = PIECE) -> list[str]:
    """Every `size`-character piece of `secret` (the whole value when shorter), and of its
    JSON-escaped form: a `"` or `\\` in the value is written `\\"` or `\\\\` in a JSON
    document, where no piece of the plain value may be left to find."""
    return sorted({p for form in {secret, json.dumps(secret)[1:-1]} for p in _pieces(form, size)})


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


def files(roots: Iterable[Path], secret: str, allowed: Iterable[Path] = (),
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


def texts(named: dict[str, str], secret: str) -> list[str]:
    """Which of the named texts (a command's output) hold the secret or a piece of it."""
    needles = [p.encode() for p in pieces(secret)]
    hits = []
    for name, text in named.items():
        piece = _found(text.encode(errors="replace"), needles)
        if piece is not None:
            hits.append(f"output of {name}: {piece.decode()}")
    return hits


class ArgvSampler:
    """Reads every process's argv in a background thread until stopped; `hits` lists the
    processes whose argv held the secret or a piece of it. A process living for less than
    one pass can be missed: the scan samples, as `ps` would."""

    def __init__(self, secret: str):
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

    def __init__(self, secret: str, roots: Iterable[Path], allowed: Callable[[], Iterable[Path]] = lambda: ()):
        self.secret, self.roots, self.allowed = secret, list(roots), allowed
        self._seen: dict[str, str] = {}
        self._scanned: dict[Path, tuple[int, int, int]] = {}

    def after(self, step: str) -> None:
        for hit in files(self.roots, self.secret, self.allowed(), self._scanned):
            self._seen.setdefault(hit, f"{hit} (after {step})")

    @property
    def findings(self) -> list[str]:
        return list(self._seen.values())


def allowed_env_files(workdir: Path) -> list[Path]:
    """The files meant to hold secrets: the host's 0600 secrets file and each arm's 0600 env file."""
    specops = Path(workdir) / ".specops"
    return [specops / "secrets.env", *sorted((specops / "servers").glob("*.env"))]


def assert_clean(*findings: Sequence[str]) -> None:
    found = [line for group in findings for line in group]
    assert not found, "the canary secret leaked:\n" + "\n".join(found)
