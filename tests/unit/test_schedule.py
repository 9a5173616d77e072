"""Issue 39 point 3: one tuned schedule (draft steps per running-batch range), written in each
engine route's own form: SGLang's patch threshold (<= 0.5.13), its native tiers (>= 0.5.14)."""

from __future__ import annotations

import json

import pytest

from specops.engines import schedule_forms
from specops.engines.schedule import Schedule, ScheduleForm
from specops.sglang.adaptive import default_spec_buckets, pad_to_bucket


def test_a_schedule_from_tiers_merges_equal_neighbours_and_reads_back() -> None:
    sched = Schedule.from_tiers({9: 0, 1: 3, 3: 1, 7: 0})
    assert sched.starts == ((1, 3), (3, 1), (7, 0))
    assert sched.ranges(64) == [(1, 2, 3), (3, 6, 1), (7, 64, 0)]
    assert [sched.steps_at(b) for b in (1, 2, 3, 6, 7, 500)] == [3, 3, 1, 1, 0, 0]
    assert sched.threshold is None and sched.text() == "1+: 3, 3+: 1, 7+: 0"
    two = Schedule.from_threshold(5, 3)
    assert two.starts == ((1, 3), (6, 0)) and two.threshold == 5 and two.ranges(4) == [(1, 5, 3), (6, 6, 0)]
    assert two.to_dict() == {"tiers": {"1": 3, "6": 0}, "text": "1+: 3, 6+: 0"}


@pytest.mark.parametrize("starts", [(), ((2, 3),), ((1, 3), (1, 0)), ((1, 3), (4, -1))])
def test_a_schedule_that_leaves_a_batch_without_steps_is_refused(starts: tuple) -> None:
    with pytest.raises(ValueError):
        Schedule(starts)


def _forms(sched: Schedule) -> dict[str, ScheduleForm]:
    return {f.route.split(" (")[0] + (" patch" if "patch" in f.route else " native"): f
            for f in schedule_forms(sched, draft_model="draft", max_batch=64)}


def _vllm(form: ScheduleForm) -> dict:
    assert form.flags is not None and form.flags[0] == "--speculative-config"
    return json.loads(form.flags[1])


def test_a_threshold_schedule_in_the_patch_and_native_forms() -> None:
    forms = _forms(Schedule.from_threshold(5, 3))
    patch, native = forms["SGLang <= 0.5.13 patch"], forms["SGLang >= 0.5.14 native"]
    assert patch.flags == ["--speculative-num-steps", "3", "--speculative-disable-batch-threshold", "5"]
    assert native.flags == ["--speculative-num-steps", "3", "--speculative-adaptive",
                            "--speculative-adaptive-config", "adaptive.json"]
    assert native.config is not None and native.config_file == "adaptive.json"
    config = json.loads(native.config)
    off = str(pad_to_bucket(5, default_spec_buckets(64)) + 1)   # SGLang routes by the padded batch
    assert {k: v["candidate_steps"] for k, v in config.items()} == {"1": [3], off: [0]}
    assert "the same with or without --disable-cuda-graph" in native.note   # 5 is a bucket: one config
    # without CUDA graphs SGLang routes unpadded: the note gives that config too, keyed threshold + 1
    nine = _forms(Schedule.from_threshold(9, 3))["SGLang >= 0.5.14 native"]
    padded, unpadded = json.loads(nine.config or "{}"), json.loads(nine.note.rsplit(": ", 1)[1])
    assert {k: v["candidate_steps"] for k, v in padded.items()} == {"1": [3], "11": [0]}   # 9 pads to bucket 10
    assert {k: v["candidate_steps"] for k, v in unpadded.items()} == {"1": [3], "10": [0]}, nine.note
    lines = native.lines()
    assert lines[0] == "SGLang >= 0.5.14 (native adaptive tiers):" and lines[2].startswith("  adaptive.json: {")
    assert _vllm(forms["vLLM >= 0.32.0 native"]) == {"method": "eagle3", "model": "draft", "num_speculative_tokens": 3,
                                                     "num_speculative_tokens_per_batch_size": [[1, 5, 3], [6, 64, 0]]}


def test_what_the_patch_cannot_say_is_said_not_approximated() -> None:
    forms = _forms(Schedule.from_tiers({1: 3, 3: 1, 7: 0}))
    patch = forms["SGLang <= 0.5.13 patch"]
    assert patch.flags is None and "not expressible" in patch.note and "1+: 3, 3+: 1, 7+: 0" in patch.note
    assert patch.lines() == [patch.route + ":", "  " + patch.note]
    assert forms["SGLang >= 0.5.14 native"].flags is not None
    assert _vllm(forms["vLLM >= 0.32.0 native"])["num_speculative_tokens_per_batch_size"] == [
        [1, 2, 3], [3, 6, 1], [7, 64, 0]]
    always = _forms(Schedule.from_tiers({1: 2}))["SGLang <= 0.5.13 patch"]
    assert always.flags == ["--speculative-num-steps", "2", "--speculative-disable-batch-threshold", "0"]
    never = _forms(Schedule.from_tiers({1: 0}))
    assert never["SGLang <= 0.5.13 patch"].flags == ["--speculative-disable-batch-threshold", "-1"]   # never draft
    # SGLang 0.5.14 starts on the launch's step count and refuses a config that lists none of
    # it (measured: zero-step tiers alone did not start): one step, in a tier no batch reaches
    native = never["SGLang >= 0.5.14 native"]
    assert native.flags == ["--speculative-num-steps", "1", "--speculative-adaptive", "--speculative-adaptive-config",
                            "adaptive.json"]
    assert native.config is not None
    tiers = {int(k): v["candidate_steps"] for k, v in json.loads(native.config).items()}
    assert tiers[1] == [0] and [k for k, v in tiers.items() if v == [1]] == [max(tiers)] and max(tiers) > 64
    # and a drafting schedule's launch steps are already in its tiers: nothing added
    assert len(json.loads(forms["SGLang >= 0.5.14 native"].config or "{}")) == 3
    config = _vllm(never["vLLM >= 0.32.0 native"])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 64, 0]] and config["num_speculative_tokens"] == 1
