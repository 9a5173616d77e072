"""The report: where speculation stops paying, and the threshold the adaptive arm should use.

Everything here is computed from the run directory's files alone (results.jsonl and
manifest.json), so `specops report RUN_DIR` reproduces report.md byte for byte; nothing
of the render time goes into it.

Statistics: per (host, arm, concurrency), the median over repeats of output tok/s, with
min-max spread; median TTFT and TPOT. The speculative/baseline ratio at a level is the
ratio of the medians; its spread is the min-max of the per-repeat ratios (repeat r of the
arm over repeat r of baseline). Crossover: the first level whose EAGLE-3 ratio is below 1,
interpolated linearly in log2(concurrency) between it and the level before. Threshold:
the largest level L such that EAGLE-3's ratio is >= THRESHOLD_MARGIN at L and every level
below it (a noisy win above a loss is not a reason to speculate there).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from specops.bench import store
from specops.bench.schema import STATUS_OK
from specops.errors import ConfigError
from specops.render import fit
from specops.render.fit import Column, Fitted, fit_table
from specops.servers.fairness import args_from_argv
from specops.servers.fairness import fairness_warnings as fairness_warnings_for_args

BASELINE_ARM = "baseline"
EAGLE_ARM = "eagle3"
ADAPTIVE_ARM = "adaptive"
THRESHOLD_MARGIN = 1.05      # EAGLE-3 must beat baseline by 5% for the threshold to include a level
ADAPTIVE_TOLERANCE = 0.95    # adaptive should reach 95% of the better of baseline and EAGLE-3
REPORT_MD = "report.md"



# ---------------------------------------------------------------- data

@dataclass
class Cell:
    """One arm at one level, over its ok repeats."""

    arm: str
    concurrency: int
    repeats: int
    median_tps: float
    min_tps: float
    max_tps: float
    median_ttft_ms: float | None
    median_tpot_ms: float | None
    accept_length: float | None
    by_repeat: dict[int, float] = field(default_factory=dict)
    running_p50: float | None = None     # the server's running batch (median over repeats)
    running_p90: float | None = None
    server_accept_length: float | None = None

    def running_text(self) -> str:
        if self.running_p50 is None:
            return "-"
        return f"{self.running_p50:g}/{self.running_p90:g}" if self.running_p90 is not None else f"{self.running_p50:g}"


@dataclass
class Ratio:
    """A speculative arm over baseline at one level."""

    arm: str
    concurrency: int
    ratio: float                 # ratio of medians
    low: float                   # min / max of the per-repeat ratios
    high: float
    pairs: int


@dataclass
class Crossover:
    kind: str                    # "interpolated" | "never" | "every" | "n/a"
    value: float | None = None
    below: int | None = None     # the bracketing levels (ratio >= 1 at `below`, < 1 at `above`)
    above: int | None = None

    def text(self) -> str:
        if self.kind == "interpolated":
            return f"c≈{format_level(self.value)} (between {self.below} and {self.above}, log2 interpolation)"
        if self.kind == "never":
            return "never (EAGLE-3 at or above baseline at every level measured)"
        if self.kind == "every":
            return "at every level (EAGLE-3 below baseline from the first level)"
        return "n/a (needs baseline and eagle3 results)"


@dataclass
class HostSummary:
    host: str
    levels: list[int]
    arms: list[str]
    cells: dict[tuple[str, int], Cell]
    ratios: dict[tuple[str, int], Ratio]
    crossover: Crossover
    threshold: int | None
    adaptive_shortfalls: list[tuple[int, float | None]] | None   # None: no adaptive arm

    def rows(self) -> Iterator[tuple[int, str, Cell, Ratio | None]]:
        """(level, arm, cell, ratio to baseline) in table order: levels up, arms in order."""
        for c in self.levels:
            for arm in self.arms:
                cell = self.cells.get((arm, c))
                if cell is not None:
                    yield c, arm, cell, self.ratios.get((arm, c))

    def threshold_text(self) -> str:
        if self.crossover.kind == "n/a":
            return "n/a (needs baseline and eagle3 results)"
        if self.threshold is None:
            return f"none: EAGLE-3 never beats baseline by {THRESHOLD_MARGIN:.2f}x; do not speculate"
        top = max(lvl for lvl in self.levels if (EAGLE_ARM, lvl) in self.ratios)
        if self.threshold == top:
            return f"{self.threshold} (EAGLE-3 wins by >= {THRESHOLD_MARGIN:.2f}x up to the highest level measured)"
        return f"{self.threshold} (speculate while the running batch is <= {self.threshold})"

    def adaptive_text(self) -> str:
        if self.adaptive_shortfalls is None:
            return "n/a (no adaptive results)"
        if not self.adaptive_shortfalls:
            return f"reached >= {ADAPTIVE_TOLERANCE:.2f}x of the better arm at every level"
        parts = [f"c={c} ({'missing' if r is None else f'{r:.3f}x'})" for c, r in self.adaptive_shortfalls]
        return f"below {ADAPTIVE_TOLERANCE:.2f}x of the better arm at " + ", ".join(parts)


@dataclass
class ReportSummary:
    hosts: list[HostSummary]
    simulated: bool
    failed: list[dict[str, Any]]
    warnings: list[str]
    headline: list[str]
    markdown: str
    report_path: Path | None = None
    plot_paths: list[Path] = field(default_factory=list)
    tuning: dict[str, Any] | None = None     # tune.json, when `specops tune` made the run
    servers: list[str] = field(default_factory=list)  # arms shared with other runs, restarted (same arguments)


# ---------------------------------------------------------------- math

def format_level(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}"


def find_crossover(points: Sequence[tuple[int, float]]) -> Crossover:
    """First level with ratio < 1, interpolated in log2(concurrency) from the level before."""
    pts = sorted(points)
    if not pts:
        return Crossover("n/a")
    if pts[0][1] < 1.0:
        return Crossover("every", float(pts[0][0]), None, pts[0][0])
    for (c0, r0), (c1, r1) in zip(pts, pts[1:], strict=False):
        if r1 < 1.0:
            x0, x1 = math.log2(c0), math.log2(c1)
            frac = (r0 - 1.0) / (r0 - r1) if r0 != r1 else 0.0
            return Crossover("interpolated", 2 ** (x0 + frac * (x1 - x0)), c0, c1)
    return Crossover("never")


def recommend_threshold(points: Sequence[tuple[int, float]], margin: float = THRESHOLD_MARGIN) -> int | None:
    """The largest level L with ratio >= margin at L and at every level below it."""
    best = None
    for c, r in sorted(points):
        if r < margin:
            break
        best = c
    return best


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def _ok_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in store.effective_records(records)
            if r.get("status") == STATUS_OK and isinstance(r.get("output_throughput"), (int, float))]


def _arm_order(arms: Iterable[str]) -> list[str]:
    known = [BASELINE_ARM, EAGLE_ARM, ADAPTIVE_ARM]
    arms = set(arms)
    return [a for a in known if a in arms] + sorted(arms - set(known))


def summarize_host(host: str, records: Sequence[dict[str, Any]]) -> HostSummary:
    """Cells, ratios, crossover, threshold and the adaptive check for one host's ok records."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        groups[(str(rec["arm"]), int(rec["concurrency"]))].append(rec)
    cells: dict[tuple[str, int], Cell] = {}
    for (arm, c), recs in groups.items():
        tps = [float(r["output_throughput"]) for r in recs]
        cells[(arm, c)] = Cell(
            arm=arm, concurrency=c, repeats=len(recs),
            median_tps=statistics.median(tps), min_tps=min(tps), max_tps=max(tps),
            median_ttft_ms=_median(r.get("mean_ttft_ms") for r in recs),
            median_tpot_ms=_median(r.get("mean_tpot_ms") for r in recs),
            accept_length=_median(r.get("accept_length") for r in recs),
            by_repeat={int(r.get("repeat", 0)): float(r["output_throughput"]) for r in recs},
            running_p50=_median(r.get("running_req_p50") for r in recs),
            running_p90=_median(r.get("running_req_p90") for r in recs),
            server_accept_length=_median(r.get("server_accept_length") for r in recs),
        )
    levels = sorted({c for _, c in cells})
    arms = _arm_order(a for a, _ in cells)
    ratios: dict[tuple[str, int], Ratio] = {}
    for (arm, c), cell in cells.items():
        base = cells.get((BASELINE_ARM, c))
        if arm == BASELINE_ARM or base is None or base.median_tps <= 0:
            continue
        per = [cell.by_repeat[r] / base.by_repeat[r] for r in sorted(cell.by_repeat)
               if r in base.by_repeat and base.by_repeat[r] > 0]
        ratio = cell.median_tps / base.median_tps
        ratios[(arm, c)] = Ratio(arm, c, ratio, min(per, default=ratio), max(per, default=ratio), len(per))
    eagle_points = [(c, ratios[(EAGLE_ARM, c)].ratio) for c in levels if (EAGLE_ARM, c) in ratios]
    shortfalls: list[tuple[int, float | None]] | None = None
    if ADAPTIVE_ARM in arms:
        shortfalls = []
        for c in levels:
            best = max((cells[(a, c)].median_tps for a in (BASELINE_ARM, EAGLE_ARM) if (a, c) in cells), default=None)
            if best is None:
                continue
            adaptive_cell = cells.get((ADAPTIVE_ARM, c))
            if adaptive_cell is None:
                shortfalls.append((c, None))
            elif adaptive_cell.median_tps < ADAPTIVE_TOLERANCE * best:
                shortfalls.append((c, adaptive_cell.median_tps / best))
    return HostSummary(host, levels, arms, cells, ratios, find_crossover(eagle_points),
                       recommend_threshold(eagle_points), shortfalls)


# ---------------------------------------------------------------- fairness

def _args_of(arm_info: Any) -> dict[str, Any] | None:
    """Resolved server args of an arm from the manifest, or parsed from its launch argv."""
    if not isinstance(arm_info, dict):
        return None
    args = arm_info.get("server_args")
    if isinstance(args, dict):
        return dict(args)
    argv = arm_info.get("argv") or arm_info.get("command")
    return args_from_argv(argv) if isinstance(argv, list) else None


def _manifest_arm_sets(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, {arm: info}) for the manifest's top-level arms and each host's arms."""
    sets = []
    if isinstance(manifest.get("arms"), dict) and manifest["arms"]:
        sets.append(("", manifest["arms"]))
    hosts = manifest.get("hosts")
    if isinstance(hosts, dict):
        for name in sorted(hosts):
            info = hosts[name]
            if isinstance(info, dict) and isinstance(info.get("arms"), dict) and info["arms"]:
                sets.append((f"host {name}: ", info["arms"]))
    return sets


def fairness_warnings(manifest: dict[str, Any], records: Sequence[dict[str, Any]] = ()) -> list[str]:
    """Server args that differ between arms (the rule `deploy` uses too, from
    `specops.servers.fairness`), and uneven client settings."""
    warnings: list[str] = []
    for label, arms in _manifest_arm_sets(manifest):
        parsed = {arm: _args_of(info) for arm, info in sorted(arms.items())}
        known = {a: p for a, p in parsed.items() if p is not None}
        missing = sorted(a for a, p in parsed.items() if p is None)
        if missing:
            warnings.append(f"{label}server args not recorded for {', '.join(missing)}; fairness not checked for them")
        warnings += [label + w for w in fairness_warnings_for_args(known)]
    settings: dict[tuple[str, int], set[tuple]] = defaultdict(set)
    for rec in records:
        settings[(str(rec.get("host", "")), int(rec.get("concurrency", 0)))].add(
            (rec.get("input_len"), rec.get("output_len"), rec.get("num_prompts")))
    for (host, c), combos in sorted(settings.items()):
        if len(combos) > 1:
            shown = "; ".join(f"in={i} out={o} n={n}" for i, o, n in sorted(combos, key=repr))
            warnings.append(f"{'host ' + host + ': ' if host else ''}client settings differ at c={c}: {shown}")
    return warnings


# ---------------------------------------------------------------- servers measured

def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def server_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """What the report says about the server instances its ok points measured (each
    point's `server`, written by the sweep): an arm restarted with the same arguments, an
    arm whose server other runs shared. Raises ConfigError when one arm's points were
    measured under different launch arguments (the config hash: the args hash less the
    simulator's injected faults): those cannot be one curve."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        if isinstance(rec.get("server"), dict):
            groups[(str(rec.get("host", "")), str(rec.get("arm", "")))].append(rec)
    several_hosts = len({h for h, _ in groups}) > 1
    notes = []
    for (host, arm), recs in sorted(groups.items()):
        name = f"{arm} on {host}" if several_hosts else arm
        hashes: dict[str, int] = defaultdict(int)
        for r in recs:
            hashes[str(r["server"].get("config_hash") or r["server"].get("args_hash"))] += 1
        if len(hashes) > 1:
            counts = ", ".join(f"{h[:12]}: {n} point{'s' if n > 1 else ''}" for h, n in sorted(hashes.items()))
            raise ConfigError(f"arm {arm} on host {host}: its points were measured on servers started with different "
                              f"launch arguments (config hash {counts}); one report cannot combine them",
                              hint="each point's `server` in results.jsonl says which; keep one configuration's "
                                   "points, or measure the other in a run of its own (--out)")
        instances = {(r["server"].get("pid"), r["server"].get("proc_start")) for r in recs}
        if len(instances) > 1:
            notes.append(f"{name} restarted {_times(len(instances) - 1)} (same arguments)")
        shared = sorted({str(x) for r in recs for x in (r.get("shared_with") or [])})
        if shared:
            runs = ", ".join(shared)
            notes.append(f"{name} shared its server with run{'s' if len(shared) > 1 else ''} {runs} (identical "
                         f"arguments): their clients loaded it too, so these numbers include that load")
    return notes


# ---------------------------------------------------------------- summary + rendering

def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _headline(summaries: Sequence[HostSummary]) -> list[str]:
    lines = []
    for s in summaries:
        prefix = f"[{s.host}] " if len(summaries) > 1 else ""
        if s.crossover.kind == "interpolated":
            cross = f"crossover at c≈{format_level(s.crossover.value)} (between {s.crossover.below} and {s.crossover.above})"
        else:
            cross = "crossover: " + s.crossover.text()
        lines.append(prefix + cross)
        lines.append(prefix + "recommended threshold: " + s.threshold_text())
        lines.append(prefix + "adaptive: " + s.adaptive_text())
    return lines


def summarize(records: Sequence[dict[str, Any]], manifest: dict[str, Any] | None = None) -> ReportSummary:
    """Everything the report says, computed from records and the manifest."""
    manifest = manifest or {}
    effective = store.effective_records(records)
    ok = _ok_records(records)
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in ok:
        by_host[str(rec.get("host", ""))].append(rec)
    summaries = [summarize_host(h, by_host[h]) for h in sorted(by_host)]
    failed = sorted((r for r in effective if r.get("status") != STATUS_OK),
                    key=lambda r: (str(r.get("host", "")), str(r.get("arm", "")), int(r.get("concurrency", 0)),
                                   int(r.get("repeat", 0))))
    simulated = any(bool(r.get("simulated")) for r in effective) or bool(manifest.get("simulated"))
    summary = ReportSummary(summaries, simulated, failed, fairness_warnings(manifest, ok), _headline(summaries), "",
                            servers=server_notes(ok))
    summary.markdown = render_markdown(summary, manifest)
    return summary


SIM_BANNER = ("> **SIMULATED RESULTS.** These numbers come from specops's SGLang simulator, not a GPU: "
              "they show the method and the shape of the curves, not your hardware.")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_results(s: HostSummary) -> list[str]:
    out = [f"## Results{' on ' + s.host if s.host else ''}", "",
           "| concurrency | arm | output tok/s (median) | spread (min-max) | repeats | TTFT ms | TPOT ms "
           "| accept len | running batch p50/p90 | ratio to baseline (spread) |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c, arm, cell, ratio in s.rows():
        rtext = "-" if ratio is None else f"{ratio.ratio:.3f} ({ratio.low:.3f}-{ratio.high:.3f})"
        out.append(f"| {c} | {arm} | {cell.median_tps:.1f} | {cell.min_tps:.1f}-{cell.max_tps:.1f} | "
                   f"{cell.repeats} | {_fmt(cell.median_ttft_ms)} | {_fmt(cell.median_tpot_ms, 2)} | "
                   f"{_fmt(cell.accept_length if cell.accept_length is not None else cell.server_accept_length, 2)}"
                   f" | {cell.running_text()} | {rtext} |")
    return out + ["", f"- crossover: {s.crossover.text()}", f"- recommended threshold: {s.threshold_text()}",
                  f"- adaptive: {s.adaptive_text()}", ""]


def _md_failed(failed: list[dict[str, Any]]) -> list[str]:
    if not failed:
        return []
    out = ["## Failed points", "", "| host | arm | concurrency | repeat | error |", "|---|---|---:|---:|---|"]
    for r in failed:
        err = _md_escape(str(r.get("error") or "unknown error"))
        out.append(f"| {r.get('host', '')} | {r.get('arm', '')} | {r.get('concurrency', '')} | "
                   f"{r.get('repeat', '')} | {err[:300]} |")
    out.append("")
    for r in failed:
        excerpt = r.get("log_excerpt") or (r.get("extra") or {}).get("log_excerpt")
        if excerpt:
            out += [f"Server log at the failure of {r.get('host', '')} {r.get('arm', '')} "
                    f"c={r.get('concurrency', '')} repeat {r.get('repeat', '')}:", "", "```",
                    str(excerpt).rstrip(), "```", ""]
    return out


def render_markdown(summary: ReportSummary, manifest: dict[str, Any]) -> str:
    """report.md text: deterministic for the same files."""
    out: list[str] = ["# specops bench report", ""]
    if summary.simulated:
        out += [SIM_BANNER, ""]
    facts = []
    for key, label in (("run_id", "run"), ("sglang_version", "SGLang"), ("sglang_commit", "commit"),
                       ("gpu", "GPU"), ("gpu_count", "GPUs"), ("runner", "runner"), ("dataset", "dataset"),
                       ("dataset_hash", "dataset hash"), ("input_len", "input len"), ("output_len", "output len")):
        if manifest.get(key) not in (None, ""):
            facts.append(f"{label}: `{manifest[key]}`")
    if facts:
        out += ["- " + " · ".join(facts), ""]
    out += ["## Headline", ""] + [f"- {line}" for line in summary.headline] + [""]
    if not summary.hosts:
        out += ["No successful results yet.", ""]
    for s in summary.hosts:
        out += _md_results(s)
    out += ["## Fairness", ""]
    out += [f"- WARNING: {_md_escape(w)}" for w in summary.warnings]
    if not _manifest_arm_sets(manifest):
        out.append("- server args not checked: manifest.json records no arms")
    elif not summary.warnings:
        out.append("- no differences found between arms beyond the speculative arguments")
    out.append("")
    if summary.servers:
        out += ["## Servers", ""] + [f"- {_md_escape(line)}" for line in summary.servers] + [""]
    out += _md_failed(summary.failed)
    out += ["## Plots", "", "![output tok/s](plots/throughput.png)", "![ratio to baseline](plots/ratio.png)",
            "![TTFT](plots/ttft.png)", "![TPOT](plots/tpot.png)", ""]
    out += ["## Method", "",
            "Medians over repeats; spread is min-max. The ratio is the arm's median over baseline's median; "
            "its spread is the min-max of per-repeat ratios. The crossover is the first level where EAGLE-3's "
            "ratio drops below 1, interpolated linearly in log2(concurrency) from the level before. The "
            f"threshold is the largest level at which EAGLE-3's ratio is >= {THRESHOLD_MARGIN:.2f} there and "
            f"at every lower level. The adaptive arm should reach {ADAPTIVE_TOLERANCE:.2f}x of the better of "
            "baseline and EAGLE-3 at every level. The running batch is the server's own count of running "
            "requests during the point (its `/metrics` gauge `sglang:num_running_reqs`, else its `#running-req` "
            "log lines): median/p90 over the samples, median over repeats.", ""]
    return "\n".join(out)


def terminal_table(summary: ReportSummary, width: int = 80) -> Fitted:
    """The same table for the terminal, no wider than `width` (long host or arm names are
    shortened in the middle)."""
    columns = [Column("host", shrink=True), Column("c", "right"), Column("arm", shrink=True),
               Column("tok/s", "right"), Column("spread", "right"), Column("TTFT ms", "right"),
               Column("TPOT ms", "right"), Column("vs base", "right")]
    rows: list[list[fit.Cell]] = []
    for s in summary.hosts:
        for c, arm, cell, ratio in s.rows():
            rows.append([s.host, str(c), arm, f"{cell.median_tps:.1f}", f"{cell.min_tps:.0f}-{cell.max_tps:.0f}",
                         _fmt(cell.median_ttft_ms), _fmt(cell.median_tpot_ms, 2),
                         "-" if ratio is None else f"{ratio.ratio:.3f}"])
    return fit_table(columns, rows, width=width, key_columns=3,
                     title="specops bench" + (" (SIMULATED)" if summary.simulated else ""))

