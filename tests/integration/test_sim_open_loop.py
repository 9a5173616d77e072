"""Open loops on the simulator (a rate point): each request arrives at its declared offset on
the model clock, idle gaps move that clock, and no step starts before an arrival it was told
of has come in, so every figure of a rate point is a function of the workload: the same at
any time scale, on a loaded machine, and whenever the client actually sent each request."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import aiohttp
import pytest

from specops.bench.arrivals import offsets, parse_arrival
from specops.bench.client import RequestResult, _run_open, make_prompts, measure_point
from specops.records.schema import ResultRecord
from specops.sglang.source import ensure_tree
from specops.sim.testing import run_sim

MODEL = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--max-running-requests", "64"]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/EAGLE3-draft",
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
#: what a loaded machine or another time scale may change: the client's own lag, the wall clock
WALL_FIELDS = {"client_lag_mean_ms", "client_lag_p99_ms", "client_lag_max_ms", "started_at", "sim_time_scale"}
WALL_EXTRA = {"loop_lag_p99_ms", "loop_lag_max_ms", "duration_wall_s"}


def _model_view(record: ResultRecord) -> dict[str, Any]:
    data = {k: v for k, v in record.to_dict().items() if k not in WALL_FIELDS}
    data["extra"] = {k: v for k, v in record.extra.items() if k not in WALL_EXTRA}
    return data


def _measure(scale: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """An unsaturated and a saturating rate point (poisson, gamma) on one fresh EAGLE-3 simulator."""
    tree = ensure_tree("0.5.10.post1")
    with run_sim(tree, MODEL + EAGLE + ["--sim-time-scale", scale]) as sim:
        views = [_model_view(measure_point(sim.url, rate=rate, arrival=arrival, num_prompts=24, input_len=32,
                                           output_len=32, seed=5))
                 for rate, arrival in ((6.0, "poisson"), (40.0, "gamma:2"))]
        stats = sim.server_info()["sim_stats"]
    return views, stats


def test_rate_point_figures_do_not_depend_on_the_machines_speed():
    """Two fresh simulators at different time scales, the second beside two CPU hogs on this
    2-core machine: every model-clock figure of the rate points is identical (not close)."""
    calm = _measure("0.005")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = _measure("0.02")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    (low, high), stats = calm
    assert low["completed"] == high["completed"] == 24 and low["extra"]["clock"] == "sim-model"
    assert low["rate"] == 6.0 and low["arrival"] == "poisson" and low["saturated"] is False
    assert high["arrival"] == "gamma:2" and high["saturated"] is True   # EAGLE-3 tops out near 11 req/s here
    assert stats["loop_timeouts"] == 0
    assert loaded == calm


async def _send(url: str, scale: float, offs: list[float]) -> list[RequestResult]:
    prompts = make_prompts(len(offs), input_len=32, output_len=24, seed=9)
    async with aiohttp.ClientSession() as session:
        results, _, _ = await _run_open(session, url + "/generate", "generate", prompts, offs, scale, None, 60.0)
    return results


def test_a_request_arrives_at_its_declared_offset_whenever_it_was_sent():
    """Constant arrivals 0.5 model-s apart on the baseline: sent on time (paced by the time
    scale) or all at once, each request arrives at its offset, idle gaps move the model
    clock, and every request sees the same empty server (one TTFT, one end-to-end time)."""
    tree = ensure_tree("0.5.10.post1")
    offs = offsets(6, 2.0, parse_arrival("constant"), seed=1)
    with run_sim(tree, MODEL + ["--sim-time-scale", "0.01", "--sim-noise", "0"]) as sim:
        paced = asyncio.run(_send(sim.url, 0.01, offs))
        before = sim.server_info()["sim_stats"]["model_time_s"]
        burst = asyncio.run(_send(sim.url, 0.0, offs))
        after = sim.server_info()["sim_stats"]["model_time_s"]
    for run in (paced, burst):
        assert all(r.ok and r.sim_clock for r in run)
        arrivals = [r.sent_at - run[0].sent_at for r in run]
        assert arrivals == pytest.approx(offs, abs=1e-9)
        assert len({round(r.ttft or 0, 9) for r in run}) == 1 and len({round(r.e2e or 0, 9) for r in run}) == 1
    assert [t for r in paced for t in (r.ttft, r.e2e)] == pytest.approx([t for r in burst for t in (r.ttft, r.e2e)],
                                                                        abs=1e-9)
    assert after - before == pytest.approx(offs[-1] + (burst[-1].e2e or 0), abs=1e-6)  # idle time counted
