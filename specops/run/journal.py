"""The run directory and its journal: one JSON object per event, written as it happens.

`runs/<run-id>/events.jsonl` is append-only and flushed per event, so a crash loses
nothing already seen; large command outputs go to files under `logs/` and the event
points at them.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from specops.fsutil import atomic_write
from specops.secrets import redact
from specops.transport.base import CommandResult

INLINE_OUTPUT_LIMIT = 2000


def new_run_id(label: str) -> str:
    now = datetime.now()
    stamp = now.strftime("%Y%m%d-%H%M%S") + f"{now.microsecond // 1000:03d}"  # sorts by start time
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:40] or "run"
    return f"{stamp}-{safe}-{secrets.token_hex(2)}"


def write_json_atomic(path: Path, data: Any) -> None:
    """Replace `path` with `data` as JSON, atomically."""
    atomic_write(path, json.dumps(redact(data), indent=2, sort_keys=True, default=str) + "\n", fsync=False)


class Journal:
    """Thread-safe writer of events.jsonl for one run; hosts write from their own threads."""

    def __init__(self, run_dir: Path, on_event: Callable[[dict], None] | None = None):
        self.run_dir = run_dir
        #: called with each record after it is written (the plain-line view on a pipe)
        self.on_event = on_event
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "events.jsonl"
        self._lock = threading.Lock()
        self._fh = open(self.path, "a", buffering=1)
        self._counter = 0

    def event(self, event_type: str, /, **fields: Any) -> dict:
        # every secret value is masked here, whatever step or layer produced the event
        record = redact({"ts": round(time.time(), 3), "event": event_type, **fields})
        line = json.dumps(record, default=str, sort_keys=False)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
        if self.on_event is not None:
            self.on_event(record)
        return record

    def command(self, host: str, step: str | None, result: CommandResult, *, probe: bool = False) -> dict:
        """Record one command: the exact line, rc and timing; outputs inline or in files.
        `probe`: a read-only command run to learn something (--check lists those apart)."""
        fields: dict[str, Any] = {"command": result.command, "rc": result.rc,
                                  "duration_s": round(result.duration_s, 4)}
        if probe:
            fields["probe"] = True
        if result.timed_out:
            fields["timed_out"] = True
        for stream in ("stdout", "stderr"):
            text = getattr(result, stream)
            if len(text) <= INLINE_OUTPUT_LIMIT:
                fields[stream] = text
            else:
                with self._lock:
                    self._counter += 1
                    n = self._counter
                out = self.run_dir / "logs" / _safe(host) / f"{n:04d}.{stream}"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(redact(text))
                fields[f"{stream}_file"] = str(out.relative_to(self.run_dir))
                fields[f"{stream}_tail"] = text[-500:]
        return self.event("command", host=host, step=step, **fields)

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def read_events(run_dir: Path) -> Iterator[dict]:
    """Events of a run, skipping a torn last line."""
    path = run_dir / "events.jsonl"
    if not path.exists():
        return
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue
