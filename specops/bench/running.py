"""The server's own running batch during a point: what an adaptive threshold is compared with.

A client's concurrency is not the server's running batch: requests finish and wait for the
next one, prefill interleaves, a capped server queues. SGLang's adaptive tiers and the
`--speculative-disable-batch-threshold` patch both decide on the running batch, so tuning
needs it measured, per point, from the server:

- `/metrics` (where the server serves it): the engine's running-batch gauge (and its
  accept-length gauge), polled during the point;
- otherwise the server's log: every decode step's line (SGLang's `Decode batch, #running-req:
  N, ... accept len: X`) written between the point's start and end, read on the host by byte
  offset (only the matching lines come back, never the whole log).

The names and the line's pattern are the engine's (`specops.engines`, `BatchMetrics`): every
function here takes them as `metrics`, the default engine's when not given.

The figures land in every result record: `running_req_p50`, `running_req_p90`,
`server_accept_length`, `running_samples`, `running_source`. For an arm whose server logs
drafting transitions (the dynamic-spec-disable patch, the simulator: `specops adaptive:
drafting off|on ...`), the same log window gives `drafting_off` (was drafting off for any
decode step of the point), `drafting_off_share` (the share of the point's `Decode batch`
lines logged while it was off: exact with `--decode-log-interval 1`, a sample otherwise)
and `drafting_transitions`; the state at the window's start is the last transition before it.
"""

from __future__ import annotations

import math
import re
import shlex
import statistics
import threading
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from specops.engines.base import BatchMetrics
from specops.engines.metrics import DEFAULT_METRICS
from specops.records.schema import ResultRecord
from specops.sglang.adaptive import DRAFTING_STATE_TEXTS, MIXED_RE, TRANSITION_RE, drafting_state

if TYPE_CHECKING:  # an annotation only: the decisions that read running batches import no transport
    from specops.transport.base import Transport

#: the running-batch names of a host without `engine:` (SGLang's, which the simulator shares)
METRICS: BatchMetrics = DEFAULT_METRICS
_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEnaNIf]+)")
FIELDS = ("running_req_p50", "running_req_p90", "server_accept_length", "running_samples", "running_source")
DRAFTING_FIELDS = ("drafting_off", "drafting_off_share", "drafting_transitions")
_PRIOR = "specops-prior: "


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of the values; None when there are none."""
    vals = sorted(values)
    if not vals:
        return None
    rank = max(1, min(len(vals), int(-(-q * len(vals) // 100))))
    return float(vals[rank - 1])


@dataclass
class RunningFigures:
    """Samples of the running batch (and the server's accept length) during one point."""

    source: str
    running: list[float] = field(default_factory=list)
    accept: list[float] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        busy = [r for r in self.running if r > 0] or self.running
        acc = [a for a in self.accept if a > 0]
        return {"running_req_p50": percentile(busy, 50), "running_req_p90": percentile(busy, 90),
                "server_accept_length": round(percentile(acc, 50) or 0.0, 4) if acc else None,
                "running_samples": len(self.running), "running_source": self.source if self.running else None}


def parse_decode_lines(text: str, metrics: BatchMetrics = METRICS) -> RunningFigures:
    """Running requests and accept lengths from SGLang's `Decode batch` log lines (vLLM's stats
    lines, and its SpecDecoding lines for the accept length: `accept_re`). A patched
    adaptive server's line over steps some of which did not draft says so (MIXED_RE): its
    accept figures mix the two paths, so they are left out (a line over no drafting step
    carries none). A native adaptive server's line at 0 steps still says `accept len: 1.00`,
    no draft's figure: lines logged while its switch lines say it is off are left out too."""
    figs = RunningFigures("log")
    drafting = True
    for line in text.splitlines():
        if TRANSITION_RE.search(line):
            continue   # the patch's decode lines say their own drafting (its notes), whatever this says
        state = drafting_state(line)
        if state is not None:
            drafting = state[0]
            continue
        if metrics.accept_re is not None and (a := metrics.accept_re.search(line)):
            if drafting:   # an engine that logs the accept length on a line of its own (vLLM's)
                figs.accept.append(float(a.group(1)))
            continue
        m = metrics.decode_re.search(line)
        if m is None:
            continue
        figs.running.append(float(m.group(1)))
        if m.group(2) and drafting and not MIXED_RE.search(line, m.end()):
            figs.accept.append(float(m.group(2)))
    return figs


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value} (labels dropped; the last sample of a name wins)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if m and not line.startswith("#"):
            try:
                out[m.group(1)] = float(m.group(3))
            except ValueError:
                continue
    return out


def decode_lines_script(path: str, offset: int, length: int, metrics: BatchMetrics = METRICS) -> str:
    """Bash printing the last drafting-state line before `offset` (prefixed `specops-prior: `),
    then the `Decode batch` and drafting-state lines of bytes [offset, offset+length) of the log."""
    p = shlex.quote(path)
    states = "|".join(DRAFTING_STATE_TEXTS)
    pattern = shlex.quote(f"{metrics.decode_line}|{states}")
    prior = (f"head -c {int(offset)} {p} 2>/dev/null | grep -a -E {shlex.quote(states)} | tail -n 1 "
             f"| sed 's/^/{_PRIOR}/'")
    return (f"{{ {prior}; tail -c +{int(offset) + 1} {p} 2>/dev/null | head -c {int(length)} "
            f"| grep -a -E {pattern}; }} || true")


def drafting_evidence(text: str, logs_transitions: bool = False, metrics: BatchMetrics = METRICS) -> dict[str, Any]:
    """`drafting_off`, `drafting_off_share`, `drafting_transitions` from the lines
    `decode_lines_script` printed: the patch's transition lines, or a native adaptive server's
    start and switch lines. A server that `logs_transitions` (the patched adaptive arm) drafts
    until its first "off" line; for any other arm, a log without a drafting-state line gives
    None for all three (nothing to say)."""
    drafting, seen_any = True, logs_transitions
    steps = off_steps = transitions = 0
    for line in text.splitlines():
        state = drafting_state(line)
        if state is not None:
            seen_any = True
            drafting = state[0]
            transitions += 1 if state[1] and not line.startswith(_PRIOR) else 0
        elif metrics.decode_re.search(line):
            steps += 1
            off_steps += 0 if drafting else 1
    if not seen_any:
        return dict.fromkeys(DRAFTING_FIELDS)
    return {"drafting_off": off_steps > 0 or (steps == 0 and not drafting),
            "drafting_off_share": round(off_steps / steps, 4) if steps else None,
            "drafting_transitions": transitions}


#: decode steps read after drafting resumes: a draft KV cache left stale while drafting was
#: off shows in the first steps after it comes back (later steps have drafted it fresh)
RESUMED_STEPS = 3


@dataclass(frozen=True)
class OffStretch:
    """One stretch of an adaptive server's drafting off, and its acceptance either side, from
    its own `Decode batch` lines (one a step with `--decode-log-interval 1`): `before`, the
    accept lengths logged while drafting since the previous resume (or the log's start);
    `after`, those of the first steps (off_stretches' `steps`) after drafting resumed that ran at most
    the threshold (the line logged with the on transition is the step that still counted the
    requests that finished in it, each verified one token). Neither counts a step that
    finished every running request (`metrics.all_finished_re`): max_new_tokens cut it short."""

    off_batch: int
    on_batch: int | None
    before: tuple[float, ...]
    after: tuple[float, ...]

    @property
    def ratio(self) -> float | None:
        """Mean accept length after / before; None when either side has no figure."""
        if not self.before or not self.after:
            return None
        return round(statistics.fmean(self.after) / statistics.fmean(self.before), 4)

    @property
    def ratio_bound(self) -> float | None:
        """The ratio with two standard errors of the after-mean added: a real head's accept
        length varies from step to step (a stale draft cache drops it far below this), a
        tiny head that accepts every draft gives the ratio itself."""
        if self.ratio is None:
            return None
        se = statistics.stdev(self.after) / math.sqrt(len(self.after)) if len(self.after) > 1 else 0.0
        return round((statistics.fmean(self.after) + 2 * se) / statistics.fmean(self.before), 4)

    def to_dict(self) -> dict[str, Any]:
        return {"off_batch": self.off_batch, "on_batch": self.on_batch, "before": list(self.before),
                "after": list(self.after), "ratio": self.ratio, "ratio_bound": self.ratio_bound}


def off_stretches(text: str, threshold: int, steps: int = RESUMED_STEPS,
                  metrics: BatchMetrics = METRICS) -> list[OffStretch]:
    """Every off stretch in an adaptive server's log text, in order: the dynamic-spec-disable
    patch's transition lines (each names its running batch), or SGLang's native switch lines
    (`steps N -> 0` and back, which name none: the stretch's off batch is that of the next
    `Decode batch` line, its on batch that of the first one after it at or below `threshold`,
    since the line logged right after the switch may still count the requests that finished
    in the step before). A decode line's accept figures count only while drafting and when
    all its steps drafted (a patched server notes the others: MIXED_RE, ALL_OFF_NOTE)."""
    out: list[OffStretch] = []
    drafted: list[float] = []  # accept lengths since drafting last came on (or the text's start)
    off_batch: int | None = None  # the open stretch: where drafting went off, came on, and either side
    on_batch: int | None = None
    before: list[float] = []
    after: list[float] = []
    closed = drafting = True  # no stretch open; drafting now
    native_on = False  # a native switch back on whose batch the decode lines still have to say
    for line in text.splitlines():
        state = drafting_state(line)
        if state is not None:
            now, switch = state
            t = TRANSITION_RE.search(line)
            if switch and not now:
                if not closed:
                    out.append(OffStretch(off_batch or 0, on_batch, tuple(before), tuple(after)))
                off_batch, on_batch, before, drafted, after = (int(t["batch"]) if t else None), None, drafted, [], []
                closed = False
            elif switch and not closed and on_batch is None and not native_on:
                on_batch = int(t["batch"]) if t else None
                native_on = t is None
            drafting = now
            continue
        m = metrics.decode_re.search(line)
        if not m:
            continue
        running = int(m.group(1))
        if not closed and off_batch is None:
            off_batch = running
        if native_on and running <= threshold:
            on_batch, native_on = running, False
        if not drafting or not m.group(2) or MIXED_RE.search(line) or metrics.all_finished_re.search(line):
            continue
        accept = float(m.group(2))
        drafted.append(accept)
        if on_batch is not None and running <= threshold and len(after) < steps:
            after.append(accept)
    if not closed:
        out.append(OffStretch(off_batch or 0, on_batch, tuple(before), tuple(after)))
    return out


class RunningSampler:
    """Samples one server's running batch while a point runs: `start()`, measure, `stop()`.

    With a `base_url` whose `/metrics` answers, a thread polls it every `interval_s`;
    whatever the source, the log's `Decode batch` lines between start and stop are read
    too, and used when the metrics gave fewer than 3 samples."""

    def __init__(self, transport: Transport, log_path: str, base_url: str | None = None,
                 interval_s: float = 0.2, logs_transitions: bool = False, metrics: BatchMetrics = METRICS):
        self.transport, self.log_path, self.base_url, self.interval_s = transport, log_path, base_url, interval_s
        self.metrics = metrics
        self.logs_transitions = logs_transitions
        self._offset: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._metrics = RunningFigures("metrics")
        self._counters_at_start: tuple[float, float] | None = None
        self.lines = ""  # the log window's decode and drafting-state lines, once stopped

    def _poll(self) -> None:
        assert self.base_url
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.base_url + "/metrics", timeout=2) as resp:
                    values = parse_metrics(resp.read().decode(errors="replace"))
            except (OSError, ValueError):
                return  # no /metrics (or it went away): the log lines stand in
            if self.metrics.running not in values:
                return
            self._metrics.running.append(values[self.metrics.running])
            if self.metrics.accept in values:
                self._metrics.accept.append(values[self.metrics.accept])
            elif (accept := self._counted_accept(values)) is not None:
                self._metrics.accept.append(accept)
            self._stop.wait(self.interval_s)

    def _counted_accept(self, values: dict[str, float]) -> float | None:
        """The mean accept length since the point began, from counters (vLLM's: 1 + accepted /
        drafts over the point), where the engine counts instead of keeping a gauge."""
        if self.metrics.accept_counters is None:
            return None
        drafts, accepted = (values.get(name) for name in self.metrics.accept_counters)
        if drafts is None or accepted is None:
            return None
        if self._counters_at_start is None:
            self._counters_at_start = (drafts, accepted)
            return None
        d0, a0 = self._counters_at_start
        return 1 + (accepted - a0) / (drafts - d0) if drafts > d0 else None

    def start(self) -> None:
        try:
            self._offset = self.transport.stat_size(self.log_path)
        except Exception:  # noqa: BLE001 - sampling must never fail a point
            self._offset = None
        if self.base_url:
            self._thread = threading.Thread(target=self._poll, name="running-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the point's running-batch figures and drafting evidence (None
        where nothing was seen)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        lines = self.lines = self._log_lines()
        busy_metrics = [r for r in self._metrics.running if r > 0]
        figures = self._metrics if len(busy_metrics) >= 3 else parse_decode_lines(lines, self.metrics)
        record = figures.to_record()
        counted = self._point_accept()
        if counted is not None:   # counters span the whole point, however few polls it got
            record["server_accept_length"] = round(counted, 4)
        return {**record, **drafting_evidence(lines, self.logs_transitions, self.metrics)}

    def _point_accept(self) -> float | None:
        """An engine that counts drafts (vLLM): the accept length over the whole point, from the
        counters of the first poll and one last read now; None where it keeps a gauge instead."""
        if self.base_url is None or self.metrics.accept_counters is None or self._counters_at_start is None:
            return None
        try:
            with urllib.request.urlopen(self.base_url + "/metrics", timeout=5) as resp:
                values = parse_metrics(resp.read().decode(errors="replace"))
        except (OSError, ValueError):
            return None
        return self._counted_accept(values)

    def _log_lines(self) -> str:
        if self._offset is None:
            return ""
        try:
            end = self.transport.stat_size(self.log_path)
            if end is None or end <= self._offset:
                return ""
            res = self.transport.run(decode_lines_script(self.log_path, self._offset, end - self._offset, self.metrics),
                                     timeout=60)
            return res.stdout if res.ok else ""
        except Exception:  # noqa: BLE001 - sampling must never fail a point
            return ""


def median_running(records: Iterable[ResultRecord]) -> float | None:
    """Median over repeats of the points' running-batch medians."""
    vals = sorted(float(r.running_req_p50) for r in records if isinstance(r.running_req_p50, (int, float)))
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
