"""The one threshold rule: where the adaptive arm should stop speculating.

`specops bench`'s report, summary.json and `specops tune` all call `choose` on the same
points, so they cannot disagree. A threshold is compared with the server's running batch
(SGLang's adaptive tiers and the disable-threshold patch both decide on it), and a
client's concurrency is not that batch (requests finish and wait, prefill interleaves, a
capped server queues). So the threshold is in running-batch units wherever the server
reported its running batch during EAGLE-3's points (bench/running.py), and in
concurrency units otherwise, and the text then says so.

The rule (`RULE`): take the highest level where EAGLE-3 is at least `MARGIN` times as good
as baseline on the objective there and at every lower level (a noisy win above a loss is
not a reason to speculate there); the threshold is the p90 of EAGLE-3's running batch at
that level, rounded down, kept below the median running batch of the first level where
EAGLE-3 loses. Without running-batch samples the level itself is the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from specops.bench.schema import AXIS_CONCURRENCY, AXIS_RATE, level_label

MARGIN = 1.0   # EAGLE-3 must be at least as good as baseline at a level for it to count
UNIT_RUNNING = "running batch"
UNIT_CONCURRENCY = "concurrency"
NO_RUNNING = "the server reported no running batch"
RULE = ("threshold = p90 of the server's running batch at the highest level where EAGLE-3 is at least "
        "as fast as baseline there and at every lower level (rounded down), kept below the median "
        "running batch of the first level where it is slower; the adaptive arm speculates while its "
        "running batch is <= threshold (the level itself, in concurrency units, where the server "
        "reported no running batch)")


@dataclass(frozen=True)
class LevelPoint:
    """One concurrency level: EAGLE-3 over baseline on the objective (> 1: EAGLE-3 better),
    and EAGLE-3's running batch there (None: the server reported none)."""

    level: float
    ratio: float
    running_p50: float | None = None
    running_p90: float | None = None


@dataclass
class ThresholdChoice:
    """What `choose` decided, and why (tune.json keeps it as a dict)."""

    threshold: int | None
    level: float | None         # the highest level where EAGLE-3 still wins
    losing_level: float | None  # the first level where it does not
    running_p90: float | None
    losing_running_p50: float | None
    reason: str
    unit: str | None = None     # UNIT_RUNNING | UNIT_CONCURRENCY; None: no threshold
    top: bool = False           # EAGLE-3 wins up to the highest level measured

    def text(self, axis: str = AXIS_CONCURRENCY) -> str:
        """The report's wording: the number and what it is compared with (`axis`: what the
        levels were, concurrency or request rate)."""
        if self.threshold is None:
            return f"none: {self.reason}"
        t = self.threshold
        if self.unit == UNIT_RUNNING:
            what = f"speculate while the running batch is <= {t}"
        else:
            what = f"speculate while {axis} is <= {t:g}; {NO_RUNNING}"
        if self.top:
            what = f"EAGLE-3 wins up to the highest level measured, {level_label(self.level, axis)}: {what}"
        elif axis == AXIS_RATE and self.level is not None:
            what += f"; in request-rate terms, EAGLE-3 wins up to {level_label(self.level, axis)}"
        return f"{t:g} ({what})"


def choose(points: Sequence[LevelPoint], margin: float = MARGIN, axis: str = AXIS_CONCURRENCY) -> ThresholdChoice:
    """Apply RULE to the points (any order; levels where both arms were measured). On a rate
    sweep (`axis`) the levels are request rates: the threshold exists only in running-batch
    units (a rate is not what the adaptive arm compares)."""
    pts = sorted(points, key=lambda p: p.level)
    win: LevelPoint | None = None
    lose: LevelPoint | None = None
    for p in pts:
        if p.ratio >= margin:
            win = p
        else:
            lose = p
            break
    if win is None:
        return ThresholdChoice(None, None, lose.level if lose else None, None, None,
                               "EAGLE-3 is slower than baseline from the lowest level measured: do not speculate"
                               if lose else "no levels with both baseline and EAGLE-3")
    p90 = win.running_p90 if win.running_p90 is not None else win.running_p50
    top = lose is None
    if p90 is None and axis == AXIS_RATE:
        return ThresholdChoice(None, win.level, lose.level if lose else None, None, None,
                               f"{NO_RUNNING} at {level_label(win.level, axis)}: a request rate is not a "
                               "running batch, so no threshold", None, top)
    if p90 is None:
        return ThresholdChoice(int(win.level), win.level, lose.level if lose else None, None, None,
                               f"{NO_RUNNING} at c={win.level:g}: the level itself, in concurrency units",
                               UNIT_CONCURRENCY, top)
    src = f"running batch p90 {p90:g} at {level_label(win.level, axis)}"
    threshold = max(1, int(math.floor(p90)))
    lose_p50 = None
    if lose is not None:
        lose_p50 = lose.running_p50 if lose.running_p50 is not None else float(lose.level)
        if threshold >= lose_p50:
            threshold = max(1, int(math.ceil(lose_p50)) - 1)
            src += f", kept below the median running batch {lose_p50:g} at {level_label(lose.level, axis)}"
    return ThresholdChoice(threshold, win.level, lose.level if lose else None, p90, lose_p50, src,
                           UNIT_RUNNING, top)
