"""Issue 24 end to end on the simulator (the `local` connection, no sshd): the envelope
headline, the speculation tax, SLO goodput and the objective, each checked against values
computed here from results.jsonl alone, apart from the report's code."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from specops.decide.tune import Levels, choose_threshold
from specops.records import store
from specops.records.schema import ResultRecord
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

#: one worker builds the module's fixtures once (two would each build them)
pytestmark = pytest.mark.xdist_group("goodput")

QUIET_SIM = {"time_scale": 0.005, "noise": 0}
SLO = {"ttft_ms": 50.0, "tpot_ms": 30.0}
POINTS = ["--input-len", "32", "--output-len", "64"]


def records(run: Path) -> list[ResultRecord]:
    return store.load_results(run)


def median_of(recs: list[dict[str, Any]], arm: str, c: int, value) -> float:
    return statistics.median(value(r) for r in recs if r.arm == arm and r.concurrency == c and r.status == "ok")


def goodput(rec: dict[str, Any]) -> float:
    met = [lat for lat in rec.extra["request_latencies_ms"] if lat[0] <= SLO["ttft_ms"] and lat[1] <= SLO["tpot_ms"]]
    return len(met) / rec.duration_s


def attainment(rec: dict[str, Any]) -> float:
    lat = rec.extra["request_latencies_ms"]
    return sum(1 for x in lat if x[0] <= SLO["ttft_ms"] and x[1] <= SLO["tpot_ms"]) / (len(lat) + rec.failed)


def tps(rec: dict[str, Any]) -> float:
    return rec.output_throughput


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> Path:
    """The three arms at c=1,4,16, two repeats, with an SLO on the command line; the shipped
    adaptive threshold (8) is too high, so the envelope has a dip at c=4..8 and c=16 is above it."""
    tmp = tmp_path_factory.mktemp("goodput")
    inv = sim_inventory(tmp, {"connection": "local", "workdir": str(tmp / "w")}, sim=QUIET_SIM)
    out = tmp / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--concurrency", "1,4,16", "--repeats", "2", *POINTS,
                  "--slo", "ttft_ms=50,tpot_ms=30", "--gpu-hour-cost", "2.5", "--out", str(out))
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.slow
def test_envelope_and_speculation_tax_match_results_jsonl(sim_run: Path) -> None:
    recs = records(sim_run)
    doc = json.loads((sim_run / "summary.json").read_text())
    assert doc["schema"] == "specops.summary/2" and doc["objective"] == "throughput"
    (host,) = doc["hosts"]
    envelope = {c: median_of(recs, "adaptive", c, tps) / max(median_of(recs, "baseline", c, tps),
                                                              median_of(recs, "eagle3", c, tps)) for c in (1, 4, 16)}
    got = {e["concurrency"]: e["ratio"] for e in host["envelope"]["levels"]}
    assert got == pytest.approx(envelope)
    worst = min(envelope, key=lambda c: envelope[c])
    assert host["envelope"]["worst"] == {"concurrency": worst, "ratio": pytest.approx(envelope[worst])}
    assert host["envelope"]["mean"] == pytest.approx(statistics.fmean(envelope.values()))
    # the adaptive arm's records carry its drafting evidence (the simulator logs the patched
    # server's transition lines): the tax is taken where drafting was off for >= 90% of the point
    off = [c for c in (1, 4, 16) if median_of(recs, "adaptive", c, lambda r: r.drafting_off_share) >= 0.9]
    assert off == [16]
    assert median_of(recs, "adaptive", 1, lambda r: r.drafting_off_share) == 0.0
    tax = median_of(recs, "adaptive", 16, tps) / median_of(recs, "baseline", 16, tps)
    assert host["speculation_tax"]["source"] == "drafting_off"
    assert host["speculation_tax"]["levels"] == [{"concurrency": 16, "ratio": pytest.approx(tax)}]
    report = (sim_run / "report.md").read_text()
    assert (f"adaptive vs the better of baseline and EAGLE-3: worst {envelope[worst]:.3f}x at c={worst}, "
            f"mean {statistics.fmean(envelope.values()):.3f}x over 3 levels") in report
    assert (f"speculation tax (adaptive / baseline where drafting is off): {tax:.3f}x at c=16 (levels where "
            "the records say drafting was off for >= 90% of the point)") in report
    assert f"worst {envelope[worst]:.3f}x at c={worst}" in (sim_run / "report.html").read_text()


@pytest.mark.slow
def test_goodput_and_attainment_per_point_match_results_jsonl(sim_run: Path) -> None:
    recs = records(sim_run)
    assert all(len(r.extra["request_latencies_ms"]) == r.completed for r in recs)
    doc = json.loads((sim_run / "summary.json").read_text())
    assert doc["slo"] == SLO and doc["settings"]["slo"] == SLO
    points = {(p["arm"], p["concurrency"]): p for p in doc["hosts"][0]["points"]}
    for (arm, c), p in points.items():
        assert p["goodput"] == pytest.approx(median_of(recs, arm, c, goodput)), (arm, c)
        assert p["slo_attainment"] == pytest.approx(median_of(recs, arm, c, attainment)), (arm, c)
    # the SLO bites: EAGLE-3 at c=16 misses the TPOT limit for most requests, baseline does not
    assert points[("eagle3", 16)]["slo_attainment"] < 0.5 < points[("baseline", 16)]["slo_attainment"]
    # $2.5 per GPU-hour, one GPU per simulated arm
    for (arm, c), p in points.items():
        assert p["cost_per_mtok"] == pytest.approx(2.5 * 1e6 / (3600 * median_of(recs, arm, c, tps))), (arm, c)
    assert (sim_run / "plots" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    report = (sim_run / "report.md").read_text()
    assert "| goodput req/s | SLO met | $ / 1M output tok |" in report
    assert "objective: throughput (output tok/s); SLO TTFT <= 50 ms and TPOT <= 30 ms" in report


@pytest.mark.slow
def test_report_and_tune_give_one_threshold_on_the_simulated_run(sim_run: Path) -> None:
    recs = store.load_results(sim_run)
    doc = json.loads((sim_run / "summary.json").read_text())
    tuned = choose_threshold(Levels.of(recs, "gpu"))
    assert doc["hosts"][0]["recommended_threshold"] == tuned.threshold == 4
    assert doc["hosts"][0]["threshold_unit"] == "running batch"
    assert "recommended threshold: 4 (speculate while the running batch is <= 4)" in doc["headline"]


@pytest.mark.slow
def test_objective_goodput_with_the_hosts_slo_var(tmp_path: Path) -> None:
    """`slo` in hosts.yaml stands in for --slo; --objective goodput moves the crossover to
    where EAGLE-3's goodput, not its throughput, falls below baseline's."""
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM,
                        slo={"ttft_ms": 50, "tpot_ms": 30}, gpu_hour_cost=4.0)
    out = tmp_path / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,16",
                  "--repeats", "1", *POINTS, "--objective", "goodput", "--out", str(out))
    assert res.exit_code == 0, res.output
    recs = records(out)
    doc = json.loads((out / "summary.json").read_text())
    assert doc["objective"] == "goodput" and doc["slo"] == SLO
    assert doc["settings"]["gpu_hour_cost"] == {"gpu": 4.0}    # the hosts.yaml var, per host
    assert all(p["cost_per_mtok"] is not None for p in doc["hosts"][0]["points"])
    ratio = {c: median_of(recs, "eagle3", c, goodput) / median_of(recs, "baseline", c, goodput) for c in (1, 16)}
    assert ratio[1] > 1 > ratio[16]
    frac = (ratio[1] - 1) / (ratio[1] - ratio[16])
    expected = 2 ** (frac * math.log2(16))
    assert doc["hosts"][0]["crossover"]["value"] == pytest.approx(expected)
    by_tps = {c: median_of(recs, "eagle3", c, tps) / median_of(recs, "baseline", c, tps) for c in (1, 16)}
    on_tps = 2 ** ((by_tps[1] - 1) / (by_tps[1] - by_tps[16]) * 4)
    assert abs(on_tps - expected) > 1   # the objective changed the answer
    assert "objective: goodput (requests/s meeting TTFT <= 50 ms and TPOT <= 30 ms)" in doc["headline"]
    assert "objective: goodput" in (out / "report.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--slo", "ttft=50"], "unknown SLO limit 'ttft' (did you mean 'ttft_ms'?)"),
    (["--slo", "ttft_ms=-1"], "SLO limit ttft_ms must be a positive number of milliseconds"),
    (["--objective", "goodput"], "--objective goodput needs an SLO"),
    (["--gpu-hour-cost", "-1"], "gpu_hour_cost must be a positive number of $ per GPU-hour"),
])
def test_bad_slo_or_objective_is_refused_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *args, "--out", str(tmp_path / "run"))
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "run").exists()


def test_a_bad_slo_var_names_hosts_yaml(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, slo={"tpot": 20})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--out", str(tmp_path / "run"))
    assert res.exit_code == 2, res.output
    assert f"{inv}: vars.slo (host gpu)" in res.output and "unknown SLO limit 'tpot'" in res.output
