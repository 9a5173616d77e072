"""plots/phases.png: a phase run over time (bench --phases): the server's running batch, the
share of its steps that drafted, and output tokens per second, one line per arm, the phases'
edges dotted and the adaptive arm's threshold dashed."""

from __future__ import annotations

from pathlib import Path

from specops.decide.phases import PhaseSummary
from specops.decide.summary import ReportSummary
from specops.report.phases import PHASES_PLOT
from specops.report.plots import ARM_COLORS, figure, save_figure

#: bins the tokens/s line is averaged over (a moving window), so it reads as a rate, not spikes
SMOOTH_BINS = 9


def smooth(values: list[float], window: int = SMOOTH_BINS) -> list[float]:
    """A centred moving average (shorter at the ends)."""
    half = max(window, 1) // 2
    out = []
    for i in range(len(values)):
        part = values[max(0, i - half):i + half + 1]
        out.append(sum(part) / len(part))
    return out


def _draw(p: PhaseSummary, path: Path, simulated: bool) -> Path:
    fig, ax = figure("Load phases over time", "output tok/s (smoothed)", simulated)
    fig.set_size_inches(8, 7)
    ax.remove()
    axes = [fig.add_subplot(3, 1, i + 1) for i in range(3)]
    titles = ("running batch (server)", "drafting on (share of steps)", "output tok/s (smoothed)")
    starts = [r.duration_s for r in p.rows]
    for k, a in enumerate(axes):
        a.set_ylabel(titles[k], fontsize="small")
        a.grid(True, alpha=0.3)
        edge = 0.0
        for d in starts[:-1]:
            edge += d
            a.axvline(edge, color="black", linewidth=0.8, linestyle=":")
    for n, arm in enumerate(p.arms):
        series = p.series.get(arm) or {}
        width = float(series.get("bin_s") or 0.0)
        if width <= 0:
            continue
        color = ARM_COLORS.get(arm, f"C{n + 3}")
        tokens = [float(t) / width for t in series.get("tokens") or []]
        xs = [(i + 0.5) * width for i in range(len(tokens))]
        axes[2].plot(xs, smooth(tokens), color=color, label=arm)
        for a, key in ((axes[0], "running"), (axes[1], "drafting")):
            ys = series.get(key) or []
            pts = [(xs[i], y) for i, y in enumerate(ys) if y is not None and i < len(xs)]
            if pts:
                a.step([x for x, _ in pts], [y for _, y in pts], where="mid", color=color, label=arm)
    if p.threshold is not None:
        axes[0].axhline(p.threshold, color="black", linewidth=1, linestyle="--", label=f"threshold {p.threshold}")
    axes[0].set_title("Load phases over time: " + p.spec + ("  [SIMULATED]" if simulated else ""), fontsize="small")
    axes[2].set_xlabel("seconds from the first arrival")
    axes[0].legend(fontsize="x-small")
    fig.tight_layout()
    return save_figure(fig, path)


def write_phase_plot(summary: ReportSummary, plots_dir: Path) -> list[Path]:
    """plots/phases.png for the first host with phases (a run has one timeline); none without."""
    for s in summary.hosts:
        if s.phases is not None:
            plots_dir.mkdir(parents=True, exist_ok=True)
            return [_draw(s.phases, plots_dir / PHASES_PLOT, summary.simulated)]
    return []
