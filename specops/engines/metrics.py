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
                      all_finished_re=serving.ALL_FINISHED_RE, accept_line=serving.ACCEPT_LINE)
#: vLLM's running gauge, its acceptance counters (mean accept length = 1 + accepted / drafts, as
#: vLLM's own SpecDecoding line), and its periodic stats line; the simulator's vLLM face shows the same
VLLM = BatchMetrics(running=vllm_serving.METRIC_RUNNING, accept="",
                    decode_line=f"{vllm_serving.STATS_LINE}|{vllm_serving.SPEC_LINE}",
                    decode_re=vllm_serving.DECODE_RE, all_finished_re=vllm_serving.ALL_FINISHED_RE,
                    accept_counters=(vllm_serving.METRIC_DRAFTS, vllm_serving.METRIC_ACCEPTED),
                    accept_line=vllm_serving.SPEC_ACCEPT, accept_re=vllm_serving.SPEC_RE)
#: the figures of a host without `engine:` (config.inventory's default engine, SGLang):
#: what bench.running reads when no engine is named (tests/unit/test_engines.py checks it is
#: `specops.engines.DEFAULT.metrics`)
DEFAULT_METRICS = SGLANG


def accept_length(line: str, metrics: BatchMetrics) -> float | None:
    """The accept length one log line gives, read as its engine declares (its own line where
    the engine has one, else the decode line's group 2); None for a line that gives none."""
    if metrics.accept_re is not None:
        m = metrics.accept_re.search(line)
        return float(m.group(1)) if m else None
    d = metrics.decode_re.search(line)
    return float(d.group(2)) if d and d.group(2) else None
