"""The library behind `specops logs`: last N lines, follow, --errors, with arm prefixes, and
per arm the accept length its log shows (read as the arm's engine declares: `BatchMetrics`).

Log text is printed as rich `Text` objects, never parsed as markup, so a log line with
"[/]" or "[bold]" in it is shown as written. Crash-signature lines are red.
"""

from __future__ import annotations

import shlex
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rich.console import Console
from rich.text import Text

from specops.engines.base import BatchMetrics
from specops.engines.metrics import accept_length
from specops.errors import TransportError
from specops.hostfiles import paths
from specops.secrets import dumps_masked, mask_text
from specops.servers.logwatch import GREP_PATTERN, crash_blocks, find_signature, tail_lines
from specops.servers.logwatch import follow as _follow
from specops.transport.base import Transport

_PREFIX_STYLES = ("cyan", "magenta", "green", "yellow", "blue")
#: Lines of context read after each signature hit when extracting crash blocks.
_BLOCK_WINDOW = 250


@dataclass
class LogSource:
    """One server's log on one host; `label` is the prefix shown when several are printed."""

    transport: Transport
    path: str
    label: str
    host: str = ""
    arm: str = ""
    #: the figures of the engine that launched the arm (None: no accept length is read)
    metrics: BatchMetrics | None = None


@dataclass(frozen=True)
class AcceptSeen:
    """The accept length an arm's log shows: the last line's that gives one, of `lines` such lines."""

    last: float
    lines: int

    def text(self) -> str:
        return f"accept length {self.last:.2f} (last of {self.lines} spec-decode line{'s' if self.lines != 1 else ''})"


def accept_seen(src: LogSource) -> AcceptSeen | None:
    """The accept length the arm's whole log shows, found on the host with grep (the count of
    lines holding the engine's `accept_line`, then the last of them): two lines come back,
    never the log. None without an engine, or for a log with none (a baseline's)."""
    m = src.metrics
    if m is None or not m.accept_line:
        return None
    p, text = shlex.quote(src.path), shlex.quote(m.accept_line)
    res = src.transport.run(f"grep -a -c -F -- {text} {p}; grep -a -F -- {text} {p} | tail -n 1", timeout=60)
    count, _, last = res.stdout.partition("\n")
    value = accept_length(last, m)
    if not count.strip().isdigit() or value is None:
        return None
    return AcceptSeen(value, int(count))


def sources_for(transport: Transport, workdir: str, arms: Sequence[str] | None = None,
                host_prefix: bool = False) -> list[LogSource]:
    """Log sources for the arms under workdir (all `<arm>.log` files when arms is None)."""
    wd = transport.expand(workdir)
    d = paths.logs_dir(wd)
    if arms is None:
        res = transport.run(f"cd {shlex.quote(d)} 2>/dev/null && ls -1 -- *.log 2>/dev/null", timeout=30)
        arms = sorted(n[:-4] for n in res.stdout.split() if n.endswith(".log"))
    pre = f"{transport.name}:" if host_prefix else ""
    return [LogSource(transport, paths.server_log(wd, a), f"{pre}{a}", transport.name, a) for a in arms]


def render_line(line: str, label: str | None, style: str = "cyan") -> Text:
    """One log line as Text: optional `[label]` prefix, red bold when it holds a crash signature."""
    text = Text()
    if label:
        text.append(f"{label} | ", style=style)
    text.append(line, style="bold red" if find_signature(line) else None)
    return text


def error_blocks(transport: Transport, path: str, *, max_hits: int = 200) -> list[str]:
    """The log's crash blocks, found on the host with grep (line numbers only), then read
    as bounded windows with sed: two round trips, never the whole file. `-a`: a log with a
    stray NUL byte (a terminal's `^@`, seen in pasted SGLang logs) is still read as text."""
    res = transport.run(["grep", "-a", "-n", "-i", "-E", GREP_PATTERN, path], timeout=60)
    if res.rc not in (0, 1):
        raise TransportError(f"cannot read {path}: {res.tail(3)}", where=f"host {transport.name}")
    hits = [int(ln.split(":", 1)[0]) for ln in res.stdout.splitlines() if ln.split(":", 1)[0].isdigit()]
    hits = hits[-max_hits:]
    windows: list[tuple[int, int]] = []
    for h in hits:
        if windows and h <= windows[-1][1]:
            continue
        windows.append((h, h + _BLOCK_WINDOW))
    if not windows:
        return []
    script = "; ".join(f"sed -n '{a},{b}p' {shlex.quote(path)} ; echo '@@WIN'" for a, b in windows)
    out = mask_text(transport.run(script, timeout=60).stdout)  # whole lines, masked before a block is cut from them
    blocks: list[str] = []
    for seg in out.split("@@WIN\n"):
        for b in crash_blocks(seg):
            if b not in blocks:
                blocks.append(b)
    return blocks


class _Emitter:
    """Prints log lines, prefixed by their source's label when there are several."""

    def __init__(self, sources: Sequence[LogSource], console: Console):
        self.console = console
        self.prefixed = len(sources) > 1
        self.styles = {s.label: _PREFIX_STYLES[i % len(_PREFIX_STYLES)] for i, s in enumerate(sources)}

    def __call__(self, src_label: str, text_lines: list[str]) -> None:
        """One write per chunk (a per-line print costs ~60 us: seconds for a fast writer)."""
        if not text_lines:
            return
        batch = Text()
        for ln in text_lines:
            batch.append_text(render_line(ln, src_label if self.prefixed else None, self.styles[src_label]))
            batch.append("\n")
        self.console.print(batch, soft_wrap=True, highlight=False, end="")

    def note(self, src: LogSource, text: str) -> None:
        self.console.print(Text(f"{src.label}: {text}", style="green"))


class _JsonEmitter(_Emitter):
    """`logs -f --json`: one JSON object per log line, {host, arm, line, crash, accept_length}
    (the accept length the line gives, read as the arm's engine declares; null for most), nothing else."""

    def __init__(self, sources: Sequence[LogSource], console: Console):
        super().__init__(sources, console)
        self.by_label = {s.label: s for s in sources}

    def __call__(self, src_label: str, text_lines: list[str]) -> None:
        if not text_lines:
            return
        src = self.by_label[src_label]
        self.console.file.write("".join(dumps_masked({"host": src.host, "arm": src.arm, "line": ln,
                                                      "crash": find_signature(ln) is not None,
                                                      "accept_length": accept_length(ln, src.metrics)
                                                      if src.metrics else None}) + "\n"
                                        for ln in text_lines))
        self.console.file.flush()

    def note(self, src: LogSource, text: str) -> None:
        """Nothing: stdout holds only log lines."""


def collect(sources: Sequence[LogSource], *, lines: int = 50, errors_only: bool = False) -> dict[str, Any]:
    """`logs --json`: {host: {arm: {path, lines, crashes, accept_length, accept_lines}}}: the
    lines the text output shows (the last `lines`, or with `errors_only` the crash blocks'
    lines), the crash blocks among them, each a string, and the accept length the whole log
    shows (the last, None where none; and how many lines gave one)."""
    out: dict[str, Any] = {}
    for src in sources:
        size = src.transport.stat_size(src.path)
        if size is None:
            raise TransportError(f"no log file {src.path}", where=f"host {src.transport.name}")
        if errors_only:
            blocks = error_blocks(src.transport, src.path)
            blocks = blocks[-lines:] if lines > 0 else blocks
            shown = [ln for b in blocks for ln in b.splitlines()]
        else:
            shown = tail_lines(src.transport, src.path, lines, end=size)
            blocks = crash_blocks("\n".join(shown))
        seen = accept_seen(src)
        out.setdefault(src.host, {})[src.arm] = {"path": src.path, "lines": shown, "crashes": blocks,
                                                 "accept_length": seen.last if seen else None,
                                                 "accept_lines": seen.lines if seen else 0}
    return out


def _print_tails(sources: Sequence[LogSource], emit: _Emitter, lines: int, errors_only: bool) -> dict[str, int]:
    """The last lines (or crash blocks) of each source, then the accept length its log shows
    (not with --errors); returns per path the byte offset the tail ended at, where following
    starts (nothing written in between is lost)."""
    printed_to: dict[str, int] = {}
    for src in sources:
        size = src.transport.stat_size(src.path)
        if size is None:
            raise TransportError(f"no log file {src.path}", where=f"host {src.transport.name}")
        printed_to[src.path] = size
        if errors_only:
            blocks = error_blocks(src.transport, src.path)
            if not blocks:
                emit.note(src, f"no crash signatures in {src.path}")
            for b in blocks[-lines:] if lines > 0 else blocks:
                emit(src.label, b.splitlines())
        else:
            emit(src.label, tail_lines(src.transport, src.path, lines, end=size))
            seen = accept_seen(src)
            if seen is not None:
                emit.note(src, seen.text())
    return printed_to


def _line_handler(emit: _Emitter, labels: dict[str, str], errors_only: bool) -> Callable[[str, list[str]], None]:
    pending: dict[str, list[str]] = {}

    def on_lines(path: str, new: list[str]) -> None:
        if not errors_only:
            emit(labels[path], new)
            return
        # --errors while following: print lines from a crash signature on, in blocks.
        buf = pending.setdefault(path, [])
        for ln in new:
            if buf or find_signature(ln):
                buf.append(ln)
        if buf:
            blocks = crash_blocks("\n".join(buf))
            emit(labels[path], "\n".join(blocks).splitlines())
            buf.clear()

    return on_lines


def show(sources: Sequence[LogSource], *, lines: int = 50, follow: bool = False,
         errors_only: bool = False, console: Console | None = None,
         stop_event: threading.Event | None = None, interval: float = 0.5, json_lines: bool = False) -> None:
    """Print the last `lines` lines of each source (or only its crash blocks), prefixed by
    label when there are several; with follow, then stream new lines until stop_event is
    set (the CLI sets it on Ctrl-C). One follower thread per host reads all its files in
    one round trip per interval. `json_lines`: a JSON object per line instead (`logs -f --json`)."""
    emit = (_JsonEmitter if json_lines else _Emitter)(sources, console or Console())
    printed_to = _print_tails(sources, emit, lines, errors_only)
    if not follow:
        return
    stop_event = stop_event or threading.Event()
    by_transport: dict[int, list[LogSource]] = {}
    for src in sources:
        by_transport.setdefault(id(src.transport), []).append(src)
    threads = []
    for group in by_transport.values():
        on_lines = _line_handler(emit, {s.path: s.label for s in group}, errors_only)
        t = threading.Thread(target=_follow, args=(group[0].transport, [s.path for s in group], on_lines,
                                                  stop_event, interval),
                             kwargs={"start_at": {s.path: printed_to[s.path] for s in group}}, daemon=True)
        t.start()
        threads.append(t)
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.2)
    except KeyboardInterrupt:
        stop_event.set()
        for t in threads:
            t.join(timeout=5)
