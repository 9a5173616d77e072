"""Load that changes: `bench --phases 'RATE[/s]:DUR[s|m],...'`, one timeline for every arm.

A phase is an open loop at one request rate for one duration; the phases run back to back
as one point, so an adaptive arm meets the load rising and falling as a day's traffic does
(SGLang's own transition benchmark runs low -> high -> low). Arrival offsets come from the
seed and the phase list alone, phase after phase on one generator (bench/arrivals.py's
`gaps`): every arm and repeat is offered the same requests at the same offsets.

Each phase's first request arrives at the phase's start (the loop's first at 0); the
following ones at the arrival process's gaps, while they fall inside the phase. Phases are
rates only: a closed-loop phase (`c=N`) has no arrival timeline to share between arms.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

from specops.bench.arrivals import TRACE, Arrival, gaps, parse_arrival, parse_rate
from specops.bench.quantiles import percentile
from specops.bench.trace import MAX_REQUESTS, MAX_SPAN_S
from specops.errors import ConfigError

#: what one phase looks like; the message of every parse error shows it
SYNTAX = "RATE[/s]:DURATION[s|m], e.g. --phases '2/s:120s,16/s:120s,2/s:120s'"
#: a phase run's arrival process name in its records' `arrival` prefix
PHASES = "phases"
#: requests in one phase run, all phases together: every arm is offered each one, as a trace's
MAX_ARRIVALS = MAX_REQUESTS
#: requests per second in one phase: one client sends them all; no server we bench takes more
MAX_RATE = 10_000.0
#: seconds of one phase run, all phases together: the length a replayed trace may span
MAX_TIMELINE_S = float(MAX_SPAN_S)
#: a draw may run past its expected count; this many times it is a process whose gaps are
#: zero (gamma with a huge CV), which would otherwise never leave its phase
ARRIVAL_SLACK = 2
_DURATION = re.compile(r"^(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>s|m)?$")


@dataclass(frozen=True)
class Phase:
    """One stretch of the timeline: `rate` requests/s for `duration_s` seconds."""

    rate: float
    duration_s: float

    def label(self) -> str:
        return f"{self.rate:g}/s:{self.duration_s:g}s"


@dataclass(frozen=True)
class Timeline:
    """A phase list and the arrivals it gives: `offsets[i]` in seconds from the start,
    `phase_of[i]` the phase request i arrives in."""

    phases: tuple[Phase, ...]
    offsets: tuple[float, ...]
    phase_of: tuple[int, ...]

    def starts(self) -> list[float]:
        """Each phase's start, seconds from the timeline's."""
        out, t = [], 0.0
        for p in self.phases:
            out.append(t)
            t += p.duration_s
        return out

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    @property
    def mean_rate(self) -> float:
        """Requests per second over the whole timeline: the point's level on the rate axis."""
        return len(self.offsets) / self.duration_s

    def phase_at(self, t: float) -> int | None:
        """The phase that second `t` of the timeline falls in (None before 0; the last after its end)."""
        if t < 0:
            return None
        for k, start in reversed(list(enumerate(self.starts()))):
            if t >= start:
                return k
        return 0


def _duration(text: str, where: str) -> float:
    m = _DURATION.match(text.strip().lower())
    if m is None:
        raise ConfigError(f"phase duration {text!r} is not a number of seconds (s) or minutes (m)",
                          where=where, hint=SYNTAX)
    seconds = float(m["value"]) * (60.0 if m["unit"] == "m" else 1.0)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"phase duration {text!r} must be positive", where=where, hint=SYNTAX)
    if seconds > MAX_TIMELINE_S:
        raise ConfigError(f"phase duration {text!r} is longer than a run: at most {MAX_TIMELINE_S:g} s",
                          where=where, hint=SYNTAX)
    return seconds


def _rate(text: str, where: str) -> float:
    try:
        rate = parse_rate(text, where=where)
    except ConfigError:
        raise ConfigError(f"phase rate {text.strip()!r} is not a positive number of requests per second",
                          where=where, hint=SYNTAX) from None
    if rate > MAX_RATE:
        raise ConfigError(f"phase rate {rate:g}/s is above what one client sends: at most {MAX_RATE:g}/s",
                          where=where, hint=SYNTAX)
    return rate


def _check_run(phases: list[Phase], where: str) -> None:
    """The phases together: their length, and about how many requests they draw (one at each
    phase's start, then rate x duration), both within what one run holds."""
    total_s = sum(p.duration_s for p in phases)
    if total_s > MAX_TIMELINE_S:
        raise ConfigError(f"the phases last {total_s:g} s: at most {MAX_TIMELINE_S:g} s in one run",
                          where=where, hint="shorten the phases, or split them into several runs")
    expected = sum(1 + p.rate * p.duration_s for p in phases)
    if expected > MAX_ARRIVALS:
        raise ConfigError(f"the phases ask for about {expected:.0f} requests: at most {MAX_ARRIVALS} in one run",
                          where=where, hint="lower the rates or shorten the phases")


def parse_phases(text: str, where: str = "bench --phases") -> list[Phase]:
    """`RATE[/s]:DUR[s|m],...`: at least one phase, each a positive rate and duration."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise ConfigError("--phases lists no phase", where=where, hint=SYNTAX)
    phases: list[Phase] = []
    for n, part in enumerate(parts, start=1):
        at = f"{where} (phase {n}: {part!r})"
        if not part:
            raise ConfigError("an empty phase (two commas, or a trailing one)", where=at, hint=SYNTAX)
        rate_text, sep, dur_text = part.rpartition(":")
        if part.lower().startswith("c="):
            raise ConfigError("a concurrency phase (c=N) is not supported: phases are request rates, an open "
                              "loop whose arrivals every arm shares", where=at,
                              hint="give a rate: " + SYNTAX + "; for closed loops sweep --concurrency")
        if not sep or not rate_text.strip():
            raise ConfigError("a phase needs a rate and a duration", where=at, hint=SYNTAX)
        phases.append(Phase(_rate(rate_text, at), _duration(dur_text, at)))
    _check_run(phases, where)
    return phases


def timeline(phases: list[Phase] | tuple[Phase, ...], arrival: Arrival, seed: int) -> Timeline:
    """The arrival offsets of `phases` under `arrival`'s gaps, drawn from `seed` and the
    phase list alone (the same on every machine, arm and repeat)."""
    if arrival.kind == TRACE:
        raise ConfigError("--phases draws its own arrivals; a trace replays a file's", where="bench --phases")
    key = ",".join(p.label() for p in phases)
    rng = random.Random(f"specops-phases:{seed}:{key}:{arrival.text()}")
    offsets: list[float] = []
    phase_of: list[int] = []
    start, cap = 0.0, ARRIVAL_SLACK * MAX_ARRIVALS
    for k, phase in enumerate(phases):
        end, t = start + phase.duration_s, start
        while t < end:
            if len(offsets) >= cap:
                raise ConfigError(f"the phases drew more than {cap} arrivals under --arrival {arrival.text()}: "
                                  f"at most {MAX_ARRIVALS} are expected in one run", where="bench --phases",
                                  hint="a smaller coefficient of variation (gamma:CV), lower rates or shorter phases")
            offsets.append(round(t, 9))
            phase_of.append(k)
            t += gaps(rng, phase.rate, arrival, 1)[0]
        start = end
    return Timeline(tuple(phases), tuple(offsets), tuple(phase_of))


def timeline_of(text: str, arrival: str, seed: int, where: str = "bench --phases") -> Timeline:
    """`timeline` from the option's text and an arrival process's name."""
    return timeline(parse_phases(text, where), parse_arrival(arrival, where), seed)


# ----- what the client measures per phase -------------------------------------------------

#: at most this many bins in a run's tokens-per-second series (the plot's x resolution)
SERIES_BINS = 200


@dataclass(frozen=True)
class Done:
    """One request of a phase run as the client saw it, times in model seconds from the
    timeline's start (the simulator's model clock, else wall seconds / the time scale):
    `marks` are its stream chunks (time, tokens)."""

    index: int
    ok: bool
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    marks: tuple[tuple[float, int], ...] = ()


def phase_figures(tl: Timeline, done: list[Done]) -> list[dict[str, object]]:
    """Per phase: its requests (those arriving in it), their TTFT/TPOT percentiles and
    [TTFT, TPOT, E2E] ms each (for goodput under an SLO), and their output tokens over the
    phase's window: from its start to the last of its requests' last token, at least the
    phase's length (as a point's duration runs from its first arrival to its last token). A
    server still draining an earlier phase's queue finishes this phase's requests later: its
    window is longer, its throughput lower, whatever it streamed for the earlier phase."""
    out: list[dict[str, object]] = []
    for k, phase in enumerate(tl.phases):
        mine = [d for d in done if tl.phase_of[d.index] == k]
        ok = [d for d in mine if d.ok]
        lo = tl.starts()[k]
        hi = max([lo + phase.duration_s, *(t for d in mine for t, _ in d.marks)])
        tokens = sum(n for d in mine for _, n in d.marks)
        ttft = [d.ttft_s * 1000 for d in ok if d.ttft_s is not None]
        tpot = [d.tpot_s * 1000 for d in ok if d.tpot_s is not None]
        row: dict[str, object] = {
            "phase": k, "label": phase.label(), "rate": phase.rate, "duration_s": phase.duration_s,
            "start_s": round(lo, 6), "window_s": round(hi - lo, 6), "requests": len(mine),
            "completed": len(ok), "failed": len(mine) - len(ok), "output_tokens": tokens,
            "output_throughput": round(tokens / (hi - lo), 4) if hi > lo else None,
            "request_latencies_ms": [[round(d.ttft_s * 1000, 3),
                                      round(d.tpot_s * 1000, 3) if d.tpot_s is not None else None,
                                      round(d.e2e_s * 1000, 3)]
                                     for d in ok if d.ttft_s is not None and d.e2e_s is not None],
        }
        for name, values in (("ttft", ttft), ("tpot", tpot)):
            for q in (50, 90, 99):
                value = percentile(values, q)
                row[f"p{q}_{name}_ms"] = None if value is None else round(value, 3)
        out.append(row)
    return out


def token_series(tl: Timeline, done: list[Done]) -> dict[str, object]:
    """Output tokens streamed per bin of the timeline (to its last token): the plot's tokens
    per second, exact on the model clock."""
    end_s = max([tl.duration_s, *(t for d in done for t, _ in d.marks)])
    width = max(end_s / SERIES_BINS, 1e-3)
    bins = [0] * (int(end_s / width) + 1)
    for d in done:
        for t, n in d.marks:
            if t >= 0:
                bins[min(int(t / width), len(bins) - 1)] += n
    return {"bin_s": round(width, 6), "tokens": bins}
