"""`bench --phases` (issue 34 point 2): the phase list's parsing and its errors, the one
timeline every arm is offered, the per-phase figures the client keeps, the switching lag
read from literal log lines, and the per-phase envelope."""

from __future__ import annotations

import pytest

from specops.bench.arrivals import parse_arrival
from specops.bench.phases import Done, Phase, parse_phases, phase_figures, timeline, timeline_of, token_series
from specops.errors import ConfigError


def test_phases_parse_rates_and_durations() -> None:
    assert parse_phases("2/s:120s, 16:2m,0.5/s:30") == [Phase(2.0, 120.0), Phase(16.0, 120.0), Phase(0.5, 30.0)]


@pytest.mark.parametrize(("text", "says"), [
    ("c=4:60s", "concurrency phase (c=N) is not supported"),
    ("2/s:120s,c=8:60s", "phase 2"),
    ("", "lists no phase"),
    ("2/s:120s,,4/s:10s", "an empty phase"),
    ("2/s", "needs a rate and a duration"),
    ("fast:10s", "'fast' is not a positive number of requests per second"),
    ("2/s:10h", "not a number of seconds (s) or minutes (m)"),
    ("2/s:0s", "must be positive"),
    ("-1:10s", "'-1' is not a positive number"),
])
def test_a_bad_phase_list_is_refused_naming_the_option_and_phase(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_phases(text)
    assert says in str(err.value) and "bench --phases" in str(err.value)


def test_the_timeline_is_the_seed_and_phases_alone_and_keeps_each_phase_rate() -> None:
    a = timeline_of("2/s:100s,20/s:100s,2/s:100s", "poisson", seed=7)
    assert a == timeline_of("2/s:100s,20/s:100s,2/s:100s", "poisson", seed=7)   # every arm and repeat
    assert a.offsets != timeline_of("2/s:100s,20/s:100s,2/s:100s", "poisson", seed=8).offsets
    assert a.offsets[0] == 0.0 and list(a.offsets) == sorted(a.offsets)
    counts = [a.phase_of.count(k) for k in range(3)]
    assert 150 < counts[0] < 250 and 1800 < counts[1] < 2200 and 150 < counts[2] < 250, counts
    for i, k in enumerate(a.phase_of):   # each request inside its phase's window
        assert a.starts()[k] <= a.offsets[i] < a.starts()[k] + a.phases[k].duration_s
    assert a.mean_rate == len(a.offsets) / 300.0 and a.phase_at(150.0) == 1 and a.phase_at(-1) is None


def test_constant_arrivals_give_exactly_rate_times_duration_per_phase() -> None:
    tl = timeline([Phase(2.0, 3.0), Phase(4.0, 1.0)], parse_arrival("constant"), seed=1)
    assert tl.offsets == (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.25, 3.5, 3.75)
    assert tl.phase_of == (0,) * 6 + (1,) * 4


def test_per_phase_figures_count_each_phase_requests_and_window_tokens() -> None:
    tl = timeline([Phase(1.0, 2.0), Phase(2.0, 1.0)], parse_arrival("constant"), seed=1)
    # requests 0, 1 in phase 0 (at 0 s and 1 s), 2 and 3 in phase 1 (at 2 s and 2.5 s); request 3 failed
    done = [Done(0, True, 0.1, 0.01, 0.2, ((0.1, 1), (0.2, 9))),
            Done(1, True, 0.2, 0.02, 1.4, ((1.2, 1), (2.4, 9))),      # its tail streams in phase 1
            Done(2, True, 0.1, None, 0.1, ((2.1, 1),)),
            Done(3, False)]
    rows = phase_figures(tl, done)
    assert [r["requests"] for r in rows] == [2, 2] and [r["completed"] for r in rows] == [2, 1]
    assert rows[0]["output_tokens"] == 11 and rows[0]["output_throughput"] == 5.5   # 11 tokens over 2 s
    assert rows[1]["output_tokens"] == 10 and rows[1]["window_s"] == 1.0
    assert rows[0]["p50_ttft_ms"] == 150.0 and rows[0]["request_latencies_ms"] == [[100.0, 10.0, 200.0],
                                                                                   [200.0, 20.0, 1400.0]]
    assert rows[1]["p50_tpot_ms"] is None and rows[1]["request_latencies_ms"] == [[100.0, None, 100.0]]
    series = token_series(tl, done)
    assert sum(series["tokens"]) == 21 and series["bin_s"] == pytest.approx(3.0 / 200)
