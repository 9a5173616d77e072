"""`specops tune`'s search, its write-back and the model it is tested against, without servers.

The Tuner runs here with a phase runner that writes records straight from the simulator's
performance model (what a perfectly quiet simulated host would measure), so the whole loop
(bracket, fine levels, threshold, neighbours, tiers, budget) is exercised in milliseconds.
The same loop against real simulated servers is tests/e2e/test_tune_e2e.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specops.bench.matrix import Point
from specops.bench.repeats import RepeatRule
from specops.bench.running import RunningSampler, parse_decode_lines, parse_metrics, percentile
from specops.bench.settings import BenchSettings
from specops.bench.sweep import unsettled
from specops.config.writeback import write_adaptive
from specops.decide.tune import (
    TIERS_ARM,
    TOLERANCE,
    Levels,
    Phase,
    Verdict,
    bracket,
    candidate_arm,
    choose_threshold,
    choose_tiers,
    fine_levels,
    neighbours,
    off_path_shortfall,
    verify,
    verify_order,
)
from specops.engines import engine_named
from specops.errors import ConfigError
from specops.flows.tuner import Tuner
from specops.records.schema import ResultRecord
from specops.report.tune import points_text, result_of, tune_lines, verdict_text
from specops.servers.arms import arms_from_vars
from specops.sglang.adaptive import default_spec_buckets, route_steps, tier_config
from specops.sim import model as M
from specops.sim.logs import decode_batch_line

ARMS = {"baseline": {"port": 30000}, "eagle3": {"port": 30001, "num_steps": 3},
        "adaptive": {"port": 30002, "threshold": 8, "num_steps": 3}}


# ---------------------------------------------------------------- the model tune is tested against

def test_model_keeps_its_calibration_and_adds_draft_steps() -> None:
    assert M.accept_length(1) == pytest.approx(3.0)
    assert M.accept_length(1, 1) < M.accept_length(1, 2) < M.accept_length(1, 3) < M.accept_length(1, 7) < 8
    assert M.accept_length(8, 0) == 1.0
    # k=3 is the calibrated EAGLE-3 arm: same figures as before draft steps were modelled
    assert M.predicted_output_throughput("eagle3", 64) == pytest.approx(354.0, rel=0.01)
    assert M.predicted_output_throughput("baseline", 64) == pytest.approx(773.0, rel=0.01)
    # one draft step wins where three no longer do, and nothing beats the baseline at large batches
    assert M.best_steps(1, [0, 1, 3]) == 3 and M.best_steps(6, [0, 1, 3]) == 1 and M.best_steps(32, [0, 1, 3]) == 0
    assert M.implied_threshold() == 5


def test_sim_tiers_settle_as_sglang_adaptive_slots_do() -> None:
    default = M.load_adaptive_config(None, M.spec_cuda_graph_bs(64))
    assert default.steps_for(1) == 3 and default.steps_for(8) == 3 and default.steps_for(33) == 1
    assert default.steps_for(64) == 0
    measured = M.AdaptiveTiers({1: [3], 3: [1], 11: [0]}, tuple(M.spec_cuda_graph_bs(64)))
    assert [measured.steps_for(b) for b in (1, 2, 3, 9, 10, 11, 12)] == [3, 3, 1, 1, 1, 0, 0]
    assert M.ArmModel("adaptive", tiers=measured).step(4)[1] == pytest.approx(M.accept_length(4, 1))


# ---------------------------------------------------------------- running-batch sampling

def test_running_figures_from_sglang_log_lines_and_metrics() -> None:
    text = "\n".join(decode_batch_line(n, 100, 0.01, acc, True, 300.0, 0)
                     for n, acc in ((4, 2.9), (5, 2.8), (5, 2.8), (6, None), (0, None)))
    figs = parse_decode_lines("[2026-01-01 00:00:00 TP0] Prefill batch, #new-seq: 1, #running-req: 3\n" + text)
    assert figs.running == [4, 5, 5, 6, 0]
    rec = figs.to_record()
    assert (rec["running_req_p50"], rec["running_req_p90"], rec["server_accept_length"]) == (5.0, 6.0, 2.8)
    assert rec["running_source"] == "log"
    metrics = ('# HELP sglang:num_running_reqs The number of running requests.\n'
               '# TYPE sglang:num_running_reqs gauge\n'
               'sglang:num_running_reqs{model_name="m"} 7.0\nsglang:spec_accept_length{model_name="m"} 2.5\n')
    assert parse_metrics(metrics) == {"sglang:num_running_reqs": 7.0, "sglang:spec_accept_length": 2.5}
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == 9.0 and percentile([], 50) is None


def test_sampler_reads_only_the_points_part_of_a_log(tmp_path: Path) -> None:
    from specops.transport.local import LocalTransport

    log = tmp_path / "arm.log"
    log.write_text(decode_batch_line(60, 1, 0.1, None, True, 1.0, 0) + "\n")
    sampler = RunningSampler(LocalTransport(), str(log))
    sampler.start()
    with log.open("a") as fh:
        for n in (3, 3, 4):
            fh.write(decode_batch_line(n, 1, 0.1, 2.5, True, 1.0, 0) + "\n")
    rec = sampler.stop()
    assert (rec["running_req_p50"], rec["running_req_p90"], rec["running_samples"]) == (3.0, 4.0, 3)


# ---------------------------------------------------------------- the search on model records

def model_records(arm: str, levels: list[int], *, steps: int | None = None, threshold: int | None = None,
                  tiers: dict[int, int] | None = None, host: str = "h", repeats: int = 1) -> list[ResultRecord]:
    """What a quiet simulated host measures: model throughput, running batch = concurrency."""
    out = []
    for c in levels:
        if arm == "baseline" or steps == 0:
            tps = M.predicted_output_throughput("baseline", c, max_running=64)
        elif tiers is not None:
            t = M.AdaptiveTiers({b: [s] for b, s in tiers.items()}, tuple(M.spec_cuda_graph_bs(64)))
            tps = M.predicted_output_throughput("adaptive", c, tiers=t, max_running=64)
        elif threshold is not None:
            tps = M.predicted_output_throughput("adaptive", c, threshold=threshold, max_running=64)
        else:
            tps = M.predicted_output_throughput("eagle3", c, num_steps=steps, max_running=64)
        for r in range(repeats):
            out.append(ResultRecord(host=host, arm=arm, concurrency=c, repeat=r, status="ok",
                                    output_throughput=tps, running_req_p50=float(c), running_req_p90=float(c)))
    return out


class FakeHost:
    """A Tuner's phase runner and record store backed by the model."""

    def __init__(self, records: list[ResultRecord] | None = None):
        self.records: list[ResultRecord] = list(records or [])
        self.phases: list[Phase] = []

    def run_phase(self, phase: Phase, arms: dict[str, Any]) -> None:
        self.phases.append(phase)
        for name in phase.arms:
            spec = arms[name]
            if name == "baseline":
                made = model_records(name, phase.levels)
            elif spec.get("kind") == "adaptive" and spec.get("tiers"):
                made = model_records(name, phase.levels, tiers=spec["tiers"])
            elif spec.get("kind") == "adaptive":
                made = model_records(name, phase.levels, threshold=spec["threshold"])
            else:
                made = model_records(name, phase.levels, steps=int(spec.get("num_steps") or 3))
            for rec in made:   # the next repeats, as the bench step numbers them: the count asked, at least one
                have = sum(1 for r in self.records if r.arm == rec.arm and r.concurrency == rec.concurrency)
                self.records += [replace(rec, repeat=have + k) for k in range(max(1, phase.rule.most - have))]


def tuner(fake: FakeHost, **kw: Any) -> Tuner:
    opts: dict[str, Any] = dict(host="h", arms=ARMS, settings={"repeats": 1, "input_len": 32, "output_len": 64},
                                coarse=[1, 2, 4, 8, 16, 32, 64], run_phase=fake.run_phase,
                                records=lambda: fake.records, say=lambda _l: None, time_scale=0.25,
                                budget_s=None, native=False)
    opts.update(kw)
    return Tuner(**opts)


def test_from_scratch_finds_the_models_threshold_and_verifies_it() -> None:
    fake = FakeHost()
    res = tuner(fake).run()
    assert res.bracket == [4, 8] and res.fine_levels == [5, 6, 7]
    assert res.threshold == M.implied_threshold() == 5 and res.status == "verified", tune_lines(res)
    levels = [1, 2, 4, 5, 6, 7, 8, 16, 32, 64]
    # verified level by level, nearest the threshold first
    assert [p.name for p in fake.phases] == ["coarse", "fine"] + [f"verify threshold 5 c={c}"
                                                                  for c in verify_order(levels, 5)]
    assert verify_order(levels, 5)[:3] == [6, 5, 7] and res.measured_points == 2 * 10 + 10
    assert res.candidates[0]["arm"] == candidate_arm(5) and res.candidates[0]["ok"]
    assert "running batch" in res.rule and "p90" in res.rule


def test_from_an_existing_run_reuses_its_points() -> None:
    reused = model_records("baseline", [1, 2, 4, 8, 16]) + model_records("eagle3", [1, 2, 4, 8, 16])
    fake = FakeHost(reused)
    res = tuner(fake, coarse=[1, 2, 4, 8, 16], reused_from="runs/old").run()
    assert "coarse" not in [p.name for p in fake.phases]
    assert res.threshold == 5 and res.reused_from == "runs/old"


def test_from_a_run_measured_fewer_times_its_points_get_the_repeats_typed() -> None:
    """The patch route's tune (2026-12-06, `--from bench-before --repeats auto:3`) rejected
    threshold 10 at c=4 against EAGLE-3's one bench-before record while its own points had two
    or three: the bar compared a median with a single run. The run's points now get the
    repeats the tune measures its own with (the bench step measures only the missing ones)."""
    reused = model_records("baseline", [1, 2, 4, 8, 16]) + model_records("eagle3", [1, 2, 4, 8, 16])
    fake = FakeHost(reused)
    res = tuner(fake, coarse=[1, 2, 4, 8, 16], reused_from="runs/old",
                settings={"repeats": 2, "input_len": 32, "output_len": 64}).run()
    coarse = [p for p in fake.phases if p.name == "coarse"]
    assert len(coarse) == 1 and coarse[0].levels == [1, 2, 4, 8, 16] and coarse[0].repeats == 2, fake.phases
    assert coarse[0].arms == ["baseline", "eagle3"]
    assert res.threshold == 5 and res.reused_from == "runs/old"


def test_a_candidate_short_against_earlier_reference_points_is_judged_on_them_measured_again() -> None:
    """The patch route's tune (2026-12-06) rejected threshold 10 at c=4, 0.920x of EAGLE-3's
    point from a bench 30 minutes before; measured back to back the next day, the adaptive arm
    ran 1.008x of EAGLE-3 there (both drafting every step) while EAGLE-3's own point had moved
    from 79.0 to 71.4 tok/s. Here `--from`'s run was measured in a faster hour (every point 8%
    above the model): each level the candidate falls short at has its reference arms measured
    again beside it, as often as the candidate was, and is judged on those runs."""
    faster = [replace(r, output_throughput=(r.output_throughput or 0) * 1.08)
              for r in model_records("baseline", [1, 2, 4, 8, 16]) + model_records("eagle3", [1, 2, 4, 8, 16])]
    fake = FakeHost(faster)
    res = tuner(fake, coarse=[1, 2, 4, 8, 16], reused_from="runs/old").run()
    assert res.status == "verified" and res.threshold == 5, tune_lines(res)
    rechecked = {(r["arm"], r["concurrency"]): r for r in res.rechecks}
    assert rechecked and {c for _, c in rechecked} <= {1, 2, 4, 8, 16}, res.rechecks   # never a level the tune measured
    for (arm, c), r in rechecked.items():
        assert arm == candidate_arm(5) and r["before"] < TOLERANCE <= r["after"], r
        assert r["references"] and r["runs"] == 1
        # the reference arms ran beside it: a phase each, named for it, after the candidate's level
        names = [p.name for p in fake.phases]
        for ref in r["references"]:
            assert names.index(f"recheck {ref} c={c}") == names.index(f"verify threshold 5 c={c}") + 1 + \
                r["references"].index(ref), names
    # at c=1 EAGLE-3 (2x the baseline) is the only reference; the earlier runs stay in the records
    assert rechecked[(candidate_arm(5), 1)]["references"] == ["eagle3"]
    assert sum(1 for r in fake.records if r.arm == "eagle3" and r.concurrency == 1) == 2
    assert res.candidates[0]["ok"] and all(v >= TOLERANCE for v in res.candidates[0]["ratios"].values())
    # the terminal and report.md say each, before the verdict it changed, from tune.json as from the result
    lines = tune_lines(result_of(json.loads(json.dumps(res.to_dict()))))
    said = [ln for ln in lines if "measured again beside it" in ln]
    assert len(said) == len(rechecked) and lines.index(said[-1]) + 1 == lines.index(res.candidates[0]["text"])
    assert "adaptive-t5 at c=4: 0.926x of the better arm as measured earlier; " in "\n".join(said), said


def test_a_candidate_short_beside_fresh_reference_points_is_still_rejected() -> None:
    """The recheck does not rescue a real shortfall: threshold 4 loses c=5 (0.948x of
    EAGLE-3 by the model), and EAGLE-3 measured again beside it says the same."""
    fake = FakeHost()
    t = _first_threshold_rejected(fake, max_candidates=1)
    res = t.run()
    assert res.threshold is None and res.status == "unverified"
    (recheck,) = [r for r in res.rechecks if r["concurrency"] == 5]
    assert recheck["before"] == pytest.approx(recheck["after"]) and recheck["after"] < TOLERANCE, recheck
    # c=5 sits by the model's crossover: the two arms within 5% of each other, both measured again
    assert recheck["references"] == ["baseline", "eagle3"]


def test_the_plan_counts_what_a_recheck_measures() -> None:
    """The line before anything starts says what each shortfall adds (`_recheck`): here the
    two reference arms measured twice more at c=5, as the candidate was."""
    fake = FakeHost()
    t = _first_threshold_rejected(fake, max_candidates=1, settings={"repeats": 2, "input_len": 32, "output_len": 64})
    plan = t.plan_text()
    assert plan.recheck_points == 4 and 0 < plan.recheck_s < plan.likely_s, plan
    before = len(fake.records)
    t.run()
    assert [p.name for p in fake.phases if p.name.startswith("recheck")] == ["recheck baseline c=5", "recheck eagle3 c=5"]
    fresh = [r for r in fake.records[before:] if r.concurrency == 5 and r.arm in ("baseline", "eagle3")
             and r.repeat >= t.fresh_from.get((r.arm, 5), 99)]
    assert len(fresh) == plan.recheck_points, (fake.phases, fresh)


def test_a_budget_too_small_stops_with_a_partial_result() -> None:
    reused = model_records("baseline", [1, 2, 4, 8]) + model_records("eagle3", [1, 2, 4, 8])
    fake = FakeHost(reused)
    res = tuner(fake, coarse=[1, 2, 4, 8], budget_s=0.5).run()
    assert res.status == "partial" and not res.ok and fake.phases == []
    assert "budget reached: the fine phase" in res.message
    assert "provisional threshold from the points measured: 4" in res.message   # coarse levels only
    assert res.threshold is None


def _first_threshold_rejected(fake: FakeHost, **kw: Any) -> Tuner:
    """A tuner whose server reports a running batch of 4 at c=5 (say, prefill interleaving):
    it chooses threshold 4, which then loses c=5 (0.948x of EAGLE-3)."""
    t = tuner(fake, **kw)
    orig = fake.run_phase

    def undercounted(phase: Phase, arms: dict[str, Any]) -> None:
        orig(phase, arms)
        for r in fake.records:
            if r.arm == "eagle3" and r.concurrency == 5:
                r.running_req_p50 = r.running_req_p90 = 4.0
    t.run_phase = undercounted  # type: ignore[method-assign]
    return t


def test_a_rejected_threshold_tries_its_neighbours() -> None:
    res = _first_threshold_rejected(FakeHost()).run()
    # 4 loses c=5 (0.948x of EAGLE-3), 3 loses c=4; 5, the next neighbour, passes
    assert [(c["threshold"], c["ok"]) for c in res.candidates] == [(4, False), (3, False), (5, True)]
    assert res.threshold == 5 and res.status == "verified"
    assert neighbours(5, [5]) == [4, 6, 3, 7]


def test_one_candidate_is_verified_and_no_neighbour_when_asked_for_one() -> None:
    """`tune --candidates 1`: the chosen threshold alone is verified (a server launch each on a
    real host); rejected, tune says what it tried instead of launching its neighbours."""
    fake = FakeHost()
    res = _first_threshold_rejected(fake, max_candidates=1).run()
    assert [(c["threshold"], c["ok"]) for c in res.candidates] == [(4, False)]
    assert res.status == "unverified" and res.threshold is None
    assert res.message.startswith("no threshold passed verification (tried 4)"), res.message
    assert not any(p.name.startswith("verify threshold 3") for p in fake.phases)


def test_a_candidate_short_where_its_drafting_was_off_is_said_to_pay_its_off_path() -> None:
    """Real SGLang 0.5.14 on CPU (2026-12-06): above its threshold the adaptive arm drafted in 7%
    of its steps and ran 0.914x of the baseline, its zero-step tier still running the draft
    model's extend. tune said only "worst level 0.914x"; it now says what that shortfall is."""
    fake = FakeHost()
    orig = fake.run_phase

    def taxed(phase: Phase, arms: dict[str, Any]) -> None:
        orig(phase, arms)
        for r in fake.records:   # above its threshold a candidate runs the baseline's path, 10% slower
            threshold = arms.get(r.arm, {}).get("threshold") if r.arm.startswith("adaptive") else None
            if threshold is not None and r.concurrency > threshold and r.drafting_off_share is None:
                r.output_throughput = 0.9 * M.predicted_output_throughput("baseline", r.concurrency, max_running=64)
                r.drafting_off_share = 0.93
    t = tuner(fake, max_candidates=2, engine=engine_named("sglang"))
    t.run_phase = taxed  # type: ignore[method-assign]
    res = t.run()
    assert res.status == "unverified" and res.threshold is None, tune_lines(res)
    assert "drafting off in 93% of its decode steps and still ran 0.900x of the better arm" in res.message, res.message
    assert "drafting-off path" in res.message and "kind: spec-off" in res.message
    assert "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 in the adaptive arm's env" in res.message
    # an adaptive arm that already skips the extend is not told to skip it, but that it resumed cold
    fake = FakeHost()
    orig = fake.run_phase
    t = tuner(fake, max_candidates=2, engine=engine_named("sglang"))
    t.base_arms["adaptive"]["env"] = {"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": "true"}  # read as the engine reads it
    t.run_phase = taxed  # type: ignore[method-assign]
    skipping = t.run()
    assert skipping.status == "unverified" and "drafting off in 93%" in skipping.message, skipping.message
    assert "its draft extend was already skipped" in skipping.message, skipping.message
    assert "in the adaptive arm's env" not in skipping.message, skipping.message
    # an engine with no such switch (the simulator: its drafting-off step is the baseline's) offers none
    fake = FakeHost()
    orig = fake.run_phase
    t = tuner(fake, max_candidates=2, engine=engine_named("sim"))
    t.run_phase = taxed  # type: ignore[method-assign]
    plain_engine = t.run()
    assert "drafting-off path" in plain_engine.message and "=1" not in plain_engine.message, plain_engine.message
    # off where EAGLE-3 was the better arm: the threshold was too low, not the off path's cost
    lv = Levels.of(fake.records, "h")
    low = Verdict("adaptive-t9", False, {4: 0.8}, [4], None)
    lv.cells[("adaptive-t9", 4)] = replace(lv.cells[("baseline", 4)], arm="adaptive-t9", drafting_off_share=1.0)
    assert (lv.tps("eagle3", 4) or 0) > (lv.tps("baseline", 4) or 0) and off_path_shortfall(lv, low) is None
    # a candidate short while drafting (the undercounted batch above) is not said to pay it
    plain = _first_threshold_rejected(FakeHost(), max_candidates=1).run()
    assert plain.status == "unverified" and "drafting-off path" not in plain.message, plain.message


def test_a_wide_bracket_is_bisected_to_the_exhaustive_threshold_with_fewer_levels() -> None:
    """Coarse levels 1,2,16,64 leave 13 levels inside the bracket [2, 16]: the exhaustive way
    measures all of them, the bisection a few, and both choose the model's threshold."""
    coarse = [1, 2, 16, 64]
    full, bis = FakeHost(), FakeHost()
    exhaustive = tuner(full, coarse=coarse, bisect_from=None).run()
    bisected = tuner(bis, coarse=coarse).run()
    assert exhaustive.bracket == [2, 16] and not exhaustive.bisected
    assert len(exhaustive.fine_levels) == 12 and set(exhaustive.fine_levels) < set(range(3, 16))  # MAX_FINE_LEVELS
    assert bisected.bisected and bisected.bracket == [5, 6]          # narrowed to neighbours
    assert bisected.threshold == exhaustive.threshold == M.implied_threshold()
    assert bisected.choice and exhaustive.choice and bisected.choice["threshold"] == exhaustive.choice["threshold"]
    assert len(bisected.fine_levels) <= 4 < len(exhaustive.fine_levels)
    assert [p.name for p in bis.phases if p.name.startswith("bisect")] == \
        [f"bisect c={c}" for c in (6, 3, 4, 5)]                     # the bracket's geometric middle each time
    fine_points = sum(p.points for p in full.phases if p.name == "fine")
    bisect_points = sum(p.points for p in bis.phases if p.name.startswith("bisect"))
    assert bisect_points == 2 * 4 and fine_points == 2 * 12
    assert bisected.measured_points < exhaustive.measured_points


def test_verification_stops_at_the_first_level_below_the_ratio() -> None:
    """Threshold 3 loses c=4 (adaptive no longer speculates there, EAGLE-3 still 1.14x ahead):
    verified riskiest first, it is rejected after the levels up to that one, the rest unmeasured."""
    fake = FakeHost()
    t = tuner(fake, coarse=[1, 2, 4, 8], max_candidates=1)
    orig = fake.run_phase

    def low_running(phase: Phase, arms: dict[str, Any]) -> None:
        """EAGLE-3's running batch reads 3 at c=4 and c=5: the rule then picks 3."""
        orig(phase, arms)
        for r in fake.records:
            if r.arm == "eagle3" and r.concurrency in (4, 5):
                r.running_req_p50 = r.running_req_p90 = 3.0
    t.run_phase = low_running  # type: ignore[method-assign]
    res = t.run()
    assert res.choice and res.choice["threshold"] == 3
    cand = res.candidates[0]
    assert cand["threshold"] == 3 and not cand["ok"] and res.status == "unverified"
    measured = [p.levels[0] for p in fake.phases if p.arms == [candidate_arm(3)]]
    order = verify_order([1, 2, 4, 5, 6, 7, 8], 3)
    assert measured == order[:order.index(4) + 1]                   # stopped at c=4, its first shortfall
    assert sorted(cand["skipped"]) == sorted(set(order) - set(measured)) and cand["skipped"]
    assert "stopped there" in cand["text"] and "c=4" in cand["text"]
    # the exhaustive verdict on every level agrees: 3 is rejected at c=4
    full = model_records("baseline", order) + model_records("eagle3", order)
    full += model_records(candidate_arm(3), order, threshold=3)
    assert 4 in verify(Levels.of(full, "h"), candidate_arm(3), order).shortfalls


def test_points_already_in_the_run_are_not_measured_again() -> None:
    """Reused points (flows/reuse.py copies them into the run directory) count as measured
    levels: the coarse phase runs only the levels and repeats still missing."""
    have = model_records("baseline", [1, 2, 4]) + model_records("eagle3", [1, 2, 4])
    for r in have:
        r.extra = {"reused_from": "runs/old"}
    fake = FakeHost(have)
    res = tuner(fake, coarse=[1, 2, 4, 8, 16]).run()
    coarse = next(p for p in res.phases if p["name"] == "coarse")
    assert coarse["points"] == 2 * 2                                # c=8 and c=16, both arms
    assert res.reused_points == 6 and res.threshold == 5
    assert res.measured_points == len(fake.records) - 6
    assert "points: " in points_text(res) and "6 reused" in tune_lines(res)[-1]


def test_verdicts_need_every_level_and_the_gain_at_concurrency_one() -> None:
    recs = model_records("baseline", [1, 8]) + model_records("eagle3", [1, 8])
    recs += model_records("adaptive-t5", [1, 8], threshold=5)
    ok = verify(Levels.of(recs, "h"), "adaptive-t5", [1, 8])
    assert ok.ok and ok.gain_kept == pytest.approx(1.0)
    never = model_records("adaptive-t0", [1, 8], steps=0)   # speculates nowhere: loses the c=1 gain
    bad = verify(Levels.of(recs + never, "h"), "adaptive-t0", [1, 8])
    assert not bad.ok and bad.shortfalls == [1] and "rejected" in verdict_text(bad)
    missing = verify(Levels.of(recs, "h"), "adaptive-t5", [1, 8, 16])
    assert not missing.ok and missing.missing == [16]


def test_bracket_and_fine_levels() -> None:
    recs = model_records("baseline", [1, 2, 4, 8, 16]) + model_records("eagle3", [1, 2, 4, 8, 16])
    lv = Levels.of(recs, "h")
    assert bracket(lv) == (4, 8) and fine_levels(4, 8, lv.both()) == [5, 6, 7]
    assert len(fine_levels(16, 64, [])) == 12 and fine_levels(None, 8, []) == []
    assert choose_threshold(lv).threshold == 4   # coarse only: the running batch at c=4


def test_native_tiers_beat_the_threshold_config_and_are_verified() -> None:
    fake = FakeHost()
    res = tuner(fake, native=True, tier_steps=[0, 1, 3]).run()
    assert res.status == "verified" and res.tiers is not None, tune_lines(res)
    assert res.tiers[1] == 3 and 0 in res.tiers.values() and 1 in res.tiers.values()
    assert res.tiers_verdict and res.tiers_verdict["ok"]
    assert res.default_comparison and max(res.default_comparison["ratios"].values()) > 1.05
    assert all(r is not None and r >= 0.95 for r in res.tiers_verdict["ratios"].values())
    assert TIERS_ARM in {p.arms[0] for p in fake.phases}


def test_choose_tiers_from_measured_levels() -> None:
    levels = [1, 2, 4, 8, 16]
    recs = model_records("baseline", levels) + model_records("eagle3", levels) + model_records("eagle3-k1", levels, steps=1)
    tiers = choose_tiers(Levels.of(recs, "h"), {"baseline": 0, "eagle3": 3, "eagle3-k1": 1}, levels)
    assert tiers == {1: 3, 3: 1, 9: 0}


# ---------------------------------------------------------------- tier configs for SGLang

def test_tier_config_routes_each_batch_to_its_tier() -> None:
    plan = tier_config({1: [3], 3: [1], 9: [0]}, 64)
    buckets = default_spec_buckets(64)
    assert [route_steps(plan.config, b, buckets)[0] for b in (1, 2, 3, 8, 9, 10, 11, 40)] == [3, 3, 1, 1, 0, 0, 0, 0]
    assert plan.effective_threshold == 8
    arms = arms_from_vars({"model": "m", "draft_model": "d", "arms": {
        **ARMS, "adaptive": {"port": 30002, "threshold": 5, "tiers": {1: 3, 3: 1, 9: 0}}}})
    assert arms["adaptive"].tiers == {1: [3], 3: [1], 9: [0]}
    with pytest.raises(ConfigError, match="must start at batch size 1"):
        arms_from_vars({"model": "m", "draft_model": "d", "arms": {"adaptive": {"threshold": 5, "tiers": {4: 0}}}})


def test_tier_config_lists_the_launch_steps_where_no_batch_reaches_them() -> None:
    """SGLang 0.5.14 starts on `--speculative-num-steps` and sizes its draft buffers by the
    largest candidate step: a config that never lists the launch's steps does not start. They
    go in a tier above every batch the server forms, so no batch routes to it."""
    plan = tier_config({1: [0]}, 8, launch_steps=2, max_batch=8)
    assert {k: v["candidate_steps"] for k, v in plan.config.items()} == {"1": [0], "9": [2]}
    buckets = default_spec_buckets(8)
    assert [route_steps(plan.config, b, buckets)[0] for b in range(1, 9)] == [0] * 8
    assert plan.effective_threshold is None
    wide = tier_config({1: [3], 9: [0]}, 8, launch_steps=2, max_batch=32)  # more requests than graph buckets
    assert {k: v["candidate_steps"] for k, v in wide.config.items()} == {"1": [3], "9": [0], "33": [2]}
    assert [route_steps(wide.config, b, buckets)[0] for b in (1, 8, 9, 32)] == [3, 3, 0, 0]
    # listed already: nothing added
    assert tier_config({1: [2], 9: [0]}, 8, launch_steps=2, max_batch=8).config.keys() == {"1", "9"}


# ---------------------------------------------------------------- --write

COMMENTED = """\
# my lab's hosts
defaults:
  workdir: ~/specops   # shared
hosts:
  local:
    connection: local
    engine: sim
  gpu-a:
    address: 10.0.0.5
    vars:
      arms:
        baseline: {port: 30000, gpus: [0]}
        eagle3:   {port: 30001, gpus: [1]}
        adaptive:
          port: 30002        # third GPU
          gpus: [2]
          threshold: 8       # too high, says the report
groups: {}
vars:
  model: meta-llama/Llama-3.1-8B-Instruct
  arms:
    baseline: {port: 30000}
    eagle3:   {port: 30001, num_steps: 3}
    adaptive: {port: 30002, threshold: 8, num_steps: 3}   # the one to tune
"""


def test_write_changes_only_that_value_in_a_commented_hosts_yaml(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(COMMENTED)
    where = write_adaptive(path, "local", "adaptive", threshold=5)
    assert "vars.arms.adaptive.threshold = 5" in where
    after = path.read_text()
    changed = [(a, b) for a, b in zip(COMMENTED.splitlines(), after.splitlines(), strict=True) if a != b]
    assert changed == [("    adaptive: {port: 30002, threshold: 8, num_steps: 3}   # the one to tune",
                        "    adaptive: {port: 30002, threshold: 5, num_steps: 3}   # the one to tune")]
    # a host with its own arms gets its own value, block style kept
    write_adaptive(path, "gpu-a", "adaptive", threshold=6, tiers={1: 3, 3: 1, 9: 0})
    lines = path.read_text().splitlines()
    assert "          threshold: 6       # too high, says the report" in lines
    assert "          tiers: {1: 3, 3: 1, 9: 0}" in lines
    assert lines[0] == "# my lab's hosts" and "    eagle3:   {port: 30001, num_steps: 3}" in lines
    # tiers in a flow mapping go beside the threshold, and are replaced in place next time
    write_adaptive(path, "local", "adaptive", threshold=5, tiers={1: 3, 4: 1, 10: 0})
    write_adaptive(path, "local", "adaptive", threshold=5, tiers={1: 3, 3: 1, 9: 0})
    assert ("    adaptive: {port: 30002, threshold: 5, tiers: {1: 3, 3: 1, 9: 0}, num_steps: 3}   # the one to tune"
            in path.read_text().splitlines())
    with pytest.raises(ConfigError, match="no arm 'adaptive2'"):
        write_adaptive(path, "local", "adaptive2", threshold=5)


class RepeatingHost(FakeHost):
    """A phase runner that repeats points the way a bench sweep does: every point of the
    phase once per round, while the sweep's own rule (`bench.sweep.unsettled`) says it is
    unsettled. `noise` scales one repeat's throughput per (arm, level): a noisy point."""

    def __init__(self, noise: dict[tuple[str, int], float]):
        super().__init__()
        self.noise = noise
        self.settings_seen: list[Any] = []

    def run_phase(self, phase: Phase, arms: dict[str, Any]) -> None:
        self.phases.append(phase)
        settings = BenchSettings.from_dict({"arms": phase.arms, "concurrency": phase.levels,
                                            "repeats": phase.repeats_setting}, where="test")
        self.settings_seen.append(settings.repeat_rule().text())
        rule = settings.repeat_rule()
        one = FakeHost()
        for rep in range(rule.most):
            points = [Point(a, c, rep) for a in phase.arms for c in phase.levels]
            for p in unsettled(settings, points, self.records, "h") if rule.auto else points:
                one.records = []
                FakeHost.run_phase(one, Phase(phase.name, [p.arm], [p.concurrency], RepeatRule(False, 1)), arms)
                for r in one.records:
                    r.repeat = rep
                    r.output_throughput *= 1.0 + self.noise.get((p.arm, p.concurrency), 0.0) * (-1) ** rep
                self.records += one.records


def test_auto_repeats_reach_every_phase_and_stop_each_point_when_settled() -> None:
    """`tune --repeats auto:4`: each phase's bench gets the rule, a steady point stops at 2
    repeats, a noisy one (EAGLE-3 at c=6, 8% apart between repeats, near the crossover)
    goes on to 4, and the threshold is the one the model implies."""
    fake = RepeatingHost({("eagle3", 6): 0.08})
    t = tuner(fake, settings={"repeats": "auto:4", "input_len": 32, "output_len": 64})
    res = t.run()
    assert set(fake.settings_seen) == {"auto:4"}
    per_point: dict[tuple[str, int], int] = {}
    for r in fake.records:
        per_point[(r.arm, r.concurrency)] = per_point.get((r.arm, r.concurrency), 0) + 1
    assert per_point[("eagle3", 6)] == 4 and per_point[("baseline", 6)] == 2
    assert per_point[("baseline", 1)] == per_point[("eagle3", 64)] == 2
    assert res.threshold == M.implied_threshold() and res.status == "verified", tune_lines(res)
    assert all(p["repeats"] == "auto:4" for p in res.phases)
    # a second tune over the same records measures nothing more for the coarse levels
    again = tuner(fake, settings={"repeats": "auto:4", "input_len": 32, "output_len": 64})
    assert again._todo(Phase("coarse", ["baseline", "eagle3"], [1, 2, 4, 8], again._repeats())) == []


def test_a_fixed_count_counts_the_repeats_a_run_already_has() -> None:
    fake = FakeHost(model_records("baseline", [1, 2], repeats=3) + model_records("eagle3", [1, 2], repeats=1))
    t = tuner(fake, settings={"repeats": 2, "input_len": 32, "output_len": 64})
    todo = t._todo(Phase("coarse", ["baseline", "eagle3"], [1, 2, 4], t._repeats()))
    assert sorted(todo) == [("baseline", 4), ("baseline", 4), ("eagle3", 1), ("eagle3", 2), ("eagle3", 4), ("eagle3", 4)]


def test_the_arms_tune_adds_drop_the_deployed_servers_fixed_ports() -> None:
    """Measured on real SGLang 0.5.14: an adaptive arm deployed with `--nccl-port 29600` kept
    that port, and tune's adaptive-t4 copied it and died with torch.distributed's 'failed to
    listen'. The arms tune adds pick their own; the deployed arms keep theirs."""
    pinned = ["--nccl-port", "29600", "--metrics-port=29700", "--mem-fraction-static", "0.5"]
    arms = {"baseline": {"port": 30000, "extra_args": list(pinned)},
            "eagle3": {"port": 30001, "num_steps": 3, "extra_args": list(pinned)},
            "adaptive": {"port": 30002, "threshold": 8, "num_steps": 3, "extra_args": list(pinned)}}
    seen: dict[str, dict[str, Any]] = {}
    fake = FakeHost()

    def run_phase(phase: Phase, given: dict[str, Any]) -> None:
        seen.update({name: given[name] for name in phase.arms})
        fake.run_phase(phase, given)

    res = tuner(fake, arms=arms, run_phase=run_phase, native=True, tier_steps=[0, 1, 3]).run()
    added = {name: arm for name, arm in seen.items() if name not in arms}
    assert res.status == "verified" and TIERS_ARM in added and any(n.startswith("eagle3-k") for n in added), seen
    for name, arm in added.items():
        assert arm["extra_args"] == ["--mem-fraction-static", "0.5"], name
    assert seen["baseline"]["extra_args"] == pinned and seen["eagle3"]["extra_args"] == pinned
