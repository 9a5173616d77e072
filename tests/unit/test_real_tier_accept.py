"""The real tier's reading of acceptance after drafting resumes (adaptive_check), on lines
as SGLang 0.5.10.post1 and the patch log them (copied from a run): the decode line logged
with the on transition still counts the requests that finished in that step, verified one
token each, so it is not a resumed step."""

from __future__ import annotations

from tests.support.real_sglang.adaptive_check import accept_length, resumed_accept_lengths

LOG = """\
[13:33:04] specops adaptive: drafting off (running batch 3 > threshold 1)
[13:33:06] Decode batch, #running-req: 3, #token: 37, drafting off (one-token verify, no accept figures), cpu graph: False
[13:33:11] Decode batch, #running-req: 3, #token: 16, drafting off (one-token verify, no accept figures), cpu graph: False
[13:33:11] specops adaptive: drafting on (running batch 1 <= threshold 1)
[13:33:11] Decode batch, #running-req: 3, #token: 17, token usage: 0.01, accept len: 1.00, accept rate: 0.33, cpu graph: False
[13:33:12] Decode batch, #running-req: 1, #token: 18, token usage: 0.01, accept len: 3.00, accept rate: 1.00, cpu graph: False
[13:33:12] Decode batch, #running-req: 1, #token: 21, token usage: 0.01, accept len: 2.50, accept rate: 0.83, cpu graph: False
[13:33:13] Decode batch, #running-req: 1, #token: 24, token usage: 0.01, accept len: 3.00, accept rate: 1.00, cpu graph: False
[13:33:13] Decode batch, #running-req: 1, #token: 27, token usage: 0.01, accept len: 1.00, accept rate: 0.33, cpu graph: False
"""


def test_the_first_steps_after_resuming_are_read_and_the_transition_step_is_not() -> None:
    assert resumed_accept_lengths(LOG, threshold=1) == [3.0, 2.5, 3.0]
    assert resumed_accept_lengths(LOG, threshold=1, steps=4) == [3.0, 2.5, 3.0, 1.0]
    assert resumed_accept_lengths(LOG, threshold=3)[0] == 1.0  # at threshold 3 that step drafted


def test_no_resume_reads_nothing() -> None:
    assert resumed_accept_lengths(LOG.split("[13:33:11] specops adaptive: drafting on")[0], threshold=1) == []


def test_accept_length_is_tokens_per_verify_step_from_meta_info() -> None:
    assert accept_length([{"verify_ct": 3, "accepted": 6}, {"verify_ct": 1, "accepted": 0}]) == 2.5
    assert accept_length([{"verify_ct": 0, "accepted": 0}]) is None
