"""`specops bench --phases` end to end on the local simulated host (issue 34 point 2): three
phases (low, high, low) against baseline, EAGLE-3 and the adaptive arm with one timeline;
the adaptive arm switches within one scheduler step of its running batch crossing the
threshold, and the lag and each phase's envelope are in report.md, report.html and
summary.json, the plot over time beside them; other load options, a concurrency phase or
another runner are refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.records import store
from tests.support.arms import arm_vars, sim_inventory
from tests.support.deploy import run_cli

#: every decode step logs its line: the lag is counted in scheduler steps
EVERY_STEP = {"extra_args": ["--decode-log-interval", "1"]}
PHASES = "2/s:4s,16/s:4s,2/s:4s"
COMMON = ["--arms", "baseline,eagle3,adaptive", "--repeats", "1", "--input-len", "32", "--output-len", "32"]


def _inventory(tmp_path: Path) -> Path:
    arms = arm_vars(baseline=EVERY_STEP, eagle3=EVERY_STEP, adaptive=EVERY_STEP)["arms"]
    return sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, arms=arms,
                         sim={"time_scale": 0.02, "noise": 0})


@pytest.mark.slow
def test_three_phases_show_the_adaptive_arm_switching_at_once(tmp_path: Path) -> None:
    inv, out = _inventory(tmp_path), tmp_path / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *COMMON, "--phases", PHASES, "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "phases" in res.output and "2,16,2/s" in res.output        # the table's level column
    recs = {r.arm: r for r in store.load_results(out)}
    assert sorted(recs) == ["adaptive", "baseline", "eagle3"]
    requests = {arm: [p["requests"] for p in r.extra["phases"]] for arm, r in recs.items()}
    assert len({tuple(v) for v in requests.values()}) == 1, requests   # one timeline for every arm
    adaptive = recs["adaptive"].extra
    assert adaptive["phases"][1]["switches"] >= 1                    # drafting went off in the burst
    assert all(s["lag_steps"] <= 1 for s in adaptive["switching"]["switches"]), adaptive["switching"]
    host = json.loads((out / "summary.json").read_text())["hosts"][0]
    phases = host["phases"]
    assert phases["worst_lag_steps"] is not None and phases["worst_lag_steps"] <= 1
    assert phases["worst_lag_s"] is not None and phases["lag"]["worst_steps"] == phases["worst_lag_steps"]
    assert [p["label"] for p in phases["phases"]] == PHASES.split(",")
    envelopes = [p["envelope"] for p in phases["phases"]]
    assert all(e is not None and 0.9 <= e <= 1.1 for e in envelopes), envelopes
    assert phases["phases"][1]["arms"]["eagle3"]["p99_ttft_ms"] > phases["phases"][1]["arms"]["adaptive"]["p99_ttft_ms"]
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    lag = f"worst {phases['worst_lag_steps']} scheduler step(s)"
    for text in (md, page):
        assert "Phases on gpu" in text and lag in text
        assert f"16/s:4s {envelopes[1]:.3f}x" in text                  # the burst phase's envelope
    assert (out / "plots" / "phases.png").stat().st_size > 10_000


@pytest.mark.parametrize(("args", "says"), [
    (["--phases", "2/s:4s", "--rate", "2"], "--phases is the run's whole load"),
    (["--phases", "2/s:4s", "--concurrency", "4"], "--phases is the run's whole load"),
    (["--phases", "2/s:4s,c=8:4s"], "a concurrency phase (c=N) is not supported"),
    (["--phases", "2/s:4s", "--runner", "sglang"], "--phases runs through specops' own client"),
    (["--phases", "2/s:4x"], "phase 1: '2/s:4x'"),
])
def test_bad_phase_options_are_refused_before_anything_runs(tmp_path: Path, args: list[str], says: str) -> None:
    res = run_cli("bench", "--host", "gpu", "-i", str(_inventory(tmp_path)), *COMMON, *args,
                  "--out", str(tmp_path / "run"))
    assert res.exit_code == 2 and says in res.output, res.output
    assert not (tmp_path / "w" / ".specops" / "logs").exists()       # no server was started
