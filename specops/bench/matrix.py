"""The sweep order: arms x concurrency levels x repeats, repeats interleaved across arms.

Repeat 0 runs the arms A B C, repeat 1 runs C B A, repeat 2 A B C again, and so on: a
slow drift of the machine (thermals, a neighbour) or an adaptive controller's history
then does not favour whichever arm always runs first. Within an arm's turn the levels
run low to high. Consecutive points of the same arm form a group, so arms that share
GPUs are launched once per group (C ends repeat 0 and starts repeat 1: one launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from specops.errors import ConfigError


@dataclass(frozen=True, order=True)
class Point:
    """One benchmark point: which arm, at which concurrency, which repeat (0-based)."""

    arm: str
    concurrency: int
    repeat: int

    def label(self) -> str:
        return f"{self.arm} c={self.concurrency} r={self.repeat}"


def _validate(arms: Sequence[str], levels: Sequence[int], repeats: int) -> None:
    if not arms:
        raise ConfigError("no arms to benchmark", where="bench --arms")
    dup = sorted({a for a in arms if list(arms).count(a) > 1})
    if dup:
        raise ConfigError(f"arm listed twice: {', '.join(dup)}", where="bench --arms")
    if not levels:
        raise ConfigError("no concurrency levels", where="bench --concurrency")
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise ConfigError(f"concurrency level {level!r} is not a positive integer", where="bench --concurrency")
    if len(set(levels)) != len(levels):
        raise ConfigError("a concurrency level is listed twice", where="bench --concurrency")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be a positive integer, got {repeats!r}", where="bench --repeats")


def arm_order(arms: Sequence[str], repeat: int) -> list[str]:
    """The arms' order in one repeat: as given on even repeats, reversed on odd ones."""
    return list(arms) if repeat % 2 == 0 else list(reversed(arms))


def plan_points(arms: Sequence[str], levels: Sequence[int], repeats: int) -> list[Point]:
    """Every point in run order: repeat, then arm (interleaved ABC/CBA), then level ascending."""
    _validate(arms, levels, repeats)
    ordered_levels = sorted(levels)
    return [Point(arm, level, r)
            for r in range(repeats)
            for arm in arm_order(arms, r)
            for level in ordered_levels]


def points_for_arm(points: Iterable[Point], arm: str) -> list[Point]:
    """One arm's points in order: arms on their own GPUs/hosts sweep independently."""
    return [p for p in points if p.arm == arm]
