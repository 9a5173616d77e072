"""The simulator with vLLM's face, as a process: vLLM's flags from the tree (an unknown one
refused as vLLM's argparse refuses it), its lines, `/metrics` names and endpoints, the adaptive
arm following `num_speculative_tokens_per_batch_size` per running batch, and its failures in
vLLM's words. Every figure is read from the model clock or the server's counters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specops.bench.client import measure_point
from specops.bench.running import parse_metrics
from specops.servers.logwatch import failure_reason
from specops.sim.testing import run_sim, start_sim
from specops.vllm import serving
from tests.support.arms import TIME_SCALE
from tests.support.vllm_trees import old_release, vllm_tree  # noqa: F401 - fixture

SCALE = ["--sim-time-scale", str(TIME_SCALE)]


def _spec(n: int = 3, schedule: list[list[int]] | None = None) -> list[str]:
    config: dict[str, object] = {"method": "eagle3", "model": "/m/draft", "num_speculative_tokens": n}
    if schedule is not None:
        config["num_speculative_tokens_per_batch_size"] = schedule
    return ["--speculative-config", json.dumps(config)]


def _vllm(tree: Path, args: list[str], **kw: object):  # type: ignore[no-untyped-def]
    return run_sim(tree, ["--model", "/m/target", *args, *SCALE], face="vllm", ready_line=serving.READY_LINE, **kw)


def test_adaptive_follows_the_schedule_per_running_batch(vllm_tree: Path) -> None:  # noqa: F811
    with _vllm(vllm_tree, ["--max-num-seqs", "8", *_spec(3, [[1, 2, 3], [3, 8, 0]])]) as sim:
        for concurrency in (1, 6):
            rec = measure_point(sim.url, concurrency=concurrency, num_prompts=12, input_len=16, output_len=24,
                                api="completions")
            assert rec.completed == 12 and rec.simulated
        stats = sim.server_info()["sim_stats"]["steps_by_batch"]
        metrics = parse_metrics(__import__("urllib.request").request.urlopen(sim.url + "/metrics").read().decode())
        log = sim.log_text()
    assert stats and all((s > 0) == (int(b) <= 2) and (p > 0) == (int(b) > 2) for b, v in stats.items()
                         for s, p in [(v["speculative"], v["plain"])])
    assert any(int(b) > 2 for b in stats)  # the big batches ran, without drafting
    drafts, accepted = metrics[serving.METRIC_DRAFTS], metrics[serving.METRIC_ACCEPTED]
    assert drafts > 0 and metrics[serving.METRIC_DRAFT_TOKENS] == 3 * drafts and 0 < accepted <= 3 * drafts
    assert metrics[serving.METRIC_RUNNING] == 0
    assert serving.READY_LINE in log and "Application startup complete." in log
    assert "Decode batch" not in log and "Prefill batch" not in log  # SGLang's lines stay out of vLLM's face


def test_baseline_endpoints_and_stats_lines(vllm_tree: Path) -> None:  # noqa: F811
    with _vllm(vllm_tree, ["--max-num-seqs", "4", "--served-model-name", "tgt", "--dtype", "float32",
                           "--max-model-len", "1024"]) as sim:
        models = sim.get_json("/v1/models")
        version = sim.get_json("/version")
        rec = measure_point(sim.url, concurrency=4, num_prompts=16, input_len=16, output_len=64, api="completions")
        text = __import__("urllib.request").request.urlopen(sim.url + "/metrics").read().decode()
    assert models["data"][0]["id"] == "tgt" and models["data"][0]["max_model_len"] == 1024
    assert version == {"version": "0.32.0"}
    assert rec.completed == 16 and rec.accept_length is None
    assert serving.METRIC_RUNNING in parse_metrics(text) and serving.METRIC_DRAFTS not in parse_metrics(text)


def test_an_unknown_flag_is_refused_as_vllm_would(vllm_tree: Path) -> None:  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "specops.sim", "--vllm-tree", str(vllm_tree), "--model", "m",
                           "--max-running-requests", "8"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "api_server.py: error: unrecognized arguments: --max-running-requests 8" in proc.stderr


def _failed_start(tree: Path, args: list[str], tmp_path: Path) -> str:
    sim = start_sim(tree, ["--model", "/m/target", *args, *SCALE], log_path=tmp_path / "s.log", face="vllm")
    assert sim.wait_exit(timeout=60) == 1
    return sim.log_text()


def test_schedule_on_a_release_without_it_fails_in_vllms_words(vllm_tree: Path, tmp_path: Path) -> None:  # noqa: F811
    old = old_release(vllm_tree, tmp_path / "old")
    log = _failed_start(old, _spec(3, [[1, 4, 3], [5, 8, 0]]), tmp_path)
    assert "Unexpected keyword argument 'num_speculative_tokens_per_batch_size'" in log
    reason = failure_reason(log)
    assert reason is not None and "ValidationError: 1 validation error for SpeculativeConfig" in reason, reason


def test_bad_schedule_and_fail_at_start(vllm_tree: Path, tmp_path: Path) -> None:  # noqa: F811
    log = _failed_start(vllm_tree, _spec(3, [[2, 4, 3]]), tmp_path)
    assert "The first batch-size range must start at 1" in log
    assert "RuntimeError: Engine core initialization failed. See root cause above." in log
    log = _failed_start(vllm_tree, ["--sim-fail-at-start"], tmp_path)
    assert "EngineCore failed to start." in log


@pytest.mark.parametrize("n", [2])
def test_injected_crash_logs_engine_dead(vllm_tree: Path, tmp_path: Path, n: int) -> None:  # noqa: F811
    with _vllm(vllm_tree, ["--max-num-seqs", "4", *_spec(), "--sim-crash-after", str(n)],
               log_path=tmp_path / "c.log") as sim:
        measure_point(sim.url, concurrency=1, num_prompts=4, input_len=8, output_len=8, api="completions",
                      warmup=0, timeout_s=30)
        sim.wait_exit(timeout=60)
        log = sim.log_text()
    assert "EngineCore encountered a fatal error." in log
    assert "EngineDeadError: EngineCore encountered an issue." in log


def test_the_sampler_reads_vllms_metrics_names(vllm_tree: Path) -> None:  # noqa: F811
    """The running batch and the accept length of a point from vLLM's /metrics (running gauge,
    draft and accepted counters), through the engine's BatchMetrics: polled until three busy
    samples are in, however long that takes on this machine."""
    import threading

    from specops.bench.running import RunningSampler
    from specops.engines import ENGINES
    from specops.transport.local import LocalTransport
    from tests.support.faults import wait_until

    with _vllm(vllm_tree, ["--max-num-seqs", "8", *_spec(3)]) as sim:
        sampler = RunningSampler(LocalTransport(), str(sim.log_path), sim.url, interval_s=0.05,
                                 metrics=ENGINES["sim-vllm"].metrics)
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                measure_point(sim.url, concurrency=8, num_prompts=16, input_len=8, output_len=64,
                              api="completions", warmup=0)

        sampler.start()
        thread = threading.Thread(target=load, daemon=True)
        thread.start()
        try:
            wait_until(lambda: len([r for r in sampler._metrics.running if r > 0]) >= 3 and sampler._metrics.accept,
                       "three busy /metrics polls with an accept length", timeout=120)
        finally:
            stop.set()
            thread.join(timeout=120)
        figs = sampler.stop()
    assert figs["running_source"] == "metrics"
    assert 1 <= figs["running_req_p50"] <= 8 and 1 < figs["server_accept_length"] <= 4
