"""`specops verify` on SGLang's native adaptive route (issue 39, part 2): the switch lines a real
0.5.14 server logged (tests/unit/test_real_tier_native.py's LOG) are the drafting evidence, and
the acceptance after drafting resumed is read from the decode lines around them; a host needs
a baseline and an adaptive arm, an EAGLE-3 one is checked where there is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.acceptance import Acceptance, arm_names
from specops.bench.running import off_stretches
from specops.config.inventory import load_inventory
from specops.errors import ConfigError
from specops.report.verify import Verification, accept_check, drafting_check, identity_check, resumed_check
from specops.servers.lifecycle import ServerState
from tests.support.deploy import inventory
from tests.unit.test_real_tier_native import LOG, OFF, ON

#: the requests verify sends alone first: the adaptive arm drafts before its batch goes wide
ALONE = ("[2026-12-04 03:13:30] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, accept len: 3.00, "
         "accept rate: 1.00, cpu graph: False, gen throughput (token/s): 5.00, #queue-req: 0\n")
NAME = "drafting stopped above the threshold and resumed below it"


def _state(mechanism: str = "native-adaptive") -> ServerState:
    return ServerState(arm="adaptive", kind="adaptive", pid=1, pgid=1, proc_start="1", port=1, command="",
                       argv=[], env={}, args_hash="", log_path="/x.log", state_path="", started_at=0.0,
                       mechanism=mechanism, workdir="/")


def test_the_native_switch_lines_are_the_drafting_evidence() -> None:
    check = drafting_check(_state(), LOG, 1)
    assert check.ok is True, check
    assert check.detail == "SGLang's tiers: 0 steps at running batch 3 > 1, drafting again at 1 <= 1"
    assert OFF in check.evidence and ON in check.evidence and check.evidence[0] == "log: /x.log"


def test_native_evidence_fails_without_a_switch_or_when_drafting_never_comes_back() -> None:
    none = drafting_check(_state(), LOG.replace(OFF + "\n", "").replace(ON + "\n", ""), 1)
    assert none.ok is False and "no 'steps N -> 0' switch line" in none.detail, none
    stuck = drafting_check(_state(), LOG.replace(ON + "\n", ""), 1)
    assert stuck.ok is False and stuck.detail == ("drafting went off (batch 3) but never came back on at a "
                                                  "batch <= 1"), stuck
    narrow = drafting_check(_state(), LOG.replace("#running-req: 3", "#running-req: 1"), 1)
    assert narrow.ok is False and "only at running batches <= 1" in narrow.detail, narrow
    # the patch's reader finds nothing in these lines: the mechanism picks the reader
    assert drafting_check(_state("dynamic-spec-disable-patch"), LOG, 1).ok is False


def test_the_off_steps_accept_figures_do_not_count_as_drafting() -> None:
    """0.5.14 logs `accept len: 1.00` for a zero-step decode step: not a drafted step, and not the
    acceptance before drafting stopped."""
    [stretch] = off_stretches(ALONE + LOG, 1)
    assert (stretch.off_batch, stretch.on_batch) == (3, 1)
    assert stretch.before == (3.0,) and stretch.after == (3.0, 3.0, 3.0) and stretch.ratio == 1.0
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=5, threshold=1, arms={"adaptive": {}})
    resumed = resumed_check(v, _state(), ALONE + LOG, steps=3)
    assert resumed.ok is True and v.arms["adaptive"]["off_stretches"][0]["after"] == [3.0, 3.0, 3.0], resumed
    stale = ALONE + LOG.replace("accept len: 3.00, accept rate: 1.00", "accept len: 1.50, accept rate: 0.25")
    assert resumed_check(v, _state(), stale, steps=3).ok is False


def test_verify_needs_baseline_and_adaptive_and_checks_eagle3_where_there_is_one(tmp_path: Path) -> None:
    def names(arms: dict) -> dict[str, str]:
        inv = load_inventory(inventory(tmp_path, {"h": {"connection": "local", "engine": "sim"}},
                                       {"model": "m", "draft_model": "d", "arms": arms}))
        return arm_names(inv, inv.hosts["h"])

    assert names({"baseline": {"port": 1}, "adaptive": {"port": 2, "threshold": 1}}) == {
        "baseline": "baseline", "adaptive": "adaptive"}
    assert names({"base": {"kind": "baseline", "port": 1}, "e": {"kind": "eagle3", "port": 3},
                  "a": {"kind": "adaptive", "port": 2, "threshold": 1}}) == {
        "baseline": "base", "eagle3": "e", "adaptive": "a"}
    with pytest.raises(ConfigError, match="verify needs a adaptive arm on h; its arms: baseline .baseline., "
                                          "eagle3 .eagle3."):
        names({"baseline": {"port": 1}, "eagle3": {"port": 3}})
    # without an EAGLE-3 arm, identity and acceptance are the adaptive arm's alone
    same = identity_check("c", ["p"], {"baseline": [[1, 2]], "adaptive": [[1, 2]]})
    assert same.ok is True and same.detail == "1 requests: adaptive's ids equal baseline's token for token"
    off = identity_check("c", ["p"], {"baseline": [[1, 2]], "adaptive": [[1, 3]]})
    assert off.ok is False and off.detail == "1 of 1 outputs differ from baseline's"
    drafting = Acceptance()
    drafting.requests, drafting.tokens, drafting.verify_steps = 2, 16, 6
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=8, arms={"adaptive": {}})
    assert accept_check(v, {"baseline": Acceptance(), "adaptive": drafting}).ok is True


@pytest.mark.parametrize("mechanism", ["native-adaptive", "dynamic-spec-disable-patch"])
def test_a_threshold_the_running_batch_cannot_exceed_is_said_so_not_failed(mechanism: str) -> None:
    """The SGLang real crossover (bench/RESULTS.md, 2026-12-05): tune refused, the adaptive arm kept
    its placeholder threshold 32 = max_running_requests 32, and verify failed with 'no transition
    line ... (34 requests were sent at once)': no batch can run above 32, so there is no switch to
    show, whatever the arm does. That is a configuration verify cannot prove, said as such."""
    quiet = LOG.replace(OFF + "\n", "").replace(ON + "\n", "")
    capped = drafting_check(_state(mechanism), quiet, 32, max_running=32)
    assert capped.ok is None, capped
    assert capped.detail.startswith("the adaptive arm's threshold 32 is not below its max_running_requests 32"), capped
    assert "tune --write" in capped.detail
    # below the cap, no switch is a failure as before; and evidence, where there is some, decides
    assert drafting_check(_state(mechanism), quiet, 31, max_running=32).ok is False
    assert drafting_check(_state(), LOG, 1, max_running=1).ok is True


def test_a_cold_resume_is_not_failed_where_the_arm_skips_the_draft_extend_on_purpose() -> None:
    """With SGLang's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND the drafting-off steps leave the draft
    state stale, and the first steps after resuming draft from zeros (the patch route on
    0.5.10.post1, measured 2026-12-06: accept length 1.0, 1.0, 1.0 after resuming against 3.0
    alone). That is the setting's cost; verify says so rather than call the arm broken, and still
    fails the same figures from an arm that keeps its draft state."""
    stale = ALONE + LOG.replace("accept len: 3.00, accept rate: 1.00", "accept len: 1.00, accept rate: 0.00")
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=5, threshold=1, arms={"adaptive": {}})
    switch = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"
    cold = resumed_check(v, _state(), stale, steps=3, cold_switch=switch)
    assert cold.ok is None and cold.verdict == "UNAVAILABLE", cold
    assert f"{switch}=1 has it" in cold.detail and "resumed cold" in cold.detail, cold.detail
    assert resumed_check(v, _state(), stale, steps=3).ok is False
    # a cold-resuming arm whose acceptance came back anyway passes as any other
    assert resumed_check(v, _state(), ALONE + LOG, steps=3, cold_switch=switch).ok is True


@pytest.mark.parametrize("value,skips", [("1", True), ("true", True), ("Yes", True), ("y", True),
                                         ("0", False), ("false", False), ("", False)])
def test_an_arm_skips_the_extend_where_its_env_sets_the_engines_switch_true(value: str, skips: bool) -> None:
    from specops.engines import engine_named
    sglang, sim = engine_named("sglang"), engine_named("sim")
    assert sglang.skips_off_extend({"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": value}) is skips
    assert sglang.skips_off_extend({}) is False
    assert sim.skips_off_extend({"SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND": value}) is False  # no such switch
