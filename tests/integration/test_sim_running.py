"""The simulator's running-batch signals, as SGLang exposes them: `#running-req` in its
Decode batch lines, and with --enable-metrics the `/metrics` gauge `sglang:num_running_reqs`
(SGLang's name, srt/metrics/collector.py). Without the flag, /metrics is 404, as in SGLang."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

from specops.bench.running import RunningSampler, parse_metrics
from specops.sglang.serving import METRIC_RUNNING
from specops.sglang.source import ensure_tree
from specops.sim.testing import drive, run_sim
from specops.transport.local import LocalTransport

EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/EAGLE3-draft",
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
BASE = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--sim-time-scale", "0.25", "--max-running-requests", "64"]


def test_metrics_gauge_and_log_lines_report_the_running_batch() -> None:
    tree = ensure_tree("0.5.10.post1")
    with run_sim(tree, BASE + EAGLE + ["--enable-metrics"]) as sim:
        text = urllib.request.urlopen(sim.url + "/metrics", timeout=5).read().decode()
        assert "# TYPE sglang:num_running_reqs gauge" in text and parse_metrics(text)[METRIC_RUNNING] == 0.0
        by_metrics = RunningSampler(LocalTransport(), str(sim.log_path), sim.url, interval_s=0.05)
        by_log = RunningSampler(LocalTransport(), str(sim.log_path))
        by_metrics.start()
        by_log.start()
        asyncio.run(drive(sim.url, 4, 16, max_new_tokens=96))
        got_m, got_l = by_metrics.stop(), by_log.stop()
    assert got_m["running_source"] == "metrics" and got_m["running_req_p50"] == 4.0, got_m
    assert got_l["running_source"] == "log" and got_l["running_req_p50"] == 4.0, got_l
    assert 2.0 < (got_l["server_accept_length"] or 0) <= 4.0


def test_no_metrics_endpoint_without_the_flag() -> None:
    tree = ensure_tree("0.5.10.post1")
    with run_sim(tree, BASE) as sim:
        try:
            urllib.request.urlopen(sim.url + "/metrics", timeout=5)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as e:
            assert e.code == 404
