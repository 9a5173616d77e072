"""Issue 25 ("tune spends less") and issue 24 (tune over a list of context lengths), end to
end against simulated servers on the `local` host: tune takes the points an earlier bench
measured on the same servers and client settings instead of measuring them again (and none
from another configuration), and `--input-len A,B` gives one recommendation per length.
The simulator runs with its noise off, as in test_tune_e2e.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.records import store
from tests.support.arms import sim_inventory
from tests.support.deploy import TUNE_TIMEOUT_S, run_cli

QUIET_SIM = {"time_scale": 0.005, "noise": 0}
LENS = ["--input-len", "32", "--output-len", "64"]


def measured(run: Path) -> list[dict]:
    return [r for r in store.load_results(run) if not r.extra.get("reused_from")]


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_reuses_a_prior_bench_of_the_same_servers_and_nothing_of_another(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM)
    runs = tmp_path / "runs"
    bench = runs / "bench-1"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,4,16",
                  "--repeats", "1", *LENS, "--out", str(bench))
    assert res.exit_code == 0, res.output
    # another configuration first (a different --max-running-requests: other server arguments,
    # so another config hash): it reuses nothing, and a tiny budget stops it before it measures
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--concurrency", "1,4,16", *LENS,
                  "--var", "max_running_requests=48", "--budget-minutes", "0.01", "--out", str(tmp_path / "other"))
    assert res.exit_code == 1, res.output
    assert "reused no points" in res.output and str(runs) in res.output
    assert "points: 0 measured, 0 reused" in res.output
    # the same configuration: the bench's six points are the coarse sweep, not measured again
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--concurrency", "1,4,16", *LENS, "--out", str(out),
                  "--runs-dir", str(runs))
    assert res.exit_code == 0, res.output
    assert "reused 6 points from run bench-1 (6)" in res.output, res.output
    assert "coarse: all 6 points already measured (reused); nothing to run" in res.output
    result = json.loads((out / "tune.json").read_text())["result"]
    assert result["status"] == "verified" and result["reused_points"] == 6
    assert "coarse" not in [p["name"] for p in result["phases"]]
    records = store.load_results(out)
    copied = [r for r in records if r.extra.get("reused_from") == str(bench)]
    assert sorted((r.arm, r.concurrency) for r in copied) == sorted(
        (a, c) for a in ("baseline", "eagle3") for c in (1, 4, 16))
    assert result["measured_points"] == len(measured(out)) == len(records) - 6
    assert f"points: {result['measured_points']} measured, 6 reused" in res.output
    # the bracket [4, 16] holds 11 levels: bisected, a few measured rather than all of them
    assert result["bracket"] == [5, 6] or result["bracket"][1] - result["bracket"][0] == 1
    assert result["bisected"] and len(result["fine_levels"]) < 11
    # --no-reuse measures the coarse sweep again
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--concurrency", "1,4,16", *LENS, "--no-reuse",
                  "--budget-minutes", "0.01", "--out", str(tmp_path / "fresh"), "--runs-dir", str(runs))
    assert "reused" not in res.output.split("points:")[0] and "points: 0 measured, 0 reused" in res.output


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_over_two_context_lengths_recommends_per_length_and_says_which_it_wrote(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM)
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--concurrency", "1,4,8", "--input-len", "4096,32",
                  "--output-len", "64", "--write", "--out", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "tune.json").read_text())
    assert doc["schema"] == "specops.tune-lengths/1"
    rows = {r["input_len"]: r for r in doc["lengths"]}
    assert sorted(rows) == [32, 4096] and all(r["status"] == "verified" for r in rows.values()), rows
    for length, row in rows.items():   # each length is a run directory of its own, with its own report
        sub = Path(row["run_dir"])
        assert sub == out / f"in{length}-out64" and (sub / "report.md").exists()
        assert {r.input_len for r in store.load_results(sub)} == {length}
        assert json.loads((sub / "tune.json").read_text())["result"]["threshold"] == row["threshold"]
    # the table, and the length --write was for: the first given (4096)
    assert "per context length" in res.output and "the length --write is for" in res.output
    assert doc["for_length"] == {"input_len": 4096, "output_len": 64}
    written = doc["written"]
    assert written and "threshold" in written
    adaptive = (tmp_path / "hosts.yaml").read_text()
    assert f"threshold: {rows[4096]['threshold']}" in adaptive
    assert "chosen for input 4096, output 64" in json.loads(
        (out / "in4096-out64" / "tune.json").read_text())["result"]["written"]
    assert "points:" in res.output.splitlines()[-1]
