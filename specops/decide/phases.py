"""A phase run's verdict per phase (bench --phases): what each arm did in each stretch of
load, how the adaptive arm compares with the best static arm there, and how fast it switched.

Figures per phase and arm are medians over repeats of the records' `extra.phases[k]` (the
builtin client's: output tokens streamed during the phase over its length, TTFT/TPOT
percentiles of the requests arriving in it); goodput counts the phase's requests that met
every SLO limit over the phase's window. The envelope of a phase is the adaptive arm's
throughput over the best static arm's (every other arm) there. The switching lag
(bench/switching.py) is the worst over repeats: steps and seconds, per phase and overall.
report/phases.py words it and writes summary.json's part.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from specops.decide.slo import meets
from specops.records.schema import ResultRecord

ADAPTIVE_ARM = "adaptive"
#: the figures of one arm in one phase, median over repeats
FIGURES = ("output_throughput", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms",
           "p99_tpot_ms")
@dataclass
class PhaseCell:
    """One arm in one phase."""

    arm: str
    figures: dict[str, float | None]
    repeats: int
    requests: int
    goodput: float | None = None          # requests/s meeting the SLO over the phase's window
    attainment: float | None = None
    switches: int | None = None           # the server's switch lines in the phase (most over repeats)
    worst_lag_steps: int | None = None
    worst_lag_s: float | None = None

    @property
    def throughput(self) -> float | None:
        return self.figures.get("output_throughput")


@dataclass
class PhaseRow:
    """One phase: its rate and duration, every arm's cell, and the adaptive arm's envelope."""

    phase: int
    label: str
    rate: float
    duration_s: float
    cells: dict[str, PhaseCell] = field(default_factory=dict)
    best_static: str | None = None
    envelope: float | None = None          # adaptive / best static arm's throughput


@dataclass
class PhaseSummary:
    """Every phase of one host's phase run, and the adaptive arm's worst lag over all of them."""

    spec: str
    arms: list[str]
    rows: list[PhaseRow]
    worst_lag_steps: int | None
    worst_lag_s: float | None
    threshold: int | None
    series: dict[str, dict[str, Any]] = field(default_factory=dict)   # arm -> the first repeat's series


def _median(values: Iterable[float | None]) -> float | None:
    vals = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.median(vals) if vals else None


def _most(values: Iterable[Any]) -> Any:
    vals = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(vals) if vals else None


def _goodput(rows: Sequence[Mapping[str, Any]], slo: Mapping[str, float]) -> tuple[float | None, float | None]:
    good, share = [], []
    for row in rows:
        lat, window = row.get("request_latencies_ms"), row.get("window_s")
        if not isinstance(lat, list) or not isinstance(window, (int, float)) or window <= 0:
            continue
        met = sum(1 for one in lat if isinstance(one, list) and meets(one, slo))
        total = int(row.get("requests") or len(lat))
        good.append(met / window)
        share.append(met / total if total else None)
    return _median(good), _median(share)


def _cell(arm: str, rows: Sequence[Mapping[str, Any]], slo: Mapping[str, float] | None) -> PhaseCell:
    cell = PhaseCell(arm, {k: _median(r.get(k) for r in rows) for k in FIGURES}, len(rows),
                     int(_median(r.get("requests") for r in rows) or 0),
                     switches=_most(r.get("switches") for r in rows),
                     worst_lag_steps=_most(r.get("worst_lag_steps") for r in rows),
                     worst_lag_s=_most(r.get("worst_lag_s") for r in rows))
    if slo:
        cell.goodput, cell.attainment = _goodput(rows, slo)
    return cell


def _phase_rows(rec: ResultRecord) -> list[dict[str, Any]]:
    rows = rec.extra.get("phases")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def summarize_phases(records: Sequence[ResultRecord], slo: Mapping[str, float] | None = None) -> PhaseSummary | None:
    """One host's phase run from its ok records; None when they are not a phase run's."""
    recs = [r for r in records if _phase_rows(r)]
    if not recs:
        return None
    by_arm: dict[str, list[ResultRecord]] = {}
    for rec in sorted(recs, key=lambda r: (str(r.arm), int(r.repeat))):
        by_arm.setdefault(str(rec.arm), []).append(rec)
    arms = sorted(by_arm, key=lambda a: (a == ADAPTIVE_ARM, a != "baseline", a))
    template = _phase_rows(recs[0])
    out: list[PhaseRow] = []
    for k, first in enumerate(template):
        row = PhaseRow(k, str(first.get("label")), float(first.get("rate") or 0.0),
                       float(first.get("duration_s") or 0.0))
        for arm, mine in by_arm.items():
            rows = [p for r in mine for p in _phase_rows(r)[k:k + 1]]
            if rows:
                row.cells[arm] = _cell(arm, rows, slo)
        statics = {a: c.throughput for a, c in row.cells.items() if a != ADAPTIVE_ARM and c.throughput}
        if statics:
            row.best_static = max(statics, key=lambda a: statics[a] or 0.0)
            adaptive = row.cells.get(ADAPTIVE_ARM)
            if adaptive is not None and adaptive.throughput is not None:
                row.envelope = round(adaptive.throughput / (statics[row.best_static] or 1.0), 4)
        out.append(row)
    adaptive_cells = [r.cells[ADAPTIVE_ARM] for r in out if ADAPTIVE_ARM in r.cells]
    switching = next((r.extra.get("switching") for r in by_arm.get(ADAPTIVE_ARM, [])
                      if isinstance(r.extra.get("switching"), dict)), None) or {}
    return PhaseSummary(
        spec=str(recs[0].extra.get("phases_spec") or ""), arms=arms, rows=out,
        worst_lag_steps=_most(c.worst_lag_steps for c in adaptive_cells),
        worst_lag_s=_most(c.worst_lag_s for c in adaptive_cells),
        threshold=switching.get("threshold") if isinstance(switching.get("threshold"), int) else None,
        series={arm: dict(mine[0].extra.get("phase_series") or {}) for arm, mine in by_arm.items()})

