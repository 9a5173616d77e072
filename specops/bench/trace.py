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
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.errors import ConfigError

#: the keys every line must have
REQUIRED = ("timestamp", "input_length", "output_length")
#: lines past this are refused: a trace is replayed request by request against every arm
MAX_REQUESTS = 100_000
#: seconds from a trace's first arrival to its last: a replay lasts that long on every arm
MAX_SPAN_S = 86_400
#: a timestamp past this many milliseconds is no clock: epoch milliseconds reach it in 2286
MAX_TIMESTAMP_MS = 1e13
#: one prompt's tokens (2 Mi): the builtin client builds each prompt word by word; a longer
#: one is a typo in the file, not a workload
MAX_INPUT_TOKENS = 1 << 21
#: one request's output tokens (1 Mi): more than any server here is configured to generate
MAX_OUTPUT_TOKENS = 1 << 20
#: prompt tokens of the whole trace (256 Mi): the builtin client builds every prompt up front,
#: about 1.5 GiB of text at this cap
MAX_TOTAL_INPUT_TOKENS = 1 << 28
#: one line's bytes: a Mooncake line is a few hundred, its hash_ids a few thousand for a long prompt
MAX_LINE_BYTES = 64 * 1024
#: the file's bytes, checked before it is read: MAX_REQUESTS lines of a few KiB each, with room
MAX_FILE_BYTES = 256 * 1024 * 1024
#: JSON nesting in a line: a Mooncake line is an object holding lists; the parser recurses per level
MAX_NESTING = 32
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")


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
    if value > MAX_TIMESTAMP_MS:
        raise ConfigError(f"'{key}' is {value:g} ms: at most {MAX_TIMESTAMP_MS:g}", where=where)
    return float(value)


def _length(value: Any, key: str, where: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"'{key}' must be a whole number of tokens >= 1, got {value!r}", where=where)
    if value > limit:
        raise ConfigError(f"'{key}' is {value} tokens: at most {limit}", where=where)
    return value


def _depth(text: str) -> int:
    """How deep the line's lists and objects nest, strings aside; 0 when there are too few
    brackets to reach MAX_NESTING (most lines: counted in C, never walked)."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return 0
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub('""', text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _parse(text: str, where: str) -> Any:
    """The line's JSON, its size and nesting checked first: a deep line would end the parser
    in a RecursionError, a long one in a prompt nobody meant."""
    size = len(text.encode("utf-8"))
    if size > MAX_LINE_BYTES:
        raise ConfigError(f"the line is {size} bytes long: at most {MAX_LINE_BYTES}", where=where)
    if _depth(text) > MAX_NESTING:
        raise ConfigError(f"the line's JSON is nested deeper than {MAX_NESTING} levels", where=where)
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"the line's JSON is nested deeper than {MAX_NESTING} levels", where=where) from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more digits than Python converts
        raise ConfigError(f"not a JSON object: {getattr(exc, 'msg', exc)}", where=where) from None


def _line(text: str, where: str) -> tuple[float, int, int]:
    row = _parse(text, where)
    if not isinstance(row, dict):
        raise ConfigError(f"each line must be a JSON object, got {type(row).__name__}", where=where)
    missing = [k for k in REQUIRED if k not in row]
    if missing:
        raise ConfigError(f"missing {', '.join(repr(k) for k in missing)}", where=where,
                          hint='each line: {"timestamp": MS, "input_length": N, "output_length": M}')
    return (_number(row["timestamp"], "timestamp", where),
            _length(row["input_length"], "input_length", where, MAX_INPUT_TOKENS),
            _length(row["output_length"], "output_length", where, MAX_OUTPUT_TOKENS))


def _read(path: Path) -> bytes:
    """The file's bytes, its size checked before they are read."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"the trace is {size} bytes: at most {MAX_FILE_BYTES}", where=str(path),
                              hint="cut the trace to the window you want to replay")
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the trace: {exc.strerror or exc}", where=str(path)) from None


def _rows(data: bytes, path: Path) -> list[tuple[float, int, int]]:
    """Every request line, checked, with the file's totals: requests and prompt tokens."""
    rows: list[tuple[float, int, int]] = []
    tokens = 0
    for number, raw in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        if len(rows) >= MAX_REQUESTS:
            raise ConfigError(f"more than {MAX_REQUESTS} requests", where=where,
                              hint="cut the trace to the window you want to replay")
        rows.append(_line(raw, where))
        tokens += rows[-1][1]
        if tokens > MAX_TOTAL_INPUT_TOKENS:
            raise ConfigError(f"more than {MAX_TOTAL_INPUT_TOKENS} input tokens in all", where=where,
                              hint="cut the trace to the window you want to replay")
    return rows


def read_trace(path: Path) -> Trace:
    """The trace at `path`, checked line by line (ConfigError naming `path:line` for a bad one)."""
    data = _read(path)
    rows = _rows(data, path)
    if not rows:
        raise ConfigError("the trace holds no requests", where=str(path))
    rows.sort(key=lambda r: r[0])   # stable: requests of one instant keep the file's order
    start = rows[0][0]
    span_s = (rows[-1][0] - start) / 1000.0
    if span_s > MAX_SPAN_S:
        raise ConfigError(f"the trace spans {span_s:.10g} s: at most {MAX_SPAN_S} s", where=str(path),
                          hint="cut the trace to the window you want to replay")
    requests = tuple(TraceRequest(round((ms - start) / 1000.0, 6), i, o) for ms, i, o in rows)
    return Trace(str(path), hashlib.sha256(data).hexdigest(), requests)
