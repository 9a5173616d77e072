"""Open-loop arrival offsets: when each request of a rate point is sent, in model seconds.

An open loop sends request i at its offset whatever the server's speed; the offsets are
drawn from the seed and the rate alone, so every arm and every repeat at a level is offered
the same arrivals (fairness), and a point can be measured again exactly. Processes:
`poisson` (exponential gaps), `constant` (gaps of exactly 1/rate), `gamma:CV` (gamma gaps
with coefficient of variation CV: above 1 bursty, below 1 smoother; CV 1 is Poisson).

Offsets start at 0 (the first request opens the loop). `gaps` draws one stretch at one rate
from a generator the caller owns, so piecewise rates (phases) can chain stretches on one
generator, and a replayed trace is simply a list of offsets handed to the same client.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from specops.errors import ConfigError

ARRIVALS = ("poisson", "constant", "gamma:CV")
DEFAULT_ARRIVAL = "poisson"
#: the arrival "process" of a replayed trace (`bench --trace`): its offsets are the file's own
TRACE = "trace"


@dataclass(frozen=True)
class Arrival:
    """An arrival process: its kind and the gaps' coefficient of variation (1 for Poisson,
    0 for constant)."""

    kind: str
    cv: float = 1.0

    def text(self) -> str:
        return f"gamma:{self.cv:g}" if self.kind == "gamma" else self.kind


def parse_arrival(text: str, where: str = "bench --arrival") -> Arrival:
    """`poisson`, `constant` or `gamma:CV` (CV > 0, finite)."""
    value = str(text).strip().lower()
    if value == TRACE:
        return Arrival(TRACE, math.nan)
    if value in ("poisson", "constant"):
        return Arrival(value, 1.0 if value == "poisson" else 0.0)
    kind, sep, cv_text = value.partition(":")
    if kind == "gamma" and sep:
        try:
            cv = float(cv_text)
        except ValueError:
            cv = math.nan
        if math.isfinite(cv) and cv > 0:
            return Arrival("gamma", cv)
        raise ConfigError(f"--arrival gamma:CV needs a positive coefficient of variation, got {cv_text!r}",
                          where=where, hint="e.g. --arrival gamma:2 (bursty) or gamma:0.5 (smooth)")
    raise ConfigError(f"unknown arrival process {text!r}; allowed: {', '.join(ARRIVALS)}", where=where)


def parse_rate(text: str, where: str = "bench --rate") -> float:
    """One request rate: a positive finite number of requests per second, `/s` allowed."""
    raw = str(text).strip()
    value = raw[:-2].strip() if raw.lower().endswith("/s") else raw
    try:
        rate = float(value)
    except ValueError:
        raise ConfigError(f"--rate {raw!r} is not a number of requests per second", where=where,
                          hint="e.g. --rate 1,2,4,8 or --rate 0.5/s") from None
    if not math.isfinite(rate) or rate <= 0:
        raise ConfigError(f"--rate must be a positive finite number of requests per second, got {raw!r}",
                          where=where)
    return rate


def parse_rates(text: str, where: str = "bench --rate") -> list[float]:
    """A comma list of rates (`1,2,4/s`); none listed twice."""
    rates = [parse_rate(part, where) for part in str(text).split(",") if part.strip()]
    if not rates:
        raise ConfigError("--rate lists no rate", where=where, hint="e.g. --rate 1,2,4,8")
    if len(set(rates)) != len(rates):
        raise ConfigError(f"--rate lists a rate twice: {text}", where=where)
    return rates


def gaps(rng: random.Random, rate: float, arrival: Arrival, n: int) -> list[float]:
    """`n` gaps between arrivals at `rate` requests/s, in model seconds (mean 1/rate)."""
    mean = 1.0 / rate
    if arrival.kind == "constant":
        return [mean] * n
    if arrival.kind == "poisson":
        return [rng.expovariate(rate) for _ in range(n)]
    shape = 1.0 / (arrival.cv * arrival.cv)
    return [rng.gammavariate(shape, mean / shape) for _ in range(n)]


def offsets(n: int, rate: float, arrival: Arrival, seed: int) -> list[float]:
    """The `n` arrival offsets of a rate point, first at 0: the same for the same seed, rate
    and process on every machine, arm and repeat."""
    if n <= 0:
        return []
    if arrival.kind == TRACE:
        raise ConfigError("a trace's arrivals are the offsets in its file (bench/trace.py), not drawn",
                          where="bench --trace")
    rng = random.Random(f"specops-arrivals:{seed}:{rate!r}:{arrival.text()}")
    out = [0.0]
    for gap in gaps(rng, rate, arrival, n - 1):
        out.append(out[-1] + gap)
    return out


def level_text(rate: float) -> str:
    """How a rate reads in labels: `4/s`, `0.5/s`."""
    return f"{rate:g}/s"
