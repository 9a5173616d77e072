"""SGLang's native adaptive speculation (0.5.14+, issue 39) on a real server, launched as
specops launches it: specops plans both arms (`plan_arms` -> `build_launch`, mechanism
`native-adaptive`, its own generated tier config with a zero-step tier above threshold 1),
on 0.5.14's wheel tree with the runtime 0.5.14 pins (torch 2.11.0, transformers 5.8.1).
Greedy tokens identical to a plain server's with several requests at once (the worker
switches to the zero-step tier and back mid-request) and alone; SGLang's own switch lines
`Switch adaptive runtime state: steps 2 -> 0` and `0 -> 2`, read by specops'
`parse_step_switches`; drafts accepted alone (accept length >= 2.0 of 3 from meta_info) and
as well right after drafting resumed.

The check can fail, and the second test shows it does when it should: the same run with
the generated config's zero-step tier given 2 steps (`no-zero-tier`: SGLang then drafts at
every batch and logs no switch) and the stand-in verify committing a wrong token
(`break-accept`) must report both (on this CPU, 2026-12-04: "the generated config has no
zero-step tier above threshold 1", "expected a 'steps 2 -> 0' switch line first, got []",
"no 'steps 0 -> 2' switch line", "adaptive output_ids differ from plain's" in both phases).
The pure checks are held on a real log's lines in tests/unit/test_real_tier_native.py.
"""

from __future__ import annotations

import json

import pytest

from tests.support.real_sglang.native_check import run_native_check

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group("real_sglang"), pytest.mark.timeout(2400)]


def test_native_adaptive_keeps_greedy_tokens_and_switches_tiers(native_runtime, tiny_models, tmp_path):
    summary = run_native_check("0.5.14", threshold=1, work=tmp_path)
    assert summary["ok"], json.dumps({k: v for k, v in summary.items() if k != "phases"}, indent=1)[-6000:]
    assert summary["runtime"] == str(native_runtime.root)
    assert summary["adaptive_config"]["2"]["candidate_steps"] == [0], summary["adaptive_config"]
    lines = summary["adaptive"]["switch_lines"]
    assert "Switch adaptive runtime state: steps 2 -> 0, draft_tokens 3 -> 1" in lines[0], lines
    assert any("Switch adaptive runtime state: steps 0 -> 2, draft_tokens 1 -> 3" in ln for ln in lines), lines
    assert summary["adaptive"]["accept_len"] >= 2.0, summary["adaptive"]


def test_native_check_catches_a_config_without_a_zero_step_tier_and_a_broken_accept_path(
        native_runtime, tiny_models, tmp_path):
    summary = run_native_check("0.5.14", threshold=1, work=tmp_path, faults=("no-zero-tier", "break-accept"))
    problems = summary["problems"]
    assert not summary["ok"], summary
    assert "the generated config has no zero-step tier above threshold 1: {1: [2], 2: [2]}" in problems, problems
    assert "expected a 'steps 2 -> 0' switch line first, got []" in problems, problems
    assert summary["adaptive"]["switch_lines"] == [], summary["adaptive"]  # SGLang drafted at every batch
    for phase in ("wide", "narrow"):
        assert f"adaptive output_ids differ from plain's in phase {phase}" in problems, problems
    # the servers themselves ran: the faults, not a crash, failed the run
    assert summary["plain"]["alive_after"] and summary["adaptive"]["alive_after"], summary
