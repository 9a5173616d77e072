"""File access to an engine's source tree (SGLang's, vLLM's), local or over a Transport, so one
patch engine and one layout reader serve both.

The engine reads whole files, edits and compiles them in memory here, and only then
writes; every write is atomic (temp file beside the target + rename).
"""

from __future__ import annotations

import posixpath
import subprocess
from pathlib import Path
from typing import Protocol

from specops.errors import TransportError
from specops.fsutil import atomic_write
from specops.transport.base import Transport

_IO_TIMEOUT_S = 60.0


class TreeFiles(Protocol):
    """Files of one tree, addressed by path relative to the tree root."""

    root: str

    def read(self, relpath: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        ...

    def write(self, relpath: str, data: bytes) -> None:
        """Replace the file atomically (parents created)."""
        ...

    def remove(self, relpath: str) -> None:
        """Delete the file; absent is fine."""
        ...

    def exists(self, relpath: str) -> bool:
        ...

    def prune(self, reldir: str) -> None:
        """Remove the empty folders under and including `reldir` (state folders a revert emptied)."""
        ...

    def git_describe(self) -> str | None:
        """`git describe --tags` of the tree's checkout, None where it is not a git checkout
        or no tag is reachable (the version of trees without a literal version)."""
        ...


def outside_tree(relpath: str) -> str | None:
    """Why `relpath` cannot name a file of a tree (absolute, `~`, leaving it through `..`,
    empty), or None when it can. The one rule: patch sets are checked with it when they
    are loaded, and every tree access checks again."""
    if not relpath or not relpath.strip():
        return "is empty"
    if "\0" in relpath:
        return "contains a NUL byte"
    if relpath.startswith(("/", "~")):
        return "is absolute; give it relative to the tree root (e.g. python/sglang/...)"
    norm = posixpath.normpath(relpath)
    if norm == ".." or norm.startswith("../"):
        return "leaves the tree"
    if norm == ".":
        return "names the tree itself, not a file in it"
    return None


def _check_rel(relpath: str) -> str:
    why = outside_tree(relpath)
    if why:  # patch sets are refused at load time; this guards every other caller
        raise ValueError(f"path {relpath!r} {why}")
    return posixpath.normpath(relpath)


class LocalTreeFiles:
    """A tree on this machine."""

    def __init__(self, root: Path | str):
        self.path = Path(root).expanduser().resolve()
        self.root = str(self.path)

    def _p(self, relpath: str) -> Path:
        return self.path / _check_rel(relpath)

    def read(self, relpath: str) -> bytes | None:
        try:
            return self._p(relpath).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, relpath: str, data: bytes) -> None:
        atomic_write(self._p(relpath), data, fsync=False)

    def remove(self, relpath: str) -> None:
        try:
            self._p(relpath).unlink()
        except FileNotFoundError:
            pass

    def prune(self, reldir: str) -> None:
        top = self._p(reldir)
        if not top.is_dir():
            return
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            if not any(folder.iterdir()):
                folder.rmdir()
        if not any(top.iterdir()):
            top.rmdir()

    def exists(self, relpath: str) -> bool:
        return self._p(relpath).is_file()

    def git_describe(self) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", self.root, "describe", "--tags"], capture_output=True,
                                  text=True, timeout=_IO_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def __repr__(self) -> str:
        return f"LocalTreeFiles({self.root})"


class TransportTreeFiles:
    """A tree on a host, reached through a Transport (ssh or local)."""

    def __init__(self, transport: Transport, root: str, timeout: float = _IO_TIMEOUT_S):
        self.transport = transport
        self.root = transport.expand(root)
        self.timeout = timeout

    def _p(self, relpath: str) -> str:
        return posixpath.join(self.root, _check_rel(relpath))

    def read(self, relpath: str) -> bytes | None:
        # stat_size answers None only for "no such file"; a transport error raises, so a
        # tree behind a broken file transfer never reads as an empty tree
        path = self._p(relpath)
        if self.transport.stat_size(path) is None:
            return None
        return self.transport.get(path)

    def write(self, relpath: str, data: bytes) -> None:
        self.transport.put(data, self._p(relpath))

    def remove(self, relpath: str) -> None:
        res = self.transport.run(["rm", "-f", "--", self._p(relpath)], timeout=self.timeout)
        if not res.ok:
            raise TransportError(f"cannot remove {self._p(relpath)}: {res.tail(3)}",
                                 where=f"host {self.transport.name}")

    def exists(self, relpath: str) -> bool:
        return self.transport.stat_size(self._p(relpath)) is not None

    def prune(self, reldir: str) -> None:
        self.transport.run(["find", self._p(reldir), "-depth", "-type", "d", "-empty", "-delete"], timeout=self.timeout)

    def git_describe(self) -> str | None:
        res = self.transport.run(["git", "-C", self.root, "describe", "--tags"], timeout=self.timeout)
        return res.stdout.strip() or None if res.ok else None

    def __repr__(self) -> str:
        return f"TransportTreeFiles({self.transport.name}:{self.root})"
