"""The `sglang` runner's per-request latencies: bench_serving's `--output-details` arrays
(a line real bench_serving wrote, tests/data/bench_serving/README.md) become the same
[TTFT, TPOT, E2E] ms the builtin client keeps, so goodput under an SLO works for both; a
benchmark without the arrays says why in the record, and the report repeats it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.bench.bench_serving import (
    DETAILS_FLAG,
    bench_command,
    parse_bench_serving_line,
    parse_bench_serving_output,
    to_model_time,
)
from specops.decide.slo import latencies_missing, point_goodput
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.records.schema import LATENCIES_KEY, MISSING_KEY, ResultRecord
from specops.report.summary import summarize
from specops.sglang.source import ensure_tree
from tests.support.sglang_trees import CI_RELEASES

CAPTURED = Path(__file__).parents[1] / "data" / "bench_serving" / "details_0.5.10.post1_cpu_c2.jsonl"


def captured() -> dict:
    return json.loads(CAPTURED.read_text())


def test_the_captured_line_gives_each_requests_ttft_tpot_and_e2e() -> None:
    data = captured()
    rec = parse_bench_serving_output(CAPTURED.read_text(), num_prompts=3)
    lat = rec["extra"][LATENCIES_KEY]
    # by hand from the arrays: TTFT; TPOT = the ITLs over output_len - 1 (request 2's first
    # chunk carried two tokens: 2 ITLs for 4 tokens); E2E = TTFT + the ITLs
    want = [[t * 1000, sum(g) * 1000 / (n - 1), (t + sum(g)) * 1000]
            for t, g, n in zip(data["ttfts"], data["itls"], data["output_lens"], strict=True)]
    assert len(lat) == rec["completed"] == 3 and rec["failed"] == 0
    for got, exp in zip(lat, want, strict=True):
        assert got == pytest.approx(exp, abs=1e-3)
    assert sum(x[0] for x in lat) / 3 == pytest.approx(data["mean_ttft_ms"], abs=1e-3)   # bench_serving's own mean
    assert sum(x[1] for x in lat) / 3 <= data["mean_tpot_ms"] + 1e-3
    assert MISSING_KEY not in rec["extra"]
    raw = json.loads(rec["raw"])   # the arrays and the generated text are not stored twice
    assert not {"ttfts", "itls", "output_lens", "generated_texts", "errors"} & set(raw)
    assert raw["completed"] == 3 and raw["mean_ttft_ms"] == data["mean_ttft_ms"]
    # it survives the store's round trip
    assert ResultRecord.from_dict(rec).to_dict()["extra"][LATENCIES_KEY] == lat


def test_goodput_and_attainment_of_the_captured_point() -> None:
    rec = parse_bench_serving_line(CAPTURED.read_text(), num_prompts=3)
    lat = rec["extra"][LATENCIES_KEY]
    slo = {"ttft_ms": 30.0, "tpot_ms": 6.0}
    met = [x for x in lat if x[0] <= 30.0 and x[1] <= 6.0]
    assert len(met) == 1   # request 0 misses the TPOT limit, request 1 the TTFT limit
    goodput, attainment = point_goodput(ResultRecord.from_dict(rec), slo)
    assert goodput == pytest.approx(1 / rec["duration_s"]) and attainment == pytest.approx(1 / 3)


def test_a_failed_request_is_left_out_and_counts_against_attainment() -> None:
    data = captured()
    data.update(completed=2, ttfts=[*data["ttfts"][:2], 0.0], output_lens=[*data["output_lens"][:2], 0],
                itls=[*data["itls"][:2], []], errors=["", "", "Traceback ... ClientConnectorError"])
    rec = parse_bench_serving_line(json.dumps(data), num_prompts=3)
    assert len(rec["extra"][LATENCIES_KEY]) == 2 and rec["failed"] == 1
    assert point_goodput(ResultRecord.from_dict(rec), {"e2e_ms": 600000.0}) == (pytest.approx(2 / rec["duration_s"]), pytest.approx(2 / 3))


def test_a_line_without_details_says_why_and_has_no_goodput() -> None:
    data = {k: v for k, v in captured().items() if k not in ("ttfts", "itls", "output_lens", "input_lens",
                                                              "generated_texts", "errors")}
    rec = parse_bench_serving_line(json.dumps(data), num_prompts=3)
    assert LATENCIES_KEY not in rec["extra"]
    why = latencies_missing(ResultRecord.from_dict(rec))
    assert why and DETAILS_FLAG in why and "goodput and SLO attainment are unavailable" in why
    assert point_goodput(ResultRecord.from_dict(rec), {"ttft_ms": 100.0}) == (None, None)   # not a zero
    # the report says it, in the runner's words
    rows = [ResultRecord.from_dict({**rec, "host": "h", "arm": arm, "concurrency": 1, "repeat": 0, "status": "ok"})
            for arm in ("baseline", "eagle3")]
    summary = summarize(rows, {"bench": {"slo": {"ttft_ms": 100}}})
    assert summary.hosts[0].cells[("baseline", 1)].goodput is None
    assert summary.headline[-1].endswith(f"goodput n/a: {why}")


def test_arrays_of_different_lengths_are_refused_with_a_reason() -> None:
    data = captured()
    data["itls"] = data["itls"][:2]
    rec = parse_bench_serving_line(json.dumps(data))
    assert "differ in length (ttfts 3, itls 2" in (latencies_missing(ResultRecord.from_dict(rec)) or "")


def test_scaled_clock_latencies_are_in_model_time() -> None:
    rec = parse_bench_serving_line(CAPTURED.read_text())
    model = to_model_time(rec, 0.5)
    assert model["extra"][LATENCIES_KEY] == [[pytest.approx(v * 2, abs=2e-3) for v in one]
                                             for one in rec["extra"][LATENCIES_KEY]]


@pytest.mark.parametrize("exp", CI_RELEASES, ids=[e.version for e in CI_RELEASES])
def test_every_release_gets_output_details_and_accepts_it(exp) -> None:
    cmd = bench_command(LocalTreeFiles(ensure_tree(exp.version)))
    argv = cmd.argv("python3", port=1, input_len=8, output_len=4, num_prompts=3, concurrency=2, output_file="o")
    assert cmd.details and DETAILS_FLAG in argv and cmd.flags.check(argv[3:]) is None


def test_a_benchmark_without_the_flag_is_run_without_it(sglang_tree) -> None:
    tree = sglang_tree("0.5.10.post1")
    path = tree / "python/sglang/bench_serving.py"
    src = path.read_text()
    start = src.index(f'"{DETAILS_FLAG}"')
    call = src.rindex("parser.add_argument(", 0, start)
    path.write_text(src[:call] + "pass  # removed\n    " + src[src.index(")", start) + 1:].lstrip())
    cmd = bench_command(LocalTreeFiles(tree))
    argv = cmd.argv("python3", port=1, input_len=8, output_len=4, num_prompts=3, concurrency=2, output_file="o")
    assert not cmd.details and DETAILS_FLAG not in argv
