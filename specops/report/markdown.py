"""report.md: the bench report as markdown, rendered from the summary decide/summary.py
computed (and the tuning section, from tune.json, where `specops tune` made the run);
`terminal_table`, the same results for the console; `result_columns`, the results table's
columns report.md and report.html share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from specops.bench.repeats import AUTO_MAX, RepeatRule
from specops.config.slo import Slo
from specops.decide.summary import (
    ADAPTIVE_TOLERANCE,
    DRAFTING_OFF_SHARE,
    Cell,
    HostSummary,
    Ratio,
    ReportSummary,
    context_rows,
)
from specops.engines import ENGINES
from specops.records.manifest import Manifest, ManifestLike, as_manifest
from specops.records.schema import AXIS_RATE, ResultRecord, level_text, load_level
from specops.render import fit
from specops.render.fit import Column, Fitted, fit_table
from specops.report.phases import markdown_section
from specops.report.tune import tune_lines
from specops.report.words import (
    THRESHOLD_RULE,
    adaptive_text,
    crossover_cell,
    crossover_text,
    drafting_cell,
    host_label,
    per_level_texts,
    running_cell,
    saturation_text,
    threshold_text,
)
from specops.secrets import clip

REPORT_MD = "report.md"


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


SIM_BANNER = ("> **SIMULATED RESULTS.** These numbers come from specops's SGLang simulator, not a GPU: "
              "they show the method and the shape of the curves, not your hardware.")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


@dataclass(frozen=True)
class ResultColumn:
    """One column of the results table, which report.md and report.html both render (two
    hand-written copies once differed: the HTML lacked the drafting evidence)."""

    header: str
    text: Callable[[float, str, Cell, Ratio | None], str]
    sort: Callable[[float, str, Cell, Ratio | None], float | None] = lambda c, arm, cell, ratio: None
    left: bool = False


def _ratio_text(ratio: Ratio | None) -> str:
    return "-" if ratio is None else f"{ratio.ratio:.3f} ({ratio.low:.3f}-{ratio.high:.3f})"


def _verdict(value: bool | None) -> str:
    return "-" if value is None else ("SATURATED" if value else "no")


def _level_header(s: HostSummary) -> str:
    if s.phases is not None:
        return "phases: mean rate (req/s)"
    return "rate (req/s)" if s.axis == AXIS_RATE else "concurrency"


def _level_cell(s: HostSummary, c: float) -> str:
    """A row's level in the terminal table: a concurrency, a rate, or a phase run's rates."""
    if s.phases is not None:
        return ",".join(f"{r.rate:g}" for r in s.phases.rows) + "/s"
    return f"{c:g}/s" if s.axis == AXIS_RATE else str(c)


def result_columns(s: HostSummary, slo: Slo | None = None) -> list[ResultColumn]:
    """The results table's columns for one host: goodput and SLO met with an SLO, cost with a price."""
    cols = [
        ResultColumn(_level_header(s), lambda c, a, cell, r: f"{c:g}",
                     lambda c, a, cell, r: c),
        ResultColumn("arm", lambda c, a, cell, r: a, left=True),
        ResultColumn("output tok/s (median)", lambda c, a, cell, r: f"{cell.median_tps:.1f}",
                     lambda c, a, cell, r: cell.median_tps),
        ResultColumn("spread (min-max)", lambda c, a, cell, r: f"{cell.min_tps:.1f}-{cell.max_tps:.1f}",
                     lambda c, a, cell, r: cell.max_tps - cell.min_tps),
        ResultColumn("repeats", lambda c, a, cell, r: str(cell.repeats), lambda c, a, cell, r: cell.repeats),
        ResultColumn("TTFT ms", lambda c, a, cell, r: _fmt(cell.median_ttft_ms),
                     lambda c, a, cell, r: cell.median_ttft_ms),
        ResultColumn("TPOT ms", lambda c, a, cell, r: _fmt(cell.median_tpot_ms, 2),
                     lambda c, a, cell, r: cell.median_tpot_ms),
        ResultColumn("accept len", lambda c, a, cell, r: _fmt(cell.shown_accept_length(), 2),
                     lambda c, a, cell, r: cell.shown_accept_length()),
        ResultColumn("running batch p50/p90", lambda c, a, cell, r: running_cell(cell),
                     lambda c, a, cell, r: cell.running_p50),
        ResultColumn("drafting", lambda c, a, cell, r: drafting_cell(cell),
                     lambda c, a, cell, r: cell.drafting_off_share),
        ResultColumn("ratio to baseline (spread)", lambda c, a, cell, r: _ratio_text(r),
                     lambda c, a, cell, r: None if r is None else r.ratio),
    ]
    if s.axis == AXIS_RATE:
        cols.append(ResultColumn("saturated", lambda c, a, cell, r: _verdict(cell.saturated),
                                 lambda c, a, cell, r: None if cell.saturated is None else float(cell.saturated)))
    if slo:
        cols += [ResultColumn("goodput req/s", lambda c, a, cell, r: _fmt(cell.goodput, 2),
                              lambda c, a, cell, r: cell.goodput),
                 ResultColumn("SLO met", lambda c, a, cell, r: _pct(cell.attainment),
                              lambda c, a, cell, r: cell.attainment)]
    if any(cell.cost_per_mtok is not None for cell in s.cells.values()):
        cols.append(ResultColumn("$ / 1M output tok", lambda c, a, cell, r: _fmt(cell.cost_per_mtok, 3),
                                 lambda c, a, cell, r: cell.cost_per_mtok))
    return cols


def _md_results(s: HostSummary, slo: Slo | None = None) -> list[str]:
    cols = result_columns(s, slo)
    label = host_label(s)
    out = [f"## Results{' on ' + label if label else ''}", "",
           "| " + " | ".join(col.header for col in cols) + " |",
           "|" + "".join("---|" if col.left else "---:|" for col in cols)]
    for row in s.rows():
        out.append("| " + " | ".join(_md_escape(col.text(*row)) for col in cols) + " |")
    out += ["", f"- crossover: {crossover_text(s.crossover)}", f"- recommended threshold: {threshold_text(s)}",
            f"- adaptive: {adaptive_text(s)}"]
    out += [f"- {line}" for line in per_level_texts(s)]
    out += [f"- {line}" for line in (saturation_text(s),) if line is not None]
    return out + [""]


def _md_failed(failed: list[ResultRecord]) -> list[str]:
    if not failed:
        return []
    axis = "rate" if any(r.rate is not None for r in failed) else "concurrency"
    out = ["## Failed points", "", f"| host | arm | {axis} | repeat | error |", "|---|---|---:|---:|---|"]
    for r in failed:
        err = _md_escape(str(r.error or "unknown error"))
        out.append(f"| {r.host} | {r.arm} | {load_level(r):g} | "
                   f"{r.repeat} | {clip(err, 300, keep='start')} |")
    out.append("")
    for r in failed:
        excerpt = r.extra.get("log_excerpt")
        if excerpt:
            out += [f"Server log at the failure of {r.host} {r.arm} "
                    f"{level_text(r)} repeat {r.repeat}:", "", "```",
                    str(excerpt).rstrip(), "```", ""]
    return out


CONTEXT_PLOT = "crossover_context.png"


def _md_context(summary: ReportSummary) -> list[str]:
    rows = context_rows(summary)
    if not rows:
        return []
    out = ["## Context length", "",
           "The crossover and threshold at each context length swept (each length's own points; "
           f"plot: plots/{CONTEXT_PLOT}).", "",
           "| host | input len | output len | crossover | recommended threshold |", "|---|---:|---:|---|---|"]
    for r in rows:
        out.append(f"| {r.host} | {r.input_len} | {r.output_len} | {crossover_cell(r.crossover)} | "
                   f"{_md_escape(threshold_text(r))} |")
    return out + [""]


def tune_section(doc: dict[str, Any]) -> list[str]:
    """The Tuning section of report.md, from tune.json (report.html lists its lines too)."""
    out = ["## Tuning", ""]
    res = doc.get("result") or {}
    for line in tune_lines(res):
        out.append(f"- {line}")
    if res.get("written"):
        out.append(f"- written: {res['written']}")
    out.append("")
    return out


def scheduling_lines(manifest: Manifest) -> list[str]:
    """report.md's lines on scheduling and repeats (one per host that records one)."""
    out = []
    bench = manifest.settings()
    for host, part in sorted((manifest.hosts or {}).items()):
        sched = part.scheduling
        if sched is None:
            continue
        text = f"scheduling on {host}: {sched.mode} ({sched.reason})"
        for check in sched.fairness:
            text += f"; fairness check {check.get('phase')}: {'passed' if check.get('ok') else 'FAILED'}"
            if not check.get("ok") and check.get("why"):
                text += f" ({check['why']})"
        out.append(text)
    if bench.repeats_auto:
        out.append(f"repeats {RepeatRule(True, int(bench.repeats or AUTO_MAX)).describe()}")
    return out


def engine_label(manifest: Manifest) -> str:
    """What the run's `engine_version` is the version of: SGLang, unless every host that says
    served with another engine (a vLLM run records vLLM's release there)."""
    names = {h.engine for h in (manifest.hosts or {}).values() if h.engine}
    titles = {ENGINES[n].title for n in names if n in ENGINES}
    return titles.pop() if len(titles) == 1 else "SGLang"


def render_markdown(summary: ReportSummary, given: ManifestLike) -> str:
    """report.md text: deterministic for the same files."""
    manifest = as_manifest(given)
    out: list[str] = ["# specops bench report", ""]
    if summary.simulated:
        out += [SIM_BANNER, ""]
    facts = []
    for key, label in (("run_id", "run"), ("engine_version", engine_label(manifest)), ("sglang_commit", "commit"),
                       ("device", "device"), ("cpu", "CPU"),  # a CPU host (device cpu): no GPU line
                       ("gpu", "GPU"), ("gpu_count", "GPUs"), ("runner", "runner"), ("dataset", "dataset"),
                       ("dataset_hash", "dataset hash"), ("input_len", "input len"), ("output_len", "output len")):
        if manifest.header(key) not in (None, ""):
            facts.append(f"{label}: `{manifest.header(key)}`")
    if facts:
        out += ["- " + " · ".join(facts), ""]
    out += [f"- {_md_escape(line)}" for line in scheduling_lines(manifest)] + (
        [""] if scheduling_lines(manifest) else [])
    out += ["## Headline", ""] + [f"- {line}" for line in summary.headline] + [""]
    if not summary.hosts:
        out += ["No successful results yet.", ""]
    out += _md_context(summary)
    for s in summary.hosts:
        out += _md_results(s, summary.slo)
        out += markdown_section(s, summary.slo)
    out += tune_section(summary.tuning) if summary.tuning else []
    out += ["## Fairness", ""]
    out += [f"- WARNING: {_md_escape(w)}" for w in summary.warnings]
    if not manifest.arm_sets():
        out.append("- server args not checked: manifest.json records no arms")
    elif not summary.warnings:
        out.append("- no differences found between arms beyond the speculative arguments")
    out.append("")
    if summary.servers:
        out += ["## Servers", ""] + [f"- {_md_escape(line)}" for line in summary.servers] + [""]
    out += _md_failed(summary.failed)
    out += ["## Plots", "", "![output tok/s](plots/throughput.png)", "![ratio to baseline](plots/ratio.png)",
            "![TTFT](plots/ttft.png)", "![TPOT](plots/tpot.png)",
            "![tokens/s per GPU vs tokens/s per user](plots/pareto.png)"]
    out += ([f"![crossover vs context length](plots/{CONTEXT_PLOT})"] if context_rows(summary) else []) + [""]
    out += ["## Method", "",
            "Medians over repeats; spread is min-max. The ratio is the arm's median over baseline's median; "
            "its spread is the min-max of per-repeat ratios. The crossover is the first level where EAGLE-3's "
            "ratio drops below 1, interpolated linearly in log2(concurrency) from the level before. The "
            f"threshold (the rule `specops tune` uses too): {THRESHOLD_RULE}. The adaptive arm should reach "
            f"{ADAPTIVE_TOLERANCE:.2f}x of the better of baseline and EAGLE-3 at every level; the envelope "
            "line gives, over the levels, the worst and the mean of its median over the better arm's. The "
            "speculation tax is the adaptive arm's median over baseline's where its drafting was off: the "
            f"levels its records say so (drafting off for >= {DRAFTING_OFF_SHARE:.0%} of the point), else "
            "the levels whose running batch is above the threshold the arm was launched with. The running "
            "batch is the server's own count of running requests during the point (its `/metrics` gauge "
            "`sglang:num_running_reqs`, else its `#running-req` log lines): median/p90 over the samples, "
            "median over repeats. The objective names what the crossover, threshold, envelope and tax "
            "compare: output throughput, goodput (requests per second whose TTFT, TPOT and E2E met every "
            "limit of the SLO, from the client's per-request latencies; attainment is the share of the "
            "point's requests that did, failed ones never do), or TPOT (compared as 1000 / TPOT ms). The Pareto plot puts each arm's levels at "
            "tokens/s per user (1000 / TPOT ms) against tokens/s per GPU (output tok/s over the arm's "
            "tensor x data parallel size); with a GPU-hour price, $ per 1M output tokens is that price x "
            "GPUs / (3600 x output tok/s) x 1e6.", ""]
    return "\n".join(out)


def terminal_table(summary: ReportSummary, width: int = 80) -> Fitted:
    """The same table for the terminal, no wider than `width` (long host or arm names are
    shortened in the middle)."""
    phased = any(s.phases is not None for s in summary.hosts)
    level = "phases" if phased else ("rate" if any(s.axis == AXIS_RATE for s in summary.hosts) else "c")
    columns = [Column("host", shrink=True), Column(level, "right"), Column("arm", shrink=True),
               Column("tok/s", "right"), Column("spread", "right"), Column("TTFT ms", "right"),
               Column("TPOT ms", "right"), Column("vs base", "right")]
    rows: list[list[fit.Cell]] = []
    for s in summary.hosts:
        for c, arm, cell, ratio in s.rows():
            rows.append([host_label(s), _level_cell(s, c), arm, f"{cell.median_tps:.1f}", f"{cell.min_tps:.0f}-{cell.max_tps:.0f}",
                         _fmt(cell.median_ttft_ms), _fmt(cell.median_tpot_ms, 2),
                         "-" if ratio is None else f"{ratio.ratio:.3f}"])
    return fit_table(columns, rows, width=width, key_columns=3,
                     title="specops bench" + (" (SIMULATED)" if summary.simulated else ""))

