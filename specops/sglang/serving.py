"""What a running SGLang server shows the world, beyond its flags: the module that starts it,
the line that says it is ready, the `/metrics` gauges and the `Decode batch` log line the
running batch is read from. The simulator speaks the same face (sim/logs, sim/server), so
these are SGLang's words, kept once; specops.engines.sglang hands them to the layers above."""

from __future__ import annotations

import re

#: `python -m` this to start a server
LAUNCH_MODULE = "sglang.launch_server"

#: SGLang's ready line; readiness needs it in the log as well as /health answering 200.
#: Every supported release logs it word for word (tests/unit/test_crash_corpus.py reads each tree).
READY_LINE = "The server is fired up and ready to roll!"

#: the launch flag that serves `/metrics`
METRICS_FLAG = "--enable-metrics"
#: the flag that fixes the KV cache's size in tokens (else a CPU server takes a share of the memory free at its start)
MAX_TOTAL_TOKENS_FLAG = "--max-total-tokens"
#: the `/metrics` gauges of the running batch and the mean accept length; SGLang's names, from
#: `srt/metrics/collector.py` (`srt/observability/metrics_collector.py` from 0.5.16)
METRIC_RUNNING = "sglang:num_running_reqs"
METRIC_ACCEPT = "sglang:spec_accept_length"

#: what starts every decode step's log line (for `grep` on the host)
DECODE_LINE = "Decode batch"
#: what precedes the accept length in a drafting server's decode line (`logs` greps for it)
ACCEPT_LINE = "accept len: "
#: a decode step's line: group 1 the running requests, group 2 the accept length (when drafting)
DECODE_RE = re.compile(rf"{DECODE_LINE}[^\n]*?#running-req: (\d+)(?:[^\n]*?{ACCEPT_LINE}([0-9.]+))?")
#: a `Decode batch` line whose step finished every running request: their KV freed, SGLang
#: (and the simulator) log `#token: 0`; the step was cut by max_new_tokens, so its accept
#: length is not what the drafts would have given
ALL_FINISHED_RE = re.compile(r"#token: 0\b")
