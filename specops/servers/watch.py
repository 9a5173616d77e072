"""The readiness watch, once, for local servers (servers.lifecycle) and Slurm jobs
(servers.slurm): each arm's log read by offset, the ready line and crash signatures
(servers.logwatch) found in what is new, the crash grace, and the wait loop.

What differs between the two is behind `Source`: how one poll learns, in one round trip
for all arms, whether each server still runs, what its readiness endpoint answers and
what its log gained; and how a failure or a timeout is worded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence, TypeVar

from specops.errors import StepError, TransportError
from specops.secrets import clip
from specops.servers.logwatch import READY_LINES, crash_signature, read_new, tail_lines
from specops.servers.records import ServerState
from specops.servers.records import where as _where
from specops.servers.remote import HEALTH_PATIENCE_S, POLL_HEALTH_S
from specops.transport.base import Transport

#: The log text a watch keeps (the crash excerpt and the failure line are read from it).
KEEP_BYTES = 512 * 1024
#: How long a crash signature may precede the server's end before we fail anyway;
#: it lets the rest of the traceback reach the log.
CRASH_GRACE_S = 1.0
#: The end of the text already read that is scanned again with each chunk: a ready line or
#: a crash line may be split across two chunks.
_OVERLAP = 300


@dataclass
class ArmWatch:
    """One arm's log as read so far, and what the wait has learnt about the arm."""

    state: ServerState
    offset: int = 0
    text: str = ""
    ready_line: bool = False
    crash_at: float | None = None
    signature: str | None = None
    health: str = "000"
    ready_after_s: float | None = None

    def feed(self, data: bytes) -> None:
        """Take the log's next bytes: scan them (with the overlap) before the kept text is
        trimmed, so a chunk is scanned whole however long the log already is."""
        if not data:
            return
        self.offset += len(data)
        start = max(0, len(self.text) - _OVERLAP)
        self.text += data.decode(errors="replace")
        new = self.text[start:]
        if len(self.text) > KEEP_BYTES:
            self.text = _trimmed(self.text, KEEP_BYTES)
        if any(line in new for line in READY_LINES):
            self.ready_line = True
        if self.signature is None:
            sig = crash_signature(new)
            if sig:
                self.signature, self.crash_at = sig, time.monotonic()

    def crash_due(self, now: float) -> bool:
        """A crash line was logged at least CRASH_GRACE_S ago."""
        return self.crash_at is not None and now - self.crash_at >= CRASH_GRACE_S

    def health_s(self) -> int:
        """How long this poll waits for the readiness endpoint: a few seconds while the server
        loads (the poll is repeated, and a crash elsewhere must not wait on it), SGLang's own
        health budget once its ready line is logged (its /health runs a generation: seconds on
        a busy host, which a short wait would never see answer). Once a crash line is logged
        it is back to a few seconds: a server whose scheduler died may still accept the
        request and hold it until SGLang's 20 s budget ends, and the crash must fail the step
        within its grace, not a health budget later."""
        return HEALTH_PATIENCE_S if self.ready_line and self.signature is None else POLL_HEALTH_S

    def last_line(self) -> str:
        """The last complete line logged, for the live view: a line still being written may
        end inside a secret, whose first characters no mask can recognise. A progress bar's
        `\r` ends its line too (the view then lags the bar by one redraw)."""
        complete = self.text[:max(self.text.rfind("\n"), self.text.rfind("\r")) + 1]
        return next((ln.strip() for ln in reversed(complete.splitlines()) if ln.strip()), "starting")


def _trimmed(text: str, keep: int) -> str:
    """The last `keep` characters of `text` from a line's start: a cut inside a line (a
    secret's last characters, which no mask can recognise) drops that line's piece."""
    kept = text[-keep:]
    if text[-keep - 1] == "\n":
        return kept
    nl = kept.find("\n")
    return kept[nl + 1:] if nl >= 0 else ""


W = TypeVar("W", bound=ArmWatch)
W_in = TypeVar("W_in", bound=ArmWatch, contravariant=True)


class Source(Protocol[W_in]):
    """A backend's side of the wait (lifecycle's processes, slurm's jobs)."""

    def poll(self, watches: Sequence[W_in], max_bytes: int) -> None:
        """One round trip: each watch's liveness and health, its log's new bytes fed."""

    def gone(self, w: W_in) -> bool:
        """The server has ended (its process exited, its job ended)."""

    def serving(self, w: W_in) -> bool:
        """Whatever the backend needs besides health 200 and the ready line (a running job)."""

    def fail(self, w: W_in, elapsed: float) -> StepError:
        """The failure of an arm that ended or logged a crash, with its crash excerpt."""

    def not_ready(self, w: W_in, timeout_s: float) -> StepError:
        """The failure of an arm still not ready at the deadline."""


def drain(transport: Transport, w: ArmWatch) -> None:
    """Read what is left of an ended server's log (bounded), so the excerpt is complete."""
    for _ in range(16):
        (c,) = read_new(transport, [(w.state.log_path, w.offset)], max_bytes=256 * 1024)
        if not c.data:
            return
        w.feed(c.data)


def loading_line(watches: Sequence[ArmWatch], elapsed: float) -> str:
    """`baseline: Load weight end. ... | eagle3: Capture cuda graph begin` (the last log line of each)."""
    parts = [f"{w.state.arm}: {clip(w.last_line(), 80)}" for w in watches if w.ready_after_s is None]
    return f"{elapsed:.0f}s " + " | ".join(parts)


def wait(transport: Transport, source: Source[W], watches: Sequence[W], timeout_s: float, poll_s: float, *,
         max_bytes: int, on_progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """Poll the arms not yet ready, at most `poll_s` (<= 1 s) apart, until every one is
    (alive, health 200, ready line logged, `source.serving`). Returns seconds to ready per
    arm. An ended server fails at once (its log drained first); a crash line fails after
    CRASH_GRACE_S (polling faster meanwhile); the deadline fails with `source.not_ready`."""
    poll_s = min(max(poll_s, 0.05), 1.0)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while True:
        source.poll([w for w in watches if w.ready_after_s is None], max_bytes)
        now = time.monotonic()
        for w in watches:
            if w.ready_after_s is not None:
                continue
            if source.gone(w):
                drain(transport, w)
                raise source.fail(w, now - t0)
            if w.crash_due(now):
                raise source.fail(w, now - t0)
            if w.health == "200" and w.ready_line and source.serving(w):
                w.ready_after_s = now - t0
        if all(w.ready_after_s is not None for w in watches):
            return {w.state.arm: w.ready_after_s for w in watches}  # type: ignore[misc]
        if on_progress is not None:
            on_progress(loading_line(watches, now - t0))
        if now >= deadline:
            raise source.not_ready(next(w for w in watches if w.ready_after_s is None), timeout_s)
        crashing = any(w.ready_after_s is None and w.crash_at is not None for w in watches)
        time.sleep(min(poll_s, 0.2) if crashing else min(poll_s, max(0.0, deadline - now)))


def not_ready_error(transport: Transport, w: "ArmWatch", timeout_s: float, endpoint: str) -> StepError:
    """A server alive but not ready at the timeout: what was missing (`endpoint`: the health
    check as this backend reached it) and the log's last lines; one shape for both backends."""
    try:
        last = "\n".join(tail_lines(transport, w.state.log_path, 30))
    except TransportError:
        last = "(no log file)"
    missing = []
    if w.health != "200":
        missing.append(f"{endpoint} answered {w.health}")
    if not w.ready_line:
        missing.append("ready line not logged")
    return StepError(f"server '{w.state.arm}' not ready after {timeout_s:.0f}s ({', '.join(missing)}); "
                     f"last lines of {w.state.log_path}:\n{last}", where=_where(transport, w.state.arm),
                     hint="raise the step's timeout if the model is large")
