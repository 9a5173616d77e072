"""The engines' running-batch and acceptance figures as data, apart from the engines themselves:
bench.running parses them for decide/, which reaches no transport (the engines read trees
over one)."""

from __future__ import annotations

from specops.engines.base import BatchMetrics
from specops.sglang import serving
from specops.vllm import serving as vllm_serving

#: SGLang's gauges and decode line; the simulator shows the same
SGLANG = BatchMetrics(running=serving.METRIC_RUNNING, accept=serving.METRIC_ACCEPT,
                      decode_line=serving.DECODE_LINE, decode_re=serving.DECODE_RE,
                      all_finished_re=serving.ALL_FINISHED_RE)
#: vLLM's running gauge, its acceptance counters (mean accept length = 1 + accepted / drafts, as
#: vLLM's own SpecDecoding line), and its periodic stats line; the simulator's vLLM face shows the same
VLLM = BatchMetrics(running=vllm_serving.METRIC_RUNNING, accept="",
                    decode_line=f"{vllm_serving.STATS_LINE}|{vllm_serving.SPEC_LINE}",
                    decode_re=vllm_serving.DECODE_RE, all_finished_re=vllm_serving.ALL_FINISHED_RE,
                    accept_counters=(vllm_serving.METRIC_DRAFTS, vllm_serving.METRIC_ACCEPTED))
#: the figures of a host without `engine:` (config.inventory's default engine, SGLang):
#: what bench.running reads when no engine is named (tests/unit/test_engines.py checks it is
#: `specops.engines.DEFAULT.metrics`)
DEFAULT_METRICS = SGLANG
