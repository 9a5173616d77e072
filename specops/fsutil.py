"""Writing files on this machine: atomic replacement and whole-line appends, one
implementation for every writer. A write that fails (a full disk, a quota, a read-only
filesystem) raises WriteError naming the file and leaves what was there before intact:
the old file, or every line appended before."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from specops.errors import SpecopsError
from specops.secrets import mask_text

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


#: A file holding argv or an environment (a secret's only home): read by its owner alone.
SECRET_MODE = 0o600


def atomic_write(path: Path | str, data: bytes | str, *, mode: int | None = None, default_mode: int | None = None,
                 secret: bool = False, fsync: bool = True) -> None:
    """Write `data` to a temp file beside `path`, then rename it into place, so a reader
    sees the old file or the new one, never half of either; parents are created. The mode:
    `mode`; else SECRET_MODE when `secret`; else the old file's; else `default_mode`; else
    0o666 less the umask, as any program's new file (a forced 0644 overrode a private
    umask). A symlink at `path` is replaced by the file, never written through. The bytes
    are written as given (a secret's env file holds its value): text specops renders is
    masked by its writer (`secrets.mask_text`) before it comes here."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    final = mode if mode is not None else SECRET_MODE if secret else _kept_mode(path, default_mode)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temp_beside(path, 0o666 if final is None else SECRET_MODE)
    except OSError as exc:
        raise write_error(exc, path, kept="the file is unchanged") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        if final is not None:
            os.chmod(tmp, final)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise write_error(exc, path, kept="the file is unchanged") from None
        raise


def _kept_mode(path: Path, default_mode: int | None) -> int | None:
    """The mode of the regular file at `path` (a symlink's own 0777 is no file's mode), else
    `default_mode`; None: the umask decides."""
    try:
        st = path.lstat()
    except OSError:
        return default_mode
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else default_mode


def _temp_beside(path: Path, perm: int) -> tuple[int, str]:
    """A new temp file in `path`'s folder, created with `perm` (less the umask): unlike
    mkstemp's fixed 0600, a file the umask should decide gets its mode at creation."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.urandom(4).hex()}.specops-tmp")
        try:
            return os.open(tmp, flags, perm), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temp file name", str(path.parent))


def append_whole(path: Path | str, data: bytes, *, fsync: bool = True, secret: bool = False) -> None:
    """Append `data` (whole lines) to `path`, or nothing: a short write or an error cuts the
    file back to its size before, so a full disk never leaves half a line behind. The lines
    pass the masking sink (`secrets.mask_text`, on the encoded text: a JSON line's escaped
    secret too). A symlink at `path` is refused (O_NOFOLLOW): a run's journal is never
    written through a link to somewhere else. A new file gets 0o666 less the umask, or
    SECRET_MODE when `secret`."""
    path = Path(path)
    data = _masked(data)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                     SECRET_MODE if secret else 0o666)
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


def _masked(data: bytes) -> bytes:
    """`data` through the masking sink; bytes that are not UTF-8 pass through unchanged
    (surrogateescape keeps them as they were)."""
    return mask_text(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
