"""The builtin client: pure parts here, real points against the real simulator (a process)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

from specops.bench.client import _split_counts, default_num_prompts, make_prompts, measure_point, percentile
from specops.errors import ConfigError
from specops.sim.testing import free_port

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
               "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B", "--speculative-num-steps", "3",
               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


@contextmanager
def simulator(*flags: str, time_scale: float = 0.25, tmp: Path) -> Iterator[str]:
    """The real simulator (`python -m specops.sim`) on a free port, ready; killed after."""
    from specops.sglang.source import ensure_tree
    from specops.sim.testing import run_sim

    args = ["--model-path", MODEL, "--sim-time-scale", str(time_scale), *flags]
    log = tmp / f"sim-{len(list(tmp.glob('sim-*.log')))}.log"
    with run_sim(ensure_tree("0.5.10.post1"), args, log_path=log) as sim:
        yield sim.url


# ---------------------------------------------------------------- pure parts

def test_prompts_are_deterministic_per_seed_and_sized():
    a = make_prompts(5, input_len=32, output_len=8, seed=3)
    assert a == make_prompts(5, input_len=32, output_len=8, seed=3)
    assert a != make_prompts(5, input_len=32, output_len=8, seed=4)
    # token ids, as bench_serving's random-ids: the server prefills exactly input_len tokens
    assert all(p.ids is not None and len(p.ids) == 32 and p.output_len == 8 for p in a)
    assert len({p.ids for p in a}) == 5


def test_prompts_from_a_sharegpt_file_and_bad_datasets(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hello there"},
                                                   {"from": "gpt", "value": "hi"}]},
                                {"conversations": [{"from": "human", "value": "tell me more"}]}]))
    prompts = make_prompts(4, input_len=0, output_len=16, seed=1, dataset=str(path))
    assert {p.text for p in prompts} == {"hello there", "tell me more"} and prompts[0].output_len == 16
    with pytest.raises(ConfigError, match="download"):
        make_prompts(1, input_len=1, output_len=1, seed=1, dataset="sharegpt")
    (tmp_path / "empty.jsonl").write_text('{"foo": 1}\n')
    with pytest.raises(ConfigError, match="no prompts"):
        make_prompts(1, input_len=1, output_len=1, seed=1, dataset=str(tmp_path / "empty.jsonl"))


def test_multi_token_chunks_spread_and_unknown_counts_share_the_rest():
    # A speculative server's chunks: 1, 3, 4 tokens -> counts kept.
    assert [k for _, k in _split_counts([(0.0, 1), (0.1, 3), (0.2, 4)], 8)] == [1, 3, 4]
    # OpenAI stream without per-chunk usage: 3 chunks, 7 tokens in all -> integers summing to 7.
    counts = [k for _, k in _split_counts([(0.0, None), (0.1, None), (0.2, None)], 7)]
    assert sum(counts) == 7 and max(counts) - min(counts) <= 1


def test_percentile_matches_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10.0], 99) == 10.0 and percentile([], 50) is None
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert default_num_prompts(1) == 16 and default_num_prompts(64) == 256


def test_unreachable_server_fails_the_point_without_raising():
    rec = measure_point(f"http://127.0.0.1:{free_port()}", concurrency=2, num_prompts=4, input_len=4,
                    output_len=4, warmup=0, timeout_s=5)
    assert rec.status == "failed" and rec.completed == 0 and rec.failed == 4
    assert "4 of 4 requests failed" in rec.error and "Connect" in rec.error


# ---------------------------------------------------------------- against the simulator

def test_baseline_point_against_the_simulator(tmp_path):
    from specops.sim.model import predicted_output_throughput

    with simulator(time_scale=0.25, tmp=tmp_path) as base:
        rec = measure_point(base, concurrency=4, num_prompts=16, input_len=16, output_len=64, seed=1, timeout_s=60)
    assert rec.status == "ok", rec.error
    assert rec.completed == 16 and rec.failed == 0
    assert rec.total_output_tokens == 16 * 64
    assert rec.simulated is True and rec.sim_time_scale == 0.25
    assert rec.output_throughput > 0 and rec.request_throughput > 0
    assert 0 < rec.mean_ttft_ms < rec.mean_e2e_ms
    assert rec.p50_itl_ms <= rec.p99_itl_ms
    assert rec.accept_length is None and rec.itl_spread is False
    # Converted back to model units: close to the simulator's own steady-state prediction.
    predicted = predicted_output_throughput("baseline", 4)
    assert 0.6 * predicted < rec.output_throughput < 1.15 * predicted, (rec.output_throughput, predicted)
    assert rec.extra["flush_cache"] == "ok"


def test_eagle3_point_reports_accept_length_and_spread_itl(tmp_path):
    with simulator(*EAGLE_FLAGS, time_scale=0.25, tmp=tmp_path) as base:
        rec = measure_point(base, concurrency=2, num_prompts=8, input_len=16, output_len=48, seed=1, timeout_s=60)
        comp = measure_point(base, concurrency=2, num_prompts=8, input_len=16, output_len=48, seed=1,
                         timeout_s=60, api="completions")
    assert rec.status == "ok", rec.error
    assert rec.completed == 8 and rec.total_output_tokens == 8 * 48
    assert rec.accept_length is not None and rec.accept_length > 1.5
    assert rec.itl_spread is True
    # Each burst's gap is spread over its tokens, so the mean ITL agrees with TPOT instead of
    # being inflated by the accept length (as counting one ITL per chunk would).
    assert rec.mean_itl_ms == pytest.approx(rec.mean_tpot_ms, rel=0.1)
    assert comp.status == "ok", comp.error
    assert comp.completed == 8 and comp.total_output_tokens == 8 * 48
    assert comp.output_throughput > 0 and comp.mean_ttft_ms < comp.mean_e2e_ms


def test_sweep_against_two_simulated_arms_finds_the_models_crossover(tmp_path):
    """Library-level sweep: plan, run each point, store it, render; the report's crossover
    and threshold bracket the levels the simulator's own model predicts."""
    from specops.bench.matrix import plan_points
    from specops.records import store
    from specops.report.artifacts import render_report
    from specops.sim.model import predicted_best_threshold, predicted_crossover

    levels = [1, 4, 16]
    run_dir = tmp_path / "run"
    with simulator(time_scale=0.1, tmp=tmp_path) as base_url, \
            simulator(*EAGLE_FLAGS, "--max-running-requests", "64", time_scale=0.1, tmp=tmp_path) as eagle_url:
        urls = {"baseline": base_url, "eagle3": eagle_url}
        for p in plan_points(["baseline", "eagle3"], levels, 1):
            rec = measure_point(urls[p.arm], concurrency=p.concurrency, input_len=16, output_len=32, seed=5, timeout_s=60)
            store.append_result(run_dir, replace(rec, host="local", arm=p.arm, repeat=p.repeat, mechanism="sim"))
    summary = render_report(run_dir)
    host = summary.hosts[0]
    assert host.crossover.kind == "interpolated"
    assert host.crossover.above == predicted_crossover(levels) == 16
    assert host.threshold == predicted_best_threshold(levels) == 4
    assert len(store.load_results(run_dir)) == 6 and "SIMULATED" in (run_dir / "report.md").read_text()


def test_the_warm_up_sends_one_request_alone_before_the_points_concurrency(tmp_path):
    """Measured on real SGLang 0.5.14 (CPU, bfloat16): an adaptive arm at threshold 10 benched at
    c=11 warmed up at 11 in flight, so it never drafted before the measured run; its first
    drafting step (a one-time ~10 s on that path) then fell inside the run, which read 0.32x of
    baseline. A warm-up request alone runs at batch 1, where every adaptive arm drafts."""
    with simulator(time_scale=0.1, tmp=tmp_path) as base:
        rec = measure_point(base, concurrency=4, num_prompts=4, input_len=16, output_len=8, seed=1, timeout_s=60)
    assert rec.status == "ok", rec.error
    assert rec.extra["warmup"] == 4 and rec.extra["warmup_alone"] == 1 and rec.extra["warmup_failed"] == 0
    log = next(tmp_path.glob("sim-*.log")).read_text()
    # the point's prefills (16 tokens a prompt; the simulator's own start-up probe is shorter):
    # the lone warm-up request, then the closed loops of 4 (the warm-up's, then the run's)
    prefills = [line.split("Prefill batch, ")[1].split(", #cached")[0] for line in log.splitlines()
                if "Prefill batch" in line and "#new-token: 6," not in line]
    assert prefills == ["#new-seq: 1, #new-token: 16", "#new-seq: 4, #new-token: 64", "#new-seq: 4, #new-token: 64"], \
        prefills
