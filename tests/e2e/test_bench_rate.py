"""`specops bench --rate` end to end on the local simulated host (issue 34, parts 1 and 4):
a rate sweep's crossover and running-batch threshold agree with the concurrency sweep's,
a rate beyond the baseline's capacity is reported as saturated, results carry the rate,
and bad rate options are refused before anything runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support.arms import arm_vars, sim_inventory
from tests.support.deploy import run_cli

#: every decode step logs its running batch, so a point's running-batch figures are exact
EVERY_STEP = {"extra_args": ["--decode-log-interval", "1"]}
COMMON = ["--arms", "baseline,eagle3", "--repeats", "1", "--input-len", "32", "--output-len", "32"]


def _inventory(tmp_path: Path) -> Path:
    arms = arm_vars(baseline=EVERY_STEP, eagle3=EVERY_STEP, adaptive=EVERY_STEP)["arms"]
    return sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, arms=arms)


@pytest.mark.slow
def test_a_rate_sweep_agrees_with_the_concurrency_sweep_and_says_what_saturated(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    closed, opened = tmp_path / "closed", tmp_path / "open"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *COMMON, "--concurrency", "1,2,4,8,16", "--json",
                  "--out", str(closed))
    assert res.exit_code == 0, res.output
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *COMMON, "--rate", "2,4,8/s,16,32", "--json",
                  "--out", str(opened))
    assert res.exit_code == 0, res.output
    by_c = json.loads((closed / "summary.json").read_text())["hosts"][0]
    doc = json.loads((opened / "summary.json").read_text())
    by_rate = doc["hosts"][0]
    assert not any("client settings differ" in w for w in doc["warnings"]), doc["warnings"]  # levels kept apart
    # the same running-batch threshold, within 1, both in the server's own units
    assert by_c["threshold_unit"] == by_rate["threshold_unit"] == "running batch"
    assert abs(by_c["recommended_threshold"] - by_rate["recommended_threshold"]) <= 1, (by_c, by_rate)
    # the crossover in request-rate terms: EAGLE-3 wins up to 8/s and loses by 16/s
    assert by_rate["axis"] == "rate" and by_rate["threshold_rate"] == 8.0
    assert (by_rate["crossover"]["below"], by_rate["crossover"]["above"]) == (8.0, 16.0)
    # 32 req/s of 32 tokens is past the baseline's ~773 tok/s: saturated, and said so
    assert {"arm": "baseline", "rate": 32.0} in by_rate["saturated"]
    assert {"arm": "baseline", "rate": 2.0} not in by_rate["saturated"]
    point = next(p for p in by_rate["points"] if p["arm"] == "baseline" and p["rate"] == 32.0)
    assert point["saturated"] is True
    report = (opened / "report.md").read_text()
    assert "| rate (req/s) |" in report and "SATURATED" in report and "baseline at 32/s" in report
    assert "crossover: rate≈" in report and "EAGLE-3 wins up to rate=8/s" in report
    with open(opened / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["arm"], float(r["rate"])) for r in rows} == {
        (a, x) for a in ("baseline", "eagle3") for x in (2.0, 4.0, 8.0, 16.0, 32.0)}
    assert {r["saturated"] for r in rows if r["arm"] == "baseline" and r["rate"] == "32"} == {"true"}
    manifest = json.loads((opened / "manifest.json").read_text())
    assert manifest["bench"]["rate"] == [2.0, 4.0, 8.0, 16.0, 32.0] and manifest["bench"]["arrival"] == "poisson"
    # a concurrency sweep's files say nothing of rates
    assert "rate" not in json.loads((closed / "manifest.json").read_text())["bench"]
    assert "rate" not in (closed / "results.csv").read_text().splitlines()[0].split(",")


@pytest.mark.parametrize("args, said", [
    (["--rate", "0"], ["bench --rate", "positive finite number"]),
    (["--rate", "abc"], ["bench --rate", "'abc' is not a number of requests per second"]),
    (["--rate", "2", "--arrival", "gamma:-1"], ["bench --arrival", "positive coefficient of variation"]),
    (["--rate", "2", "--concurrency", "4"], ["give --rate (open loops) or --concurrency (closed loops), not both"]),
    (["--arrival", "constant"], ["--arrival shapes the arrivals of --rate"]),
])
def test_bad_rate_options_fail_before_anything_runs(tmp_path: Path, args: list[str], said: list[str]) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *args, "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 2, res.output
    for text in said:
        assert text in res.output, res.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "w").exists()
