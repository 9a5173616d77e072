"""`specops tune`'s loop on one host: the phases of decide/tune.py's search (coarse, fine or
bisection, verify, tiers), each run through a callback (flows/tune_run.py passes the bench
playbook), within the time budget."""

from __future__ import annotations

import math
import time
from typing import Any, Callable, NamedTuple, Sequence

from specops.bench.repeats import LevelKey, RepeatRule, parse_repeats, settled, throughputs
from specops.decide.summary import BASELINE_ARM, EAGLE_ARM
from specops.decide.tune import (
    BISECT_FROM,
    MAX_CANDIDATES,
    MAX_FINE_LEVELS,
    TIERS_ARM,
    TOLERANCE,
    Levels,
    Phase,
    TuneResult,
    Verdict,
    bisect_level,
    bracket,
    candidate_arm,
    choose_threshold,
    choose_tiers,
    estimate_point_seconds,
    fine_levels,
    is_reused,
    neighbours,
    off_path_shortfall,
    steps_arm,
    verify,
    verify_order,
)
from specops.engines.base import ServingEngine
from specops.errors import ConfigError
from specops.launchargs import arg_name
from specops.ports import DEFAULT_EPHEMERAL, first_ports
from specops.records.schema import ResultRecord
from specops.report.tune import TIERS_RULE, choice_doc, off_path_text, recheck_text, verdict_text
from specops.report.words import THRESHOLD_RULE, threshold_reason

#: Per-server ports an arm's extra_args may pin: the deployed server still holds them, so an
#: arm tune adds beside it drops them and lets the engine pick its own (real SGLang 0.5.14's
#: adaptive-t4 died with torch.distributed's "failed to listen" on a copied --nccl-port).
PINNED_PORT_ARGS = frozenset({"nccl_port", "metrics_port"})

class TunePlan(NamedTuple):
    """What `Tuner.plan_text` expects to measure, in points and seconds."""
    likely_points: int        # the first threshold verifies, no tiers
    likely_s: float
    most_points: int          # every candidate and the tiers
    most_s: float
    recheck_points: int       # each level a candidate falls short at (`_recheck`) adds these
    recheck_s: float


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
                 tier_steps: Sequence[int] = (0, 1, 3),
                 reused_from: str | None = None, max_candidates: int = MAX_CANDIDATES, ports: Sequence[int] = (),
                 release: Release | None = None, keep_ok: bool = False, bisect_from: int | None = BISECT_FROM,
                 engine: ServingEngine | None = None):
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
        self.max_candidates = max_candidates
        self.release, self.keep_ok, self.bisect_from = release, keep_ok and release is not None, bisect_from
        self.kept: set[str] = set()
        #: (reference arm, level) -> the first repeat its verdicts read: a candidate that fell short
        #: there had that arm measured again beside it (`_recheck`), and only those runs count
        self.fresh_from: dict[tuple[str, int], int] = {}
        #: the host's engine: whether the adaptive arm skips a drafting-off step's draft extend is its
        #: decision (ServingEngine.skips_off_extend), as it is verify's
        self.engine = engine
        self.result = TuneResult(host=host, rule=THRESHOLD_RULE, reused_from=reused_from, budget_s=budget_s)
        self.started = time.monotonic()
        self.pace: float | None = None   # measured wall seconds per point
        self.spent_points = 0
        ports_free = list(ports)
        # none given (a tuner built without a host): safe ports by the one rule, unchecked
        self.tune_ports = ports_free or first_ports(max(8, 1 + len(self.tier_steps)), DEFAULT_EPHEMERAL,
                                                    where=f"host {host}")

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

    def plan_text(self) -> TunePlan:
        """The line printed before anything starts: points and seconds when the first
        threshold verifies and no tiers are tuned, at most, and per recheck."""
        coarse = Phase("coarse", [BASELINE_ARM, EAGLE_ARM], self.coarse, self._repeats())
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
        # `_recheck`: both reference arms at one level, as often as the candidate ran there
        recheck = Phase("recheck", [BASELINE_ARM, EAGLE_ARM], [mid], self._repeats())
        first = (len(coarse_todo), self.estimate(coarse, coarse_todo) if coarse_todo else 0.0)
        return TunePlan(first[0] + sum(p.points for p in likely), first[1] + sum(self.estimate(p) for p in likely),
                        first[0] + sum(p.points for p in phases), first[1] + sum(self.estimate(p) for p in phases),
                        recheck.points, self.estimate(recheck))

    # ----- arms

    def _adaptive_with(self, **changes: Any) -> dict[str, Any]:
        arm = {k: v for k, v in self.base_arms["adaptive"].items() if k not in ("tiers",)}
        arm.update(changes)
        arm["kind"] = "adaptive"
        arm["port"] = self.tune_ports[0]
        return _unpinned(arm)

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
                lv = Levels.of(self._judged(), self.host)
                so_far = verify(lv, arm, measured, lowest=lowest)
                if c in so_far.shortfalls:
                    if not self._recheck(arm, c, lv, so_far.ratios.get(c)):
                        return None
                    so_far = verify(Levels.of(self._judged(), self.host), arm, measured, lowest=lowest)
                if not so_far.ok and len(measured) < len(order):
                    so_far.skipped = [x for x in order if x not in measured]
                    return so_far
        finally:
            self._release([arm])
        return verify(Levels.of(self._judged(), self.host), arm, levels)

    def _judged(self) -> list[ResultRecord]:
        """The records verdicts read: where a reference arm was measured again beside a
        candidate (`_recheck`), its runs at that level from then on only."""
        return [r for r in self.records()
                if not (r.host == self.host and r.concurrency is not None
                        and r.repeat < self.fresh_from.get((r.arm, int(r.concurrency)), 0))]

    def _recheck(self, arm: str, c: int, lv: Levels, before: float | None) -> bool:
        """`arm` fell short at `c` against reference points measured earlier (a coarse sweep,
        `--from`'s run, minutes or hours before: a real CPU host's pace drifts by more than the
        5% the bar allows, 2026-12-07). Measure the reference arms there again, now, as often as
        the candidate was, and judge the level on those runs. The candidate's server is
        stopped first (the reference arms may share its GPU). `lv`: the levels `before` was
        judged on. False: the budget stopped it."""
        best = lv.best(c)
        if best is None:
            return True
        # an arm further below the better one than the bar allows could not become the reference
        refs = [a for a in (BASELINE_ARM, EAGLE_ARM) if (lv.tps(a, c) or 0.0) >= TOLERANCE * best]
        recs = [r for r in self.records() if r.host == self.host and r.concurrency == c]
        runs = max(1, sum(1 for r in recs if r.arm == arm and r.ok))
        self._release([arm])
        for ref in refs:
            first = 1 + max((r.repeat for r in recs if r.arm == ref), default=-1)
            phase = Phase(f"recheck {ref} c={c}", [ref], [c], RepeatRule(False, first + runs))
            if not self._run(phase, self._arms()):
                return False
            self.fresh_from[(ref, c)] = first
        after = verify(Levels.of(self._judged(), self.host), arm, [c]).ratios.get(c)
        self.result.rechecks.append({"arm": arm, "concurrency": c, "references": refs, "runs": runs,
                                     "before": before, "after": after})
        self.say(recheck_text(arm, c, refs, before, after))
        return True

    def _loop(self) -> None:
        res, reps = self.result, self._repeats()
        res.coarse_levels = self.coarse
        # with --from, the coarse levels are the run's: the phase measures only the repeats its
        # points lack (none when the run measured them as often as tune measures its own)
        if not self._run(Phase("coarse", [BASELINE_ARM, EAGLE_ARM], self.coarse, reps), self._arms()):
            return
        if not self._narrow(reps):
            self._provisional(Levels.of(self.records(), self.host))
            return
        lv = Levels.of(self.records(), self.host)
        choice = choose_threshold(lv)
        res.choice = choice_doc(choice)
        self.say(f"rule: {THRESHOLD_RULE}")
        if choice.threshold is None:
            res.status, res.message = "no-speculation", threshold_reason(choice)
            return
        self.say(f"chosen threshold {choice.threshold} ({threshold_reason(choice)})")
        levels = lv.both()
        tried: list[int] = []
        queue = [choice.threshold]
        best: tuple[float, int, Verdict] | None = None   # (worst ratio, threshold, its verdict)
        while queue and len(tried) < self.max_candidates:
            t = queue.pop(0)
            tried.append(t)
            arm = candidate_arm(t)
            verdict = self._verify(f"verify threshold {t}", arm, self._adaptive_with(threshold=t), levels, t, reps)
            if verdict is None:
                break
            res.candidates.append({"threshold": t, "arm": arm, "ok": verdict.ok, "text": verdict_text(verdict),
                                   "ratios": {str(c): r for c, r in verdict.ratios.items()},
                                   "gain_kept": verdict.gain_kept, "skipped": verdict.skipped})
            self.say(verdict_text(verdict))
            worst = min((r for r in verdict.ratios.values() if r is not None), default=0.0)
            if best is None or worst > best[0]:
                best = (worst, t, verdict)
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
                if best is not None:   # fell short where it was not drafting: say what that costs
                    off = off_path_shortfall(Levels.of(self._judged(), self.host), best[2])
                    switch, skipped = self._off_extend()
                    res.message += (f"; {off_path_text(best[2].arm, off, switch=switch, extend_skipped=skipped)}"
                                    if off else "")
            return
        res.status, res.message = "verified", f"threshold {res.threshold} verified at {len(levels)} levels"
        native = self.native
        if native is None:
            mech = {r.mechanism for r in self.records() if r.arm == candidate_arm(res.threshold)}
            native = "native-adaptive" in mech
        if native:
            self._tiers(levels)

    def _off_extend(self) -> tuple[str | None, bool]:
        """The engine's switch that skips a drafting-off step's draft extend, and whether the
        adaptive arm's environment sets it (no engine: neither)."""
        if self.engine is None:
            return None, False
        return self.engine.off_extend_switch, self.engine.skips_off_extend(self.base_arms["adaptive"].get("env") or {})

    def _provisional(self, lv: Levels) -> None:
        choice = choose_threshold(lv)
        self.result.choice = choice_doc(choice)
        if choice.threshold is not None:
            self.result.message += (f"; provisional threshold from the points measured: {choice.threshold} "
                                    f"({threshold_reason(choice)}), not verified")

    def _tiers(self, levels: list[int]) -> None:
        res, reps = self.result, self._repeats()
        extra = [k for k in self.tier_steps if k not in (0, self.eagle_steps)]
        lv = Levels.of(self.records(), self.host)
        # measure other step counts where speculation can still pay: up to the first level where
        # baseline beats EAGLE-3 by more than the best other count could make up (2x), capped by levels
        steps_levels = [c for c in levels if (lv.tps(EAGLE_ARM, c) or 0) * 2 >= (lv.tps(BASELINE_ARM, c) or 0)]
        arms = {steps_arm(k): _unpinned({**self.base_arms[EAGLE_ARM], "kind": "eagle3", "num_steps": k,
                                         "num_draft_tokens": k + 1, "port": self.tune_ports[1 + i]})
                for i, k in enumerate(extra)}
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
        res.tiers_verdict = {"ok": verdict.ok, "text": verdict_text(verdict),
                             "ratios": {str(c): r for c, r in verdict.ratios.items()}, "skipped": verdict.skipped}
        self.say(verdict_text(verdict))
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


def _unpinned(arm: dict[str, Any]) -> dict[str, Any]:
    """The arm without the per-server ports its extra_args pin (PINNED_PORT_ARGS), as
    `--flag VALUE` or `--flag=VALUE`."""
    given = [str(a) for a in arm.get("extra_args") or []]
    kept: list[str] = []
    i = 0
    while i < len(given):
        flag, _, inline = given[i].partition("=")
        if given[i].startswith("--") and arg_name(flag) in PINNED_PORT_ARGS:
            i += 1 if inline or i + 1 >= len(given) or given[i + 1].startswith("--") else 2
            continue
        kept.append(given[i])
        i += 1
    return {**arm, "extra_args": kept} if "extra_args" in arm else arm
