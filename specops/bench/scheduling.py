"""How a host's arms are scheduled: side by side (every arm measures the same point at
once, each with its own client) or one arm at a time (interleaved, ABC/CBA).

Side by side needs three things, else the sweep interleaves:

- the arms do not share a GPU (sweep.gpus_share; a CPU host's arms share its cores);
- the host has at least `CORES_PER_ARM` (2) CPU cores per arm measured at once: one for
  the client, one for its server's CPU side (SGLang's scheduler process keeps a core busy).
  Measured on the 2-core CI machine against the simulator at the `local` host's time scale
  (0.1, baseline 7.7k wall tok/s at c=64): the builtin client used 0.18 core at c=1, 0.34 at
  c=8 and 0.48 at c=64 (CPU seconds / wall seconds, its start included); so 2 cores per arm
  leave the client 2x headroom for bench_serving, which also detokenizes every chunk
  (not measured here: it needs SGLang's runtime packages);
- the fairness check passes: before the sweep, one point (the probe) is measured on each
  arm alone, then on all arms at once; each arm's two figures must agree within
  `START_TOLERANCE` (10 %: no run-to-run spread is known yet, and the simulator's first
  point on a fresh server alone differs by up to 7 % from its later ones). The alone figures
  are the point's results; the side-by-side ones are kept in the manifest only. The check
  runs again at the end (the probe side by side once more, against the alone figures, within
  the arm's run-to-run spread at that level: max(`FAIR_TOLERANCE` 5 %, 2 x CV)); a failure
  then re-measures the side-by-side points one arm at a time.

`--arms-at-once` skips the cores rule (the GPU rule stays: arms on one GPU cannot be up
together); `--one-arm-at-a-time` always interleaves. The manifest's `hosts.<host>.scheduling`
and report.md say which was used and why (records/manifest.py's `Scheduling`).
"""

from __future__ import annotations

import statistics
from typing import Any

from specops.bench.repeats import cv
from specops.records.manifest import Scheduling

AT_ONCE = "arms-at-once"
ONE_AT_A_TIME = "one-arm-at-a-time"
AUTO = "auto"
CHOICES = (AUTO, AT_ONCE, ONE_AT_A_TIME)
CORES_PER_ARM = 2
FAIR_TOLERANCE = 0.05
START_TOLERANCE = 0.10


def decide(asked: str, *, arms: int, shares_gpu: bool, cores: int | None) -> Scheduling:
    """The mode before the fairness check, and the reason in words."""
    if arms < 2:
        return Scheduling(ONE_AT_A_TIME, "one arm to measure", asked)
    if shares_gpu:
        why = "arms share a GPU (or a CPU host's cores), so they cannot be up together"
        if asked == AT_ONCE:
            why += "; --arms-at-once does not apply"
        return Scheduling(ONE_AT_A_TIME, why, asked)
    if asked == ONE_AT_A_TIME:
        return Scheduling(ONE_AT_A_TIME, "--one-arm-at-a-time", asked)
    if asked == AT_ONCE:
        return Scheduling(AT_ONCE, "--arms-at-once (arms on distinct GPUs)", asked)
    need = CORES_PER_ARM * arms
    if cores is None:
        return Scheduling(ONE_AT_A_TIME, "the host's CPU cores are unknown (side by side needs "
                                         f"{CORES_PER_ARM} per arm)", asked)
    if cores < need:
        return Scheduling(ONE_AT_A_TIME, f"{cores} CPU cores < {need} ({CORES_PER_ARM} per arm measured at once)",
                          asked)
    return Scheduling(AT_ONCE, f"arms on distinct GPUs and {cores} CPU cores (>= {CORES_PER_ARM} per arm)", asked)


def probe_level(levels: list[float]) -> float:
    """The level the fairness check measures: the sweep's median level, loaded enough that
    a starved client shows, at a fraction of the top level's cost (c=64 points take the
    longest: 4 x 64 requests)."""
    ordered = sorted(levels)
    return ordered[(len(ordered) - 1) // 2]


def compare(phase: str, alone: dict[str, float | None], together: dict[str, float | None],
            spread: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """One fairness check: per arm, output tok/s alone and side by side and whether they
    agree: within START_TOLERANCE without a `spread`, else max(FAIR_TOLERANCE, 2 x the arm's
    CV over it)."""
    arms, ok, worst = [], True, ""
    for arm, a in alone.items():
        t = together.get(arm)
        values = (spread or {}).get(arm) or []
        tol = START_TOLERANCE if spread is None else max(FAIR_TOLERANCE, 2 * (cv(values) or 0.0))
        if not a or t is None:
            agree, diff = False, None
        else:
            diff = (t - a) / a
            agree = abs(diff) <= tol
        arms.append({"arm": arm, "alone": a, "side_by_side": t, "diff": None if diff is None else round(diff, 4),
                     "tolerance": round(tol, 4), "agree": agree})
        if not agree:
            ok = False
            worst = worst or (f"{arm}: {_tps(t)} tok/s side by side vs {_tps(a)} alone"
                              + ("" if diff is None else f" ({diff:+.1%}, tolerance {tol:.0%})"))
    return {"phase": phase, "ok": ok, "arms": arms, "why": worst}


def _tps(value: float | None) -> str:
    return "no result" if value is None else f"{value:.0f}"


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
