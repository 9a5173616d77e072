"""The sweep order: arms x context lengths x concurrency levels x repeats, repeats
interleaved across arms.

Repeat 0 runs the arms A B C, repeat 1 runs C B A, repeat 2 A B C again, and so on: a
slow drift of the machine (thermals, a neighbour) or an adaptive controller's history
then does not favour whichever arm always runs first. Within an arm's turn the levels
run low to high, one context length (input, output) after another, shortest first; a sweep
of one length has no length in its points (`None`: the run's settings say it), as before
lengths were an axis. Consecutive points of the same arm form a group, so arms that share
GPUs are launched once per group (C ends repeat 0 and starts repeat 1: one launch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from specops.errors import ConfigError
from specops.records.schema import AXIS_RATE
from specops.records.store import load_results

#: one context length of a sweep: (input tokens, output tokens)
Length = tuple[int, int]


@dataclass(frozen=True, order=True)
class Point:
    """One benchmark point: which arm, at which load level, which repeat (0-based), and at
    which input/output length when the sweep has several (None: the run's one length). The
    level is a concurrency (closed loop), or a request rate (`rate`, open loop; concurrency 0)."""

    arm: str
    concurrency: int
    repeat: int
    input_len: int | None = None
    output_len: int | None = None
    rate: float | None = None

    @property
    def level(self) -> float:
        return self.rate if self.rate is not None else self.concurrency

    def level_text(self) -> str:
        return f"rate={self.rate:g}/s" if self.rate is not None else f"c={self.concurrency}"

    def label(self) -> str:
        length = "" if self.input_len is None else f" in={self.input_len} out={self.output_len}"
        return f"{self.arm} {self.level_text()}{length} r={self.repeat}"


def length_pairs(input_lens: Sequence[int], output_lens: Sequence[int]) -> list[Length]:
    """Every (input, output) pair of the two lists, shortest input first."""
    return sorted({(i, o) for i in input_lens for o in output_lens})


def _validate(arms: Sequence[str], levels: Sequence[float], repeats: int, axis: str, command: str) -> None:
    if not arms:
        raise ConfigError("no arms to benchmark", where=f"{command} --arms")
    dup = sorted({a for a in arms if list(arms).count(a) > 1})
    if dup:
        raise ConfigError(f"arm listed twice: {', '.join(dup)}", where=f"{command} --arms")
    flag = f"{command} --{axis}"
    if not levels:
        raise ConfigError(f"no {axis} levels", where=flag)
    for level in levels:
        if axis == AXIS_RATE:
            if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < float("inf"):
                raise ConfigError(f"rate {level!r} is not a positive number of requests per second", where=flag)
        elif isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise ConfigError(f"concurrency level {level!r} is not a positive integer", where=flag)
    if len(set(levels)) != len(levels):
        raise ConfigError(f"a {axis} level is listed twice", where=flag)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be a positive integer, got {repeats!r}", where=f"{command} --repeats")


def arm_order(arms: Sequence[str], repeat: int) -> list[str]:
    """The arms' order in one repeat: as given on even repeats, reversed on odd ones."""
    return list(arms) if repeat % 2 == 0 else list(reversed(arms))


def plan_points(arms: Sequence[str], levels: Sequence[float], repeats: int,
                lengths: Sequence[Length] | None = None, axis: str = "concurrency",
                command: str = "bench") -> list[Point]:
    """Every point in run order: repeat, then arm (interleaved ABC/CBA), then context length
    (shortest first; only when `lengths` has more than one), then level ascending. `axis`:
    the levels are concurrencies, or request rates (AXIS_RATE); `command` (bench or tune)
    names the flag a bad value came from."""
    _validate(arms, levels, repeats, axis, command)
    ordered_levels = sorted(levels)
    many: list[tuple[int | None, int | None]] = (
        [(i, o) for i, o in sorted(set(lengths))] if lengths and len(set(lengths)) > 1 else [(None, None)])
    if axis == AXIS_RATE:
        return [Point(arm, 0, r, i, o, float(level))
                for r in range(repeats) for arm in arm_order(arms, r) for i, o in many for level in ordered_levels]
    return [Point(arm, int(level), r, i, o)
            for r in range(repeats)
            for arm in arm_order(arms, r)
            for i, o in many
            for level in ordered_levels]


def points_for_arm(points: Iterable[Point], arm: str) -> list[Point]:
    """One arm's points in order: arms on their own GPUs/hosts sweep independently."""
    return [p for p in points if p.arm == arm]


def point_groups(points: Iterable[Point]) -> list[list[Point]]:
    """The points grouped by what arms measured side by side share (repeat, length, level),
    in the order each group first appears: the same repeat-major order, each arm's point of
    a group at once."""
    groups: dict[tuple[int, int | None, int | None, float], list[Point]] = {}
    for p in points:
        groups.setdefault((p.repeat, p.input_len, p.output_len, p.level), []).append(p)
    return list(groups.values())


def done_points(run_dir: Path, *, host: str | None = None) -> set[Point]:
    """Points with an ok record in the run directory (for `host`, when given)."""
    done: set[Point] = set()
    for rec in load_results(run_dir):
        if rec.ok and (host is None or rec.host == host):
            done.add(Point(rec.arm, rec.concurrency, rec.repeat, rate=rec.rate))
    return done


def missing_points(run_dir: Path, matrix: Iterable[Point], *, host: str | None = None) -> list[Point]:
    """The points of `matrix` still to run for --resume: no ok record yet (failed ones re-run).

    Keeps the matrix order, so a resumed sweep interleaves arms as the original did.
    """
    done = done_points(run_dir, host=host)
    return [p for p in matrix if p not in done]
