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
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.real_sglang import PATCH_ROUTE_GROUP
from tests.support.real_sglang.adaptive_check import run_check

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(PATCH_ROUTE_GROUP), pytest.mark.timeout(1800)]


@pytest.mark.parametrize("version,workers", [("0.5.10.post1", (True,)), ("0.5.9", (False, True))],
                         ids=["0.5.10.post1-v2", "0.5.9-v1-v2"])
def test_adaptive_keeps_greedy_tokens_across_the_threshold(real_runtime, tiny_models, tmp_path, version, workers):
    summary = run_check(version, threshold=1, workers=workers, work=tmp_path)
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
        assert resumed and sum(resumed) / len(resumed) >= 0.9 * adaptive["accept_len"], adaptive
