"""`--repeats N` or `--repeats auto[:MAX]`: how many times each point is measured.

A fixed count measures every point N times whatever its spread. `auto` measures each point
at least `AUTO_MIN` (2) times and stops it once the answer is clear, at most MAX (default
`AUTO_MAX`, 5) times. The rule, for one arm at one level (and context length):

- settled by spread: its output tok/s over the repeats so far has a coefficient of
  variation (stdev / mean) below `CV_SETTLED` (3 %); or
- settled by decision: every arm at that level has at least 2 repeats, and each other arm's
  mean ratio to baseline is more than `DECISION_SE` (3) standard errors away from 1 (the
  standard error of the ratio from the two arms' CVs: sqrt(cv_a^2/n_a + cv_b^2/n_b)), so
  another repeat cannot flip whether speculation pays there.

The rule reads only the run's ok records, so a resumed run continues a point's repeats
where it stopped, and the step's check (`matrix_for`) agrees with the sweep on what is
still to run.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

from specops.bench.matrix import Point
from specops.errors import ConfigError
from specops.records.schema import CONTEXT_AXIS, ResultRecord, load_level

AUTO_MIN = 2
AUTO_MAX = 5
CV_SETTLED = 0.03
DECISION_SE = 3.0
BASELINE = "baseline"
_AUTO = re.compile(r"^auto(?::(\d+))?$")

#: (load level, input_len, output_len) of a point, lengths None in a one-length sweep
LevelKey = tuple[float, Any, Any]


@dataclass(frozen=True)
class RepeatRule:
    """A fixed count (`auto` False: `most` repeats each) or auto (AUTO_MIN..most)."""

    auto: bool
    most: int

    @property
    def least(self) -> int:
        return min(AUTO_MIN, self.most) if self.auto else self.most

    def text(self) -> str:
        return f"auto:{self.most}" if self.auto else str(self.most)

    def describe(self) -> str:
        if not self.auto:
            return f"{self.most} per point"
        return (f"auto: {self.least} to {self.most} per point, stopping when output tok/s varies by less than "
                f"{CV_SETTLED:.0%} (CV) or each arm's ratio to baseline is {DECISION_SE:g} standard errors from 1")


def parse_repeats(value: Any, where: str = "bench --repeats") -> RepeatRule:
    """An int >= 1, or "auto" / "auto:MAX" (MAX >= 2); anything else is bad input."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError("--repeats must be at least 1", where=where)
        return RepeatRule(False, value)
    text = str(value).strip().lower()
    if text.isdigit():
        return parse_repeats(int(text), where)
    m = _AUTO.match(text)
    if not m:
        raise ConfigError(f"--repeats expects a count or auto[:MAX], got {value!r}", where=where,
                          hint="e.g. --repeats 3, --repeats auto, --repeats auto:8")
    most = int(m.group(1)) if m.group(1) else AUTO_MAX
    if most < AUTO_MIN:
        raise ConfigError(f"--repeats auto:{most}: MAX must be at least {AUTO_MIN}", where=where)
    return RepeatRule(True, most)


def normalized(value: Any, where: str = "bench --repeats") -> int | str:
    """What the settings (and the manifest) keep: the int, or "auto:MAX"."""
    rule = parse_repeats(value, where)
    return rule.text() if rule.auto else rule.most


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample stdev / mean); None with fewer than 2 values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else math.inf


def level_key(rec: ResultRecord | Point) -> LevelKey:
    """The level (and length) of a record or a Point (a record's length only where the
    sweep had several: CONTEXT_AXIS)."""
    level = load_level(rec) if isinstance(rec, ResultRecord) else rec.level
    if isinstance(rec, ResultRecord) and not rec.extra.get(CONTEXT_AXIS):
        return level, None, None
    return level, rec.input_len, rec.output_len


def throughputs(records: Iterable[ResultRecord], host: str | None = None) -> dict[tuple[str, LevelKey], list[float]]:
    """ok output tok/s per (arm, level), one value per repeat (the latest ok record)."""
    latest: dict[tuple[str, LevelKey, int], float] = {}
    for rec in records:
        if not rec.ok or (host is not None and rec.host != host):
            continue
        tput = rec.output_throughput
        if isinstance(tput, (int, float)):
            latest[(str(rec.arm), level_key(rec), int(rec.repeat or 0))] = float(tput)
    out: dict[tuple[str, LevelKey], list[float]] = defaultdict(list)
    for (arm, key, _r), tput in sorted(latest.items(), key=lambda kv: kv[0][2]):
        out[(arm, key)].append(tput)
    return out


def decision_settled(values: dict[tuple[str, LevelKey], list[float]], arms: list[str], key: LevelKey) -> bool:
    """Every arm at the level has >= 2 repeats and each one's ratio to baseline is more
    than DECISION_SE standard errors from 1."""
    if BASELINE not in arms or len(arms) < 2:
        return False
    base = values.get((BASELINE, key), [])
    if len(base) < AUTO_MIN:
        return False
    for arm in arms:
        if arm == BASELINE:
            continue
        vals = values.get((arm, key), [])
        if len(vals) < AUTO_MIN:
            return False
        cv_a, cv_b = cv(vals) or 0.0, cv(base) or 0.0
        ratio = statistics.fmean(vals) / statistics.fmean(base) if statistics.fmean(base) > 0 else 0.0
        se = ratio * math.sqrt(cv_a ** 2 / len(vals) + cv_b ** 2 / len(base))
        if abs(ratio - 1.0) <= DECISION_SE * se or not math.isfinite(se):
            return False
    return True


def settled(rule: RepeatRule, values: dict[tuple[str, LevelKey], list[float]], arms: list[str], arm: str,
            key: LevelKey) -> str | None:
    """Why this arm's point needs no further repeat ("max", "spread", "decision"), or None."""
    n = len(values.get((arm, key), []))
    if n >= rule.most:
        return "max"
    if not rule.auto or n < rule.least:
        return None
    spread = cv(values.get((arm, key), []))
    if spread is not None and spread < CV_SETTLED:
        return "spread"
    return "decision" if decision_settled(values, arms, key) else None
