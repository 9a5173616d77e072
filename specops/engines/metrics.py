"""The engines' running-batch and acceptance figures as data, apart from the engines themselves:
bench.running parses them for decide/, which reaches no transport (the engines read trees
over one)."""

from __future__ import annotations

from specops.engines.base import BatchMetrics
from specops.sglang import serving

#: SGLang's gauges and decode line; the simulator shows the same
SGLANG = BatchMetrics(running=serving.METRIC_RUNNING, accept=serving.METRIC_ACCEPT,
                      decode_line=serving.DECODE_LINE, decode_re=serving.DECODE_RE,
                      all_finished_re=serving.ALL_FINISHED_RE)
#: the figures of a host without `engine:` (config.inventory's default engine, SGLang):
#: what bench.running reads when no engine is named (tests/unit/test_engines.py checks it is
#: `specops.engines.DEFAULT.metrics`)
DEFAULT_METRICS = SGLANG
