"""`specops tune`: from a sweep to a verified adaptive configuration.

The search, as pure functions over result records (so it is tested without servers);
flows/tuner.py's `Tuner` runs its phases through the bench playbook on one host, into one
run directory, and records/tune.py writes `tune_document` as `tune.json` beside results.jsonl:

1. coarse: baseline and EAGLE-3 at the coarse levels (or the points of an existing run)
   bracket the crossover: the last level where EAGLE-3 is at least as fast, the first
   where it is not; points already in the run directory (reused from an earlier run of the
   same configuration, flows/reuse.py, or `--from`'s) are not measured again, only the
   repeats they lack;
2. fine: both arms at every level inside the bracket, or, when the bracket holds
   `BISECT_FROM` levels or more, a bisection of it: one level at a time (the geometric middle
   of the bracket), the bracket narrowed by each, until its ends are neighbours;
3. the threshold, in running-batch units (decide/threshold.py, the rule the report uses too;
   report/words.py's `THRESHOLD_RULE` says it), from the server's own running batch
   measured during each point (bench/running.py);
4. verify: arm `adaptive-t<T>` (the adaptive profile with that threshold) at every level;
   accepted when it reaches `TOLERANCE` of the better of baseline and EAGLE-3 at each level
   and keeps `GAIN_KEPT` of EAGLE-3's gain at the lowest level; otherwise the neighbours.
   Levels are measured one at a time, nearest the threshold first (`verify_order`), with the
   candidate's server kept up between them, and a candidate is rejected at its first level
   below `TOLERANCE`: the rest are not measured. Before that, the reference arms at that level
   are measured again beside it and the level is judged on those runs (flows/tuner.py
   `_recheck`: the points it fell short of may be hours older, and a host's pace drifts);
5. tiers (native adaptive trees, 0.5.14+): arms `eagle3-k<k>` measure other draft-step
   counts; per level the fastest count (0 = baseline) gives a tier config, verified as
   `adaptive-tiers` the same way.

Before each phase the time it needs is estimated (the simulator's model on a simulated host,
else the pace measured so far); a phase that would not fit the budget is not started and the
result says what was measured and what was not. The words (verdicts, the result's lines,
the per-length table, the rules) are report/tune.py's.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from specops.bench.repeats import RepeatRule
from specops.bench.running import median_running, percentile
from specops.decide.summary import (
    BASELINE_ARM,
    EAGLE_ARM,
    Cell,
    find_crossover,
    ok_records,
    summarize_host,
    threshold_points,
)
from specops.decide.threshold import ThresholdChoice, choose
from specops.engines.schedule import Schedule
from specops.records.schema import ResultRecord
from specops.sim import model as M

TOLERANCE = 0.95      # adaptive >= 0.95x of the better arm at every level
GAIN_KEPT = 0.90      # ... and keeps 90% of EAGLE-3's gain at the lowest level
MAX_FINE_LEVELS = 12  # a wide bracket is sampled at most this many levels
BISECT_FROM = 4       # a bracket with at least this many levels inside is bisected, not swept
MAX_CANDIDATES = 3    # thresholds verified at most: the chosen one, then its neighbours
TIERS_ARM = "adaptive-tiers"


REUSED_FROM = "reused_from"   # a record copied from another run (flows/reuse.py, `tune --from`): its run


def is_reused(rec: ResultRecord) -> bool:
    """A record copied from another run, not measured by this one."""
    return bool(rec.extra.get(REUSED_FROM))


def candidate_arm(threshold: int) -> str:
    return f"adaptive-t{threshold}"


def steps_arm(steps: int) -> str:
    return f"eagle3-k{steps}"


# ---------------------------------------------------------------- the search (pure)

@dataclass
class Levels:
    """What the measured cells say about one host."""

    cells: dict[tuple[str, float], Cell]
    levels: list[int]   # tune sweeps concurrency (closed loops) only

    @classmethod
    def of(cls, records: Sequence[ResultRecord], host: str) -> "Levels":
        mine = [r for r in ok_records(records) if r.host == host and r.rate is None]
        s = summarize_host(host, mine)
        return cls(s.cells, [int(c) for c in s.levels])

    def tps(self, arm: str, c: int) -> float | None:
        cell = self.cells.get((arm, c))
        return cell.median_tps if cell else None

    def both(self) -> list[int]:
        """Levels where baseline and EAGLE-3 both have results."""
        return [c for c in self.levels if (BASELINE_ARM, c) in self.cells and (EAGLE_ARM, c) in self.cells]

    def best(self, c: int) -> float | None:
        vals = [v for v in (self.tps(BASELINE_ARM, c), self.tps(EAGLE_ARM, c)) if v is not None]
        return max(vals) if vals else None


def bracket(lv: Levels) -> tuple[int | None, int | None]:
    """(last level where EAGLE-3 >= baseline from the bottom up, first level where it is not)."""
    pts = [(c, (lv.tps(EAGLE_ARM, c) or 0.0) / (lv.tps(BASELINE_ARM, c) or 1.0)) for c in lv.both()]
    cross = find_crossover(pts)
    if cross.kind == "interpolated":
        return _level(cross.below), _level(cross.above)
    if cross.kind == "every":
        return None, _level(cross.above)
    if cross.kind == "never":
        return (pts[-1][0] if pts else None), None
    return None, None


def fine_levels(below: int | None, above: int | None, measured: Sequence[int]) -> list[int]:
    """Every level strictly inside the bracket not yet measured (at most MAX_FINE_LEVELS, spread)."""
    if below is None or above is None or above - below < 2:
        return []
    inside = [c for c in range(below + 1, above) if c not in set(measured)]
    if len(inside) <= MAX_FINE_LEVELS:
        return inside
    step = len(inside) / MAX_FINE_LEVELS
    return sorted({inside[int(i * step)] for i in range(MAX_FINE_LEVELS)})


def bisect_level(below: int | None, above: int | None, measured: Sequence[int]) -> int | None:
    """The next level a bisection of the bracket measures: the unmeasured level inside it
    nearest its geometric middle (the crossover is interpolated in log2 c); None when the
    bracket's ends are neighbours (or it has no two ends)."""
    if below is None or above is None:
        return None
    inside = [c for c in range(below + 1, above) if c not in set(measured)]
    if not inside:
        return None
    mid = math.log2(below * above) / 2
    return min(inside, key=lambda c: (abs(math.log2(c) - mid), c))


def _level(value: float | None) -> int | None:
    return None if value is None else int(value)


def verify_order(levels: Sequence[int], threshold: int) -> list[int]:
    """The levels a candidate is measured at, riskiest first (report/tune.py's VERIFY_ORDER)."""
    pivot = math.log2(threshold + 0.5)
    return sorted(levels, key=lambda c: (abs(math.log2(c) - pivot), c))


def choose_threshold(lv: Levels) -> ThresholdChoice:
    """decide/threshold.py's rule (the one the report uses) on the measured cells."""
    return choose(threshold_points(lv.cells, lv.both()))


def neighbours(threshold: int, tried: Sequence[int], limit: int = 2) -> list[int]:
    """Candidates around the chosen threshold, nearest first, lower before higher."""
    out = []
    for d in range(1, limit + 1):
        for t in (threshold - d, threshold + d):
            if t >= 1 and t not in tried and t not in out:
                out.append(t)
    return out


@dataclass
class Verdict:
    arm: str
    ok: bool
    ratios: dict[int, float | None]          # adaptive / better arm, per level
    shortfalls: list[int]
    gain_kept: float | None                  # share of EAGLE-3's gain kept at the lowest level
    missing: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)   # not measured: rejected at an earlier level


def verify(lv: Levels, arm: str, levels: Sequence[int], lowest: int | None = None) -> Verdict:
    """The acceptance rule for one adaptive candidate at the given levels. `lowest`: the
    level the gain is judged at (default the lowest of `levels`); where it is not among
    `levels` (a verification under way), the gain is not judged yet."""
    ratios: dict[int, float | None] = {}
    short, missing = [], []
    for c in levels:
        best, mine = lv.best(c), lv.tps(arm, c)
        if mine is None or best is None:
            missing.append(c)
            ratios[c] = None
            continue
        ratios[c] = mine / best if best > 0 else None
        if best > 0 and mine < TOLERANCE * best:
            short.append(c)
    gain = None
    low = lowest if lowest is not None else (min(levels) if levels else None)
    if low is not None and low in levels:
        base, eagle, mine = lv.tps(BASELINE_ARM, low), lv.tps(EAGLE_ARM, low), lv.tps(arm, low)
        if base is not None and eagle is not None and mine is not None and eagle > base:
            gain = (mine - base) / (eagle - base)
    ok = not short and not missing and (gain is None or gain >= GAIN_KEPT)
    return Verdict(arm, ok, ratios, short, gain, missing)


#: a candidate's point with its drafting off for this share of its decode steps or more
#: measured its drafting-off path, not its drafting
OFF_MOSTLY = 0.5


@dataclass(frozen=True)
class OffPathShortfall:
    """Where a candidate fell short with its drafting mostly off: what it pays above its
    threshold for being able to draft (the draft model loaded; on SGLang's zero-step tier its
    extend still runs each step), which no threshold removes."""

    level: int
    off_share: float
    ratio: float


def off_path_shortfall(lv: Levels, v: Verdict) -> OffPathShortfall | None:
    """The first level `v` fell short at while its drafting was off for most of the point and
    the baseline was the better arm (so not drafting was right there: a level where EAGLE-3 was
    better says the threshold is too low, not what the off path costs)."""
    for c in v.shortfalls:
        cell, ratio = lv.cells.get((v.arm, c)), v.ratios.get(c)
        share = cell.drafting_off_share if cell is not None else None
        base = lv.tps(BASELINE_ARM, c)
        if (share is not None and share >= OFF_MOSTLY and ratio is not None
                and base is not None and base >= (lv.tps(EAGLE_ARM, c) or 0.0)):
            return OffPathShortfall(c, share, ratio)
    return None


def choose_tiers(lv: Levels, steps_by_arm: dict[str, int], levels: Sequence[int]) -> dict[int, int]:
    """report/tune.py's TIERS_RULE: {first running batch of the tier: draft steps}, from the measured levels."""
    picks: list[tuple[int, int, float, float]] = []   # (level, steps, running p50, running p90)
    for c in sorted(levels):
        best_arm, best_tps = None, -1.0
        for arm in steps_by_arm:
            tps = lv.tps(arm, c)
            if tps is not None and tps > best_tps:
                best_arm, best_tps = arm, tps
        if best_arm is None:
            continue
        cell = lv.cells[(best_arm, c)]
        p50 = cell.running_p50 if cell.running_p50 is not None else float(c)
        picks.append((c, steps_by_arm[best_arm], p50, cell.running_p90 if cell.running_p90 is not None else p50))
    tiers: dict[int, int] = {}
    prev = None
    for i, (_c, steps, run50, _run90) in enumerate(picks):
        if steps == prev:
            continue
        if i == 0:
            start = 1
        else:
            # the tier starts just above the running batch (p90) of the last level of the previous tier
            start = max(1, int(math.floor(picks[i - 1][3])) + 1)
            start = min(start, max(1, int(math.ceil(run50))))
        if start in tiers or (tiers and start <= max(tiers)):
            start = max(tiers) + 1
        tiers[start] = steps
        prev = steps
    return tiers or {1: 0}


# ---------------------------------------------------------------- estimates

def estimate_point_seconds(arm_steps: int, concurrency: int, prompts: int, input_len: int, output_len: int,
                           time_scale: float | None) -> float:
    """Wall seconds of one point: the simulator's model on simulated hosts, else a GPU guess."""
    overhead = 2.0  # client start, cache flush, result write
    if time_scale is None:
        return 30.0 + overhead
    arm = "baseline" if arm_steps == 0 else "eagle3"
    tput = M.predicted_output_throughput(arm, concurrency, max_running=None,  # type: ignore[arg-type]
                                         num_steps=arm_steps or None)
    model_s = prompts * output_len / max(tput, 1.0) + prompts * M.prefill_ms(input_len) / 1000.0 / max(1, concurrency)
    return model_s * time_scale * 1.3 + overhead


@dataclass
class Phase:
    name: str
    arms: list[str]
    levels: list[int]
    rule: RepeatRule
    keep: bool = False   # leave the servers up for the next phase (the Tuner stops them after)

    @property
    def repeats(self) -> int:
        """Repeats each point gets at least (auto: its minimum; the sweep decides the rest)."""
        return self.rule.least

    @property
    def repeats_setting(self) -> int | str:
        """What the phase's bench step is given: the count, or "auto:MAX"."""
        return self.rule.text() if self.rule.auto else self.rule.most

    @property
    def points(self) -> int:
        return len(self.arms) * len(self.levels) * self.repeats


# ---------------------------------------------------------------- the outcome

@dataclass
class TuneResult:
    host: str
    status: str = "running"        # verified | unverified | partial | no-speculation
    message: str = ""
    rule: str = ""                  # the threshold rule in words (report/words.py), set by the Tuner
    coarse_levels: list[int] = field(default_factory=list)
    reused_from: str | None = None
    reuse: str | None = None                # what the automatic reuse found (flows/reuse.py), as said
    bracket: list[int | None] = field(default_factory=lambda: [None, None])
    fine_levels: list[int] = field(default_factory=list)
    bisected: bool = False                  # the fine levels came from a bisection of the bracket
    choice: dict[str, Any] | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)
    threshold: int | None = None
    tiers: dict[int, int] | None = None
    tiers_verdict: dict[str, Any] | None = None
    tiers_rule: str | None = None
    default_comparison: dict[str, Any] | None = None
    phases: list[dict[str, Any]] = field(default_factory=list)
    planned_points: int = 0
    estimate_s: float = 0.0
    budget_s: float | None = None
    elapsed_s: float = 0.0
    written: str | None = None
    measured_points: int = 0                # points this tune ran (ok or failed): the GPU time it spent
    reused_points: int = 0                  # points it took from earlier runs instead
    #: levels where a candidate fell short and the reference arms were measured again beside it
    #: (flows/tuner.py `_recheck`): arm, concurrency, references, runs, before, after
    rechecks: list[dict[str, Any]] = field(default_factory=list)
    input_len: int | None = None
    output_len: int | None = None
    #: the verified schedule (engines.schedule.Schedule.to_dict) and its form in every engine's routes
    schedule: dict[str, Any] | None = None
    forms: list[dict[str, Any]] = field(default_factory=list)
    #: the headline fairness warnings of the runs it decided from (arms on different attention
    #: backends or devices): their ratios measure that difference, so --write writes nothing
    unfair: list[str] = field(default_factory=list)

    def verified_schedule(self, num_steps: int) -> Schedule | None:
        """What verified, as a schedule: the tiers when they did, else the threshold with the
        adaptive arm's `num_steps`; None when nothing verified."""
        if not self.ok or self.threshold is None:
            return None
        if self.tiers is not None and (self.tiers_verdict or {}).get("ok"):
            return Schedule.from_tiers(self.tiers)
        return Schedule.from_threshold(self.threshold, num_steps)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.tiers is not None:
            data["tiers"] = {str(k): v for k, v in self.tiers.items()}
        return data

    @property
    def ok(self) -> bool:
        return self.status == "verified"


def tune_document(result: TuneResult, settings: dict[str, Any]) -> dict[str, Any]:
    """tune.json's content for one length: the settings and the outcome (records/tune.py writes it)."""
    return {"schema": "specops.tune/1", "settings": settings, "result": result.to_dict()}


# ---------------------------------------------------------------- several context lengths

def length_dir(input_len: int, output_len: int) -> str:
    """A length's run directory inside a several-length tune."""
    return f"in{input_len}-out{output_len}"


def length_row(res: TuneResult) -> dict[str, Any]:
    """One length's row in a several-length tune.json."""
    return {"input_len": res.input_len, "output_len": res.output_len, "status": res.status,
            "threshold": res.threshold, "bracket": res.bracket, "measured_points": res.measured_points,
            "reused_points": res.reused_points, "message": res.message}


def running_summary(records: Sequence[ResultRecord], arm: str, c: int) -> tuple[float | None, float | None]:
    """(median running batch, p90) of one arm at one level over its repeats (for tests and reports)."""
    recs = [r for r in records if r.arm == arm and r.concurrency == c]
    return median_running(recs), percentile([float(r.running_req_p90) for r in recs
                                             if isinstance(r.running_req_p90, (int, float))], 50)
