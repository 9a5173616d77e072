"""`specops report RUN_DIR --objective ... --slo ...`: one simulated run re-rendered under
other objectives from its files alone. Each report names its objective, and its crossover is
the one computed here from results.jsonl for that objective (EAGLE-3 over baseline at c=1
and c=16, interpolated in log2(concurrency) where the ratio falls through 1)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

#: one worker builds the module's fixtures once (two would each build them)
pytestmark = pytest.mark.xdist_group("report_objective")

QUIET_SIM = {"time_scale": 0.005, "noise": 0}
SLO = {"ttft_ms": 50.0, "tpot_ms": 30.0}
LEVELS = (1, 16)


def records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]


def median_of(recs: list[dict[str, Any]], arm: str, c: int, value: Callable[[dict[str, Any]], float]) -> float:
    return statistics.median(value(r) for r in recs if r["arm"] == arm and r["concurrency"] == c and r["status"] == "ok")


def goodput(rec: dict[str, Any]) -> float:
    lat = rec["extra"]["request_latencies_ms"]
    return sum(1 for x in lat if x[0] <= SLO["ttft_ms"] and x[1] <= SLO["tpot_ms"]) / rec["duration_s"]


SCORES: dict[str, Callable[[dict[str, Any]], float]] = {
    "throughput": lambda r: r["output_throughput"],
    "goodput": goodput,
    "tpot": lambda r: r["mean_tpot_ms"],
}


def crossover(recs: list[dict[str, Any]], objective: str) -> float:
    """EAGLE-3 / baseline per level on the objective (TPOT: lower wins, so baseline / EAGLE-3),
    and where the line between c=1 and c=16 crosses 1, in log2(concurrency)."""
    value = SCORES[objective]
    ratio = {c: median_of(recs, "eagle3", c, value) / median_of(recs, "baseline", c, value) for c in LEVELS}
    if objective == "tpot":
        ratio = {c: 1 / r for c, r in ratio.items()}
    assert ratio[1] > 1 > ratio[16], (objective, ratio)   # the data has a crossover to check
    return 2 ** ((ratio[1] - 1) / (ratio[1] - ratio[16]) * math.log2(16))


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """baseline and EAGLE-3 at c=1 and 16, benched on throughput with an SLO."""
    tmp = tmp_path_factory.mktemp("objective")
    inv = sim_inventory(tmp, {"connection": "local", "workdir": str(tmp / "w")}, sim=QUIET_SIM)
    out = tmp / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,16",
                  "--repeats", "1", "--input-len", "32", "--output-len", "64", "--slo", "ttft_ms=50,tpot_ms=30",
                  "--out", str(out))
    assert res.exit_code == 0, res.output
    return out


def report_json(run: Path, *args: str) -> dict[str, Any]:
    res = run_cli("report", str(run), "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.slow
def test_one_run_under_two_objectives_gives_each_its_own_crossover(run: Path) -> None:
    recs = records(run)
    benched = report_json(run)
    assert benched["objective"] == "throughput" and benched["settings"]["objective"] == "throughput"
    on_tps = benched["hosts"][0]["crossover"]["value"]
    assert on_tps == pytest.approx(crossover(recs, "throughput"))

    good = report_json(run, "--objective", "goodput")   # the bench's SLO, from manifest.json
    assert good["objective"] == "goodput" and good["slo"] == SLO
    assert good["settings"]["objective"] == "throughput"   # what the bench did is still said
    on_goodput = good["hosts"][0]["crossover"]["value"]
    assert on_goodput == pytest.approx(crossover(recs, "goodput"))
    assert abs(on_goodput - on_tps) > 1   # the objective moved the crossover
    md = (run / "report.md").read_text()
    assert ("objective: goodput (requests/s meeting TTFT <= 50 ms and TPOT <= 30 ms) (chosen by specops report; "
            "the bench ran with objective throughput)") in md
    assert "objective: goodput" in (run / "report.html").read_text()

    tpot = report_json(run, "--objective", "tpot")
    assert tpot["objective"] == "tpot"
    assert tpot["hosts"][0]["crossover"]["value"] == pytest.approx(crossover(recs, "tpot"))
    assert "objective: TPOT" in (run / "report.md").read_text()

    # without options the run renders as benched again: the files were not changed
    again = report_json(run)
    assert again["objective"] == "throughput" and again["hosts"][0]["crossover"]["value"] == on_tps
    assert "chosen by specops report" not in (run / "report.md").read_text()


@pytest.mark.slow
def test_another_slo_on_the_command_line_recounts_goodput(run: Path) -> None:
    recs = records(run)
    doc = report_json(run, "--objective", "goodput", "--slo", "ttft_ms=100000,tpot_ms=100000")
    assert doc["slo"] == {"ttft_ms": 100000.0, "tpot_ms": 100000.0}
    points = {(p["arm"], p["concurrency"]): p for p in doc["hosts"][0]["points"]}
    for (arm, c), p in points.items():   # a limit nobody misses: every completed request counts
        assert p["slo_attainment"] == 1.0
        assert p["goodput"] == pytest.approx(median_of(recs, arm, c, lambda r: r["completed"] / r["duration_s"]))


@pytest.mark.parametrize("args, message", [
    (["--objective", "goodput"], "--objective goodput needs an SLO"),
    (["--slo", "ttft=5"], "unknown SLO limit 'ttft' (did you mean 'ttft_ms'?)"),
    (["--objective", "speed"], "Invalid value for '--objective'"),
])
def test_bad_objective_or_slo_is_refused_and_changes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    """A run benched without an SLO (hand-written files): refused before any file is written."""
    rows = [{"host": "h", "arm": arm, "concurrency": 1, "repeat": 0, "status": "ok", "output_throughput": tps}
            for arm, tps in (("baseline", 100.0), ("eagle3", 150.0))]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "manifest.json").write_text(json.dumps({"bench": {"objective": "throughput"}}))
    before = sorted(p.name for p in tmp_path.iterdir())
    res = run_cli("report", str(tmp_path), *args)
    assert res.exit_code == 2 and message in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
