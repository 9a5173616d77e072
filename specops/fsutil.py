"""Writing files on this machine: atomic replacement and whole-line appends, one
implementation for every writer. A write that fails (a full disk, a quota, a read-only
filesystem) raises WriteError naming the file and leaves what was there before intact:
the old file, or every line appended before."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from specops.errors import SpecopsError

#: errno values that mean "no room": the hint then says to free space, not to fix a path.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class WriteError(SpecopsError):
    """A file on this machine could not be written; what it held before is intact."""


def write_error(exc: OSError, path: Path | str, *, kept: str = "it is unchanged") -> WriteError:
    """The one-line error for a failed write of `path`: the file, the reason, what was kept."""
    reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
    hint = (f"{kept}; free space on that filesystem and run again" if exc.errno in _FULL
            else f"{kept}; check that the directory is writable")
    return WriteError(f"cannot write {path}: {reason}", hint=hint)


def atomic_write(path: Path | str, data: bytes | str, *, mode: int | None = None, default_mode: int = 0o644,
                 fsync: bool = True) -> None:
    """Write `data` to a temp file beside `path`, then rename it into place, so a reader
    sees the old file or the new one, never half of either. The file keeps its mode
    (or gets `mode`, else `default_mode` when new); parents are created."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".specops-tmp", dir=path.parent)
    except OSError as exc:
        raise write_error(exc, path, kept="the file is unchanged") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        if mode is None:
            mode = path.stat().st_mode & 0o7777 if path.exists() else default_mode
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise write_error(exc, path, kept="the file is unchanged") from None
        raise


def append_whole(path: Path | str, data: bytes, *, fsync: bool = True) -> None:
    """Append `data` (whole lines) to `path`, or nothing: a short write or an error cuts the
    file back to its size before, so a full disk never leaves half a line behind."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise write_error(exc, path, kept="the file is unchanged") from None
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written == 0:  # a regular file that takes nothing: treat it as full
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            if fsync:
                os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass  # truncating frees space; if even that fails the reader skips a torn tail
            raise write_error(exc, path, kept="every line before is whole") from None
    finally:
        os.close(fd)
