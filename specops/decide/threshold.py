"""The one threshold rule: where the adaptive arm should stop speculating.

`specops bench`'s report, summary.json and `specops tune` all call `choose` on the same
points, so they cannot disagree. A threshold is compared with the server's running batch
(SGLang's adaptive tiers and the disable-threshold patch both decide on it), and a
client's concurrency is not that batch (requests finish and wait, prefill interleaves, a
capped server queues). So the threshold is in running-batch units wherever the server
reported its running batch during EAGLE-3's points (bench/running.py), and in
concurrency units otherwise, and report/words.py then says so.

The rule (report/words.py's `THRESHOLD_RULE` says it in words): take the highest level where EAGLE-3 is at least `MARGIN` times as good
as baseline on the objective there and at every lower level (a noisy win above a loss is
not a reason to speculate there); the threshold is the p90 of EAGLE-3's running batch at
that level, rounded down, kept below the median running batch of the first level where
EAGLE-3 loses. Without running-batch samples the level itself is the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

from specops.records.schema import AXIS_CONCURRENCY, AXIS_RATE

MARGIN = 1.0   # EAGLE-3 must be at least as good as baseline at a level for it to count
#: what a threshold is compared with, as summary.json and tune.json record it
UNIT_RUNNING = "running batch"
UNIT_CONCURRENCY = "concurrency"


class Why(Enum):
    """Why `choose` decided what it did (report/words.py's `threshold_reason` says it)."""

    NO_LEVELS = "no_levels"                  # no level with both baseline and EAGLE-3
    SLOWER_FROM_START = "slower_from_start"  # EAGLE-3 loses from the lowest level: do not speculate
    NO_RUNNING_RATE = "no_running_rate"      # a rate sweep without running-batch samples: no threshold
    NO_RUNNING_LEVEL = "no_running_level"    # no running-batch samples: the level itself, in concurrency units
    RUNNING_P90 = "running_p90"              # the p90 of the running batch at the last winning level
    KEPT_BELOW = "kept_below"                # ... kept below the median running batch where EAGLE-3 loses


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
    """What `choose` decided, and why (tune.json keeps it as a dict, its reason in words)."""

    threshold: int | None
    level: float | None         # the highest level where EAGLE-3 still wins
    losing_level: float | None  # the first level where it does not
    running_p90: float | None
    losing_running_p50: float | None
    why: Why
    unit: str | None = None     # UNIT_RUNNING | UNIT_CONCURRENCY; None: no threshold
    top: bool = False           # EAGLE-3 wins up to the highest level measured
    axis: str = AXIS_CONCURRENCY  # what the levels were: concurrency or request rate


def choose(points: Sequence[LevelPoint], margin: float = MARGIN, axis: str = AXIS_CONCURRENCY) -> ThresholdChoice:
    """Apply the rule to the points (any order; levels where both arms were measured). On a
    rate sweep (`axis`) the levels are request rates: the threshold exists only in
    running-batch units (a rate is not what the adaptive arm compares)."""
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
                               Why.SLOWER_FROM_START if lose else Why.NO_LEVELS, axis=axis)
    p90 = win.running_p90 if win.running_p90 is not None else win.running_p50
    top = lose is None
    if p90 is None and axis == AXIS_RATE:
        return ThresholdChoice(None, win.level, lose.level if lose else None, None, None,
                               Why.NO_RUNNING_RATE, None, top, axis)
    if p90 is None:
        return ThresholdChoice(int(win.level), win.level, lose.level if lose else None, None, None,
                               Why.NO_RUNNING_LEVEL, UNIT_CONCURRENCY, top, axis)
    why = Why.RUNNING_P90
    threshold = max(1, int(math.floor(p90)))
    lose_p50 = None
    if lose is not None:
        lose_p50 = lose.running_p50 if lose.running_p50 is not None else float(lose.level)
        if threshold >= lose_p50:
            threshold = max(1, int(math.ceil(lose_p50)) - 1)
            why = Why.KEPT_BELOW
    return ThresholdChoice(threshold, win.level, lose.level if lose else None, p90, lose_p50, why,
                           UNIT_RUNNING, top, axis)
