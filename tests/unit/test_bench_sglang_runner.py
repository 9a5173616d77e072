"""The `sglang` runner: bench_serving's argv against each real version's parser, and its
JSON lines of old and new shapes (keys taken from each version's `result = {...}` dict)."""

from __future__ import annotations

import json
import math

import pytest

from specops.bench.bench_serving import (
    bench_command,
    bench_serving_argv,
    parse_bench_serving_line,
    parse_bench_serving_output,
    to_model_time,
)
from specops.errors import ConfigError, SpecopsError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.records.schema import CSV_COLUMNS, ResultRecord
from specops.sglang.source import ensure_tree
from tests.support.sglang_trees import CI_RELEASES

# 0.5.14 (same shape as 0.5.10.post1 plus p90/p95 on TTFT/TPOT/ITL and E2E p95).
LINE_0_5_14 = json.dumps({
    "tag": None, "backend": "sglang", "dataset_name": "random-ids", "request_rate": float("inf"),
    "max_concurrency": 16, "sharegpt_output_len": 256, "random_input_len": 512, "random_output_len": 256,
    "random_range_ratio": 1.0,
    "server_info": {"internal_states": [{"avg_spec_accept_length": 3.12}], "version": "0.5.14"},
    "duration": 41.5, "completed": 64, "total_input_tokens": 32768, "total_input_text_tokens": 32768,
    "total_input_vision_tokens": 0, "total_output_tokens": 16384, "total_output_tokens_retokenized": 16380,
    "request_throughput": 1.542, "input_throughput": 789.6, "output_throughput": 394.8, "total_throughput": 1184.4,
    "mean_e2e_latency_ms": 10234.5, "median_e2e_latency_ms": 10200.0, "std_e2e_latency_ms": 150.0,
    "p90_e2e_latency_ms": 10400.0, "p95_e2e_latency_ms": 10450.0, "p99_e2e_latency_ms": 10500.0,
    "mean_ttft_ms": 250.0, "median_ttft_ms": 240.0, "std_ttft_ms": 20.0, "p90_ttft_ms": 270.0,
    "p95_ttft_ms": 280.0, "p99_ttft_ms": 300.0,
    "mean_tpot_ms": 39.1, "median_tpot_ms": 39.0, "std_tpot_ms": 1.0, "p90_tpot_ms": 40.0, "p95_tpot_ms": 40.5,
    "p99_tpot_ms": 41.0,
    "mean_itl_ms": 120.0, "median_itl_ms": 118.0, "std_itl_ms": 10.0, "p90_itl_ms": 130.0, "p95_itl_ms": 135.0,
    "p99_itl_ms": 150.0, "concurrency": 15.7, "accept_length": 3.12, "max_output_tokens_per_s": 420.0,
    "max_concurrent_requests": 16,
})

# 0.4.10.post2 / 0.5.4: no p90 anywhere, no server_info, ITL has p95/p99.
LINE_0_4_10 = json.dumps({
    "backend": "sglang", "dataset_name": "random-ids", "request_rate": float("inf"), "max_concurrency": 4,
    "sharegpt_output_len": None, "random_input_len": 128, "random_output_len": 64, "random_range_ratio": 1.0,
    "duration": 12.0, "completed": 16, "total_input_tokens": 2048, "total_output_tokens": 1024,
    "total_output_tokens_retokenized": 1024, "request_throughput": 1.333, "input_throughput": 170.6,
    "output_throughput": 85.3, "mean_e2e_latency_ms": 2900.0, "median_e2e_latency_ms": 2890.0,
    "std_e2e_latency_ms": 30.0, "p99_e2e_latency_ms": 2990.0, "mean_ttft_ms": 55.0, "median_ttft_ms": 54.0,
    "std_ttft_ms": 2.0, "p99_ttft_ms": 60.0, "mean_tpot_ms": 45.0, "median_tpot_ms": 45.0, "std_tpot_ms": 0.5,
    "p99_tpot_ms": 46.0, "mean_itl_ms": 45.0, "median_itl_ms": 45.0, "std_itl_ms": 0.5, "p95_itl_ms": 45.9,
    "p99_itl_ms": 46.5, "concurrency": 3.9, "accept_length": None,
})

# An old (0.2/0.3-era) line: medians only, no p99, no ITL mean, no TPOT, no accept length.
LINE_OLD = json.dumps({
    "backend": "sglang", "dataset_name": "random", "request_rate": float("inf"),
    "total_input_tokens": 1000, "total_output_tokens": 500, "total_output_tokens_retokenized": 500,
    "mean_e2e_latency_ms": 800.0, "median_e2e_latency_ms": 790.0, "median_ttft_ms": 40.0,
    "median_itl_ms": 12.0, "output_throughput": 600.0, "sharegpt_output_len": None,
    "random_input_len": 100, "random_output_len": 50, "random_range_ratio": 0.0,
    "duration": 0.83, "completed": 10,
})

# Every request's output was one token: numpy gives NaN for the ITL statistics; a
# zero-length run divides into Infinity.
LINE_NAN = ('{"backend": "sglang", "request_rate": Infinity, "duration": 1.0, "completed": 8, '
            '"output_throughput": Infinity, "request_throughput": 8.0, "mean_ttft_ms": 20.0, '
            '"p99_ttft_ms": 25.0, "mean_tpot_ms": NaN, "p99_tpot_ms": NaN, "mean_itl_ms": NaN, '
            '"median_itl_ms": NaN, "p99_itl_ms": NaN, "mean_e2e_latency_ms": 21.0, '
            '"p99_e2e_latency_ms": -Infinity, "accept_length": NaN}')


def test_new_shape_maps_every_normalized_field():
    rec = parse_bench_serving_line(LINE_0_5_14, num_prompts=64)
    assert rec["duration_s"] == 41.5 and rec["completed"] == 64 and rec["failed"] == 0
    assert rec["output_throughput"] == 394.8 and rec["request_throughput"] == 1.542
    assert (rec["mean_ttft_ms"], rec["p50_ttft_ms"], rec["p90_ttft_ms"], rec["p99_ttft_ms"]) == (250.0, 240.0, 270.0, 300.0)
    assert (rec["mean_tpot_ms"], rec["p99_tpot_ms"]) == (39.1, 41.0)
    assert (rec["mean_itl_ms"], rec["p90_itl_ms"], rec["p99_itl_ms"]) == (120.0, 130.0, 150.0)
    assert (rec["mean_e2e_ms"], rec["p50_e2e_ms"], rec["p90_e2e_ms"], rec["p99_e2e_ms"]) == (10234.5, 10200.0, 10400.0, 10500.0)
    assert rec["accept_length"] == 3.12
    assert rec["raw"] == LINE_0_5_14 and rec["runner"] == "sglang"
    # The record round-trips through the schema and fills every CSV column.
    row = dict(zip(CSV_COLUMNS, ResultRecord.from_dict(rec).csv_row(), strict=True))
    assert row["p99_e2e_ms"] == "10500" and row["accept_length"] == "3.12"


def test_0_4_shape_has_no_p90_and_null_accept_length():
    rec = parse_bench_serving_line(LINE_0_4_10, num_prompts=20)
    assert rec["p90_ttft_ms"] is None and rec["p90_e2e_ms"] is None
    assert rec["p99_itl_ms"] == 46.5 and rec["p95_itl_ms"] == 45.9
    assert rec["accept_length"] is None
    assert rec["failed"] == 4  # 20 sent, 16 completed


def test_old_shape_missing_keys_are_none_not_errors():
    rec = parse_bench_serving_line(LINE_OLD)
    assert rec["completed"] == 10 and rec["output_throughput"] == 600.0
    assert rec["mean_e2e_ms"] == 800.0 and rec["p50_ttft_ms"] == 40.0 and rec["p50_itl_ms"] == 12.0
    for missing in ("p99_ttft_ms", "p99_itl_ms", "p99_e2e_ms", "mean_tpot_ms", "mean_itl_ms", "mean_ttft_ms",
                    "request_throughput", "accept_length"):
        assert rec[missing] is None, missing


def test_nan_and_infinity_become_none_and_the_record_stays_strict_json():
    rec = parse_bench_serving_line(LINE_NAN, num_prompts=8)
    assert rec["output_throughput"] is None and rec["mean_itl_ms"] is None and rec["p99_e2e_ms"] is None
    assert rec["accept_length"] is None and rec["mean_ttft_ms"] == 20.0
    stored = ResultRecord.from_dict(rec).to_dict()
    json.dumps(stored, allow_nan=False)  # raises on any NaN left behind
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in stored.values())


def test_accept_length_falls_back_to_embedded_server_info():
    data = json.loads(LINE_0_5_14)
    data["accept_length"] = None
    data["server_info"] = {"decode": [{"internal_states": [{"avg_spec_accept_length": 2.75}]}]}
    assert parse_bench_serving_line(json.dumps(data))["accept_length"] == 2.75


def test_output_file_with_appended_lines_uses_the_last_and_garbage_is_a_clear_error():
    rec = parse_bench_serving_output(LINE_OLD + "\n" + LINE_0_4_10 + "\n\n")
    assert rec["completed"] == 16
    with pytest.raises(SpecopsError, match="no result line"):
        parse_bench_serving_output("\n")
    with pytest.raises(SpecopsError, match="not JSON"):
        parse_bench_serving_line("Error running benchmark for request rate: inf")
    with pytest.raises(SpecopsError, match="not a JSON object"):
        parse_bench_serving_line("[1, 2]")


@pytest.mark.parametrize("exp", CI_RELEASES, ids=[e.version for e in CI_RELEASES])
def test_argv_per_release_is_accepted_by_its_own_benchmark(exp):
    """Module and flags read from the tree: `sglang.benchmark.serving` from 0.5.16 on."""
    cmd = bench_command(LocalTreeFiles(ensure_tree(exp.version)))
    assert cmd.module == exp.bench_module and cmd.version == exp.version
    argv = cmd.argv("python3", port=30000, dataset="random", input_len=512, output_len=256,
                    num_prompts=64, concurrency=16, output_file="/tmp/out.jsonl", seed=7)
    assert argv[:5] == ["python3", "-m", exp.bench_module, "--backend", "sglang"]
    assert cmd.flags.check(argv[3:]) is None
    pairs = dict(zip(argv, argv[1:], strict=False))
    assert pairs["--dataset-name"] == "random-ids" and pairs["--random-range-ratio"] == "1.0"
    assert pairs["--max-concurrency"] == "16" and pairs["--num-prompts"] == "64"
    assert pairs["--warmup-requests"] == "16" and "--flush-cache" in argv
    # random-ids go as the ids themselves: without --tokenize-prompt bench_serving decodes them to
    # text and the server tokenizes that inside its TTFT (client_agreement, 2026-12-05: the
    # server's own TTFT 4.57 ms for bench_serving's requests, 3.39 ms for the builtin client's ids)
    assert "--tokenize-prompt" in argv
    for dataset in ("random-text", "sharegpt"):  # text datasets stay text
        assert "--tokenize-prompt" not in cmd.argv("python3", port=30000, dataset=dataset, input_len=8, output_len=8,
                                                   num_prompts=4, concurrency=1, output_file="/tmp/o.jsonl")


def test_a_flag_the_trees_benchmark_lacks_is_refused(sglang_tree):
    tree = sglang_tree("0.5.10.post1")
    path = tree / "python/sglang/bench_serving.py"
    src = path.read_text()
    start = src.index('"--flush-cache"')
    call = src.rindex("parser.add_argument(", 0, start)
    path.write_text(src[:call] + "pass  # removed\n    " + src[src.index(")", start) + 1:].lstrip())
    cmd = bench_command(LocalTreeFiles(tree))
    with pytest.raises(ConfigError, match=r"sglang.bench_serving of SGLang 0.5.10.post1 would refuse its command: "
                                          r"unrecognized arguments: --flush-cache"):
        cmd.argv("python3", port=1, input_len=8, output_len=8, num_prompts=4, concurrency=1, output_file="o")


def test_scaled_clock_figures_are_converted_to_model_time_like_the_builtin_client():
    """The defect: on the simulator's clock (wall = model x 0.1) bench_serving's figures stayed
    in wall units, 10x the builtin client's. Converted, both runners report model units."""
    wall = parse_bench_serving_line(LINE_0_5_14, num_prompts=64)
    model = to_model_time(wall, 0.1)
    assert model["duration_s"] == pytest.approx(415.0) and model["mean_ttft_ms"] == pytest.approx(2500.0)
    assert model["p99_itl_ms"] == pytest.approx(1500.0) and model["p50_e2e_ms"] == pytest.approx(102000.0)
    assert model["output_throughput"] == pytest.approx(39.48) and model["request_throughput"] == pytest.approx(0.1542)
    assert model["simulated"] is True and model["sim_time_scale"] == 0.1
    assert model["extra"]["duration_wall_s"] == 41.5 and model["accept_length"] == wall["accept_length"]
    rec = ResultRecord.from_dict({**model, "host": "h", "arm": "a", "concurrency": 16, "repeat": 0})
    assert rec.simulated and rec.output_throughput == pytest.approx(39.48)
    assert to_model_time(wall, None) == wall and to_model_time(wall, 0) == wall  # a real server: unchanged


def test_argv_dataset_path_and_bad_values():
    argv = bench_serving_argv("py", base_url="http://h:1", dataset="/data/sharegpt.json", input_len=1,
                              output_len=1, num_prompts=4, concurrency=1, output_file="o")
    pairs = dict(zip(argv, argv[1:], strict=False))
    assert pairs["--dataset-name"] == "sharegpt" and pairs["--dataset-path"] == "/data/sharegpt.json"
    assert pairs["--base-url"] == "http://h:1" and "--port" not in argv
    with pytest.raises(SpecopsError, match="concurrency"):
        bench_serving_argv("py", port=1, input_len=1, output_len=1, num_prompts=4, concurrency=0, output_file="o")
    with pytest.raises(SpecopsError, match="exactly one"):
        bench_serving_argv("py", input_len=1, output_len=1, num_prompts=4, concurrency=1, output_file="o")
