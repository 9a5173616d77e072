"""The report's decisions: where speculation stops paying, and the threshold the adaptive
arm should use, as data (`ReportSummary`); report/ renders it (report.md, report.html,
summary.json, plots).

Everything here is computed from the run directory's files alone (results.jsonl and
manifest.json), so `specops report RUN_DIR` reproduces report.md byte for byte; nothing
of the render time goes into it.

Statistics: per (host, arm, concurrency), the median over repeats of output tok/s, with
min-max spread; median TTFT and TPOT. The speculative/baseline ratio at a level is the
ratio of the medians; its spread is the min-max of the per-repeat ratios (repeat r of the
arm over repeat r of baseline). Crossover: the first level whose EAGLE-3 ratio is below 1,
interpolated linearly in log2(concurrency) between it and the level before. Threshold:
decide/threshold.py's one rule (shared with `specops tune`), in the server's running-batch
units where the records carry its running batch, else in concurrency units.

Context length: a sweep of several input/output lengths (`--input-len 256,2048`) gets one
HostSummary per host and length, so each length has its own tables, crossover and
threshold, and the "Context length" section sets the crossovers side by side.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from specops.config.slo import DEFAULT_OBJECTIVE, Slo, check_objective, parse_slo
from specops.decide.phases import PhaseSummary, summarize_phases
from specops.decide.slo import latencies_missing, point_goodput
from specops.decide.threshold import UNIT_CONCURRENCY, UNIT_RUNNING, LevelPoint, ThresholdChoice, choose
from specops.errors import ConfigError
from specops.records import store
from specops.records.manifest import Manifest, ManifestLike, as_manifest
from specops.records.schema import (
    AXIS_CONCURRENCY,
    AXIS_RATE,
    STATUS_OK,
    ResultRecord,
    load_level,
)

BASELINE_ARM = "baseline"
EAGLE_ARM = "eagle3"
ADAPTIVE_ARM = "adaptive"
#: what a spec-off arm's records say as their mechanism (servers.launch): how the report finds one
SPEC_OFF_MECHANISM = "spec-off"
ADAPTIVE_TOLERANCE = 0.95    # adaptive should reach 95% of the better of baseline and EAGLE-3
DRAFTING_OFF_SHARE = 0.9     # a level counts as "drafting off" when it was off for >= 90% of the point



# ---------------------------------------------------------------- data

@dataclass
class Cell:
    """One arm at one level, over its ok repeats."""

    arm: str
    concurrency: float                   # the level: a concurrency, or a request rate on a rate sweep
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
    drafting_off_share: float | None = None   # adaptive arms: share of the point with drafting off
    goodput: float | None = None              # requests/s meeting the SLO (median over repeats)
    attainment: float | None = None           # share of requests meeting it (median over repeats)
    gpus: int = 1                             # GPUs the arm's server used (tp x dp), for per-GPU figures
    cost_per_mtok: float | None = None        # $ per 1M output tokens at the host's GPU-hour price
    saturated: bool | None = None             # a rate point: the server did not keep up in some repeat

    @property
    def tps_per_gpu(self) -> float:
        return self.median_tps / max(1, self.gpus)

    @property
    def tps_per_user(self) -> float | None:
        """Per-user decode speed, 1000 / TPOT ms."""
        return 1000.0 / self.median_tpot_ms if self.median_tpot_ms else None

    def shown_accept_length(self) -> float | None:
        """The accept length the report shows: the server's /server_info figure, except for a
        point during which drafting was off (a patched adaptive server). SGLang counts a
        one-token step as a speculative one, which dilutes that figure, so such a point shows
        the figure from its decode lines instead, which leave those steps out (none: "-")."""
        if self.drafting_off_share:
            return self.server_accept_length
        return self.accept_length if self.accept_length is not None else self.server_accept_length


@dataclass
class Ratio:
    """A speculative arm over baseline at one level."""

    arm: str
    concurrency: float
    ratio: float                 # ratio of medians
    low: float                   # min / max of the per-repeat ratios
    high: float
    pairs: int


@dataclass
class Crossover:
    kind: str                    # "interpolated" | "never" | "every" | "n/a"
    value: float | None = None
    below: float | None = None   # the bracketing levels (ratio >= 1 at `below`, < 1 at `above`)
    above: float | None = None
    axis: str = AXIS_CONCURRENCY  # what the levels are: concurrency or request rate


@dataclass
class _PerLevel:
    """Ratios per level, with their worst level and mean."""

    ratios: dict[float, float]

    @property
    def worst(self) -> tuple[float, float] | None:
        if not self.ratios:
            return None
        c = min(self.ratios, key=lambda k: (self.ratios[k], k))
        return c, self.ratios[c]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.ratios.values()) if self.ratios else None


@dataclass
class Envelope(_PerLevel):
    """How close the adaptive arm came to what it is for: at each level, its median over the
    better of baseline's and EAGLE-3's (1.0: it followed the envelope exactly)."""

    objective: str = DEFAULT_OBJECTIVE
    axis: str = AXIS_CONCURRENCY


TAX_EVIDENCE = "drafting_off"        # the records say when drafting was off
TAX_THRESHOLD = "above_threshold"    # they do not: levels above the arm's threshold stand in
TAX_NONE = "none"


@dataclass
class Tax(_PerLevel):
    """The speculation tax: what the adaptive arm still costs where its drafting is off
    (adaptive / baseline there; below 1.0 is the price of carrying the draft model)."""

    source: str = TAX_NONE           # TAX_EVIDENCE | TAX_THRESHOLD | TAX_NONE
    threshold: int | None = None     # the arm's threshold (TAX_THRESHOLD)
    unit: str | None = None          # what the threshold was compared with: UNIT_RUNNING | UNIT_CONCURRENCY
    objective: str = DEFAULT_OBJECTIVE
    axis: str = AXIS_CONCURRENCY


@dataclass
class CapableTax(_PerLevel):
    """The tax of staying speculation-capable: a spec-off arm (the speculative server with
    drafting off at every batch size) over baseline at each level. It is the most an adaptive
    arm can reach where it does not draft, measured rather than inferred."""

    arm: str = "spec-off"
    objective: str = DEFAULT_OBJECTIVE
    axis: str = AXIS_CONCURRENCY


@dataclass
class HostSummary:
    host: str
    levels: list[float]
    arms: list[str]
    cells: dict[tuple[str, float], Cell]
    ratios: dict[tuple[str, float], Ratio]
    crossover: Crossover
    threshold_choice: ThresholdChoice
    adaptive_shortfalls: list[tuple[float, float | None]] | None   # None: no adaptive arm
    envelope: Envelope | None = None     # None: no adaptive arm
    tax: Tax | None = None
    objective: str = DEFAULT_OBJECTIVE
    length: tuple[int, int] | None = None   # (input, output) tokens in a several-length sweep
    axis: str = AXIS_CONCURRENCY            # the load axis: concurrency, or request rate (a rate sweep)
    capable_tax: CapableTax | None = None   # None: no spec-off arm
    phases: PhaseSummary | None = None      # a phase run (bench --phases): per phase and arm, lag, envelope

    @property
    def threshold(self) -> int | None:
        return self.threshold_choice.threshold

    def rows(self) -> Iterator[tuple[float, str, Cell, Ratio | None]]:
        """(level, arm, cell, ratio to baseline) in table order: levels up, arms in order."""
        for c in self.levels:
            for arm in self.arms:
                cell = self.cells.get((arm, c))
                if cell is not None:
                    yield c, arm, cell, self.ratios.get((arm, c))

    def saturated(self) -> list[tuple[str, float]]:
        """(arm, rate) of the rate cells whose server did not keep up (bench/saturation.py)."""
        return [(arm, c) for c, arm, cell, _ in self.rows() if cell.saturated]



@dataclass(frozen=True)
class ServerFact:
    """The server instances one arm's ok points were measured on: how often it restarted (same
    arguments) and the runs that shared it."""

    host: str
    arm: str
    restarts: int
    shared_with: list[str]
    several_hosts: bool   # the run measured several hosts: the words name the host too


@dataclass
class ReportSummary:
    """Everything the report decides, as data. `headline`, `warnings` and `servers` are its
    words, which report/summary.py's `summarize` writes in (decide leaves them empty)."""

    hosts: list[HostSummary]
    simulated: bool
    failed: list[ResultRecord]
    warnings: list[str] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)
    report_path: Path | None = None
    plot_paths: list[Path] = field(default_factory=list)
    objective: str = DEFAULT_OBJECTIVE
    slo: Slo | None = None
    tuning: dict[str, Any] | None = None     # tune.json, when `specops tune` made the run
    servers: list[str] = field(default_factory=list)  # arms shared with other runs, restarted (same arguments)
    recorded_objective: str = DEFAULT_OBJECTIVE       # the bench's own (`specops report --objective` may differ)
    latencies_missing: str | None = None              # the records' own reason for having no per-request latencies
    by_length: bool = False                           # a sweep of several context lengths
    server_facts: list[ServerFact] = field(default_factory=list)


# ---------------------------------------------------------------- math

def find_crossover(points: Sequence[tuple[float, float]]) -> Crossover:
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


def threshold_points(cells: dict[tuple[str, float], Cell], levels: Iterable[float],
                     objective: str = DEFAULT_OBJECTIVE) -> list[LevelPoint]:
    """What the crossover and the threshold rule read at each level where baseline and
    EAGLE-3 were both measured: EAGLE-3 over baseline on the objective, and EAGLE-3's running
    batch (the report and `specops tune` both build their points here)."""
    out = []
    for c in levels:
        eagle = cells.get((EAGLE_ARM, c))
        ratio = objective_ratio(score(eagle, objective), score(cells.get((BASELINE_ARM, c)), objective))
        if eagle is not None and ratio is not None:
            out.append(LevelPoint(c, ratio, eagle.running_p50, eagle.running_p90))
    return out


RATIO_CAP = 100.0   # a level where only one side has a non-zero objective counts as that far ahead


def score(cell: Cell | None, objective: str = DEFAULT_OBJECTIVE) -> float | None:
    """The cell's value on the objective, higher is better: output tok/s; goodput (req/s
    meeting the SLO); or per-user decode speed 1000 / TPOT ms for `tpot`."""
    if cell is None:
        return None
    if objective == "goodput":
        return cell.goodput
    if objective == "tpot":
        return 1000.0 / cell.median_tpot_ms if cell.median_tpot_ms else None
    return cell.median_tps


def objective_ratio(mine: float | None, other: float | None) -> float | None:
    """mine / other on a higher-is-better objective; None where neither side has a value
    above zero (no evidence either way)."""
    if mine is None or other is None:
        return None
    if other <= 0:
        return None if mine <= 0 else RATIO_CAP
    return min(mine / other, RATIO_CAP)


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def ok_records(records: Iterable[ResultRecord]) -> list[ResultRecord]:
    return [r for r in store.effective_records(records)
            if r.status == STATUS_OK and isinstance(r.output_throughput, (int, float))]


def _arm_order(arms: Iterable[str]) -> list[str]:
    known = [BASELINE_ARM, EAGLE_ARM, ADAPTIVE_ARM]
    arms = set(arms)
    return [a for a in known if a in arms] + sorted(arms - set(known))


def _drafting_off_share(rec: ResultRecord) -> float | None:
    """A record's drafting-off evidence (`drafting_off_share` 0..1, or `drafting_off`), at the
    top level or in its extra; None where it has none."""
    for share, off in ((rec.drafting_off_share, rec.drafting_off),
                       (rec.extra.get("drafting_off_share"), rec.extra.get("drafting_off"))):
        if isinstance(share, (int, float)) and not isinstance(share, bool) and math.isfinite(share):
            return float(share)
        if isinstance(off, bool):
            return 1.0 if off else 0.0
    return None


def _best(cells: dict[tuple[str, float], Cell], c: float, objective: str) -> float | None:
    values = [v for v in (score(cells.get((a, c)), objective) for a in (BASELINE_ARM, EAGLE_ARM)) if v is not None]
    return max(values) if values else None


def envelope_of(cells: dict[tuple[str, float], Cell], levels: Iterable[float], arm: str = ADAPTIVE_ARM,
                objective: str = DEFAULT_OBJECTIVE) -> Envelope:
    """The arm over the better of baseline and EAGLE-3 on the objective, at each level with both."""
    ratios = {}
    for c in levels:
        ratio = objective_ratio(score(cells.get((arm, c)), objective), _best(cells, c, objective))
        if ratio is not None:
            ratios[c] = ratio
    return Envelope(ratios, objective)


def tax_of(cells: dict[tuple[str, float], Cell], levels: Iterable[float], threshold: int | None,
           arm: str = ADAPTIVE_ARM, objective: str = DEFAULT_OBJECTIVE) -> Tax:
    """Adaptive / baseline where drafting is off: the levels the records say so, else the
    levels whose running batch (or concurrency, where none was reported) is above the arm's
    threshold."""
    ratio = {c: objective_ratio(score(cells.get((arm, c)), objective), score(cells.get((BASELINE_ARM, c)), objective))
             for c in levels}
    mine = {c: cells[(arm, c)] for c in levels if ratio[c] is not None}
    if any(cell.drafting_off_share is not None for cell in mine.values()):
        off = [c for c, cell in mine.items() if (cell.drafting_off_share or 0.0) >= DRAFTING_OFF_SHARE]
        source, unit = TAX_EVIDENCE, None
    elif threshold is not None:
        running = all(cell.running_p50 is not None for cell in mine.values())
        off = [c for c, cell in mine.items()
               if (cell.running_p50 if running and cell.running_p50 is not None else c) > threshold]
        source, unit = TAX_THRESHOLD, (UNIT_RUNNING if running else UNIT_CONCURRENCY)
    else:
        return Tax({}, TAX_NONE, objective=objective)
    return Tax({c: float(ratio[c] or 0.0) for c in sorted(off)}, source, threshold, unit, objective)


def summarize_host(host: str, records: Sequence[ResultRecord], adaptive_threshold: int | None = None,
                   objective: str = DEFAULT_OBJECTIVE, slo: Slo | None = None,
                   gpus: dict[str, int] | None = None, gpu_hour_cost: float | None = None) -> HostSummary:
    """Cells, ratios, crossover, threshold and the adaptive check for one host's ok records
    (`adaptive_threshold`: the adaptive arm's own threshold, from the manifest, for the tax
    where the records carry no drafting-off evidence; `objective`: what the crossover,
    threshold, envelope and tax compare; `slo`: the limits goodput counts against)."""
    groups: dict[tuple[str, float], list[ResultRecord]] = defaultdict(list)
    for rec in records:
        groups[(str(rec.arm), load_level(rec))].append(rec)
    axis = AXIS_RATE if any(rec.rate is not None for rec in records) else AXIS_CONCURRENCY
    cells: dict[tuple[str, float], Cell] = {}
    for (arm, c), recs in groups.items():
        tps = [float(r.output_throughput or 0.0) for r in recs]  # ok_records: all numbers
        cells[(arm, c)] = Cell(
            arm=arm, concurrency=c, repeats=len(recs),
            median_tps=statistics.median(tps), min_tps=min(tps), max_tps=max(tps),
            median_ttft_ms=_median(r.mean_ttft_ms for r in recs),
            median_tpot_ms=_median(r.mean_tpot_ms for r in recs),
            accept_length=_median(r.accept_length for r in recs),
            by_repeat={int(r.repeat): float(r.output_throughput or 0.0) for r in recs},
            running_p50=_median(r.running_req_p50 for r in recs),
            running_p90=_median(r.running_req_p90 for r in recs),
            server_accept_length=_median(r.server_accept_length for r in recs),
            drafting_off_share=_median(_drafting_off_share(r) for r in recs),
            saturated=_saturated(recs),
        )
        cell = cells[(arm, c)]
        cell.gpus = (gpus or {}).get(arm, 1)
        if gpu_hour_cost is not None and cell.median_tps > 0:
            cell.cost_per_mtok = gpu_hour_cost * cell.gpus * 1e6 / (3600.0 * cell.median_tps)
        if slo:
            good = [point_goodput(r, slo) for r in recs]
            cells[(arm, c)].goodput = _median(g for g, _ in good)
            cells[(arm, c)].attainment = _median(a for _, a in good)
    levels = sorted({c for _, c in cells})
    arms = _arm_order(a for a, _ in cells)
    ratios: dict[tuple[str, float], Ratio] = {}
    for (arm, c), cell in cells.items():
        base = cells.get((BASELINE_ARM, c))
        if arm == BASELINE_ARM or base is None or base.median_tps <= 0:
            continue
        per = [cell.by_repeat[r] / base.by_repeat[r] for r in sorted(cell.by_repeat)
               if r in base.by_repeat and base.by_repeat[r] > 0]
        ratio = cell.median_tps / base.median_tps
        ratios[(arm, c)] = Ratio(arm, c, ratio, min(per, default=ratio), max(per, default=ratio), len(per))
    points = threshold_points(cells, levels, objective)
    shortfalls: list[tuple[float, float | None]] | None = None
    envelope = tax = None
    if ADAPTIVE_ARM in arms:
        envelope = envelope_of(cells, levels, objective=objective)
        tax = tax_of(cells, levels, adaptive_threshold, objective=objective)
        shortfalls = []
        for c in levels:
            if _best(cells, c, objective) is None:
                continue
            if (ADAPTIVE_ARM, c) not in cells:
                shortfalls.append((c, None))
            elif c in envelope.ratios and envelope.ratios[c] < ADAPTIVE_TOLERANCE:
                shortfalls.append((c, envelope.ratios[c]))
    crossover = replace(find_crossover([(p.level, p.ratio) for p in points]), axis=axis)
    for per_level in (envelope, tax):
        if per_level is not None:
            per_level.axis = axis
    summary = HostSummary(host, levels, arms, cells, ratios, crossover, choose(points, axis=axis), shortfalls,
                          envelope, tax, objective, axis=axis)
    spec_off = next((str(r.arm) for r in records if str(r.mechanism or "").startswith(SPEC_OFF_MECHANISM)), None)
    if spec_off is not None:
        summary.capable_tax = capable_tax_of(cells, levels, spec_off, objective, axis)
    summary.phases = summarize_phases(records, slo)
    return summary


def capable_tax_of(cells: dict[tuple[str, float], Cell], levels: Iterable[float], arm: str,
                   objective: str = DEFAULT_OBJECTIVE, axis: str = AXIS_CONCURRENCY) -> CapableTax:
    """`arm` (a spec-off arm) over baseline at every level that measured both."""
    ratios = {c: objective_ratio(score(cells.get((arm, c)), objective), score(cells.get((BASELINE_ARM, c)), objective))
              for c in levels}
    return CapableTax({c: float(r) for c, r in ratios.items() if r is not None}, arm, objective, axis)


def _saturated(recs: Sequence[ResultRecord]) -> bool | None:
    """A rate cell is saturated when any repeat was (bench/saturation.py); None off rate points."""
    verdicts = [r.saturated for r in recs if r.saturated is not None]
    return any(verdicts) if verdicts else None


def adaptive_threshold_of(manifest: Manifest, host: str) -> int | None:
    """The adaptive arm's threshold as the run launched it (manifest: the host's arms, else
    the top-level arms): `effective_threshold`, else `threshold`."""
    mine = manifest.host_facts(host)
    for arms in (mine.arms if mine is not None else None, manifest.arms):
        info = (arms or {}).get(ADAPTIVE_ARM)
        if info is not None:
            for value in (info.effective_threshold, info.threshold):
                if value is not None and value > 0:
                    return value
    return None


# ---------------------------------------------------------------- servers measured

def server_facts(records: Sequence[ResultRecord]) -> list[ServerFact]:
    """The server instances the ok points measured (each point's `server`, written by the
    sweep), per arm: restarts with the same arguments, runs that shared the server. Raises
    ConfigError when one arm's points were measured under different launch arguments (the
    config hash: the args hash less the simulator's injected faults): those cannot be one
    curve."""
    groups: dict[tuple[str, str], list[ResultRecord]] = defaultdict(list)
    for rec in records:
        if isinstance(rec.server, dict):
            groups[(str(rec.host), str(rec.arm))].append(rec)
    several_hosts = len({h for h, _ in groups}) > 1
    facts = []
    for (host, arm), recs in sorted(groups.items()):
        hashes: dict[str, int] = defaultdict(int)
        for r in recs:
            server = r.server or {}
            hashes[str(server.get("config_hash") or server.get("args_hash"))] += 1
        if len(hashes) > 1:
            raise ConfigError(f"arm {arm} on host {host}: its points were measured on servers started with different "
                              "launch arguments (config hash "
                              + ", ".join(f"{h[:12]}: {n} point{'s' if n > 1 else ''}" for h, n in sorted(hashes.items()))
                              + "); one report cannot combine them",
                              hint="each point's `server` in results.jsonl says which; keep one configuration's "
                                   "points, or measure the other in a run of its own (--out)")
        instances = {((r.server or {}).get("pid"), (r.server or {}).get("proc_start")) for r in recs}
        shared = sorted({str(x) for r in recs for x in (r.shared_with or [])})
        if len(instances) > 1 or shared:
            facts.append(ServerFact(host, arm, len(instances) - 1, shared, several_hosts))
    return facts


# ---------------------------------------------------------------- summary + rendering

def arm_gpus(manifest: Manifest, host: str) -> dict[str, int]:
    """GPUs each arm's server used on the host: tensor x data parallel size from its
    recorded server args (1 where unrecorded)."""
    mine = manifest.host_facts(host)
    out = {}
    for arm, info in ((mine.arms or {}) if mine is not None else {}).items():
        args = info.server_args
        if args is None:
            continue
        n = 1
        for key in ("tp_size", "dp_size"):
            value = args.get(key)
            n *= value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
        out[str(arm)] = n
    return out


def gpu_hour_cost_of(manifest: Manifest, host: str) -> float | None:
    """The host's GPU-hour price as `bench` recorded it (manifest `bench.gpu_hour_cost`: a
    number for every host, or {host: number})."""
    cost: Any = manifest.settings().gpu_hour_cost
    if isinstance(cost, dict):
        cost = cost.get(host)
    return float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0 else None


def objective_of(manifest: ManifestLike) -> tuple[str, Slo | None]:
    """The run's objective and SLO, as `bench` recorded them (manifest.json `bench`); a run
    from before either existed: throughput, no SLO."""
    bench = as_manifest(manifest).settings()
    # an ill-typed value is kept raw in `extra`: parse_slo and check_objective say what is wrong with it
    slo = parse_slo(bench.slo if bench.slo is not None else bench.extra.get("slo"), where="manifest.json: bench.slo")
    objective = str(bench.objective or bench.extra.get("objective") or DEFAULT_OBJECTIVE)
    check_objective(objective, slo, where="manifest.json: bench.objective")
    return objective, slo


def swept_lengths(manifest: Manifest) -> bool:
    """True when the run swept several context lengths (a list in --input-len or
    --output-len); a run of one length is reported as before lengths were an axis."""
    bench = manifest.settings()
    return any(isinstance(v, list) and len(v) > 1 for v in (bench.input_len, bench.output_len))


def record_length(rec: ResultRecord) -> tuple[int, int]:
    """The (input, output) length a record measured (0 where it records none)."""
    return int(rec.input_len or 0), int(rec.output_len or 0)


def summarize_run(records: Sequence[ResultRecord], given: ManifestLike = None, *,
                  objective: str | None = None, slo: Slo | None = None) -> ReportSummary:
    """Everything the report decides, computed from records and the manifest (`objective`,
    `slo`: `specops report`'s own, in place of those the bench recorded); report/summary.py's
    `summarize` words it."""
    manifest = as_manifest(given)
    recorded, recorded_slo = objective_of(manifest)
    slo = recorded_slo if slo is None else slo
    objective = objective or recorded
    check_objective(objective, slo, where="report --objective")
    effective = store.effective_records(records)
    ok = ok_records(records)
    by_host: dict[tuple[str, tuple[int, int] | None], list[ResultRecord]] = defaultdict(list)
    lengths = swept_lengths(manifest)
    for rec in ok:
        by_host[(str(rec.host), record_length(rec) if lengths else None)].append(rec)
    summaries = []
    for h, length in sorted(by_host, key=lambda k: (k[0], k[1] or (0, 0))):
        summary_h = summarize_host(h, by_host[(h, length)], adaptive_threshold_of(manifest, h), objective, slo,
                                   arm_gpus(manifest, h), gpu_hour_cost_of(manifest, h))
        summary_h.length = length
        summaries.append(summary_h)
    failed = sorted((r for r in effective if r.status != STATUS_OK),
                    key=lambda r: (str(r.host), str(r.arm), load_level(r), int(r.repeat)))
    simulated = any(bool(r.simulated) for r in effective) or bool(manifest.simulated)
    why = next((w for w in map(latencies_missing, ok) if w), None)
    return ReportSummary(summaries, simulated, failed, objective=objective, slo=slo, recorded_objective=recorded,
                         latencies_missing=why, by_length=lengths, server_facts=server_facts(ok))


@dataclass(frozen=True)
class ContextRow:
    """One host at one context length: its crossover and threshold."""

    host: str
    input_len: int
    output_len: int
    crossover: Crossover
    threshold: int | None
    choice: ThresholdChoice
    unit: str | None


def context_rows(summary: ReportSummary) -> list[ContextRow]:
    """Per host and context length, shortest first; empty for a run of one length."""
    return [ContextRow(s.host, s.length[0], s.length[1], s.crossover, s.threshold, s.threshold_choice,
                       s.threshold_choice.unit) for s in summary.hosts if s.length is not None]
