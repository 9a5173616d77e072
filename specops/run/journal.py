"""The run directory and its journal: one JSON object per event, written as it happens.

`runs/<run-id>/events.jsonl` is append-only and written per event, so a crash loses
nothing already seen; large command outputs go to files under `logs/` and the event
points at them. A full disk never tears the journal or stops a run halfway through its
bookkeeping: an event that cannot be written is left out whole, counted, and the run ends
with a warning naming the file (`write_problem`); the results files raise instead.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from specops.fsutil import WriteError, append_whole, atomic_write, write_error
from specops.run.events import Command, Event, Unknown, build, parse
from specops.secrets import clip, redact
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

    def __init__(self, run_dir: Path, on_event: Callable[[Event], None] | None = None):
        self.run_dir = run_dir
        #: called with each event as written (the plain-line view on a pipe)
        self.on_event = on_event
        self.path = run_dir / "events.jsonl"
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, self.path, kept="nothing was run") from None
        self._lock = threading.Lock()
        self._counter = 0
        #: the first write that failed (a full disk) and how many events it left out
        self.write_failure: WriteError | None = None
        self.lost = 0
        append_whole(self.path, b"", fsync=False)  # created now: a run directory always has one

    def emit(self, ev: Event) -> Event:
        """Write one event: THE way anything gets into the journal. Stamped now, every secret
        value masked here (whatever step or layer built it); returns the event as written,
        which `on_event` gets too."""
        record: dict[str, Any] = redact({**ev.to_record(), "ts": round(time.time(), 3)})
        line = json.dumps(record, default=str, sort_keys=False)
        with self._lock:
            try:
                append_whole(self.path, (line + "\n").encode(), fsync=False)
            except WriteError as exc:
                self._failed(exc)
        written = (None if isinstance(ev, Unknown) else build(type(ev), record)) or parse(record)
        if self.on_event is not None:
            self.on_event(written)
        return written

    def command(self, host: str, step: str | None, result: CommandResult, *, probe: bool = False) -> Event:
        """Record one command: the exact line, rc and timing; outputs inline or in files.
        `probe`: a read-only command run to learn something (--check lists those apart)."""
        outputs: dict[str, Any] = {}
        for stream in ("stdout", "stderr"):
            text = getattr(result, stream)
            if len(text) <= INLINE_OUTPUT_LIMIT:
                outputs[stream] = text
                continue
            with self._lock:
                self._counter += 1
                n = self._counter
            out = self.run_dir / "logs" / _safe(host) / f"{n:04d}.{stream}"
            outputs[f"{stream}_tail"] = clip(text, 500)
            try:
                atomic_write(out, redact(text), fsync=False)
                outputs[f"{stream}_file"] = str(out.relative_to(self.run_dir))
            except WriteError as exc:
                with self._lock:
                    self._failed(exc)
        return self.emit(Command(host=host, step=step, command=result.command, rc=result.rc,
                                 duration_s=round(result.duration_s, 4), probe=probe,
                                 timed_out=result.timed_out, **outputs))

    def _failed(self, exc: WriteError) -> None:
        """Remember a write that failed (under the lock); the run goes on."""
        self.lost += 1
        if self.write_failure is None:
            self.write_failure = exc

    def write_problem(self) -> str | None:
        """One line for the end of the run when something could not be journaled, else None."""
        if self.write_failure is None:
            return None
        return (f"{self.write_failure.message}: {self.lost} journal write(s) left out "
                f"(every event before them is whole)")

    def write_meta(self, data: Any) -> None:
        """run.json, atomically; a failure is kept like an event's (the old run.json stays)."""
        try:
            write_json_atomic(self.run_dir / "run.json", data)
        except WriteError as exc:
            with self._lock:
                self._failed(exc)

    def close(self) -> None:
        """Nothing is held open between events; kept so callers end a run the same way."""


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def read_events(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Lines of a run's journal as dicts, skipping a torn last line (`typed_events` parses them)."""
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


def typed_events(run_dir: Path) -> Iterator[Event]:
    """Events of a run as their classes (run.events); a kind not known here is `Unknown`."""
    for record in read_events(run_dir):
        yield parse(record)
