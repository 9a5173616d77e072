"""specops' reader of SGLang's native adaptive switch lines (>= 0.5.14, `--speculative-adaptive`):
`EAGLEWorkerV2.apply_runtime_state` logs one when the worker moves to another tier's step count.
The lines below are verbatim from a real 0.5.14 server on CPU (specops' two-tier config,
threshold 1, the real tier's native_check, 2026-12-04)."""

from __future__ import annotations

from specops.sglang.adaptive import StepSwitch, parse_step_switches

LOG = """\
[2026-12-04 03:13:33] AdaptiveSpeculativeParams initialized: steps=2, candidate_steps=[2]
[2026-12-04 03:13:33] Built adaptive runtime state steps=0: elapsed=0.01s, mem=0.00GB
[2026-12-04 03:13:35] Switch adaptive runtime state: steps 2 -> 0, draft_tokens 3 -> 1
[2026-12-04 03:13:37] Decode batch, #running-req: 3, #token: 37, token usage: 0.02, accept len: 1.00, accept rate: 0.00, cpu graph: False, gen throughput (token/s): 0.75, #queue-req: 0
[2026-12-04 03:13:43] Switch adaptive runtime state: steps 0 -> 2, draft_tokens 1 -> 3
"""


def test_reads_both_switches_in_order():
    assert parse_step_switches(LOG) == [StepSwitch(2, 0, 3, 1), StepSwitch(0, 2, 1, 3)]
    assert [s.drafting for s in parse_step_switches(LOG)] == [False, True]


def test_a_tp_ranks_prefix_is_read_too():
    assert parse_step_switches("[2026-12-04 03:13:35 TP0] Switch adaptive runtime state: steps 2 -> 0, "
                               "draft_tokens 3 -> 1") == [StepSwitch(2, 0, 3, 1)]


def test_other_adaptive_lines_are_not_switches():
    assert parse_step_switches("AdaptiveSpeculativeParams initialized: steps=2, candidate_steps=[2]\n"
                               "Built adaptive runtime state steps=0: elapsed=0.01s, mem=0.00GB\n") == []
    # the patch route's transition lines are another reader's (parse_transitions)
    assert parse_step_switches("specops adaptive: drafting off (running batch 3 > threshold 1)") == []


def test_the_simulators_words_are_what_the_readers_read():
    """The simulator logs SGLang's native lines from these formats; the readers take them back."""
    from specops.sglang.adaptive import NATIVE_START_LINE, STEP_SWITCH_LINE, drafting_state

    switch = STEP_SWITCH_LINE.format(old=3, new=0, old_tokens=4, new_tokens=1)
    assert parse_step_switches(switch) == [StepSwitch(3, 0, 4, 1)] and drafting_state(switch) == (False, True)
    start = NATIVE_START_LINE.format(steps=3, candidates=[3])
    assert start in LOG.replace("steps=2, candidate_steps=[2]", "steps=3, candidate_steps=[3]")
    assert drafting_state(start) == (True, False) and drafting_state("Decode batch, #running-req: 3") is None
