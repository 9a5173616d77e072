"""PNG plots of a bench summary (matplotlib, Agg canvas; no pyplot global state).

throughput.png: output tok/s vs concurrency per arm (log2 x), with the repeat spread;
ratio.png: each speculative arm over baseline with its spread band and a line at 1;
ttft.png / tpot.png: median TTFT and TPOT vs concurrency; pareto.png: tokens/s per GPU vs
tokens/s per user (1000 / TPOT ms), each arm's levels joined, with the frontier no arm beats
on both; crossover_context.png (only for a sweep of several context lengths): each host's
crossover and recommended threshold against input length. Each file is written to a temp
name beside it and renamed into place.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from specops.decide.summary import HostSummary, ReportSummary, context_rows
from specops.fsutil import atomic_write
from specops.records.schema import AXIS_RATE, level_label
from specops.report.markdown import CONTEXT_PLOT
from specops.report.words import host_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PLOT_FILES = ("throughput.png", "ratio.png", "ttft.png", "tpot.png", "pareto.png")
ARM_COLORS = {"baseline": "tab:blue", "eagle3": "tab:orange", "adaptive": "tab:green"}
_OTHER_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _color(host: HostSummary, arm: str) -> str:
    """One colour per arm in every plot (and its band), so the figures read together."""
    if arm in ARM_COLORS:
        return ARM_COLORS[arm]
    others = [a for a in host.arms if a not in ARM_COLORS]
    return _OTHER_COLORS[others.index(arm) % len(_OTHER_COLORS)] if arm in others else "tab:gray"


def figure(title: str, ylabel: str, simulated: bool) -> tuple[Figure, Axes]:
    """A new figure. matplotlib (0.5 s to import) is imported here, where a plot is drawn,
    not at the top: report/artifacts and report/compare import this module on paths that
    draw nothing (`compare --json`, a bench refused before it runs)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

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
    label = host_label(host)
    return f"{label}:{name}" if many and label else name


_DASHES = ("-", "--", ":", "-.")


def _dash(summary: ReportSummary, host: HostSummary) -> str:
    """One line style per context length (solid for a run of one length), so the arms'
    colours still read across lengths."""
    lengths = sorted({h.length for h in summary.hosts if h.length is not None})
    return _DASHES[lengths.index(host.length) % len(_DASHES)] if host.length in lengths else "-"


def _xticks(ax: object, levels: Sequence[float], summary: ReportSummary | None = None) -> None:
    """The levels as ticks; on a rate sweep the axis is the request rate."""
    if summary is not None and any(h.axis == AXIS_RATE for h in summary.hosts):
        ax.set_xlabel("request rate (req/s)")  # type: ignore[attr-defined]
    if levels:
        ax.set_xticks(list(levels))  # type: ignore[attr-defined]
        ax.set_xticklabels([f"{c:g}" for c in levels])  # type: ignore[attr-defined]


def _band(ax: Axes, summary: ReportSummary, host: HostSummary, arm: str,
          points: list[tuple[float, float, float, float]], alpha: float) -> list[float]:
    """One arm's line (middle value per level, in its colour and its host's dash) over the band
    from its low to its high value; `points`: (concurrency, middle, low, high). Returns the
    levels drawn (none for an arm without points)."""
    if not points:
        return []
    xs = [p[0] for p in points]
    color = _color(host, arm)
    ax.plot(xs, [p[1] for p in points], marker="o", color=color, label=_label(host, arm, len(summary.hosts) > 1),
            linestyle=_dash(summary, host))
    ax.fill_between(xs, [p[2] for p in points], [p[3] for p in points], color=color, alpha=alpha)
    return xs


def _throughput(summary: ReportSummary, path: Path) -> Path:
    fig, ax = figure("Output throughput", "output tok/s (median over repeats)", summary.simulated)
    levels: set[float] = set()
    for host in summary.hosts:
        for arm in host.arms:
            cells = [host.cells[(arm, c)] for c in host.levels if (arm, c) in host.cells]
            levels.update(_band(ax, summary, host, arm, [(c.concurrency, c.median_tps, c.min_tps, c.max_tps)
                                                         for c in cells], alpha=0.15))
    _xticks(ax, sorted(levels), summary)
    if levels:
        ax.legend()
    return save_figure(fig, path)


def _ratio(summary: ReportSummary, path: Path) -> Path:
    fig, ax = figure("Speculative / baseline output tok/s", "ratio to baseline", summary.simulated)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--")
    levels: set[float] = set()
    for host in summary.hosts:
        for arm in host.arms:
            ratios = [host.ratios[(arm, c)] for c in host.levels if (arm, c) in host.ratios]
            levels.update(_band(ax, summary, host, arm, [(r.concurrency, r.ratio, r.low, r.high) for r in ratios],
                                alpha=0.2))
        if host.crossover.kind == "interpolated" and host.crossover.value:
            ax.axvline(host.crossover.value, color="grey", linewidth=1, linestyle=":")
    _xticks(ax, sorted(levels), summary)
    if levels:
        ax.legend()
    return save_figure(fig, path)


def _latency(attr: str, title: str, ylabel: str) -> Callable[[ReportSummary, Path], Path]:
    def draw(summary: ReportSummary, path: Path) -> Path:
        fig, ax = figure(title, ylabel, summary.simulated)
        many = len(summary.hosts) > 1
        levels: set[float] = set()
        for host in summary.hosts:
            for arm in host.arms:
                pts = [(c, getattr(host.cells[(arm, c)], attr)) for c in host.levels if (arm, c) in host.cells]
                pts = [(c, v) for c, v in pts if v is not None]
                if not pts:
                    continue
                levels.update(c for c, _ in pts)
                ax.plot([c for c, _ in pts], [v for _, v in pts], marker="o", color=_color(host, arm),
                        label=_label(host, arm, many), linestyle=_dash(summary, host))
        _xticks(ax, sorted(levels), summary)
        if levels:
            ax.legend()
        return save_figure(fig, path)
    return draw


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both axes (higher is better on each), by x."""
    out: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if not out or y > out[-1][1]:
            out.append((x, y))
    return sorted(out)


def _pareto(summary: ReportSummary, path: Path) -> Path:
    fig, ax = figure("Tokens/s per GPU vs tokens/s per user", "output tok/s per GPU (median)", summary.simulated)
    ax.set_xscale("linear")
    ax.set_xlabel("tokens/s per user (1000 / TPOT ms)")
    many = len(summary.hosts) > 1
    drawn = False
    for host in summary.hosts:
        everyone: list[tuple[float, float]] = []
        for arm in host.arms:
            cells = [host.cells[(arm, c)] for c in host.levels if (arm, c) in host.cells]
            pts = [(cell.tps_per_user, cell.tps_per_gpu, cell.concurrency) for cell in cells
                   if cell.tps_per_user is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=_color(host, arm),
                    label=_label(host, arm, many))
            for x, y, c in pts:
                ax.annotate(level_label(c, host.axis), (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
            everyone += [(float(x), y) for x, y, _ in pts]
            drawn = True
        edge = frontier(everyone)
        if len(edge) > 1:
            ax.plot([p[0] for p in edge], [p[1] for p in edge], color="black", linestyle="--", linewidth=1,
                    label=_label(host, "Pareto frontier", many))
    if drawn:
        ax.legend(fontsize="small")
    return save_figure(fig, path)


def _context(summary: ReportSummary, path: Path) -> Path:
    """Crossover (solid) and recommended threshold (dashed) against input length, one line per
    host and output length. A crossover beyond the levels measured ("never") is drawn at the
    highest level with an up-pointing marker; one below the lowest ("every") at the lowest."""
    fig, ax = figure("Crossover vs context length", "concurrency (crossover) / threshold", summary.simulated)
    ax.set_xlabel("input length (tokens)")
    ax.set_yscale("log", base=2)
    rows = context_rows(summary)
    levels = {h.host: h.levels for h in summary.hosts}
    series = sorted({(r.host, r.output_len) for r in rows})
    many = len(series) > 1
    for n, (host, out_len) in enumerate(series):
        mine = sorted((r for r in rows if (r.host, r.output_len) == (host, out_len)), key=lambda r: r.input_len)
        color = _OTHER_COLORS[n % len(_OTHER_COLORS)] if many else "tab:orange"
        name = f"{host + ' ' if host else ''}out={out_len}" if many else ""
        pts = []
        for r in mine:
            lv = levels.get(host) or [1]
            c = r.crossover
            if c.kind == "interpolated" and c.value:
                pts.append((r.input_len, c.value, "o"))
            elif c.kind == "never":
                pts.append((r.input_len, float(max(lv)), "^"))
            elif c.kind == "every":
                pts.append((r.input_len, float(min(lv)), "v"))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, label=f"crossover {name}".strip())
            for x, y, marker in pts:
                ax.plot([x], [y], marker=marker, color=color, linestyle="none")
        th = [(r.input_len, r.threshold) for r in mine if r.threshold]
        if th:
            ax.plot([p[0] for p in th], [p[1] for p in th], color=color, linestyle="--", marker="s",
                    label=f"threshold {name}".strip())
    xs = sorted({r.input_len for r in rows})
    _xticks(ax, xs)
    ys = sorted({c for h in summary.hosts if h.length is not None for c in h.levels})
    if ys:
        ax.set_yticks(ys)
        ax.set_yticklabels([str(c) for c in ys])
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return save_figure(fig, path)


def write_plots(summary: ReportSummary, plots_dir: Path) -> list[Path]:
    """Write the PNGs of PLOT_FILES into plots_dir (and CONTEXT_PLOT for a sweep of several
    context lengths); returns their paths."""
    plots_dir = Path(plots_dir)
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawers = (_throughput, _ratio,
               _latency("median_ttft_ms", "Time to first token", "TTFT ms (median of means)"),
               _latency("median_tpot_ms", "Time per output token", "TPOT ms (median of means)"), _pareto)
    paths = [draw(summary, plots_dir / name) for draw, name in zip(drawers, PLOT_FILES, strict=True)]
    if context_rows(summary):
        paths.append(_context(summary, plots_dir / CONTEXT_PLOT))
    return paths
