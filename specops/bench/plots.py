"""PNG plots of a bench summary (matplotlib, Agg canvas; no pyplot global state).

throughput.png: output tok/s vs concurrency per arm (log2 x), with the repeat spread;
ratio.png: each speculative arm over baseline with its spread band and a line at 1;
ttft.png / tpot.png: median TTFT and TPOT vs concurrency. Each file is written to a temp
name beside it and renamed into place.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from specops.bench.report import HostSummary, ReportSummary
from specops.bench.store import atomic_write

PLOT_FILES = ("throughput.png", "ratio.png", "ttft.png", "tpot.png")
ARM_COLORS = {"baseline": "tab:blue", "eagle3": "tab:orange", "adaptive": "tab:green"}
_OTHER_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _color(host: HostSummary, arm: str) -> str:
    """One colour per arm in every plot (and its band), so the figures read together."""
    if arm in ARM_COLORS:
        return ARM_COLORS[arm]
    others = [a for a in host.arms if a not in ARM_COLORS]
    return _OTHER_COLORS[others.index(arm) % len(_OTHER_COLORS)] if arm in others else "tab:gray"


def figure(title: str, ylabel: str, simulated: bool) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.set_title(title + ("  [SIMULATED]" if simulated else ""))
    ax.grid(True, which="both", alpha=0.3)
    return fig, ax


def save_figure(fig: Figure, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    atomic_write(path, buf.getvalue())
    return path


def _label(host: HostSummary, name: str, many: bool) -> str:
    return f"{host.host}:{name}" if many and host.host else name


def _xticks(ax: object, levels: list[int]) -> None:
    if levels:
        ax.set_xticks(levels)  # type: ignore[attr-defined]
        ax.set_xticklabels([str(c) for c in levels])  # type: ignore[attr-defined]


def _throughput(summary: ReportSummary, path: Path) -> Path:
    fig, ax = figure("Output throughput", "output tok/s (median over repeats)", summary.simulated)
    many = len(summary.hosts) > 1
    levels: set[int] = set()
    for host in summary.hosts:
        for arm in host.arms:
            cells = [host.cells[(arm, c)] for c in host.levels if (arm, c) in host.cells]
            if not cells:
                continue
            xs = [c.concurrency for c in cells]
            levels.update(xs)
            color = _color(host, arm)
            ax.plot(xs, [c.median_tps for c in cells], marker="o", color=color, label=_label(host, arm, many))
            ax.fill_between(xs, [c.min_tps for c in cells], [c.max_tps for c in cells], color=color, alpha=0.15)
    _xticks(ax, sorted(levels))
    if levels:
        ax.legend()
    return save_figure(fig, path)


def _ratio(summary: ReportSummary, path: Path) -> Path:
    fig, ax = figure("Speculative / baseline output tok/s", "ratio to baseline", summary.simulated)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    many = len(summary.hosts) > 1
    levels: set[int] = set()
    for host in summary.hosts:
        for arm in host.arms:
            ratios = [host.ratios[(arm, c)] for c in host.levels if (arm, c) in host.ratios]
            if not ratios:
                continue
            xs = [r.concurrency for r in ratios]
            levels.update(xs)
            color = _color(host, arm)
            ax.plot(xs, [r.ratio for r in ratios], marker="o", color=color, label=_label(host, arm, many))
            ax.fill_between(xs, [r.low for r in ratios], [r.high for r in ratios], color=color, alpha=0.2)
        if host.crossover.kind == "interpolated" and host.crossover.value:
            ax.axvline(host.crossover.value, color="grey", linewidth=1, linestyle=":")
    _xticks(ax, sorted(levels))
    if levels:
        ax.legend()
    return save_figure(fig, path)


def _latency(attr: str, title: str, ylabel: str) -> Callable[[ReportSummary, Path], Path]:
    def draw(summary: ReportSummary, path: Path) -> Path:
        fig, ax = figure(title, ylabel, summary.simulated)
        many = len(summary.hosts) > 1
        levels: set[int] = set()
        for host in summary.hosts:
            for arm in host.arms:
                pts = [(c, getattr(host.cells[(arm, c)], attr)) for c in host.levels if (arm, c) in host.cells]
                pts = [(c, v) for c, v in pts if v is not None]
                if not pts:
                    continue
                levels.update(c for c, _ in pts)
                ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", color=_color(host, arm),
                        label=_label(host, arm, many))
        _xticks(ax, sorted(levels))
        if levels:
            ax.legend()
        return save_figure(fig, path)
    return draw


def write_plots(summary: ReportSummary, plots_dir: Path) -> list[Path]:
    """Write the four PNGs into plots_dir; returns their paths."""
    plots_dir = Path(plots_dir)
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawers = (_throughput, _ratio,
               _latency("median_ttft_ms", "Time to first token", "TTFT ms (median of means)"),
               _latency("median_tpot_ms", "Time per output token", "TPOT ms (median of means)"))
    return [draw(summary, plots_dir / name) for draw, name in zip(drawers, PLOT_FILES, strict=True)]
