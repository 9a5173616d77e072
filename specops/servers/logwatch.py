"""Server logs on a host, read by byte offset: crash signatures, crash blocks, tails, follow.

The crash reader is here, once: the signatures (Python's, CUDA's, the kernel's, and the
death messages of every supported SGLang release, read from each release's source by
specops.sglang.crashlines), the blocks they start, and the one line a failure leads with.

A log can be gigabytes after a long benchmark, and the host may be behind SSH, so nothing
here pulls a whole log: the tail is read backwards from the end in chunks, new output is
read from a saved offset, and follow mode asks for every file's new bytes in one round
trip per interval.
"""

from __future__ import annotations

import base64
import functools
import re
import shlex
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from specops.engines import crash_messages, log_prefixes, ready_lines
from specops.errors import TransportError
from specops.secrets import clip, mask_text
from specops.transport.base import Transport

# --- what a crash looks like ------------------------------------------------------------

#: How much a line says about why a server died; a failure leads with the best-ranked line
#: (ties: the first, the root cause, except plain tracebacks, where the last is the one that
#: killed the process).
ECHO = 0      # points elsewhere: "Received sigquit from a child process", "see the error messages above"
DEATH = 1     # an SGLang process saying it died ("Rank 0 scheduler is dead"), a bare `EOFError`
RAISED = 2    # the exception line of a traceback; a startup error no death handler words
ATTACHED = 3  # the exception line of the traceback a dying process logged ("Scheduler hit an exception: ...")
ABORT = 4     # the process aborted: "Fatal Python error: Aborted", "terminate called after throwing ..."
ROOT = 5      # what made it abort: a CUDA error, out of memory, a segfault, heap corruption, the OOM killer


def _esc(literal: str) -> str:
    """`literal` as a pattern that Python's `re` and POSIX extended regexes (`grep -E`) read alike."""
    return re.sub(r"([\\.\[\]()*+?{}|^$])", r"\\\1", literal)


@dataclass(frozen=True)
class Signature:
    """A line that means a crash. `pattern` is valid for `re` and for `grep -E` alike."""

    text: str
    rank: int
    source: str
    pattern: str

    @property
    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern)


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A cache keyed by the pattern's text: the signatures are fixed, so each compiles once."""
    return re.compile(pattern, re.IGNORECASE)


def _from_template(text: str, rank: int, source: str) -> Signature:
    """A message with `{}` where SGLang substitutes a value: the literal parts, in order
    (shown without the colon that precedes the value, matched with it)."""
    parts = [p for p in text.split("{}") if p]
    return Signature(text.rstrip(":"), rank, source, ".*".join(_esc(p) for p in parts))


#: What Python, the C library, CUDA/PyTorch and the kernel leave when a process aborts, and why.
_ROOT_CAUSES = ("CUDA error:", "CUDA out of memory", "OutOfMemoryError", "illegal memory access",
                "Segmentation fault", "malloc(): corrupted", "double free or corruption")
_ABORTS = ("Fatal Python error:", "Aborted (core dumped)", "terminate called after throwing an instance of")
#: A start that cannot go on, in wordings no release's death handler carries.
_STARTUP = ("SyntaxError", "unrecognized arguments", "Not enough memory", "Capture cuda graph failed",
            "Address already in use", "died during initialization", "Initialization failed")
#: Words of a line that says the cause is written elsewhere.
_ECHO_WORDS = ("sigquit", "error messages above", "root cause above", "stack trace (above)")
_TB_START = "Traceback (most recent call last)"
#: The OOM killer: bash's job line, or the bare word a shell prints for its killed child.
KILLED = Signature("Killed", ROOT, "the kernel (SIGKILL, e.g. the OOM killer)",
                   r"^ *Killed *$|: line [0-9]+: *[0-9]+ Killed")


def _signatures() -> tuple[Signature, ...]:
    sigs = [Signature(_TB_START, DEATH, "python", _esc(_TB_START)), KILLED]
    sigs += [Signature(s, ROOT, "python/cuda/libc", _esc(s)) for s in _ROOT_CAUSES]
    sigs += [Signature(s, ABORT, "python/cuda/libc", _esc(s)) for s in _ABORTS]
    sigs += [Signature(s, RAISED, "startup", _esc(s)) for s in _STARTUP]
    for face, (text, process, file, releases) in crash_messages():
        rank = ECHO if any(w in text.lower() for w in _ECHO_WORDS) else DEATH
        span = releases[0] if len(releases) == 1 else f"{releases[0]}..{releases[-1]}"
        sigs.append(_from_template(text, rank, f"{face} {span} {process} ({file})"))
    return tuple(sigs)


#: Every crash signature: Python's, CUDA's and the kernel's, and the death messages of every
#: supported release of every engine (specops.engines.crash_messages: SGLang's are
#: specops.sglang.crashdata, read from each release's source).
#: Readiness polling, `specops status` and `specops logs --errors` use this one list.
SIGNATURES: tuple[Signature, ...] = _signatures()
CRASH_SIGNATURES: tuple[str, ...] = tuple(s.text for s in SIGNATURES)
#: The signatures as one extended regex, for `grep -a -i -E` on the host.
GREP_PATTERN = "|".join(s.pattern for s in SIGNATURES)
_ANY = re.compile(GREP_PATTERN, re.IGNORECASE)

#: The engines' ready lines (specops.engines.ready_lines: SGLang's, which the simulator logs
#: too); readiness needs one in the log as well as /health answering 200.
READY_LINES: tuple[str, ...] = ready_lines()
#: `grep -F`'s patterns for them, quoted for the host's shell (any one is the ready line)
READY_GREP = " ".join("-e " + shlex.quote(line) for line in READY_LINES)

_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_BARE_EXCEPTION = re.compile(r"^[\w.]+$")
_DUMP_LINE = ("Thread 0x", "Current thread 0x", "Extension modules:")
#: Cap on one crash block, so a runaway traceback cannot flood an error message.
MAX_BLOCK_LINES = 200
#: Lines of an exception's message after its first (CUDA's hints, a C++ `what():`).
_MAX_CONTINUATION = 12


def line_signatures(line: str) -> list[Signature]:
    """The signatures `line` holds (one search when it holds none)."""
    if not _ANY.search(line):
        return []
    return [s for s in SIGNATURES if s.regex.search(line)]


def _rank(sigs: Sequence[Signature]) -> int:
    """A line's rank: an echo stays one ("Initialization failed. Please see the error
    messages above." holds "Initialization failed" too)."""
    return ECHO if any(s.rank == ECHO for s in sigs) else max(s.rank for s in sigs)


def find_signature(line: str) -> str | None:
    """The best-ranked crash signature in `line` (its `text`), or None."""
    sigs = line_signatures(line)
    return max(sigs, key=lambda s: s.rank).text if sigs else None


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


def _continuation(lines: Sequence[str], i: int, records: frozenset[int] = frozenset()) -> int:
    """The last line of the message that starts at `i`: the lines after it that carry no
    log prefix, no signature and no traceback (CUDA's "For debugging consider passing
    CUDA_LAUNCH_BLOCKING=1", a C++ exception's frames)."""
    end = i
    j = i + 1
    while j < len(lines) and j - i < MAX_BLOCK_LINES:
        line = lines[j]
        frame = line.startswith(("frame #", "Exception raised from"))
        what = line.lstrip().startswith("what():")  # a C++ exception's message under `terminate called ...`
        if (not line.strip() or line.startswith("[") or j in records or _TB_START in line
                or (line_signatures(line) and not what)):
            break
        if not frame and j - i > _MAX_CONTINUATION:
            break
        end = j
        j += 1
    return end


def _dump_end(lines: Sequence[str], i: int) -> int:
    """The last line of faulthandler's dump after `Fatal Python error: ...`: its thread
    sections and their frames (blank lines between them included)."""
    end = i
    j = i + 1
    while j < len(lines) and j - i < MAX_BLOCK_LINES:
        line = lines[j]
        if line.strip() and not (line[:1] in (" ", "\t") or line.startswith(_DUMP_LINE)):
            break
        if line.strip():
            end = j
        j += 1
    return end


@dataclass
class _Block:
    start: int
    end: int
    lead: str | None  # the line a person should read, None for a traceback cut off mid-frame
    rank: int
    #: lines inside start..end another process logged (not the block's: left out when shown)
    foreign: frozenset[int] = frozenset()

    def text(self, lines: Sequence[str]) -> str:
        return "\n".join(lines[k] for k in range(self.start, self.end + 1) if k not in self.foreign)


def _is_frame(line: str) -> bool:
    return line[:1] in (" ", "\t") or line.lstrip().startswith('File "')


def _traceback_block(lines: Sequence[str], start: int, records: frozenset[int] = frozenset()) -> _Block:
    end = _traceback_end(lines, start)
    prefix = lines[start][:lines[start].index(_TB_START)]
    head = prefix.strip().rstrip(":").strip()
    attached = bool(head) and any(s.rank == DEATH for s in line_signatures(prefix))
    exc = lines[end].strip() if end > start and not _is_frame(lines[end]) and lines[end].strip() else ""
    if not exc:  # cut off inside the frames: the death message, if one logged it
        return _Block(start, end, head or None, DEATH if attached else -1)
    sigs = line_signatures(exc)
    if sigs and _rank(sigs) == ECHO:
        rank = ECHO
    elif _BARE_EXCEPTION.match(exc):
        rank = DEATH
    else:
        rank = max([RAISED, ATTACHED if attached else RAISED] + [s.rank for s in sigs if s.rank > DEATH])
    return _Block(start, _continuation(lines, end, records), exc, rank)


def _prefix(line: str) -> re.Match[str] | None:
    """The engines' log prefix at the start of `line` (`ServingEngine.log_prefix`), if any."""
    for prefix in log_prefixes():
        if m := prefix.match(line):
            return m
    return None


def _strip(lines: Sequence[str]) -> list[str]:
    return [ln[m.end():] if (m := _prefix(ln)) else ln for ln in lines]


def bare_lines(text: str) -> list[str]:
    """The log's lines with the engines' prefixes (vLLM's) set aside (other lines as they are)."""
    return _strip(text.splitlines())


def _process(line: str) -> str | None:
    """The process a prefixed line names (vLLM's `(EngineCore_DP0 pid=2081) `), None without one."""
    m = _prefix(line)
    if m is None:
        return None
    return line[:m.start("logger")] if m.groupdict().get("logger") else m.group(0)


def _own_traceback(procs: Sequence[str | None], bare: Sequence[str], start: int, records: frozenset[int]) -> _Block:
    """The traceback starting at `start`, read over its own process's lines only (`procs`: each
    line's `_process`): another process (vLLM's API server beside its engine core) may log into
    the middle of it, and a line of its read as the traceback's end would be taken for the exception."""
    who = procs[start]
    stop = min(len(bare), start + 4 * MAX_BLOCK_LINES)
    view = [start] + [k for k in range(start + 1, stop) if who is None or procs[k] in (None, who)]
    if len(view) == stop - start:
        return _traceback_block(bare, start, records)
    b = _traceback_block([bare[k] for k in view], 0, frozenset(v for v, k in enumerate(view) if k in records))
    end = view[b.end]
    return _Block(start, end, b.lead, b.rank, frozenset(range(start, end + 1)) - frozenset(view))


def _records(lines: Sequence[str]) -> frozenset[int]:
    """Indices of the lines that start a vLLM log record: a prefix unlike the line before's
    (a logged traceback repeats its record's prefix on every line)."""
    out, last = set(), None
    for i, ln in enumerate(lines):
        m = _prefix(ln)
        prefix = m.group(0) if m and m.groupdict().get("logger") else None
        if prefix is not None and prefix != last:
            out.add(i)
        last = prefix
    return frozenset(out)


#: Python's report of an exception it could not raise (in a `__del__`, a callback), followed
#: by its traceback: the process goes on (vLLM's CPU worker logs one while it compiles)
_IGNORED = "Exception ignored in"


def _ignored_end(lines: Sequence[str], i: int) -> int | None:
    """The last line of the unraisable-exception report starting at `i` (prefix-free lines),
    or None when `i` starts none."""
    if not lines[i].startswith(_IGNORED):
        return None
    if i + 1 < len(lines) and _TB_START in lines[i + 1]:
        return _traceback_end(lines, i + 1)
    return i


def crash_signature(text: str) -> str | None:
    """The first crash line's best signature in `text` (a readiness watch's new chunk), an
    exception Python reported and ignored left out."""
    lines = bare_lines(text)
    i = 0
    while i < len(lines):
        end = _ignored_end(lines, i)
        if end is not None:
            i = end + 1
            continue
        sig = find_signature(lines[i])
        if sig:
            return sig
        i += 1
    return None


def _scan(lines: Sequence[str]) -> list[_Block]:
    """The log's crash evidence, in log order (a line's vLLM prefixes set aside, each of its
    log records ending a message; an exception Python reported and ignored is none; a
    traceback read over its own process's lines, another's logged inside it read after)."""
    records = _records(lines)
    procs, lines = [_process(ln) for ln in lines], _strip(lines)
    blocks: list[_Block] = []
    taken: set[int] = set()  # a traceback's own lines, where another process's lines came between
    i = 0
    while i < len(lines):
        line = lines[i]
        if i in taken:
            i += 1
            continue
        ignored = _ignored_end(lines, i)
        if ignored is not None:
            i = ignored + 1
            continue
        if _TB_START in line:
            b = _own_traceback(procs, lines, i, records)
            blocks.append(b)
            taken.update(set(range(b.start, b.end + 1)) - b.foreign)
            i = min(b.foreign) if b.foreign else b.end + 1  # the other process's lines are read too
            continue
        sigs = line_signatures(line)
        if not sigs:
            i += 1
            continue
        rank = _rank(sigs)
        if rank == ECHO and blocks and blocks[-1].end == i - 1:
            blocks[-1].end = i  # the launcher hearing of the death just written: one block
            i += 1
            continue
        if rank == ECHO:
            end = i
        elif any(s.text == "Fatal Python error:" for s in sigs):
            end = _dump_end(lines, i)
        else:
            end = _continuation(lines, i, records)
        lead = line.strip()
        for extra in lines[i + 1:end + 1]:  # `what():  ... CUDA error: ...` under `terminate called ...`
            better = line_signatures(extra)
            if better and _rank(better) > rank:
                lead, rank = extra.strip(), _rank(better)
        blocks.append(_Block(i, end, lead, rank))
        i = end + 1
    return blocks


def _best(blocks: Sequence[_Block]) -> _Block | None:
    found = [b for b in blocks if b.lead]
    if not found:
        return None
    top = max(b.rank for b in found)
    ranked = [b for b in found if b.rank == top]
    return ranked[-1] if top == RAISED else ranked[0]


def crash_blocks(text: str) -> list[str]:
    """The log's crash evidence as blocks: each whole traceback (from its "Traceback (most
    recent call last)" line through the exception line and the rest of its message, chained
    ones included), a faulthandler dump, each other signature line with its message's
    continuation lines; a launcher's "Received sigquit" right after a block joins it. Blocks
    come in log order, none repeated."""
    lines = bare_lines(text)
    out: list[str] = []
    for b in _scan(text.splitlines()):
        block = b.text(lines)
        if block not in out:
            out.append(block)
    return out


def crash_excerpt(text: str, *, fallback_lines: int = 30) -> str:
    """What a failure message quotes: the last crash blocks (and the one its reason comes
    from, where that is earlier), else the last lines."""
    lines = bare_lines(text)
    blocks = _scan(text.splitlines())
    if not blocks:
        return "\n".join(lines[-fallback_lines:])
    picked = blocks[-5:]
    best = _best(blocks)
    if best is not None and best not in picked:
        picked = [best] + blocks[-4:]
    return "\n".join(b.text(lines) for b in picked)


#: argparse's last words: `<prog>: error: <message>` (unknown, ambiguous or invalid flags).
_ARGPARSE_ERROR = re.compile(r"^\S[^:\n]*: error: .+$", re.MULTILINE)
_MAX_REASON = 240
_SIGKILL = re.compile(r"exit code:? -9\b|\bSIGKILL\b", re.IGNORECASE)
_OOM_NAMED = re.compile(r"\bOOM\b|out of memory", re.IGNORECASE)


def failure_reason(text: str) -> str | None:
    """The one line that says why a server died, for a failure's first line: the argparse
    `error:` line; else the best-ranked crash line (the root cause: a CUDA error, an out of
    memory, a segfault, the OOM killer; then an abort, the exception that killed a process,
    a process's death message; never a `File "...", line N` frame); else the last line that
    is not a frame; None for an empty log."""
    found: list[str] = _ARGPARSE_ERROR.findall(text)  # no groups: whole matches
    if found:
        return clip(found[-1].strip(), _MAX_REASON, keep="start")
    lines = bare_lines(text)
    best = _best(_scan(text.splitlines()))
    if best is not None and best.lead:
        return clip(best.lead, _MAX_REASON, keep="start")
    rest = [ln.strip() for ln in lines if ln.strip() and not _is_frame(ln)] or [ln.strip() for ln in lines if ln.strip()]
    return clip(rest[-1], _MAX_REASON, keep="start") if rest else None


def sigkill_note(text: str) -> str | None:
    """A note for a log that shows a SIGKILL (`exit code: -9`, `Killed`) without saying what
    usually sends it, else None."""
    if _OOM_NAMED.search(text):
        return None
    if _SIGKILL.search(text) or any(KILLED.regex.search(ln) for ln in text.splitlines()[-50:]):
        return "SIGKILL (exit code -9) usually comes from the kernel's OOM killer: dmesg -T | grep -i oom"
    return None


#: the most a tail reads backwards, whatever the file holds (a log without newlines is one line)
TAIL_MAX_BYTES = 1 << 20
#: the longest line a reader passes on; a longer one keeps its head and tail around a note
MAX_LINE = 8 * 1024
#: more than any secret's length: a line is masked whole, and only then cut, with this much
#: beyond a cut still read, so no piece of a secret survives a cut unmasked
_GUARD = 4 * 1024


def cap_line(line: str, *, cut_before: bool = False) -> str:
    """`line` masked, then at most MAX_LINE characters: a long one keeps its head and tail
    around a note (only its tail when the reader began inside it, `cut_before`)."""
    line = mask_text(line)
    if cut_before:  # its first characters may be the end of a secret cut in two: never shown
        return "[... line cut] " + line[_GUARD:][-MAX_LINE:]
    if len(line) <= MAX_LINE:
        return line
    half = MAX_LINE // 2
    return f"{line[:half]} [... {len(line) - 2 * half} characters cut ...] {line[-half:]}"


def tail_lines(transport: Transport, path: str, n: int, *, chunk: int = 64 * 1024,
               end: int | None = None, max_bytes: int = TAIL_MAX_BYTES) -> list[str]:
    """The last `n` lines of `path` (of its first `end` bytes when given), read backwards
    in `chunk`-byte pieces, at most `max_bytes` in all (a log without newlines is not read
    whole); each line masked and capped (cap_line). A missing file raises TransportError."""
    size = transport.stat_size(path) if end is None else end
    if size is None:
        raise TransportError(f"no log file {path}", where=f"host {transport.name}")
    if n <= 0 or size == 0:
        return []
    pieces: list[bytes] = []
    pos, have, newlines = size, 0, 0
    while pos > 0 and have < max_bytes:
        step = min(chunk, pos, max_bytes - have)
        pos -= step
        piece = transport.read_range(path, pos, step)
        pieces.append(piece)
        have += step
        newlines += piece.count(b"\n")
        # n lines need n newlines before the last line (plus one if the file ends in one).
        if newlines > n:
            break
    lines = b"".join(reversed(pieces)).decode(errors="replace").splitlines()
    cut = pos > 0  # the first line read starts inside a line: kept only when fewer than n are whole
    if cut and len(lines) > n:
        lines, cut = lines[1:], False
    return [cap_line(ln, cut_before=cut and i == 0) for i, ln in enumerate(lines[-n:])]


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
    #: a line grew past MAX_LINE (+ the guard) and was passed on cut: its rest is dropped
    skipping: bool = False

    def take(self, data: bytes) -> list[str]:
        """The complete lines `data` ends, masked and capped; the unfinished line is kept,
        but never more than MAX_LINE + _GUARD bytes of it (a writer without newlines)."""
        if self.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return []
            data, self.skipping = data[nl + 1:], False
        *complete, self.partial = (self.partial + data).split(b"\n")
        lines = [cap_line(b.decode(errors="replace")) for b in complete]
        if len(self.partial) > MAX_LINE + _GUARD:
            head = clip(self.partial.decode(errors="replace"), MAX_LINE, keep="start")
            lines.append(head + " [... line cut: no newline]")
            self.partial, self.skipping = b"", True
        return lines


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
            complete = cur.take(c.data)
            if complete:
                on_lines(c.path, complete)
            if cur.offset < c.size:
                more = True
        if stop_event.is_set():
            return
        chunk = min(chunk * 4, catch_up_bytes) if more else max_bytes
        if not more and stop_event.wait(interval):
            return


