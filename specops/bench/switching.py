"""How fast the adaptive arm follows load that changes: its switching lag, from its own log.

A phase run (bench/phases.py) reads, beside its running-batch figures, the server's decode
lines (one a scheduler step with `--decode-log-interval 1`) and its drafting-state lines (the
dynamic-spec-disable patch's transition line, SGLang's native switch line). The threshold is
the transition line's own (`... > threshold N`), else the arm's effective threshold.

The lag of a switch: the decode steps the server ran with its running batch already on the
other side of the threshold (drafting at a batch over it, or not drafting at one at or under
it) before the switch line, and the seconds from the end of the last step on the right side
(where the crossed batch's first step began) to the switch line; a switch logged at the first
step of the crossed batch has lag 0 steps, 0 s. Times are the simulator's model clock where
its lines carry it (`[model t=...s]`, sim.logs.MODEL_STAMP: the lag is then a function of the
workload alone), else the log's wall-clock prefix (one-second resolution on SGLang's).

Each switch is placed in its phase by its time on the run's timeline (the client's
`phase_clock`: the model clock's origin, or the epoch second the timeline started at).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from specops.engines.base import BatchMetrics
from specops.engines.metrics import DEFAULT_METRICS
from specops.sglang.adaptive import TRANSITION_RE, drafting_state
from specops.sim.logs import MODEL_STAMP_RE

_WALL = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<frac>\.\d+)?")
#: what bench.running's log script puts before the last drafting-state line before the point
_PRIOR = "specops-prior: "


@dataclass(frozen=True)
class Switch:
    """One switch line: drafting from here on, the batch it names, when (seconds on the
    run's timeline, None where the line's time is unknown), and its lag."""

    t_s: float | None
    drafting: bool
    batch: int | None
    lag_steps: int | None
    lag_s: float | None

    def to_dict(self, phase: int | None) -> dict[str, Any]:
        return {"t_s": None if self.t_s is None else round(self.t_s, 6), "phase": phase,
                "drafting": self.drafting, "batch": self.batch, "lag_steps": self.lag_steps,
                "lag_s": None if self.lag_s is None else round(self.lag_s, 6)}


def line_time(line: str, clock: str) -> float | None:
    """A log line's time on `clock`: "model" (the simulator's stamp) or "epoch" (the wall
    prefix, read as this machine's local time); None where the line has none."""
    if clock == "model":
        m = MODEL_STAMP_RE.search(line)
        return float(m["t"]) if m else None
    w = _WALL.match(line)
    if w is None:
        return None
    try:
        return time.mktime(time.strptime(w["ts"], "%Y-%m-%d %H:%M:%S")) + float(w["frac"] or 0)
    except (ValueError, OverflowError):
        return None


def switches(text: str, threshold: int | None, clock: str = "model", origin: float = 0.0,
             metrics: BatchMetrics = DEFAULT_METRICS) -> list[Switch]:
    """Every switch in the lines of a point's log window, with its lag (None for a native
    switch whose threshold is unknown); `origin` is subtracted from every time."""
    explicit = TRANSITION_RE.search(text)
    thr = int(explicit["threshold"]) if explicit else threshold
    drafting, out = True, []
    wrong = 0                      # steps run on the wrong side of the threshold since the crossing
    since: float | None = None     # when the crossed batch's first step began
    last_t: float | None = None    # the end of the last decode step
    for line in text.splitlines():
        t = line_time(line, clock)
        state = drafting_state(line)
        if state is not None:
            if state[1] and not line.startswith(_PRIOR) and state[0] != drafting:
                m = TRANSITION_RE.search(line)
                lag_s = 0.0 if wrong == 0 else (t - since if t is not None and since is not None else None)
                out.append(Switch(None if t is None else t - origin, state[0], int(m["batch"]) if m else None,
                                  wrong if thr is not None else None, lag_s if thr is not None else None))
            drafting, wrong, since = state[0], 0, None
            continue
        m = metrics.decode_re.search(line)
        if m is None:
            continue
        batch = int(m.group(1))
        if thr is not None and (batch > thr) == drafting:
            since = (last_t if last_t is not None else t) if wrong == 0 else since
            wrong += 1
        else:
            wrong, since = 0, None
        last_t = t
    return out


def decode_series(text: str, clock: str, origin: float, bin_s: float, bins: int,
                  metrics: BatchMetrics = DEFAULT_METRICS) -> dict[str, list[float | None]]:
    """The running batch (mean per bin) and drafting (share of the bin's steps that drafted:
    while the server's state lines say so, on lines with accept figures; a baseline drafts
    none) over the run's timeline, from its decode and drafting-state lines."""
    running: list[list[float]] = [[] for _ in range(bins)]
    drafted: list[list[float]] = [[] for _ in range(bins)]
    drafting = True
    for line in text.splitlines():
        state = drafting_state(line)
        if state is not None:
            drafting = state[0]
            continue
        m = metrics.decode_re.search(line)
        t = line_time(line, clock) if m else None
        if m is None or t is None or t < origin or bin_s <= 0:
            continue
        k = min(int((t - origin) / bin_s), bins - 1)
        running[k].append(float(m.group(1)))
        drafted[k].append(1.0 if drafting and m.group(2) else 0.0)   # a step without accept figures drafted nothing

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 3) if values else None

    return {"running": [mean(v) for v in running], "drafting": [mean(v) for v in drafted]}


def _phase_of(rows: list[dict[str, Any]], t: float | None) -> int | None:
    if t is None or t < 0:
        return None
    starts = [float(r.get("start_s") or 0.0) for r in rows]
    return max((k for k, s in enumerate(starts) if t >= s), default=None)


def switching_extra(text: str, extra: dict[str, Any], threshold: int | None,
                    metrics: BatchMetrics = DEFAULT_METRICS) -> dict[str, Any]:
    """What a phase run's record gains from its server's log window: `switching` (every switch
    with its phase and lag), each phase's `switches`, `worst_lag_steps`, `worst_lag_s`, and the
    running batch and drafting over time in `phase_series`."""
    rows = [dict(r) for r in extra.get("phases") or [] if isinstance(r, dict)]
    clock_raw = extra.get("phase_clock")
    clock_info: dict[str, Any] = clock_raw if isinstance(clock_raw, dict) else {}
    clock = "model" if clock_info.get("kind") == "model" else "epoch"
    origin = float(clock_info.get("origin") or 0.0)
    found = [(s, _phase_of(rows, s.t_s)) for s in switches(text, threshold, clock, origin, metrics)]
    for k, row in enumerate(rows):
        mine = [s for s, p in found if p == k]
        steps = [s.lag_steps for s in mine if s.lag_steps is not None]
        secs = [s.lag_s for s in mine if s.lag_s is not None and math.isfinite(s.lag_s)]
        row.update({"switches": len(mine), "worst_lag_steps": max(steps) if steps else None,
                    "worst_lag_s": round(max(secs), 6) if secs else None})
    series = dict(extra.get("phase_series") or {})
    bin_s, tokens = float(series.get("bin_s") or 0.0), series.get("tokens") or []
    if bin_s > 0 and tokens:
        series.update(decode_series(text, clock, origin, bin_s, len(tokens), metrics))
    explicit = TRANSITION_RE.search(text)
    return {"phases": rows, "phase_series": series,
            "switching": {"threshold": int(explicit["threshold"]) if explicit else threshold,
                          "switches": [s.to_dict(p) for s, p in found]}}
