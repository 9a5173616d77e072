"""Atomic file replacement on this machine: one implementation for every writer."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path | str, data: bytes | str, *, mode: int | None = None, default_mode: int = 0o644,
                 fsync: bool = True) -> None:
    """Write `data` to a temp file beside `path`, then rename it into place, so a reader
    sees the old file or the new one, never half of either. The file keeps its mode
    (or gets `mode`, else `default_mode` when new); parents are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".specops-tmp", dir=path.parent)
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
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
