"""A user's traffic as a trace file: when each request arrived and how long it was.

The format is the Mooncake trace's, which SGLang's `bench_serving` replays
(`--dataset-name mooncake --use-trace-timestamps`) and AIPerf reads (`mooncake_trace`): JSON
Lines, one request per line, `timestamp` in milliseconds (any origin: offsets are taken from
the earliest), `input_length` and `output_length` in tokens; other keys (`hash_ids`, ...)
are kept out of the replay. Lines are replayed in timestamp order, as `bench_serving` sorts
them, so a trace cut from a log need not be sorted.

Read once, up front: a bad line stops the run before any server is touched, naming the file
and line, and the file's digest goes into the run's settings so a replay says which trace it
replayed.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.errors import ConfigError

#: the keys every line must have
REQUIRED = ("timestamp", "input_length", "output_length")
#: lines past this are refused: a trace is replayed request by request against every arm
MAX_REQUESTS = 100_000


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: seconds after the trace's first arrival, and its lengths."""

    offset_s: float
    input_len: int
    output_len: int


@dataclass(frozen=True)
class Trace:
    """A whole trace file, in arrival order."""

    path: str
    sha256: str
    requests: tuple[TraceRequest, ...]

    @property
    def duration_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return self.requests[-1].offset_s

    @property
    def mean_rate(self) -> float | None:
        """Arrivals per second over the trace (None for a trace whose arrivals share one instant)."""
        return (len(self.requests) - 1) / self.duration_s if self.duration_s > 0 else None

    def describe(self) -> str:
        rate = f", {self.mean_rate:.3g} req/s on average" if self.mean_rate is not None else ""
        return f"{self.path}: {len(self.requests)} requests over {self.duration_s:.3g} s{rate}"


def _number(value: Any, key: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"'{key}' must be a number >= 0, got {value!r}", where=where)
    return float(value)


def _length(value: Any, key: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"'{key}' must be a whole number of tokens >= 1, got {value!r}", where=where)
    return value


def _line(text: str, where: str) -> tuple[float, int, int]:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not a JSON object: {exc.msg}", where=where) from None
    if not isinstance(row, dict):
        raise ConfigError(f"each line must be a JSON object, got {type(row).__name__}", where=where)
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ConfigError(f"missing {', '.join(repr(k) for k in missing)}", where=where,
                          hint='each line: {"timestamp": MS, "input_length": N, "output_length": M}')
    return (_number(row["timestamp"], "timestamp", where), _length(row["input_length"], "input_length", where),
            _length(row["output_length"], "output_length", where))


def read_trace(path: Path) -> Trace:
    """The trace at `path`, checked line by line (ConfigError naming `path:line` for a bad one)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the trace: {exc.strerror or exc}", where=str(path)) from None
    rows: list[tuple[float, int, int]] = []
    for number, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not raw.strip():
            continue
        if len(rows) >= MAX_REQUESTS:
            raise ConfigError(f"more than {MAX_REQUESTS} requests", where=f"{path}:{number}",
                              hint="cut the trace to the window you want to replay")
        rows.append(_line(raw, f"{path}:{number}"))
    if not rows:
        raise ConfigError("the trace holds no requests", where=str(path))
    rows.sort(key=lambda r: r[0])   # stable: requests of one instant keep the file's order
    start = rows[0][0]
    requests = tuple(TraceRequest(round((ms - start) / 1000.0, 6), i, o) for ms, i, o in rows)
    return Trace(str(path), hashlib.sha256(data).hexdigest(), requests)
