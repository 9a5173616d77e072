"""Server logs on a host, read by byte offset: crash signatures, crash blocks, tails, follow.

A log can be gigabytes after a long benchmark, and the host may be behind SSH, so nothing
here pulls a whole log: the tail is read backwards from the end in chunks, new output is
read from a saved offset, and follow mode asks for every file's new bytes in one round
trip per interval.
"""

from __future__ import annotations

import base64
import re
import shlex
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from specops.errors import TransportError
from specops.transport.base import Transport

#: Lines that mean the server has crashed or will not start. One list, used by readiness
#: polling, `specops status`, and `specops logs --errors` alike. Matched case-insensitively.
CRASH_SIGNATURES: tuple[str, ...] = (
    "Traceback",
    "SyntaxError",
    "unrecognized arguments",
    "CUDA out of memory",
    "Not enough memory",
    "Scheduler hit an exception",
    "Initialization failed",
    "died during initialization",
    "Capture cuda graph failed",
    "Address already in use",
)

#: SGLang's ready line; readiness needs it in the log as well as /health answering 200.
READY_LINE = "The server is fired up and ready to roll!"

_SIG_RE = re.compile("|".join(re.escape(s) for s in CRASH_SIGNATURES), re.IGNORECASE)
_TB_START = "Traceback (most recent call last)"
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)

#: Cap on one crash block, so a runaway traceback cannot flood an error message.
MAX_BLOCK_LINES = 200


def find_signature(line: str) -> str | None:
    """The crash signature in `line` (as written in CRASH_SIGNATURES), or None."""
    m = _SIG_RE.search(line)
    if not m:
        return None
    hit = m.group(0).lower()
    return next(s for s in CRASH_SIGNATURES if s.lower() == hit)


def _traceback_end(lines: Sequence[str], start: int) -> int:
    """Index of the last line of the (possibly chained) traceback starting at `start`:
    the first non-indented line after the frames, the exception line."""
    i = start + 1
    n = len(lines)
    while i < n and i - start < MAX_BLOCK_LINES:
        line = lines[i]
        if line[:1] in (" ", "\t") or line.strip() == "":
            i += 1
            continue
        # `line` is the exception line; a chained exception continues the block.
        j = i + 1
        while j < n and lines[j].strip() == "":
            j += 1
        if j < n and lines[j].strip() in _CHAIN_LINES:
            k = j + 1
            while k < n and lines[k].strip() == "":
                k += 1
            if k < n and _TB_START in lines[k]:
                i = k + 1
                continue
        return i
    return min(i, n) - 1


def crash_blocks(text: str) -> list[str]:
    """The log's crash evidence as blocks: each whole traceback (from its "Traceback (most
    recent call last)" line through the exception line, chained ones included), and each
    other signature line on its own. Blocks come in log order, none repeated."""
    lines = text.splitlines()
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _TB_START in line:
            end = _traceback_end(lines, i)
            blocks.append("\n".join(lines[i:end + 1]))
            i = end + 1
            continue
        if _SIG_RE.search(line):
            blocks.append(line)
        i += 1
    return blocks


def crash_excerpt(text: str, *, fallback_lines: int = 30) -> str:
    """What a failure message quotes: the crash blocks, else the last lines."""
    blocks = crash_blocks(text)
    if blocks:
        return "\n".join(blocks[-5:])
    return "\n".join(text.splitlines()[-fallback_lines:])


#: argparse's last words: `<prog>: error: <message>` (unknown, ambiguous or invalid flags).
_ARGPARSE_ERROR = re.compile(r"^\S[^:\n]*: error: .+$", re.MULTILINE)
_MAX_REASON = 240


def failure_reason(text: str) -> str | None:
    """The one line that says why a server died, for a failure's first line: the argparse
    `error:` line, else the exception line of the last traceback, else the last crash
    signature line, else the last non-empty line; None for an empty log."""
    found = _ARGPARSE_ERROR.findall(text)
    if found:
        return found[-1].strip()[:_MAX_REASON]
    blocks = crash_blocks(text)
    if blocks:
        return blocks[-1].splitlines()[-1].strip()[:_MAX_REASON]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:_MAX_REASON] if lines else None


def tail_lines(transport: Transport, path: str, n: int, *, chunk: int = 64 * 1024,
               end: int | None = None) -> list[str]:
    """The last `n` lines of `path` (of its first `end` bytes when given), read backwards
    in `chunk`-byte pieces (never the whole file). A missing file raises TransportError."""
    size = transport.stat_size(path) if end is None else end
    if size is None:
        raise TransportError(f"no log file {path}", where=f"host {transport.name}")
    if n <= 0 or size == 0:
        return []
    data = b""
    pos = size
    while pos > 0:
        step = min(chunk, pos)
        pos -= step
        data = transport.read_range(path, pos, step) + data
        # n lines need n newlines before the last line (plus one if the file ends in one).
        if data.count(b"\n") > n:
            break
    lines = data.decode(errors="replace").splitlines()
    return lines[-n:]


# --- reading several files' new bytes in one round trip --------------------------------

@dataclass
class LogChunk:
    """One file's state at a poll: its size and inode, and the bytes read from the offset."""

    path: str
    size: int | None  # None: the file does not exist
    inode: str
    data: bytes


def chunk_script(path: str, offset: int, max_bytes: int) -> str:
    """Bash that prints `@@LOG <size> <inode> <base64 of up to max_bytes from offset>`.
    base64 keeps arbitrary log bytes from breaking the reply's framing."""
    p = shlex.quote(path)
    return (
        f"if [ -e {p} ]; then "
        f"st=$(stat -c '%s %i' {p} 2>/dev/null || echo '-1 0'); "
        f"printf '@@LOG %s ' \"$st\"; "
        f"tail -c +{int(offset) + 1} {p} 2>/dev/null | head -c {int(max_bytes)} | base64 -w0; "
        f"printf '\\n'; "
        f"else printf '@@LOG -1 0 \\n'; fi"
    )


def parse_chunk_line(path: str, line: str) -> LogChunk:
    """Parse one `@@LOG` line written by chunk_script."""
    parts = line.split(" ")
    size = int(parts[1])
    inode = parts[2]
    payload = parts[3] if len(parts) > 3 else ""
    return LogChunk(path, None if size < 0 else size, inode,
                    base64.b64decode(payload) if payload else b"")


def read_new(transport: Transport, requests: Sequence[tuple[str, int]], *,
             max_bytes: int = 256 * 1024, timeout: float = 30.0) -> list[LogChunk]:
    """For each (path, offset), the bytes after offset (at most max_bytes) and the file's
    size/inode, all in one remote command."""
    script = "\n".join(chunk_script(p, o, max_bytes) for p, o in requests)
    res = transport.run(script, timeout=timeout)
    if not res.ok:
        raise TransportError(f"reading logs failed: {res.tail(5)}", where=f"host {transport.name}")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("@@LOG ")]
    if len(lines) != len(requests):
        raise TransportError("reading logs: unexpected reply", where=f"host {transport.name}")
    return [parse_chunk_line(p, ln) for (p, _), ln in zip(requests, lines, strict=True)]


_ANY_INODE = "?"


@dataclass
class _Cursor:
    offset: int
    inode: str
    partial: bytes = b""


def follow(transport: Transport, paths: Sequence[str],
           on_lines: Callable[[str, list[str]], None], stop_event: threading.Event,
           interval: float = 0.5, *, from_start: bool = False, max_bytes: int = 256 * 1024,
           catch_up_bytes: int = 4 * 1024 * 1024, start_at: dict[str, int] | None = None) -> None:
    """Call on_lines(path, lines) with each complete line appended to `paths` after this
    starts (or from the beginning with from_start, or from the byte offsets in start_at:
    where a tail already printed up to, so nothing written in between is lost), until
    stop_event is set. Reads by
    offset, one round trip per interval for all files; a file that shrinks or whose inode
    changes (truncated or rotated) is read again from its start. While behind (a fast
    writer), reads grow from `max_bytes` to `catch_up_bytes` a round trip."""
    cursors: dict[str, _Cursor] = {}
    first = True
    if start_at is not None:
        # The inode is learnt from the first read; until then any inode is this file's.
        cursors = {p: _Cursor(start_at.get(p, 0), _ANY_INODE) for p in paths}
        first = False
    chunk = max_bytes
    while True:
        reqs = [(p, cursors[p].offset if p in cursors else 0) for p in paths]
        if first and not from_start:
            # Only sizes: start at the current end.
            chunks = read_new(transport, [(p, 1 << 62) for p in paths], max_bytes=1)
            for c in chunks:
                cursors[c.path] = _Cursor(c.size or 0, c.inode)
            first = False
            if stop_event.wait(interval):
                return
            continue
        first = False
        chunks = read_new(transport, reqs, max_bytes=chunk)
        more = False
        for c in chunks:
            cur = cursors.setdefault(c.path, _Cursor(0, c.inode))
            if c.size is None:
                cursors[c.path] = _Cursor(0, "")
                continue
            if cur.inode == _ANY_INODE:
                cur.inode = c.inode
            if c.inode != cur.inode or c.size < cur.offset:
                # Rotated or truncated: this poll read from the old offset; start over.
                cursors[c.path] = _Cursor(0, c.inode)
                more = True
                continue
            if not c.data:
                continue
            cur.offset += len(c.data)
            buf = cur.partial + c.data
            *complete, cur.partial = buf.split(b"\n")
            if complete:
                on_lines(c.path, [b.decode(errors="replace") for b in complete])
            if cur.offset < c.size:
                more = True
        if stop_event.is_set():
            return
        chunk = min(chunk * 4, catch_up_bytes) if more else max_bytes
        if not more and stop_event.wait(interval):
            return


