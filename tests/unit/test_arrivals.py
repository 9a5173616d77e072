"""Open-loop arrivals (bench/arrivals.py), the saturation rule (bench/saturation.py), the
simulator's open-loop header (sim/openloop.py) and bench_serving's rate argv: pure parts."""

from __future__ import annotations

import statistics

import pytest

from specops.bench.arrivals import Arrival, offsets, parse_arrival, parse_rate, parse_rates
from specops.bench.bench_serving import bench_command
from specops.bench.matrix import plan_points
from specops.bench.saturation import is_saturated, offered_rate
from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.records.schema import ResultRecord, point_key
from specops.sglang.source import ensure_tree
from specops.sim.closedloop import LoopHeaderError
from specops.sim.openloop import OPEN_HEADER, OpenLoop, open_header, parse_open_header


def test_rates_parse_with_an_optional_per_second_suffix():
    assert parse_rates("1,2.5/s, 8") == [1.0, 2.5, 8.0]
    assert parse_rate("0.5/S") == 0.5


@pytest.mark.parametrize("text, message", [
    ("0", "positive finite"), ("-1", "positive finite"), ("abc", "not a number"), ("inf", "positive finite"),
    ("nan", "positive finite"), ("", "lists no rate"), ("1,1/s", "twice")])
def test_bad_rates_are_refused_naming_the_option(text, message):
    with pytest.raises(ConfigError, match=message) as err:
        parse_rates(text)
    assert err.value.where == "bench --rate"


@pytest.mark.parametrize("text", ["gamma:-1", "gamma:0", "gamma:x", "gamma:", "burst", "gamma:inf"])
def test_bad_arrival_processes_are_refused_naming_the_option(text):
    with pytest.raises(ConfigError) as err:
        parse_arrival(text)
    assert err.value.where == "bench --arrival"


def test_offsets_are_reproducible_from_the_seed_and_start_at_zero():
    poisson = parse_arrival("poisson")
    first = offsets(50, 4.0, poisson, seed=3)
    assert first == offsets(50, 4.0, poisson, seed=3)   # every arm and repeat: the same arrivals
    assert first[0] == 0.0 and first == sorted(first)
    assert first != offsets(50, 4.0, poisson, seed=4)
    assert offsets(50, 4.0, parse_arrival("gamma:2"), seed=3) != first


def test_constant_arrivals_are_exactly_spaced():
    offs = offsets(9, 4.0, parse_arrival("constant"), seed=1)
    assert offs == [i * 0.25 for i in range(9)]


@pytest.mark.parametrize("process, cv", [("poisson", 1.0), ("gamma:2", 2.0), ("gamma:0.5", 0.5)])
def test_arrivals_follow_the_asked_rate_and_variation(process, cv):
    """Over many draws the mean gap is 1/rate (within 4 standard errors: 4 CV / sqrt(n)) and
    the gaps' CV the asked one (within 10%)."""
    rate, n = 5.0, 40000
    offs = offsets(n, rate, parse_arrival(process), seed=11)
    gaps = [b - a for a, b in zip(offs, offs[1:], strict=False)]
    mean = statistics.fmean(gaps)
    tolerance = 4 * cv / n ** 0.5
    assert mean == pytest.approx(1 / rate, rel=tolerance)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.1)
    assert offered_rate(offs) == pytest.approx(rate, rel=tolerance)


def test_the_saturation_rule():
    assert is_saturated(10.0, 8.5) is False
    assert is_saturated(10.0, 7.9) is True
    assert is_saturated(None, 5.0) is None and is_saturated(5.0, None) is None
    assert offered_rate([0.0]) is None


def test_open_loop_header_round_trip_and_bad_values():
    head = open_header("k", 1, 0.25, 0.5, 3)[OPEN_HEADER]
    got = parse_open_header(head)
    assert got is not None and (got.key, got.index, got.at, got.next, got.requests) == ("k", 1, 0.25, 0.5, 3)
    last = parse_open_header(open_header("k", 2, 0.5, None, 3)[OPEN_HEADER])
    assert last is not None and last.next is None
    assert parse_open_header(None) is None
    for bad in ("id=k;i=3;at=0;requests=3", "id=k;i=0;at=-1;requests=3", "id=k;i=0;at=1;next=0.5;requests=3",
                "id=k;at=0;requests=3"):
        with pytest.raises(LoopHeaderError):
            parse_open_header(bad)


def test_an_open_loop_knows_its_next_due_arrival_even_out_of_order():
    loop = OpenLoop("k", 3, origin=10.0)
    assert loop.due() == 10.0                      # offset 0 not received yet
    loop.add(parse_open_header("id=k;i=1;at=0.5;next=0.75;requests=3"))  # type: ignore[arg-type]
    assert loop.due() == 10.0 and loop.low == 0    # still index 0
    loop.add(parse_open_header("id=k;i=0;at=0;next=0.5;requests=3"))  # type: ignore[arg-type]
    assert loop.low == 2 and loop.due() == 10.75
    loop.add(parse_open_header("id=k;i=2;at=0.75;requests=3"))  # type: ignore[arg-type]
    assert loop.complete and loop.due() is None


def test_rate_points_have_their_own_key_and_level():
    points = plan_points(["baseline", "eagle3"], [2.0, 0.5], 1, axis="rate")
    assert [(p.arm, p.rate, p.concurrency) for p in points] == [
        ("baseline", 0.5, 0), ("baseline", 2.0, 0), ("eagle3", 0.5, 0), ("eagle3", 2.0, 0)]
    assert points[0].label() == "baseline rate=0.5/s r=0"
    rate = ResultRecord(arm="baseline", rate=2.0)
    assert point_key(rate) != point_key(ResultRecord(arm="baseline", concurrency=0))
    assert "rate" not in ResultRecord(arm="baseline", concurrency=2).to_dict()   # closed-loop lines as before
    with pytest.raises(ConfigError, match="positive number of requests per second"):
        plan_points(["baseline"], [0.0], 1, axis="rate")


def test_bench_serving_rate_argv_is_accepted_and_other_processes_refused():
    cmd = bench_command(LocalTreeFiles(ensure_tree("0.5.10.post1")))
    argv = cmd.argv("python3", port=30000, input_len=32, output_len=16, num_prompts=16, output_file="/tmp/o",
                    rate=4.0, arrival="poisson")
    pairs = dict(zip(argv, argv[1:], strict=False))
    assert pairs["--request-rate"] == "4.0" and "--max-concurrency" not in argv and pairs["--warmup-requests"] == "2"
    with pytest.raises(ConfigError, match="draws Poisson arrivals only"):
        cmd.argv("python3", port=30000, input_len=32, output_len=16, num_prompts=16, output_file="/tmp/o",
                 rate=4.0, arrival="gamma:2")
    assert Arrival("gamma", 2.0).text() == "gamma:2"


def test_rate_settings_plan_rate_points_and_extend_as_levels(tmp_path):
    from specops.bench.resume import check_resume
    from specops.bench.settings import BenchSettings
    from specops.bench.sweep import point_load

    settings = BenchSettings.from_dict({"arms": ["baseline"], "rate": [4, 0.5], "arrival": "gamma:2", "repeats": 1})
    assert settings.axis() == "rate" and settings.levels() == [4.0, 0.5]
    assert [p.rate for p in settings.plan()] == [0.5, 4.0]
    load = point_load(settings, settings.plan()[1])
    assert (load.rate, load.arrival, load.num_prompts) == (4.0, "gamma:2", 16)
    with pytest.raises(ConfigError, match="positive coefficient"):
        BenchSettings.from_dict({"rate": [1.0], "arrival": "gamma:-1"})
    merged, _ = check_resume({"rate": [2.0, 4.0]}, {"rate": [2.0, 8.0]}, tmp_path, extend=True)
    assert merged["rate"] == [2.0, 4.0, 8.0]
    with pytest.raises(ConfigError, match="--rate 2.0,8.0 differs"):
        check_resume({"rate": [2.0, 4.0]}, {"rate": [2.0, 8.0]}, tmp_path)
