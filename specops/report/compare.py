"""`specops compare`: two or more runs side by side (before/after a patch, two SGLang
versions, two GPUs).

Points are matched by arm and concurrency. A difference is marked only where it exceeds
the run-to-run spread: the min-max bands of the two runs do not overlap. Runs whose
client settings differ (prompt lengths, dataset, prompt counts, runner) measure
different things and are refused, naming the difference, unless the caller allows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.decide.summary import Cell, HostSummary
from specops.errors import ConfigError
from specops.fsutil import atomic_write
from specops.records import store
from specops.records.manifest import Manifest
from specops.records.schema import AXIS_RATE
from specops.report.plots import figure, save_figure
from specops.report.summary import summarize
from specops.report.summary_doc import envelope_doc, settings_of, tax_doc
from specops.report.words import host_label, tax_text

#: Settings two runs must share for their points to be compared.
MUST_MATCH = ("runner", "dataset", "input_len", "output_len", "num_prompts", "prompts_per_level")
COMPARE_FILES = ("compare.md", "compare.json", "compare.png")


@dataclass
class Series:
    """One run on one host: a column of the comparison."""

    label: str
    run_dir: Path
    host: HostSummary
    headline: list[str]
    simulated: bool


@dataclass
class Row:
    arm: str
    concurrency: float
    cells: list[Cell | None]
    ratios: list[float | None]           # each series' median over the first series'
    significant: list[bool]              # band of that series disjoint from the first's

    def to_dict(self, labels: list[str]) -> dict[str, Any]:
        return {"arm": self.arm, "concurrency": self.concurrency, "runs": [
            None if c is None else {"run": label, "median": c.median_tps, "min": c.min_tps, "max": c.max_tps,
                                    "ratio_to_first": r, "beyond_spread": s}
            for label, c, r, s in zip(labels, self.cells, self.ratios, self.significant, strict=True)]}


@dataclass
class Comparison:
    series: list[Series]
    rows: list[Row]
    setting_differences: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [s.label for s in self.series]


def load_series(run_dirs: list[Path]) -> tuple[list[Series], list[Manifest]]:
    series: list[Series] = []
    manifests: list[Manifest] = []
    for run_dir in run_dirs:
        if not (run_dir / "results.jsonl").exists():
            raise ConfigError(f"{run_dir} has no results.jsonl (not a bench run directory)")
        manifest = store.load_manifest(run_dir)
        summary = summarize(store.load_results(run_dir), manifest)
        manifests.append(manifest)
        name = str(manifest.run_id or run_dir.name)
        for host in summary.hosts:
            label = f"{name}:{host_label(host)}" if len(summary.hosts) > 1 else name
            series.append(Series(label, run_dir, host, summary.headline, summary.simulated))
    return series, manifests


def setting_differences(run_dirs: list[Path], manifests: list[Manifest]) -> list[str]:
    """`input_len: 256 in A, 512 in B`, one line per setting that differs."""
    settings = [settings_of(m) for m in manifests]
    out = []
    for key in MUST_MATCH:
        values = [s.get(key) for s in settings]
        if len({json.dumps(v, sort_keys=True) for v in values}) > 1:
            out.append(f"{key}: " + ", ".join(f"{v!r} in {d.name}" for v, d in zip(values, run_dirs, strict=True)))
    return out


def compare_runs(run_dirs: list[Path], *, allow_different: bool = False) -> Comparison:
    if len(run_dirs) < 2:
        raise ConfigError("compare needs at least two run directories")
    series, manifests = load_series(run_dirs)
    differences = setting_differences(run_dirs, manifests)
    if differences and not allow_different:
        raise ConfigError("the runs were measured with different client settings: " + "; ".join(differences),
                          hint="compare them anyway with --allow-different (the points then measure different things)")
    if len(series) < 2:
        raise ConfigError("fewer than two of these runs have successful results to compare")
    keys = sorted({k for s in series for k in s.host.cells}, key=lambda k: (k[1], _arm_rank(k[0])))
    rows = []
    for arm, c in keys:
        cells = [s.host.cells.get((arm, c)) for s in series]
        if sum(cell is not None for cell in cells) < 2:
            continue
        first = cells[0]
        ratios = [None if cell is None or first is None or first.median_tps <= 0 else cell.median_tps / first.median_tps
                  for cell in cells]
        significant = [bool(cell and first and (cell.min_tps > first.max_tps or cell.max_tps < first.min_tps))
                       for cell in cells]
        rows.append(Row(arm, c, cells, ratios, significant))
    return Comparison(series, rows, differences)


def _arm_rank(arm: str) -> tuple[int, str]:
    order = {"baseline": 0, "eagle3": 1, "adaptive": 2}
    return order.get(arm, 3), arm


def render_markdown(comp: Comparison) -> str:
    out = ["# specops compare", ""]
    if any(s.simulated for s in comp.series):
        out += ["> Some of these runs are SIMULATED: they describe specops's simulator, not a GPU.", ""]
    for s in comp.series:
        out += [f"## {s.label}", f"`{s.run_dir}`", ""] + [f"- {line}" for line in s.headline] + [""]
    if comp.setting_differences:
        out += ["## Settings that differ (compared anyway)", ""] + [f"- {d}" for d in comp.setting_differences] + [""]
    out += _adaptive_table(comp)
    axis = "rate (req/s)" if any(s.host.axis == AXIS_RATE for s in comp.series) else "concurrency"
    head = f"| {axis} | arm | " + " | ".join(comp.labels) + " |"
    out += ["## Output tok/s (median, min-max; ratio to the first run; * beyond the run-to-run spread)", "",
            head, "|---:|---|" + "---:|" * len(comp.labels)]
    for row in comp.rows:
        cols = []
        for i, (cell, ratio, sig) in enumerate(zip(row.cells, row.ratios, row.significant, strict=True)):
            if cell is None:
                cols.append("-")
                continue
            text = f"{cell.median_tps:.1f} ({cell.min_tps:.0f}-{cell.max_tps:.0f})"
            if i and ratio is not None:
                text += f" {ratio:.3f}x{' *' if sig else ''}"
            cols.append(text)
        out.append(f"| {row.concurrency:g} | {row.arm} | " + " | ".join(cols) + " |")
    return "\n".join(out) + "\n"


def _adaptive_table(comp: Comparison) -> list[str]:
    """Per run: how close adaptive came to the better arm, and its speculation tax."""
    if all(s.host.envelope is None for s in comp.series):
        return []
    out = ["## Adaptive vs the better of baseline and EAGLE-3, and the speculation tax", "",
           "| run | worst level | mean | speculation tax (adaptive / baseline, drafting off) |", "|---|---:|---:|---|"]
    for s in comp.series:
        env, tax = s.host.envelope, s.host.tax
        worst = env.worst if env is not None else None
        wtext = "-" if worst is None else f"{worst[1]:.3f}x at c={worst[0]}"
        mtext = "-" if env is None or env.mean is None else f"{env.mean:.3f}x"
        ttext = "-"
        if tax is not None:
            ttext = tax_text(tax).split(": ", 1)[1]
        out.append(f"| {s.label} | {wtext} | {mtext} | {ttext.replace('|', '/')} |")
    return out + [""]


def to_document(comp: Comparison) -> dict[str, Any]:
    return {"schema": "specops.compare/1", "runs": [{"label": s.label, "run_dir": str(s.run_dir),
                                                     "headline": s.headline, "simulated": s.simulated,
                                                     "envelope": envelope_doc(s.host),
                                                     "speculation_tax": tax_doc(s.host)}
                                                    for s in comp.series],
            "setting_differences": comp.setting_differences, "points": [r.to_dict(comp.labels) for r in comp.rows]}


def write_plot(comp: Comparison, path: Path) -> Path:
    """Throughput vs concurrency, each run's arms overlaid: colour per arm, line style per run."""
    fig, ax = figure("Output throughput by run", "output tok/s (median over repeats)",
                     any(s.simulated for s in comp.series))
    styles = ("-", "--", ":", "-.")
    colours = {"baseline": "tab:blue", "eagle3": "tab:orange", "adaptive": "tab:green"}
    levels: set[float] = set()
    for i, s in enumerate(comp.series):
        for arm in s.host.arms:
            cells = [s.host.cells[(arm, c)] for c in s.host.levels if (arm, c) in s.host.cells]
            xs = [c.concurrency for c in cells]
            levels.update(xs)
            ax.plot(xs, [c.median_tps for c in cells], marker="o", linestyle=styles[i % len(styles)],
                    color=colours.get(arm, "tab:gray"), label=f"{s.label}: {arm}")
    if levels:
        ax.set_xticks(sorted(levels))
        ax.set_xticklabels([f"{c:g}" for c in sorted(levels)])
        ax.legend(fontsize="small")
    return save_figure(fig, path)


def write_comparison(comp: Comparison, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "compare.md", out_dir / "compare.json"
    atomic_write(md, render_markdown(comp))
    atomic_write(js, json.dumps(to_document(comp), indent=1, sort_keys=True) + "\n")
    return [md, js, write_plot(comp, out_dir / "compare.png")]
