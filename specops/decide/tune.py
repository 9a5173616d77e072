"""`specops tune`: from a sweep to a verified adaptive configuration.

The search, as pure functions over result records (so it is tested without servers), and
`Tuner`, which runs its phases through the bench playbook on one host, into one run
directory, and writes `tune.json` beside results.jsonl:

1. coarse: baseline and EAGLE-3 at the coarse levels (or the points of an existing run)
   bracket the crossover: the last level where EAGLE-3 is at least as fast, the first
   where it is not; points already in the run directory (reused from an earlier run of the
   same configuration, flows/reuse.py) are not measured again;
2. fine: both arms at every level inside the bracket, or, when the bracket holds
   `BISECT_FROM` levels or more, a bisection of it: one level at a time (the geometric middle
   of the bracket), the bracket narrowed by each, until its ends are neighbours;
3. the threshold, in running-batch units (`THRESHOLD_RULE`, decide/threshold.py: the rule the
   report uses too), from the server's own running batch measured during each point
   (bench/running.py);
4. verify: arm `adaptive-t<T>` (the adaptive profile with that threshold) at every level;
   accepted when it reaches `TOLERANCE` of the better of baseline and EAGLE-3 at each level
   and keeps `GAIN_KEPT` of EAGLE-3's gain at the lowest level; otherwise the neighbours.
   Levels are measured one at a time, nearest the threshold first (`VERIFY_ORDER`), with the
   candidate's server kept up between them, and a candidate is rejected at its first level
   below `TOLERANCE`: the rest are not measured;
5. tiers (native adaptive trees, 0.5.14+): arms `eagle3-k<k>` measure other draft-step
   counts; per level the fastest count (0 = baseline) gives a tier config, verified as
   `adaptive-tiers` the same way.

Before each phase the time it needs is estimated (the simulator's model on a simulated host,
else the pace measured so far); a phase that would not fit the budget is not started and the
result says what was measured and what was not.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from specops.bench.repeats import LevelKey, RepeatRule, parse_repeats, settled, throughputs
from specops.bench.running import median_running, percentile
from specops.bench.schema import ResultRecord
from specops.decide.summary import (
    BASELINE_ARM,
    EAGLE_ARM,
    Cell,
    find_crossover,
    ok_records,
    summarize_host,
    threshold_points,
)
from specops.decide.threshold import RULE as THRESHOLD_RULE
from specops.decide.threshold import ThresholdChoice, choose
from specops.errors import ConfigError
from specops.fsutil import atomic_write
from specops.sim import model as M

TOLERANCE = 0.95      # adaptive >= 0.95x of the better arm at every level
GAIN_KEPT = 0.90      # ... and keeps 90% of EAGLE-3's gain at the lowest level
MAX_FINE_LEVELS = 12  # a wide bracket is sampled at most this many levels
BISECT_FROM = 4       # a bracket with at least this many levels inside is bisected, not swept
VERIFY_ORDER = ("nearest the threshold first (|log2 c - log2(T + 0.5)|, lower first on a tie): the levels "
                "where the adaptive arm stops speculating are where a wrong threshold shows")
TUNE_JSON = "tune.json"
TIERS_ARM = "adaptive-tiers"
TIERS_RULE = ("per level, the draft-step count (0 = no speculation) with the highest median throughput; a new "
              "count's tier starts just above the running batch p90 of the last level of the count before, and "
              "no higher than the running-batch median of its own first level")


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

    cells: dict[tuple[str, int], Cell]
    levels: list[int]

    @classmethod
    def of(cls, records: Sequence[ResultRecord], host: str) -> "Levels":
        mine = [r for r in ok_records(records) if r.host == host]
        s = summarize_host(host, mine)
        return cls(s.cells, s.levels)

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
        return cross.below, cross.above
    if cross.kind == "every":
        return None, cross.above
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


def verify_order(levels: Sequence[int], threshold: int) -> list[int]:
    """VERIFY_ORDER: the levels a candidate is measured at, riskiest first."""
    pivot = math.log2(threshold + 0.5)
    return sorted(levels, key=lambda c: (abs(math.log2(c) - pivot), c))


def choose_threshold(lv: Levels) -> ThresholdChoice:
    """THRESHOLD_RULE (decide/threshold.py, the rule the report uses) on the measured cells."""
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

    def text(self) -> str:
        if self.ok:
            worst = min((r for r in self.ratios.values() if r is not None), default=None)
            kept = "" if self.gain_kept is None else f", keeps {self.gain_kept:.0%} of EAGLE-3's gain at the lowest level"
            return (f"{self.arm}: verified: >= {TOLERANCE:.2f}x of the better arm at every level "
                    f"(worst {worst:.3f}x){kept}")
        parts = [f"c={c} {self.ratios[c]:.3f}x" for c in self.shortfalls if self.ratios.get(c) is not None]
        parts += [f"c={c} missing" for c in self.missing]
        if self.gain_kept is not None and self.gain_kept < GAIN_KEPT:
            parts.append(f"keeps {self.gain_kept:.0%} of EAGLE-3's gain at the lowest level (< {GAIN_KEPT:.0%})")
        if self.skipped:
            parts.append(f"stopped there: c={','.join(map(str, sorted(self.skipped)))} not measured")
        return f"{self.arm}: rejected: " + ", ".join(parts)


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


def choose_tiers(lv: Levels, steps_by_arm: dict[str, int], levels: Sequence[int]) -> dict[int, int]:
    """TIERS_RULE: {first running batch of the tier: draft steps}, from the measured levels."""
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
    rule: str = THRESHOLD_RULE
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
    input_len: int | None = None
    output_len: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.tiers is not None:
            data["tiers"] = {str(k): v for k, v in self.tiers.items()}
        return data

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    def lines(self) -> list[str]:
        """What the terminal and the report say."""
        out = []
        if self.reused_from:
            out.append(f"coarse points reused from {self.reused_from}")
        if self.reuse:
            out.append(self.reuse)
        b0, b1 = self.bracket
        if b0 is not None or b1 is not None:
            out.append(f"bracket: EAGLE-3 wins up to c={b0 if b0 is not None else '-'}, "
                       f"loses from c={b1 if b1 is not None else '- (never)'}")
        if self.fine_levels:
            how = "bisection levels" if self.bisected else "fine levels"
            out.append(f"{how}: {', '.join(str(c) for c in self.fine_levels)}")
        if self.choice:
            out.append(f"rule: {self.rule}")
            if self.choice.get("threshold") is not None:
                out.append(f"chosen threshold {self.choice['threshold']} ({self.choice['reason']})")
            else:
                out.append(f"no threshold: {self.choice['reason']}")
        for cand in self.candidates:
            out.append(cand["text"])
        if self.tiers is not None:
            shown = ", ".join(f"{b}+: {s}" for b, s in self.tiers.items())
            out.append(f"tiers (running batch: draft steps): {shown}")
            if self.tiers_verdict:
                out.append(self.tiers_verdict["text"])
            if self.default_comparison:
                out.append(self.default_comparison["text"])
        out.append(f"result: {self.status}: {self.message}")
        out.append(self.points_text())
        return out

    def points_text(self) -> str:
        return f"points: {self.measured_points} measured, {self.reused_points} reused"


def load_tune(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / TUNE_JSON
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------- running the phases

RunPhase = Callable[[Phase, dict[str, Any]], None]   # run the phase's points; arms = the arms dict to use
Release = Callable[[list[str]], None]                # stop the servers of these arms that phases kept up


class Tuner:
    """The tune loop on one host. `run_phase` runs one bench sweep (the CLI passes the bench
    playbook); `records` reads the run's results; `say` prints a line; `release` stops the
    servers a phase with `keep` left up (None: phases never keep them); `keep_ok`: baseline
    and EAGLE-3 may stay up together between bisection rounds (they share no GPU)."""

    def __init__(self, *, host: str, arms: dict[str, Any], settings: dict[str, Any], coarse: list[int],
                 run_phase: RunPhase, records: Callable[[], list[ResultRecord]], say: Callable[[str], None],
                 time_scale: float | None, budget_s: float | None, native: bool | None,
                 tier_steps: Sequence[int] = (0, 1, 3), reused: list[ResultRecord] | None = None,
                 reused_from: str | None = None, max_candidates: int = 3, ports: Sequence[int] = (),
                 release: Release | None = None, keep_ok: bool = False, bisect_from: int | None = BISECT_FROM):
        self.host, self.settings, self.coarse = host, settings, sorted(set(coarse))
        self.base_arms = {k: dict(v or {}) for k, v in arms.items()}
        for need in (BASELINE_ARM, EAGLE_ARM, "adaptive"):
            if need not in self.base_arms:
                raise ConfigError(f"tune needs arms baseline, eagle3 and adaptive in the host's vars; it has "
                                  f"{', '.join(self.base_arms) or 'none'}")
        self.run_phase, self.records, self.say = run_phase, records, say
        self.time_scale, self.budget_s, self.native = time_scale, budget_s, native
        self.eagle_steps = int(self.base_arms[EAGLE_ARM].get("num_steps") or 3)
        self.tier_steps = sorted(set(tier_steps))
        self.reused, self.max_candidates = reused or [], max_candidates
        self.release, self.keep_ok, self.bisect_from = release, keep_ok and release is not None, bisect_from
        self.kept: set[str] = set()
        self.result = TuneResult(host=host, reused_from=reused_from, budget_s=budget_s)
        self.started = time.monotonic()
        self.pace: float | None = None   # measured wall seconds per point
        self.spent_points = 0
        ports_free = list(ports)
        ports = [int(v["port"]) for v in self.base_arms.values() if isinstance(v.get("port"), int)]
        first = max(ports) + 1 if ports else 30099
        self.tune_ports = list(ports_free) if ports_free else list(range(first, first + 8))

    # ----- estimates and budget

    def _repeats(self) -> RepeatRule:
        """`tune --repeats`: a count, or auto[:MAX] (bench/repeats.py), which every phase's
        sweep applies: a point stops once its spread, or the decision at its level, is settled."""
        return parse_repeats(self.settings.get("repeats") or 1, "tune --repeats")

    def _prompts(self, c: int) -> int:
        n = self.settings.get("num_prompts") or self.settings.get("prompts_per_level")
        return int(n) if n else max(4 * c, 16)

    def _arm_steps(self, arm: str) -> int:
        if arm == BASELINE_ARM:
            return 0
        if arm.startswith("eagle3-k"):
            return int(arm[len("eagle3-k"):])
        return self.eagle_steps

    def _todo(self, phase: Phase) -> list[tuple[str, int]]:
        """(arm, level) of each point of the phase with no ok record yet (one per repeat missing):
        what the bench step will measure (it skips the points the run directory already has).
        Under auto repeats a point its records already settle (bench/repeats.py, judged among
        the phase's arms, as its sweep judges) needs nothing; an unsettled one needs at least
        one more repeat."""
        values: dict[tuple[str, LevelKey], list[float]] = {}
        for (arm, key), tps in throughputs(self.records(), self.host).items():   # one length per tune run
            values.setdefault((arm, (key[0], None, None)), []).extend(tps)
        todo: list[tuple[str, int]] = []
        for a in phase.arms:
            for c in phase.levels:
                key = (c, None, None)
                have = len(values.get((a, key), []))
                if phase.rule.auto:
                    if settled(phase.rule, values, phase.arms, a, key) is None:
                        todo += [(a, c)] * max(1, phase.rule.least - have)
                else:
                    todo += [(a, c)] * max(0, phase.rule.most - have)
        return todo

    def estimate(self, phase: Phase, todo: Sequence[tuple[str, int]] | None = None) -> float:
        """Seconds the phase needs: its points still to measure (all of them when `todo` is
        None), plus a launch per arm."""
        launch = 4.0 if self.time_scale is not None else 120.0
        pairs = list(todo) if todo is not None else [(a, c) for a in phase.arms for c in phase.levels] * phase.repeats
        if self.pace is not None:
            return len(pairs) * self.pace + launch * len(phase.arms)
        per = sum(estimate_point_seconds(self._arm_steps(a), c, self._prompts(c), int(self.settings.get("input_len", 256)),
                                         int(self.settings.get("output_len", 256)), self.time_scale)
                  for a, c in pairs)
        return per + launch * len(phase.arms)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def fits(self, phase: Phase, todo: Sequence[tuple[str, int]] | None = None) -> bool:
        if self.budget_s is None:
            return True
        return self.elapsed() + self.estimate(phase, todo) <= self.budget_s

    def _run(self, phase: Phase, arms: dict[str, Any]) -> bool:
        """Run a phase if it fits the budget; False (and a partial result) when it does not.
        Points the run directory already has (reused) are not measured again."""
        if not phase.points:
            return True
        todo = self._todo(phase)
        if not todo:
            self.say(f"{phase.name}: all {phase.points} points already measured (reused); nothing to run")
            return True
        est = self.estimate(phase, todo)
        if not self.fits(phase, todo):
            left = (self.budget_s or 0) - self.elapsed()
            self.result.status = "partial"
            self.result.message = (f"budget reached: the {phase.name} phase ({len(todo)} points, ~{est:.0f} s) "
                                   f"does not fit the {max(0.0, left):.0f} s left; nothing was changed")
            self.say(f"stop: {self.result.message}")
            return False
        have = max(0, phase.points - len(todo))
        self.say(f"{phase.name}: {len(todo)} point{'s' if len(todo) > 1 else ''} ({', '.join(phase.arms)} x c={','.join(map(str, phase.levels))}"
                 f" x {phase.rule.text()}{f', {have} already measured' if have else ''}), ~{est:.0f} s")
        t0 = time.monotonic()
        if phase.keep:
            self.kept |= set(phase.arms)
        self.run_phase(phase, arms)
        took = time.monotonic() - t0
        self.spent_points += len(todo)
        self.pace = took / len(todo) if self.pace is None else \
            (self.pace * (self.spent_points - len(todo)) + took) / self.spent_points
        self.result.phases.append({"name": phase.name, "arms": phase.arms, "levels": phase.levels,
                                   "repeats": phase.repeats_setting, "points": len(todo), "seconds": round(took, 1)})
        return True

    def _release(self, arms: Sequence[str]) -> None:
        """Stop the servers of `arms` that kept phases left up."""
        mine = sorted(self.kept & set(arms))
        if mine and self.release is not None:
            self.kept -= set(mine)
            self.release(mine)

    def plan_text(self) -> tuple[int, float, int, float]:
        """(points, seconds) when the first threshold verifies and no tiers are tuned, then
        (points, seconds) at most: the line printed before anything starts."""
        coarse = Phase("coarse", [BASELINE_ARM, EAGLE_ARM], [] if self.reused else self.coarse, self._repeats())
        coarse_todo = self._todo(coarse)
        gaps = [b - a - 1 for a, b in zip(self.coarse, self.coarse[1:], strict=False)]
        widest = max(gaps, default=0)
        if self.bisect_from is not None and widest >= self.bisect_from:
            fine_n = max(1, math.ceil(math.log2(widest + 1)))
        else:
            fine_n = min(MAX_FINE_LEVELS, widest)
        mid = self.coarse[len(self.coarse) // 2] if self.coarse else 4
        fine = Phase("fine", [BASELINE_ARM, EAGLE_ARM], [mid] * fine_n, self._repeats())
        verify_levels = self.coarse + [mid] * fine_n
        one = Phase("verify", ["adaptive"], verify_levels, self._repeats())
        likely = [fine, one]
        phases = [fine] + [one] * self.max_candidates
        if self.native is not False:
            extra = [k for k in self.tier_steps if k not in (0, self.eagle_steps)]
            phases.append(Phase("steps", [steps_arm(k) for k in extra], verify_levels, self._repeats()))
            phases.append(Phase("tiers", [TIERS_ARM], verify_levels, self._repeats()))
        first = (len(coarse_todo), self.estimate(coarse, coarse_todo) if coarse_todo else 0.0)
        return (first[0] + sum(p.points for p in likely), first[1] + sum(self.estimate(p) for p in likely),
                first[0] + sum(p.points for p in phases), first[1] + sum(self.estimate(p) for p in phases))

    # ----- arms

    def _adaptive_with(self, **changes: Any) -> dict[str, Any]:
        arm = {k: v for k, v in self.base_arms["adaptive"].items() if k not in ("tiers",)}
        arm.update(changes)
        arm["kind"] = "adaptive"
        arm["port"] = self.tune_ports[0]
        return arm

    def _arms(self, **extra: dict[str, Any]) -> dict[str, Any]:
        arms = {k: v for k, v in self.base_arms.items() if k != "adaptive"}
        arms.update(extra)
        return arms

    # ----- the loop

    def run(self) -> TuneResult:
        res = self.result
        try:
            self._loop()
        finally:
            try:
                self._release(sorted(self.kept))
            finally:
                res.elapsed_s = round(self.elapsed(), 1)
                recs = [r for r in self.records() if r.host == self.host]
                res.reused_points = sum(1 for r in recs if is_reused(r))
                res.measured_points = len(recs) - res.reused_points
        return res

    def _narrow(self, reps: RepeatRule) -> bool:
        """Phase 2: every level inside the bracket, or a bisection of it when it holds
        BISECT_FROM levels or more. False when the budget stopped it."""
        res = self.result
        lv = Levels.of(self.records(), self.host)
        below, above = bracket(lv)
        res.bracket = [below, above]
        inside = fine_levels(below, above, lv.both())
        wide = (below is not None and above is not None and self.bisect_from is not None
                 and above - below - 1 >= self.bisect_from)
        if not wide or below is None or above is None:
            res.fine_levels = inside
            self.say(f"bracket: EAGLE-3 wins up to c={below if below is not None else '-'}, loses from "
                     f"c={above if above is not None else '- (never)'}; fine levels: {', '.join(map(str, inside)) or 'none'}")
            return self._run(Phase("fine", [BASELINE_ARM, EAGLE_ARM], inside, reps), self._arms())
        res.bisected = True
        self.say(f"bracket: EAGLE-3 wins up to c={below}, loses from c={above}: {above - below - 1} levels inside, "
                 f"bisected (one level at a time, the bracket's geometric middle)")
        tried: list[int] = []
        try:
            while True:
                lv = Levels.of(self.records(), self.host)
                below, above = bracket(lv)
                level = bisect_level(below, above, list(lv.both()) + tried)
                if level is None:
                    break
                tried.append(level)
                res.fine_levels = sorted(tried)
                if not self._run(Phase(f"bisect c={level}", [BASELINE_ARM, EAGLE_ARM], [level], reps,
                                       keep=self.keep_ok), self._arms()):
                    return False
        finally:
            self._release([BASELINE_ARM, EAGLE_ARM])
        res.bracket = [below, above]
        self.say(f"bisection: EAGLE-3 wins up to c={below if below is not None else '-'}, loses from "
                 f"c={above if above is not None else '- (never)'}; measured c={','.join(map(str, sorted(tried)))}")
        return True

    def _verify(self, name: str, arm: str, spec: dict[str, Any], levels: Sequence[int], threshold: int,
                reps: RepeatRule) -> Verdict | None:
        """Measure one candidate level by level (VERIFY_ORDER), its server kept up between
        levels, and stop at its first level below TOLERANCE. None: the budget stopped it."""
        order = verify_order(levels, threshold)
        lowest = min(levels)
        measured: list[int] = []
        arms = self._arms(**{arm: spec})
        try:
            for c in order:
                if not self._run(Phase(f"{name} c={c}", [arm], [c], reps, keep=self.release is not None), arms):
                    return None
                measured.append(c)
                lv = Levels.of(self.records(), self.host)
                so_far = verify(lv, arm, measured, lowest=lowest)
                if not so_far.ok and len(measured) < len(order):
                    so_far.skipped = [x for x in order if x not in measured]
                    return so_far
        finally:
            self._release([arm])
        return verify(Levels.of(self.records(), self.host), arm, levels)

    def _loop(self) -> None:
        res, reps = self.result, self._repeats()
        res.coarse_levels = self.coarse
        if not self._run(Phase("coarse", [BASELINE_ARM, EAGLE_ARM],
                               [] if self.reused else self.coarse, reps), self._arms()):
            return
        if not self._narrow(reps):
            self._provisional(Levels.of(self.records(), self.host))
            return
        lv = Levels.of(self.records(), self.host)
        choice = choose_threshold(lv)
        res.choice = asdict(choice)
        self.say(f"rule: {THRESHOLD_RULE}")
        if choice.threshold is None:
            res.status, res.message = "no-speculation", choice.reason
            return
        self.say(f"chosen threshold {choice.threshold} ({choice.reason})")
        levels = lv.both()
        tried: list[int] = []
        queue = [choice.threshold]
        best: tuple[float, int] | None = None
        while queue and len(tried) < self.max_candidates:
            t = queue.pop(0)
            tried.append(t)
            arm = candidate_arm(t)
            verdict = self._verify(f"verify threshold {t}", arm, self._adaptive_with(threshold=t), levels, t, reps)
            if verdict is None:
                break
            res.candidates.append({"threshold": t, "arm": arm, "ok": verdict.ok, "text": verdict.text(),
                                   "ratios": {str(c): r for c, r in verdict.ratios.items()},
                                   "gain_kept": verdict.gain_kept, "skipped": verdict.skipped})
            self.say(verdict.text())
            worst = min((r for r in verdict.ratios.values() if r is not None), default=0.0)
            if best is None or worst > best[0]:
                best = (worst, t)
            if verdict.ok:
                res.threshold = t
                break
            if not queue and len(tried) == 1:
                queue = neighbours(choice.threshold, tried)
        if res.threshold is None:
            if res.status != "partial":
                res.status = "unverified"
                res.message = (f"no threshold passed verification (tried {', '.join(map(str, tried))}); "
                               f"best was {best[1]} (worst level {best[0]:.3f}x)" if best else "nothing verified")
            return
        res.status, res.message = "verified", f"threshold {res.threshold} verified at {len(levels)} levels"
        native = self.native
        if native is None:
            mech = {r.mechanism for r in self.records() if r.arm == candidate_arm(res.threshold)}
            native = "native-adaptive" in mech
        if native:
            self._tiers(levels)

    def _provisional(self, lv: Levels) -> None:
        choice = choose_threshold(lv)
        self.result.choice = asdict(choice)
        if choice.threshold is not None:
            self.result.message += (f"; provisional threshold from the points measured: {choice.threshold} "
                                    f"({choice.reason}), not verified")

    def _tiers(self, levels: list[int]) -> None:
        res, reps = self.result, self._repeats()
        extra = [k for k in self.tier_steps if k not in (0, self.eagle_steps)]
        lv = Levels.of(self.records(), self.host)
        # measure other step counts where speculation can still pay: up to the first level where
        # baseline beats EAGLE-3 by more than the best other count could make up (2x), capped by levels
        steps_levels = [c for c in levels if (lv.tps(EAGLE_ARM, c) or 0) * 2 >= (lv.tps(BASELINE_ARM, c) or 0)]
        arms = {steps_arm(k): {**{kk: vv for kk, vv in self.base_arms[EAGLE_ARM].items()},
                               "kind": "eagle3", "num_steps": k, "num_draft_tokens": k + 1,
                               "port": self.tune_ports[1 + i]} for i, k in enumerate(extra)}
        if not self._run(Phase("draft steps", list(arms), steps_levels, reps), self._arms(**arms)):
            res.status = "verified"
            res.message += "; tiers not tuned (budget)"
            return
        lv = Levels.of(self.records(), self.host)
        by_arm = {BASELINE_ARM: 0, EAGLE_ARM: self.eagle_steps, **{steps_arm(k): k for k in extra}}
        tiers = choose_tiers(lv, by_arm, levels)
        res.tiers, res.tiers_rule = tiers, TIERS_RULE
        self.say("tiers (running batch: draft steps): " + ", ".join(f"{b}+: {s}" for b, s in tiers.items()))
        tier_arm = self._adaptive_with(threshold=res.threshold, tiers={b: s for b, s in tiers.items()})
        verdict = self._verify("verify tiers", TIERS_ARM, tier_arm, levels, int(res.threshold or 1), reps)
        if verdict is None:
            res.message += "; tiers measured but not verified (budget)"
            return
        lv = Levels.of(self.records(), self.host)
        res.tiers_verdict = {"ok": verdict.ok, "text": verdict.text(),
                             "ratios": {str(c): r for c, r in verdict.ratios.items()}, "skipped": verdict.skipped}
        self.say(verdict.text())
        thr = candidate_arm(int(res.threshold or 0))
        gains = {c: (lv.tps(TIERS_ARM, c) or 0) / (lv.tps(thr, c) or 1) for c in levels
                 if lv.tps(TIERS_ARM, c) and lv.tps(thr, c)}
        if gains:
            top = max(gains, key=lambda c: gains[c])
            res.default_comparison = {"vs": thr, "ratios": {str(c): r for c, r in gains.items()},
                                      "text": f"tiers vs the two-tier threshold config ({thr}): up to "
                                              f"{gains[top]:.3f}x at c={top}"}
            self.say(res.default_comparison["text"])
        res.message += "; tiers verified" if verdict.ok else "; measured tiers rejected, the threshold stands"


def write_tune(run_dir: Path, result: TuneResult, settings: dict[str, Any]) -> None:
    doc = {"schema": "specops.tune/1", "settings": settings, "result": result.to_dict()}
    atomic_write(Path(run_dir) / TUNE_JSON, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")


# ---------------------------------------------------------------- several context lengths

FOR_LENGTH_RULE = ("the adaptive arm takes one threshold: with several lengths, --write puts in the threshold "
                   "of --for-length L (an input length tuned), else of the first length given; the other "
                   "lengths' thresholds are in tune.json and the table")


def length_dir(input_len: int, output_len: int) -> str:
    """A length's run directory inside a several-length tune."""
    return f"in{input_len}-out{output_len}"


def _length_row(res: TuneResult) -> dict[str, Any]:
    return {"input_len": res.input_len, "output_len": res.output_len, "status": res.status,
            "threshold": res.threshold, "bracket": res.bracket, "measured_points": res.measured_points,
            "reused_points": res.reused_points, "message": res.message}


def lengths_table(results: Sequence[TuneResult], chosen: tuple[int, int]) -> list[str]:
    """The per-length recommendation, one row per length (the terminal's table)."""
    head = ("input", "output", "status", "threshold", "bracket", "measured", "reused")
    rows = [head]
    for r in results:
        b0, b1 = r.bracket
        mark = " *" if (r.input_len, r.output_len) == chosen else ""
        rows.append((str(r.input_len), str(r.output_len), r.status,
                     (str(r.threshold) if r.threshold is not None else "-") + mark,
                     f"{b0 if b0 is not None else '-'}..{b1 if b1 is not None else '-'}",
                     str(r.measured_points), str(r.reused_points)))
    widths = [max(len(row[k]) for row in rows) for k in range(len(head))]
    out = ["per context length (threshold in the server's running-batch units):"]
    out += ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    out.append(f"  * the length --write is for: {FOR_LENGTH_RULE}")
    return out


def write_lengths(run_dir: Path, items: Sequence[tuple[Path, TuneResult]], chosen: tuple[int, int],
                  written: str | None) -> None:
    """tune.json of a several-length tune: one row per length (its own run directory holds
    its full tune.json and report), which length --write is for, and what was written."""
    doc = {"schema": "specops.tune-lengths/1", "rule": THRESHOLD_RULE, "for_length_rule": FOR_LENGTH_RULE,
           "for_length": {"input_len": chosen[0], "output_len": chosen[1]}, "written": written,
           "lengths": [{**_length_row(res), "run_dir": str(d)} for d, res in items],
           "measured_points": sum(res.measured_points for _, res in items),
           "reused_points": sum(res.reused_points for _, res in items)}
    atomic_write(Path(run_dir) / TUNE_JSON, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")


def running_summary(records: Sequence[ResultRecord], arm: str, c: int) -> tuple[float | None, float | None]:
    """(median running batch, p90) of one arm at one level over its repeats (for tests and reports)."""
    recs = [r for r in records if r.arm == arm and r.concurrency == c]
    return median_running(recs), percentile([float(r.running_req_p90) for r in recs
                                             if isinstance(r.running_req_p90, (int, float))], 50)
