"""`bench --phases` (issue 34 point 2): the phase list's parsing and its errors, the one
timeline every arm is offered, the per-phase figures the client keeps, the switching lag
read from literal log lines, and the per-phase envelope."""

from __future__ import annotations

import pytest

from specops.bench.arrivals import parse_arrival
from specops.bench.phases import Done, Phase, parse_phases, phase_figures, timeline, timeline_of, token_series
from specops.bench.switching import line_time, switches, switching_extra
from specops.decide.phases import summarize_phases
from specops.errors import ConfigError
from specops.records.schema import ResultRecord
from specops.report.phases import phases_doc


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


def test_per_phase_figures_count_each_phase_requests_and_their_tokens() -> None:
    tl = timeline([Phase(1.0, 2.0), Phase(2.0, 1.0)], parse_arrival("constant"), seed=1)
    # requests 0, 1 in phase 0 (at 0 s and 1 s), 2 and 3 in phase 1 (at 2 s and 2.5 s); request 3 failed
    done = [Done(0, True, 0.1, 0.01, 0.2, ((0.1, 1), (0.2, 9))),
            Done(1, True, 0.2, 0.02, 1.4, ((1.2, 1), (2.4, 9))),      # its tail streams in phase 1
            Done(2, True, 0.1, None, 0.1, ((2.1, 1),)),
            Done(3, False)]
    rows = phase_figures(tl, done)
    assert [r["requests"] for r in rows] == [2, 2] and [r["completed"] for r in rows] == [2, 1]
    # phase 0's 20 tokens over 0 s .. 2.4 s (its last request's last token, past its 2 s)
    assert rows[0]["output_tokens"] == 20 and rows[0]["window_s"] == 2.4 and rows[0]["output_throughput"] == 8.3333
    assert rows[1]["output_tokens"] == 1 and rows[1]["window_s"] == 1.0
    assert rows[0]["p50_ttft_ms"] == 150.0 and rows[0]["request_latencies_ms"] == [[100.0, 10.0, 200.0],
                                                                                   [200.0, 20.0, 1400.0]]
    assert rows[1]["p50_tpot_ms"] is None and rows[1]["request_latencies_ms"] == [[100.0, None, 100.0]]
    series = token_series(tl, done)
    assert sum(series["tokens"]) == 21 and series["bin_s"] == pytest.approx(3.0 / 200)


# ----- the switching lag, from literal log lines ------------------------------------------

P = "[2026-12-04 09:00:0{s} TP0] "


def _decode(batch: int, t: float, s: int = 0) -> str:
    return (P.format(s=s) + f"Decode batch, #running-req: {batch}, #token: 100, token usage: 0.01, accept len: 2.50, "
            f"accept rate: 0.62, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0, [model t={t:.6f}s]")


def _off(batch: int, t: float, threshold: int = 4, s: int = 0) -> str:
    return P.format(s=s) + (f"specops adaptive: drafting off (running batch {batch} > threshold {threshold}) "
                            f"[model t={t:.6f}s]")


def _on(batch: int, t: float, threshold: int = 4, s: int = 0) -> str:
    return P.format(s=s) + (f"specops adaptive: drafting on (running batch {batch} <= threshold {threshold}) "
                            f"[model t={t:.6f}s]")


def test_a_switch_at_the_first_crossed_step_has_no_lag() -> None:
    # the simulator logs the transition as the crossed batch's first step starts, its decode line after it
    text = "\n".join([_decode(3, 1.0), _decode(4, 1.01), _off(5, 1.02), _decode(5, 1.03), _decode(6, 1.04),
                      _on(4, 1.05), _decode(4, 1.06)])
    found = switches(text, threshold=None)
    assert [(s.drafting, s.batch, s.lag_steps, s.lag_s) for s in found] == [(False, 5, 0, 0.0), (True, 4, 0, 0.0)]
    assert found[0].t_s == 1.02


def test_steps_run_past_the_threshold_before_the_switch_are_its_lag() -> None:
    # two steps drafted at batches over 4 (ending 2.02 and 2.03); the last step at or under it ended at 2.01
    text = "\n".join([_decode(4, 2.01), _decode(6, 2.02), _decode(7, 2.03), _off(7, 2.035), _decode(7, 2.045),
                      # drafting off: three steps at batches <= 4 before drafting comes back
                      _decode(3, 2.06), _decode(2, 2.07), _decode(2, 2.08), _on(2, 2.09)])
    found = switches(text, threshold=None, origin=2.0)
    assert [s.lag_steps for s in found] == [2, 3]
    assert [round(s.lag_s or 0, 6) for s in found] == [0.025, 0.045]   # 2.035 - 2.01, 2.09 - 2.045
    assert [round(s.t_s or 0, 6) for s in found] == [0.035, 0.09]


def test_a_batch_that_falls_back_before_a_switch_resets_the_count() -> None:
    text = "\n".join([_decode(5, 1.0), _decode(3, 1.1), _decode(6, 1.2), _off(6, 1.3)])
    assert [s.lag_steps for s in switches(text, threshold=4)] == [1]


def test_a_native_switch_line_takes_the_arms_threshold_and_wall_times_read_the_prefix() -> None:
    native = "[2026-12-04 09:00:05] Switch adaptive runtime state: steps 2 -> 0, draft_tokens 3 -> 1"
    text = "\n".join([_decode(8, 0, s=3), _decode(9, 0, s=4), native])
    assert switches(text, threshold=None, clock="epoch")[0].lag_steps is None   # no threshold: no lag
    found = switches(text, threshold=8, clock="epoch", origin=line_time(_decode(1, 0, s=0), "epoch") or 0)
    assert [(s.drafting, s.lag_steps, s.lag_s, s.t_s) for s in found] == [(False, 1, 2.0, 5.0)]
    # a prior line (the state before the window) is no switch of the window's
    assert switches("specops-prior: " + _off(9, 0.5) + "\n" + _decode(9, 1.0) + "\n" + _on(3, 1.1),
                    threshold=None)[0].drafting is True


def test_switches_land_in_their_phases_with_the_worst_lag_of_each() -> None:
    extra = {"phases": [{"phase": 0, "start_s": 0.0}, {"phase": 1, "start_s": 10.0}, {"phase": 2, "start_s": 20.0}],
             "phase_clock": {"kind": "model", "origin": 100.0}, "phase_series": {"bin_s": 10.0, "tokens": [1, 2, 3]}}
    text = "\n".join([_decode(3, 105.0), _decode(3, 110.4), _decode(5, 110.5), _decode(6, 110.6), _off(6, 110.7), _decode(6, 120.9),
                      _decode(2, 121.0), _on(2, 121.5), _decode(2, 122.0)])
    out = switching_extra(text, extra, threshold=None)
    rows = out["phases"]
    assert [r["switches"] for r in rows] == [0, 1, 1]
    # from the end of the last step on the right side (110.4, 120.9 - not the phase's start)
    assert (rows[1]["worst_lag_steps"], rows[1]["worst_lag_s"]) == (2, 0.3)
    assert (rows[2]["worst_lag_steps"], rows[2]["worst_lag_s"]) == (1, 0.6)
    assert rows[0]["worst_lag_steps"] is None and out["switching"]["threshold"] == 4
    assert out["phase_series"]["running"] == [3.0, 4.667, 3.333]       # mean batch per 10 s bin
    assert out["phase_series"]["drafting"] == [1.0, 1.0, 0.333]        # share of the bin's steps that drafted


# ----- the per-phase verdict ---------------------------------------------------------------

def _rec(arm: str, repeat: int, tps: list[float], lags: list[int | None] | None = None) -> ResultRecord:
    rows = [{"phase": k, "label": f"{r}/s:10s", "rate": r, "duration_s": 10.0, "window_s": 10.0, "requests": 4,
             "output_throughput": t, "p50_ttft_ms": 10.0 * (k + 1),
             "request_latencies_ms": [[10.0, 5.0, 50.0], [300.0, 5.0, 400.0]],
             "switches": None if lags is None else (1 if lags[k] is not None else 0),
             "worst_lag_steps": None if lags is None else lags[k],
             "worst_lag_s": None if lags is None or lags[k] is None else lags[k] * 0.01}
            for k, (r, t) in enumerate(zip((2.0, 16.0, 2.0), tps, strict=True))]
    return ResultRecord(host="gpu", arm=arm, repeat=repeat, rate=6.6, status="ok",
                        extra={"phases": rows, "phases_spec": "2/s:10s,16/s:10s,2/s:10s",
                               "switching": {"threshold": 8, "switches": []}})


def test_the_envelope_is_adaptive_over_the_best_static_arm_in_each_phase() -> None:
    recs = [_rec("baseline", 1, [100.0, 400.0, 100.0]), _rec("baseline", 2, [100.0, 420.0, 100.0]),
            _rec("eagle3", 1, [150.0, 300.0, 120.0]), _rec("eagle3", 2, [150.0, 300.0, 120.0]),
            _rec("adaptive", 1, [150.0, 390.0, 126.0], [None, 0, 1]),
            _rec("adaptive", 2, [144.0, 410.0, 114.0], [None, 2, 0])]
    p = summarize_phases(recs, slo={"ttft_ms": 200.0})
    assert p is not None and p.arms == ["baseline", "eagle3", "adaptive"]
    assert [r.best_static for r in p.rows] == ["eagle3", "baseline", "eagle3"]
    # medians over repeats: 147 / 150, 400 / 410 (baseline's median), 120 / 120
    assert [r.envelope for r in p.rows] == [0.98, round(400 / 410, 4), 1.0]
    assert (p.worst_lag_steps, p.worst_lag_s, p.threshold) == (2, 0.02, 8)   # the worst over repeats
    assert p.rows[1].cells["adaptive"].worst_lag_steps == 2 and p.rows[0].cells["adaptive"].worst_lag_steps is None
    assert p.rows[0].cells["baseline"].goodput == 0.1        # 1 of each phase's requests met TTFT 200 ms, over 10 s
    doc = phases_doc(p)
    assert doc is not None and doc["worst_lag_steps"] == 2 and doc["phases"][1]["envelope"] == round(400 / 410, 4)
    assert doc["phases"][2]["arms"]["adaptive"]["output_throughput"] == 120.0
    assert summarize_phases([ResultRecord(host="gpu", arm="baseline", extra={})]) is None   # not a phase run


# ----- bounds (issue 55 point 5): a phase list cannot ask for more than a run can hold ------

@pytest.mark.parametrize(("text", "says"), [
    ("1e9/s:60s", "rate 1e+09/s is above"),          # once exhausted memory drawing arrivals
    ("2/s:1e9s", "is longer than"),
    ("50/s:20m,50/s:20m", "about 120002 requests"),   # each phase within bounds, the run not
    ("1/s:1380m,1/s:120m", "the phases last 90000 s"),
])
def test_a_phase_list_past_a_bound_is_refused_naming_the_option_and_the_limit(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_phases(text)
    message = str(err.value)
    assert says in message and "bench --phases" in message and "at most" in message, message


def test_the_bounds_are_named_constants_a_run_can_reach() -> None:
    from specops.bench import phases as module
    from specops.bench.trace import MAX_REQUESTS
    assert module.MAX_ARRIVALS == MAX_REQUESTS and module.MAX_TIMELINE_S == 86_400 and module.MAX_RATE == 10_000
    edge = f"{module.MAX_RATE:g}/s:{MAX_REQUESTS // module.MAX_RATE - 1:g}s"
    assert parse_phases(edge) == [Phase(module.MAX_RATE, MAX_REQUESTS // module.MAX_RATE - 1)]


def test_a_draw_that_runs_past_the_arrival_cap_stops_with_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """gamma:CV with a huge CV draws gaps of exactly 0.0: the loop once never left its phase."""
    monkeypatch.setattr("specops.bench.phases.MAX_ARRIVALS", 50)
    with pytest.raises(ConfigError) as err:
        timeline_of("1/s:10s", "gamma:1000000", seed=1)
    assert "more than 100 arrivals" in str(err.value) and "bench --phases" in str(err.value)
    assert len(timeline_of("2/s:10s", "poisson", seed=1).offsets) < 100   # an ordinary draw is untouched
