"""Issue 13 end to end: `specops tune` against simulated servers, over the real sshd and on
the `local` host. The simulator's noise is off, and every figure tune reads is on its model
clock (held for the client's declared refills), so what is measured is the model, not this
2-core machine's load; its time scale only sets how long a point takes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from specops.sim import model as M
from tests.support.arms import sim_inventory
from tests.support.deploy import TUNE_TIMEOUT_S, run_cli

SMALL = ["--concurrency", "1,2,4,8,16", "--input-len", "32", "--output-len", "64"]
QUIET_SIM = {"time_scale": 0.005, "noise": 0}


def commented_inventory(tmp_path: Path, entry: dict, *, ref: str = "v0.5.10.post1") -> Path:
    path = sim_inventory(tmp_path, entry, sim=QUIET_SIM, sglang_ref=ref)
    text = path.read_text().replace("hosts:\n", "# lab inventory: keep this comment\nhosts:\n", 1)
    text = text.replace("    threshold: 8\n", "    threshold: 8   # too high, says the report\n")
    path.write_text(text)
    return path


def tune_doc(out: Path) -> dict:
    return json.loads((out / "tune.json").read_text())


def measured_threshold(out: Path) -> int:
    """The threshold the measured baseline/EAGLE-3 points imply, read from results.csv apart
    from tune's code: the largest level at and below which EAGLE-3 was at least as fast (at a
    closed-loop level the running batch is the level)."""
    with open(out / "results.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["arm"] in ("baseline", "eagle3") and r["output_throughput"]]
    tput = {(r["arm"], int(r["concurrency"])): float(r["output_throughput"]) for r in rows}
    best = 0
    for level in sorted({c for _, c in tput}):
        if ("eagle3", level) not in tput or ("baseline", level) not in tput:
            continue
        if tput["eagle3", level] < tput["baseline", level]:
            break
        best = level
    return best


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_over_ssh_finds_the_models_threshold_verifies_and_writes_it(tmp_path: Path, sshd) -> None:
    inv = commented_inventory(tmp_path, sshd.host_entry(5, workdir=str(tmp_path / "w")))
    before = inv.read_text()
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), *SMALL, "--write", "--emit", "--candidates", "1",
                  "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "points if the first threshold verifies" in res.output and "at most" in res.output   # the plan first
    assert "for each level a candidate falls short at" in res.output
    assert tune_doc(out)["settings"]["candidates"] == 1   # the chosen threshold verified: no neighbour needed
    assert "rule: threshold = p90 of the server's running batch" in res.output
    result = tune_doc(out)["result"]
    assert result["status"] == "verified"
    # The simulator measures on its model clock, so the points are the model's, not the load's.
    # The model's steady state implies M.implied_threshold() (5), where EAGLE-3 leads by 2.3%;
    # a 64-token output wastes part of each request's last verify step, which costs EAGLE-3
    # about 2%, so the measured points may imply one less. tune must pick what they imply.
    threshold = measured_threshold(out)
    assert result["threshold"] == threshold, result
    assert abs(threshold - M.implied_threshold()) <= 1, threshold
    assert result["bracket"] == [4, 8] and result["fine_levels"] == [5, 6, 7]
    # --emit: the verified schedule in every engine route's form, on the terminal and in tune.json
    assert result["schedule"]["text"] == f"1+: 3, {threshold + 1}+: 0"
    assert f"schedule (running batch: draft steps): 1+: 3, {threshold + 1}+: 0" in res.output
    assert f"--speculative-num-steps 3 --speculative-disable-batch-threshold {threshold}\n" in res.output
    assert "--speculative-adaptive --speculative-adaptive-config adaptive.json" in res.output
    assert [f["route"].split(" (")[0] for f in result["forms"]] == ["SGLang <= 0.5.13", "SGLang >= 0.5.14",
                                                                    "vLLM >= 0.32.0"]
    assert f'"num_speculative_tokens_per_batch_size":[[1,{threshold},3],[{threshold + 1},64,0]]' in res.output
    # --write changed that one line, comments and all the rest kept
    changed = [(a, b) for a, b in zip(before.splitlines(), inv.read_text().splitlines(), strict=True) if a != b]
    assert [(a.strip(), b.strip()) for a, b in changed] == [
        ("threshold: 8   # too high, says the report", f"threshold: {threshold}   # too high, says the report")]
    assert before.startswith("# lab inventory") or "# lab inventory" in inv.read_text()
    # evidence: the Tuning section, summary.json, and running-batch figures on every point
    report = (out / "report.md").read_text()
    assert "## Tuning" in report and "running batch p50/p90" in report and "verified" in report
    assert json.loads((out / "summary.json").read_text())["tuning"]["threshold"] == threshold
    assert "<h2>Tuning</h2>" in (out / "report.html").read_text()
    with open(out / "results.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(r["running_req_p50"] and r["running_req_p90"] for r in rows)
    assert {r["server_accept_length"] != "" for r in rows if r["arm"] == "eagle3"} == {True}
    assert not list((tmp_path / "w/.specops/servers").glob("*.json")), "tune stops what it launched"


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_from_a_run_reuses_its_points_and_a_small_budget_stops_partial(tmp_path: Path) -> None:
    inv = commented_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    run = tmp_path / "bench"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,4,16",
                  "--repeats", "1", "--input-len", "32", "--output-len", "64", "--out", str(run))
    assert res.exit_code == 0, res.output
    before = inv.read_text()
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--from", str(run), "--budget-minutes", "0.05",
                  "--write", "--out", str(out))
    assert res.exit_code == 1, res.output
    # the bracket [4, 16] holds 11 levels: bisected, and its first round does not fit the budget
    assert "budget reached: the bisect c=8 phase" in res.output and "not written" in res.output
    result = tune_doc(out)["result"]
    assert result["status"] == "partial" and result["reused_from"] == str(run)
    assert result["phases"] == [] and result["bracket"] == [4, 16]
    assert "provisional threshold" in result["message"]
    reused = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(reused) == 6 and all((r.get("extra") or {}).get("reused_from") == str(run) for r in reused)
    assert inv.read_text() == before
    assert "## Tuning" in (out / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_from_a_run_measures_every_point_as_often_as_typed_and_refuses_other_settings(tmp_path: Path) -> None:
    """`tune --from RUN --repeats auto:3` on the real patch route (2026-12-06) ran every point it
    measured once, the run's count, and said nothing: the run's settings replaced every option
    typed. A typed --repeats is how often tune measures every point: its own, and the run's,
    which get the repeats they lack (the same run later rejected a threshold against EAGLE-3's
    single run record); a typed setting the run's points were measured otherwise with
    (--num-prompts, --concurrency, ...) would make tune's points incomparable with them:
    refused, naming both, before anything runs."""
    inv = commented_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    run = tmp_path / "bench"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,4,16",
                  "--repeats", "1", "--num-prompts", "16", "--input-len", "32", "--output-len", "64", "--out", str(run))
    assert res.exit_code == 0, res.output
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--from", str(run), "--repeats", "2",
                  "--candidates", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    doc = tune_doc(out)
    settings = doc["settings"]
    assert settings["repeats"] == 2, settings
    assert (settings["num_prompts"], settings["input_len"], settings["output_len"]) == (16, 32, 64), settings
    assert doc["result"]["phases"][0] == {"name": "coarse", "arms": ["baseline", "eagle3"], "levels": [1, 4, 16],
                                          "repeats": 2, "points": 6, "seconds": doc["result"]["phases"][0]["seconds"]}
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by_point: dict[tuple[str, int], dict[int, bool]] = {}
    for r in records:
        by_point.setdefault((r["arm"], r["concurrency"]), {})[r["repeat"]] = "reused_from" in (r.get("extra") or {})
    # every point of both runs twice: the run's own record (repeat 0) and the one tune added
    assert {k: v for k, v in by_point.items() if k[0] in ("baseline", "eagle3") and k[1] in (1, 4, 16)} == \
        {(a, c): {0: True, 1: False} for a in ("baseline", "eagle3") for c in (1, 4, 16)}, by_point
    assert all(len(reps) == 2 for reps in by_point.values()), by_point
    before = inv.read_text()
    for typed, shown in ((["--num-prompts", "32"], "--num-prompts 16"), (["--concurrency", "1,4,16,64"], "--concurrency 1,4,16"),
                         (["--input-len", "128"], "--input-len 32")):
        other = tmp_path / f"tune-{typed[0].strip('-')}"
        res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--from", str(run), *typed, "--out", str(other))
        assert res.exit_code == 2, res.output
        said = " ".join(res.output.split())
        assert f"--from {run}" in said and shown in said and " ".join(typed) in said, said
        assert not other.exists()
    # typed as the run measured them: accepted (an option typed to its run's value is no clash)
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--from", str(run), "--num-prompts", "16",
                  "--concurrency", "1,4,16", "--budget-minutes", "0.05", "--out", str(tmp_path / "tune-same"))
    assert res.exit_code == 1 and tune_doc(tmp_path / "tune-same")["settings"]["repeats"] == 1, res.output
    assert inv.read_text() == before


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_on_a_native_tree_tunes_tiers_that_beat_the_threshold_config(tmp_path: Path) -> None:
    inv = commented_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, ref="v0.5.16")
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), *SMALL, "--write", "--emit", "--out", str(out))
    assert res.exit_code == 0, res.output
    result = tune_doc(out)["result"]
    assert result["status"] == "verified" and result["tiers_verdict"]["ok"], result
    # the verified tiers are the schedule --emit prints; the patch threshold cannot say a 1-step tier
    assert result["schedule"]["tiers"] == {k: v for k, v in result["tiers"].items()}
    assert "not expressible: the patch drafts one step count" in res.output
    assert all(r is not None and r >= 0.95 for r in result["tiers_verdict"]["ratios"].values())
    assert max(result["default_comparison"]["ratios"].values()) > 1.05   # beats the two-tier config somewhere
    tiers = {int(k): v for k, v in result["tiers"].items()}
    assert tiers[1] == 3 and 1 in tiers.values() and tiers[max(tiers)] == 0
    written = yaml.safe_load(inv.read_text())["vars"]["arms"]["adaptive"]
    assert written["threshold"] == result["threshold"] and written["tiers"] == tiers
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {r["mechanism"] for r in records if r["arm"] == "adaptive-tiers"} == {"native-adaptive"}


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_tune_writes_no_schedule_from_arms_on_different_attention_backends(tmp_path: Path) -> None:
    """Issue 54: where the arms ran different attention backends (a CPU host's Triton-interpreted
    EAGLE against torch_native), their ratio measures the backends, so tune reports what it
    found and --write leaves hosts.yaml as it was, saying why."""
    inv = commented_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    data = yaml.safe_load(inv.read_text())
    for arm in ("eagle3", "adaptive"):
        data["vars"]["arms"][arm]["extra_args"] = ["--attention-backend", "triton"]
    inv.write_text(yaml.safe_dump(data))
    run = tmp_path / "bench"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", *SMALL,
                  "--repeats", "1", "--out", str(run))
    assert res.exit_code == 0, res.output
    assert "attention_backend differs between arms" in (run / "report.md").read_text()
    before = inv.read_text()
    out = tmp_path / "tune"
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--from", str(run), "--candidates", "1",
                  "--write", "--out", str(out))
    result = tune_doc(out)["result"]
    assert result["status"] == "verified", result   # the simulator's backends cost the same: it verifies
    assert result["written"] is None and inv.read_text() == before
    assert any("attention_backend differs between arms" in w for w in result["unfair"]), result
    assert "not written: host gpu: attention_backend differs between arms: baseline=unset, eagle3=triton" \
        in res.output, res.output
    assert "tune writes no schedule from such arms" in res.output
