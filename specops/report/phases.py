"""A phase run's section of the report (bench --phases): a table per host of every phase and
arm, the adaptive arm's envelope and switching lag per phase, and the plot over time
(report/phase_plot.py draws it).

The figures are decide/phases.py's; this module only words them."""

from __future__ import annotations

import html
from typing import Any

from specops.decide.phases import ADAPTIVE_ARM, PhaseCell, PhaseSummary
from specops.decide.summary import HostSummary
from specops.report.words import LAG_DEFINITION, host_label, lag_text, phase_envelope_text

PHASES_PLOT = "phases.png"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _lag(cell: PhaseCell | None) -> str:
    if cell is None or cell.worst_lag_steps is None:
        return "-"
    return f"{cell.worst_lag_steps} steps / {(cell.worst_lag_s or 0.0) * 1000:.1f} ms"


def _rows(p: PhaseSummary, goodput: bool) -> list[list[str]]:
    out = []
    for row in p.rows:
        adaptive = row.cells.get(ADAPTIVE_ARM)
        for arm in p.arms:
            cell = row.cells.get(arm)
            if cell is None:
                continue
            f = cell.figures
            mine = arm == ADAPTIVE_ARM
            out.append([row.label, arm, _fmt(cell.throughput), _fmt(f.get("p50_ttft_ms")), _fmt(f.get("p99_ttft_ms")),
                        _fmt(f.get("p50_tpot_ms"), 2), _fmt(f.get("p99_tpot_ms"), 2),
                        *([_fmt(cell.goodput, 2)] if goodput else []),
                        "-" if cell.switches is None else str(cell.switches),
                        _lag(adaptive) if mine else "-",
                        f"{row.envelope:.3f}x" if mine and row.envelope is not None else "-"])
    return out


HEADERS = ["phase", "arm", "output tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms"]
TAIL = ["switches", "worst lag", "envelope"]


def _headers(goodput: bool) -> list[str]:
    return HEADERS + (["goodput req/s"] if goodput else []) + TAIL


def _notes(p: PhaseSummary) -> list[str]:
    return [f"phases: `{p.spec}`", lag_text(p), phase_envelope_text(p),
            f"lag: {LAG_DEFINITION} (bench/switching.py); the simulator's lines carry its model clock"]


def markdown_section(s: HostSummary, slo: Any = None) -> list[str]:
    """report.md's Phases section for one host; nothing for a run without phases."""
    p = s.phases
    if p is None:
        return []
    heads = _headers(bool(slo))
    label = host_label(s)
    out = [f"## Phases{' on ' + label if label else ''}", "", "| " + " | ".join(heads) + " |",
           "|---|---|" + "---:|" * (len(heads) - 2)]
    out += ["| " + " | ".join(r) + " |" for r in _rows(p, bool(slo))]
    out += [""] + [f"- {line}" for line in _notes(p)] + ["", f"![load phases over time](plots/{PHASES_PLOT})", ""]
    return out


def html_section(s: HostSummary, slo: Any = None) -> list[str]:
    """report.html's Phases section for one host (the same rows as report.md)."""
    p = s.phases
    if p is None:
        return []
    e = html.escape
    heads = _headers(bool(slo))
    label = host_label(s)
    out = [f"<h2>Phases{' on ' + e(label) if label else ''}</h2>",
           '<table class="sortable"><thead><tr>'
           + "".join(f'<th class="l">{e(h)}</th>' if i < 2 else f"<th>{e(h)}</th>" for i, h in enumerate(heads))
           + "</tr></thead><tbody>"]
    for r in _rows(p, bool(slo)):
        out.append("<tr>" + "".join(f'<td class="l">{e(v)}</td>' if i < 2 else f"<td>{e(v)}</td>"
                                    for i, v in enumerate(r)) + "</tr>")
    out.append("</tbody></table><ul>" + "".join(f"<li>{e(line)}</li>" for line in _notes(p)) + "</ul>")
    return out


def phases_doc(p: PhaseSummary | None) -> dict[str, Any] | None:
    """summary.json's `hosts[].phases`."""
    if p is None:
        return None
    return {
        "spec": p.spec, "arms": p.arms, "threshold": p.threshold,
        "lag": {"definition": LAG_DEFINITION, "worst_steps": p.worst_lag_steps, "worst_s": p.worst_lag_s},
        "worst_lag_steps": p.worst_lag_steps, "worst_lag_s": p.worst_lag_s,
        "phases": [{"phase": r.phase, "label": r.label, "rate": r.rate, "duration_s": r.duration_s,
                    "best_static": r.best_static, "envelope": r.envelope,
                    "arms": {a: {**c.figures, "repeats": c.repeats, "requests": c.requests, "goodput": c.goodput,
                                 "slo_attainment": c.attainment, "switches": c.switches,
                                 "worst_lag_steps": c.worst_lag_steps, "worst_lag_s": c.worst_lag_s}
                             for a, c in r.cells.items()}}
                   for r in p.rows],
    }
