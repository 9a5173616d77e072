"""vLLM's SpecDecoding metrics line in the forms its releases printed, read through the
engine's declared figures (engines.metrics.VLLM): the mean acceptance length each gives, and
the bench's log fallback (bench.running.parse_decode_lines, line by line) pairing it with the
stats line's running batch. Each line is quoted from a real log or vLLM's source, with where."""

from __future__ import annotations

import pytest

from specops.bench.running import parse_decode_lines
from specops.engines import ENGINES
from specops.engines.metrics import VLLM, accept_length
from specops.vllm import serving

#: (where it came from, the line, the accept length it gives; None: the form has none)
FORMS = [
    # vLLM PR 15902 (0.8.3, "Enhance SpecDecoding Metrics Log in V1"), its AFTER example: no
    # drafts counted yet, so no mean acceptance length to read
    ("vllm PR 15902 (0.8.3)",
     "SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66 tokens, Drafted: 66 tokens", None),
    # vLLM 0.9.0.1 (issue "N-gram speculative decoding performs slower than Qwen3-32B-FP8 with
    # vLLM 0.9.0.1"): PR 16665's form, the rate first, no process prefix yet
    ("vllm 0.9.0.1 issue log",
     "INFO 06-06 14:20:34 [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: 38.8%, "
     "Mean acceptance length: 2.16, Accepted: 150 tokens, Drafted: 387 tokens, "
     "Per-position acceptance rate: 0.543, 0.357, 0.264", 2.16),
    # vLLM PR 24127 (0.10.2, "update spec decode metrics to use throughput"), its test result:
    # throughputs added, the APIServer process prefix
    ("vllm PR 24127 (0.10.2)",
     "(APIServer pid=2236552) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: Draft acceptance "
     "rate: 88.8%, Mean acceptance length: 5.44, Accepted throughput: 4.37 tokens/s, Drafted throughput: "
     "4.92 tokens/s, Accepted: 262 tokens, Drafted: 295 tokens, Per-position acceptance rate: 0.983, 0.949, "
     "0.915, 0.881, 0.712", 5.44),
    # vLLM 0.20.2 (issue 42363, "EngineDeadError with Kimi-K2.6 model"): the mean first, the
    # rate last as "Avg Draft acceptance rate" (the form of 0.11 on, and of 0.32.0's source)
    ("vllm issue 42363 (0.20.2)",
     "(APIServer pid=1) INFO 07-29 06:36:21 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
     "3.24, Accepted throughput: 19.50 tokens/s, Drafted throughput: 26.10 tokens/s, Accepted: 195 tokens, "
     "Drafted: 261 tokens, Per-position acceptance rate: 0.851, 0.747, 0.644, Avg Draft acceptance rate: 74.7%",
     3.24),
    # the same form from an engine-core process (data parallel): its prefix names EngineCore_DP0
    ("vllm 0.32 engine core prefix",
     "(EngineCore_DP0 pid=812) INFO 11-20 08:02:11 [metrics.py:101] SpecDecoding metrics: Mean acceptance "
     "length: 2.31, Accepted throughput: 8.90 tokens/s, Drafted throughput: 24.00 tokens/s, Accepted: 89 "
     "tokens, Drafted: 240 tokens, Per-position acceptance rate: 0.600, 0.385, 0.215, Avg Draft acceptance "
     "rate: 37.1%", 2.31),
]
#: vLLM 0.20.2's stats line, from the same log as its SpecDecoding line above (issue 42363)
STATS = ("(APIServer pid=1) INFO 07-29 06:36:31 [loggers.py:310] Engine 000: Avg prompt throughput: 0.0 "
         "tokens/s, Avg generation throughput: 30.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
         "usage: 16.7%, Prefix cache hit rate: 85.8%, MM cache hit rate: 80.0%")


def test_vllm_engine_declares_these_figures() -> None:
    assert ENGINES["vllm"].metrics is VLLM and VLLM.accept_line in serving.SPEC_RE.pattern


@pytest.mark.parametrize(("where", "line", "want"), FORMS, ids=[f[0] for f in FORMS])
def test_each_form_gives_its_accept_length(where: str, line: str, want: float | None) -> None:
    assert accept_length(line, VLLM) == want, where
    assert (VLLM.accept_line in line) == (want is not None), where  # what `logs` greps on the host


def test_the_simulators_form_is_read_too() -> None:
    assert accept_length(serving.format_spec(120, 200, 50, 5.0, [0.8, 0.6]), VLLM) == pytest.approx(3.4)


def test_bench_log_fallback_reads_the_accept_length_line_by_line() -> None:
    """The stats line gives the running batch, the SpecDecoding line after it the accept
    length: each read on its own line, as the sampler's grep hands them over."""
    text = "\n".join([STATS, FORMS[3][1], STATS.replace("Running: 1 reqs", "Running: 7 reqs"), FORMS[2][1]])
    figs = parse_decode_lines(text, VLLM)
    assert figs.running == [1.0, 7.0]
    assert figs.accept == [3.24, 5.44]
    assert figs.to_record()["server_accept_length"] == 3.24  # the nearest-rank median of the two


def test_a_stats_line_alone_gives_no_accept_length() -> None:
    figs = parse_decode_lines(STATS, VLLM)
    assert figs.running == [1.0] and figs.accept == []
