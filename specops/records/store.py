"""The run directory: results appended as they happen, CSV and manifest (records/manifest.py) written atomically.

`results.jsonl` is the source of truth: one JSON object per finished point (ok or
failed), appended and fsynced the moment the point exists, so a crash of specops, the
server or the machine loses at most the point in flight. `results.csv` is derived from it
(rewritten whole, temp + os.replace) and holds one row per point: the latest ok record of
that point, else its latest failure. A line torn by a crash mid-write is skipped with a
warning (and cut off before the next append, so it cannot glue onto a new line); a full
disk leaves no torn line at all (fsutil.append_whole cuts its own short write back) and
stops the sweep with an error naming the file.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from specops.errors import ConfigError
from specops.fsutil import WriteError, append_whole, atomic_write, write_error
from specops.records import manifest
from specops.records.schema import CSV_COLUMNS, RATE_COLUMNS, ResultRecord, level_text, point_key
from specops.secrets import redact

log = logging.getLogger(__name__)

RESULTS_JSONL = "results.jsonl"
RESULTS_CSV = "results.csv"
MANIFEST_JSON = manifest.MANIFEST_JSON

# Arms on different hosts/GPUs finish points at the same time; one writer at a time per
# process keeps the torn-tail repair, the append and the CSV rewrite from interleaving.
_WRITE_LOCK = threading.Lock()


def _record_dict(record: ResultRecord) -> dict[str, Any]:
    """The stored form of a point: schema-shaped, secrets masked (errors quote server logs)."""
    return dict(redact(record.to_dict()))


def _cut_torn_tail(path: Path) -> None:
    """If the file ends mid-line, drop that fragment (or terminate it if it is whole JSON)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        data = fh.read()
        start = data.rfind(b"\n") + 1
        tail = data[start:]
        try:
            json.loads(tail)
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")  # a complete record whose newline was lost
        except ValueError:
            log.warning("%s: dropping a torn last line (%d bytes) before appending", path, len(tail))
            fh.truncate(start)
        fh.flush()
        os.fsync(fh.fileno())


def append_result(run_dir: Path, record: ResultRecord, *, rewrite_csv: bool = True) -> ResultRecord:
    """Append one point to results.jsonl (open-append-fsync), then refresh results.csv;
    returns the record as stored (secrets masked)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RESULTS_JSONL
    data = _record_dict(record)
    line = json.dumps(data, sort_keys=True, allow_nan=False, default=str) + "\n"
    with _WRITE_LOCK:
        try:
            _cut_torn_tail(path)
        except OSError as exc:
            raise write_error(exc, path, kept="its whole lines are unchanged") from None
        try:
            append_whole(path, line.encode())
        except WriteError as exc:
            raise WriteError(f"{exc.message}; this point ({record.arm} {level_text(record)} "
                             f"repeat {record.repeat}) was measured but not saved",
                             hint=f"{exc.hint} with --resume: it runs only the missing points") from None
        if rewrite_csv:
            write_csv(run_dir)
    return ResultRecord.from_dict(data)


def load_results(run_dir: Path) -> list[ResultRecord]:
    """Every record in results.jsonl, in file order. A torn last line is skipped with a warning."""
    path = Path(run_dir) / RESULTS_JSONL
    if not path.exists():
        return []
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    torn_possible = not text.endswith("\n")
    records: list[ResultRecord] = []
    for index, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            if torn_possible and index == len(lines):
                log.warning("%s:%d: skipping a torn last line (a crash mid-write): %.60r", path, index, line)
                continue
            raise ConfigError(f"corrupt result line: {exc}", where=f"{path}:{index}",
                               hint="fix or delete that line; every other line is one point") from None
        try:
            records.append(ResultRecord.from_dict(obj))
        except TypeError as exc:  # a key of the schema with a value of no use (e.g. "extra": [])
            raise ConfigError(f"result line does not fit the record schema: {exc}", where=f"{path}:{index}",
                               hint="fix or delete that line; every other line is one point") from None
    return records


def effective_records(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    """One record per point: its latest ok record, else its latest failure; first-seen order."""
    chosen: dict[tuple[Any, ...], ResultRecord] = {}
    for rec in records:
        key = point_key(rec)
        current = chosen.get(key)
        if current is None or rec.ok or not current.ok:
            chosen[key] = rec
    return list(chosen.values())


def render_csv(records: Iterable[ResultRecord], run_id: str | None = None) -> str:
    """The results.csv text for these records (one row per point); rows from several runs
    concatenate cleanly because each carries its run id."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    chosen = effective_records(records)
    columns = CSV_COLUMNS + (RATE_COLUMNS if any(r.rate is not None for r in chosen) else ())
    writer.writerow(columns)
    for rec in chosen:
        writer.writerow(replace(rec, run_id=rec.run_id or run_id).csv_row(columns))
    return buf.getvalue()


def write_csv(run_dir: Path) -> Path:
    """Rewrite results.csv from results.jsonl, atomically."""
    path = Path(run_dir) / RESULTS_CSV
    atomic_write(path, render_csv(load_results(run_dir), Path(run_dir).name))
    return path


# The manifest's one reader and one writer live in records/manifest.py; these are their names here.
write_manifest = manifest.write
load_manifest = manifest.read
