"""The real tier's checks of SGLang's native adaptive route (native_check), on lines a real
0.5.14 server logged on this CPU (specops' two-tier config, threshold 1, 2026-12-04; the
timestamps as logged): each check passes on them and fails on what a broken run would log."""

from __future__ import annotations

import json

from specops.servers.launch import LaunchPlan
from specops.sglang.adaptive import adaptive_config
from tests.support.real_sglang.native_check import check_plan, check_switches, compare, resumed_accept_lengths

LOG = """\
[2026-12-04 03:13:33] AdaptiveSpeculativeParams initialized: steps=2, candidate_steps=[2]
[2026-12-04 03:13:35] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.01, #running-req: 2, #queue-req: 0, #pending-token: 0, cpu graph: False, input throughput (token/s): 22.79
[2026-12-04 03:13:35] Switch adaptive runtime state: steps 2 -> 0, draft_tokens 3 -> 1
[2026-12-04 03:13:37] Decode batch, #running-req: 3, #token: 37, token usage: 0.02, accept len: 1.00, accept rate: 0.00, cpu graph: False, gen throughput (token/s): 0.75, #queue-req: 0
[2026-12-04 03:13:43] Decode batch, #running-req: 3, #token: 16, token usage: 0.01, accept len: 1.00, accept rate: 0.00, cpu graph: False, gen throughput (token/s): 1.65, #queue-req: 0
[2026-12-04 03:13:43] Switch adaptive runtime state: steps 0 -> 2, draft_tokens 1 -> 3
[2026-12-04 03:14:23] Decode batch, #running-req: 1, #token: 17, token usage: 0.01, accept len: 3.00, accept rate: 1.00, cpu graph: False, gen throughput (token/s): 0.08, #queue-req: 0
[2026-12-04 03:14:23] Decode batch, #running-req: 1, #token: 20, token usage: 0.01, accept len: 3.00, accept rate: 1.00, cpu graph: False, gen throughput (token/s): 5.53, #queue-req: 0
[2026-12-04 03:14:24] Decode batch, #running-req: 1, #token: 23, token usage: 0.01, accept len: 3.00, accept rate: 1.00, cpu graph: False, gen throughput (token/s): 5.15, #queue-req: 0
[2026-12-04 03:14:25] Decode batch, #running-req: 1, #token: 0, token usage: 0.00, accept len: 3.00, accept rate: 1.00, cpu graph: False, gen throughput (token/s): 5.42, #queue-req: 0
"""
OFF, ON = LOG.splitlines()[2], LOG.splitlines()[5]


def test_a_run_that_switched_off_and_back_passes():
    assert check_switches(LOG, num_steps=2, threshold=1) == []


def test_no_switch_lines_fail():
    """A config without a zero-step tier: SGLang drafts at every batch and logs no switch."""
    problems = check_switches(LOG.replace(OFF + "\n", "").replace(ON + "\n", ""), num_steps=2, threshold=1)
    assert any("'steps 2 -> 0' switch line first" in p for p in problems), problems
    assert any("'steps 0 -> 2'" in p for p in problems), problems


def test_drafting_that_never_comes_back_fails():
    problems = check_switches(LOG.replace(ON + "\n", ""), num_steps=2, threshold=1)
    assert problems == ["no 'steps 0 -> 2' switch line (drafting never came back): "
                        "[StepSwitch(old=2, new=0, old_tokens=3, new_tokens=1)]"]


def test_a_batch_never_above_the_threshold_fails():
    narrow = LOG.replace("#running-req: 3", "#running-req: 1")
    assert check_switches(narrow, num_steps=2, threshold=1) == [
        "no decode step ran more than 1 requests (WIDE never went wide)"]


def test_resumed_acceptance_skips_the_step_that_finished_every_request():
    assert resumed_accept_lengths(LOG, num_steps=2, threshold=1) == [3.0, 3.0, 3.0]
    assert resumed_accept_lengths(LOG, num_steps=2, threshold=1, steps=5) == [3.0, 3.0, 3.0]
    assert resumed_accept_lengths(LOG.replace(ON, ""), num_steps=2, threshold=1) == []


def test_compare_catches_one_token_off():
    phases = {"wide": [("a", 3), ("b", 3)], "narrow": [("a", 3)]}
    plain = {"wide": [{"ids": [1, 2, 3]}, {"ids": [4, 5, 6]}], "narrow": [{"ids": [1, 2, 3]}]}
    assert compare(plain, json.loads(json.dumps(plain)), phases) == []
    broken = json.loads(json.dumps(plain))
    broken["wide"][1]["ids"][2] = 7
    assert compare(plain, broken, phases) == ["adaptive output_ids differ from plain's in phase wide"]
    assert compare({"wide": [{"error": "x"}], "narrow": []}, {}, phases) == [
        "plain answered wide incompletely: [None]", "plain answered narrow incompletely: []",
        "adaptive output_ids differ from plain's in phase wide"]


def _plan(config: dict[str, object], mechanism: str = "native-adaptive", effective: int = 1) -> LaunchPlan:
    return LaunchPlan(arm="adaptive", kind="adaptive", port=1, argv=[], env={}, mechanism=mechanism, workdir="/w",
                      log_path="/w/l", state_path="/w/s", config_json=json.dumps(config), effective_threshold=effective)


def test_the_plan_must_be_native_with_a_zero_step_tier():
    plan = adaptive_config(1, 2, 64)
    assert check_plan(_plan(plan.config), threshold=1) == []
    no_zero = {k: {**v, "candidate_steps": [2]} for k, v in plan.config.items()}
    assert check_plan(_plan(no_zero), threshold=1) == [
        "the generated config has no zero-step tier above threshold 1: {1: [2], 2: [2]}"]
    assert check_plan(_plan(plan.config, mechanism="dynamic-spec-disable-patch"), threshold=1) != []
