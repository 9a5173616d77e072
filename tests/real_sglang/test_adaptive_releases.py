"""The dynamic-spec-disable patch on real SGLang across its EAGLE workers and a second
release (issue 28): greedy tokens identical to a plain server's above the threshold (one-
token verify), as the batch shrinks back below it mid-request (drafting resumes on the
draft state the one-token steps kept), and below it, with drafts accepted (accept length
>= 2.0 of 3, and as high right after drafting resumed); transitions only in the log; the
`Decode batch` lines logged while drafting was off say so instead of accept figures.

Each case is tests/support/real_sglang/adaptive_check.py's run: a plain, an EAGLE-3
(unpatched) and an adaptive (patched, threshold 1) server per worker, on the release's
wheel tree with the tier's runtime. v1 is the EAGLE worker without the overlap scheduler;
v2 is EAGLEWorkerV2, which 0.5.x runs exactly when the overlap scheduler is on
(SGLANG_ENABLE_SPEC_V2 turns it on). 0.5.10.post1's v1 also runs through specops deploy in
test_cpu_host.py. Backends here: triton only (the one of the set's three this CPU runs);
fa3 and flashinfer are checked in source on every release (tests/unit/test_verify_backends.py).

One worker a release, so the tier's budget holds (both workers on both releases took 381 s of
a new machine's CI, 2026-12-06): 0.5.10.post1 runs v1, the patch route's own worker, with
SGLang's switch SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND on the adaptive arm, the way
bench/real_crossover.py's patch route runs it: its drafting-off steps skip the draft extend, so
drafting resumes cold, from the zeros the skip left (its first step after resuming accepts
nothing), and the tokens are still the plain server's. 0.5.9 runs v2 with SGLang's default,
where the one-token steps keep the draft state warm. The other pairings run where they are
cheap: v1 resuming warm in test_eagle_torch_native.py's verify (0.5.10.post1, --resume-steps),
v2's skip hook on stand-in tensors (tests/unit/test_skip_off_extend_patch.py), and any pairing
by hand: `python -m tests.support.real_sglang.adaptive_check --both-workers [--skip-off-extend]`.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.real_sglang import PATCH_ROUTE_GROUP
from tests.support.real_sglang.adaptive_check import run_check

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(PATCH_ROUTE_GROUP), pytest.mark.timeout(1800)]


@pytest.mark.parametrize("version,workers,skip", [("0.5.10.post1", (False,), True), ("0.5.9", (True,), False)],
                         ids=["0.5.10.post1-v1-skip-off-extend", "0.5.9-v2"])
def test_adaptive_keeps_greedy_tokens_across_the_threshold(real_runtime, tiny_models, tmp_path, version, workers, skip):
    summary = run_check(version, threshold=1, workers=workers, work=tmp_path, skip_off_extend=skip)
    assert summary["ok"], json.dumps({k: v for k, v in summary.items() if k != "phases"}, indent=1)[-6000:]
    for spec_v2 in workers:
        worker = "v2" if spec_v2 else "v1"
        adaptive = summary[f"adaptive-{worker}"]
        assert adaptive["overlap"] is spec_v2, worker  # v2 runs with the overlap scheduler, v1 without
        lines = adaptive["transition_lines"]
        # off as soon as a second request joins: 2 or 3, as the requests reach the scheduler
        assert re.search(r"drafting off \(running batch [23] > threshold 1\)", lines[0]), lines
        assert any("drafting on (running batch 1 <= threshold 1)" in ln for ln in lines), lines
        # drafts accepted (issue 37): the trained head, alone and right after drafting resumed
        assert adaptive["accept_len"] >= 2.0 and summary[f"eagle3-{worker}"]["accept_len"] >= 2.0, adaptive
        resumed = adaptive["resumed_accept_lens"]
        if skip:
            # the first step after resuming drafted from the skip's zeros: nothing accepted (with the
            # extend run, or the switch ignored, it drafts from a current state and accepts as alone)
            assert resumed and resumed[0] == 1.0, adaptive
        else:
            assert resumed and sum(resumed) / len(resumed) >= 0.9 * adaptive["accept_len"], adaptive
