"""Issue 24, context length as an axis, end to end on the simulator (`local` connection):
`--input-len 256,12288` sweeps both lengths beside concurrency in one run, and the report
gives a crossover per length, the long one at a larger concurrency (the simulator's decode
step reads each request's KV cache, which speculation amortises over its accept length:
sim/model.py `context_ms`), plus one plot of crossover against context length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specops.decide.summary import find_crossover
from specops.records import store
from specops.sim import model as M
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

#: one worker builds the module's fixtures once (two would each build them)
pytestmark = pytest.mark.xdist_group("context_axis")

QUIET_SIM = {"time_scale": 0.005, "noise": 0}
LEVELS = (2, 4, 8, 16)
SHORT, LONG, OUT = 256, 12288, 256


def _ratios(recs: list[dict[str, Any]], input_len: int) -> list[tuple[int, float]]:
    """EAGLE-3 over baseline per level at one input length, from results.jsonl alone."""
    tps = {(r.arm, r.concurrency): r.output_throughput for r in recs
           if r.status == "ok" and r.input_len == input_len}
    return [(c, tps[("eagle3", c)] / tps[("baseline", c)]) for c in LEVELS]


@pytest.fixture(scope="module")
def context_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("context")
    inv = sim_inventory(tmp, {"connection": "local", "workdir": str(tmp / "w")}, sim=QUIET_SIM)
    out = tmp / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3",
                  "--concurrency", ",".join(map(str, LEVELS)), "--repeats", "1",
                  "--input-len", f"{SHORT},{LONG}", "--output-len", str(OUT), "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "crossover by context length" in res.output
    return out


@pytest.mark.slow
def test_two_lengths_give_two_crossovers_that_move_as_modelled(context_run: Path) -> None:
    recs = store.load_results(context_run)
    assert sorted({(r.input_len, r.output_len) for r in recs}) == [(SHORT, OUT), (LONG, OUT)]
    assert len(recs) == 2 * 2 * len(LEVELS)   # arms x lengths x levels, one repeat
    doc = json.loads((context_run / "summary.json").read_text())
    assert doc["schema"] == "specops.summary/2"
    assert doc["settings"]["input_len"] == [SHORT, LONG]
    ctx = {c["input_len"]: c for c in doc["contexts"]}
    assert sorted(ctx) == [SHORT, LONG]
    # each length's crossover is what its own records say (computed here, apart from the report)
    for length in (SHORT, LONG):
        want = find_crossover(_ratios(recs, length))
        assert ctx[length]["crossover"]["kind"] == want.kind == "interpolated"
        assert ctx[length]["crossover"]["value"] == pytest.approx(want.value)
    short, long_ = ctx[SHORT]["crossover"], ctx[LONG]["crossover"]
    # the model: the short crossover stays between 4 and 8 (as at the default lengths); the
    # long context's KV read keeps EAGLE-3 ahead past c=8
    assert (short["below"], short["above"]) == (4, 8)
    assert long_["below"] >= 8 and long_["value"] > short["value"] * 1.5
    assert M.predicted_crossover(LEVELS, context=SHORT + OUT // 2) == 8
    assert M.predicted_crossover(LEVELS, context=LONG + OUT // 2) >= 16
    # thresholds follow: the long context's is higher
    assert ctx[LONG]["recommended_threshold"] > ctx[SHORT]["recommended_threshold"]
    # one host entry per length, each with its own points
    assert sorted((h["host"], h["input_len"]) for h in doc["hosts"]) == [("gpu", SHORT), ("gpu", LONG)]
    plot = context_run / "plots" / "crossover_context.png"
    assert plot.is_file() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (context_run / "report.md").read_text()
    assert "## Context length" in report and "plots/crossover_context.png" in report
    assert f"## Results on gpu in={LONG} out={OUT}" in report


@pytest.mark.slow
def test_resume_with_the_lengths_runs_nothing_and_extend_adds_one(context_run: Path, tmp_path: Path) -> None:
    """--resume treats the length list like the concurrency list: the same lengths in another
    order match the run; a new length needs --extend, which keeps the old points."""
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM)
    before = len(store.load_results(context_run))
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--resume", str(context_run),
                  "--input-len", f"{LONG},{SHORT}")
    assert res.exit_code == 0, res.output
    assert len(store.load_results(context_run)) == before
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--resume", str(context_run), "--input-len", "1024")
    assert res.exit_code == 2
    assert "--input-len 1024 differs from the run's --input-len 256,12288" in res.output
    assert "--extend" in res.output


def test_bad_length_list_is_exit_2_naming_the_option(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM)
    for value, option, said in (("0,abc", "--input-len", "--input-len expects comma-separated integers"),
                                ("256,0", "--input-len", "--input-len lengths must be at least 1"),
                                ("8,8", "--output-len", "--output-len lists a length twice")):
        res = run_cli("bench", "--host", "gpu", "-i", str(inv), option, value, "--out", str(tmp_path / "r"))
        assert res.exit_code == 2, res.output
        assert said in res.output, res.output
        assert not (tmp_path / "r" / "results.jsonl").exists()


@pytest.mark.slow
def test_extend_adds_a_length_to_a_one_length_run_and_keeps_its_points(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM)
    run = tmp_path / "run"
    bench = ("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline")
    first = run_cli(*bench, "--concurrency", "1", "--repeats", "1", "--input-len", "32", "--output-len", "16",
                    "--out", str(run))
    assert first.exit_code == 0, first.output
    measured = (run / "results.jsonl").read_text()
    assert "contexts" not in json.loads((run / "summary.json").read_text())
    grown = run_cli(*bench, "--resume", str(run), "--extend", "--input-len", "64")
    assert grown.exit_code == 0, grown.output
    assert "--extend keeps the run's points at --input-len 32 (not in --input-len 64)" in grown.output
    text = (run / "results.jsonl").read_text()
    assert text.startswith(measured)                       # the first point kept, not run again
    assert [(r.input_len, r.concurrency) for r in store.load_results(run)] == [(32, 1), (64, 1)]
    doc = json.loads((run / "summary.json").read_text())
    assert doc["settings"]["input_len"] == [32, 64]
    assert [(c["input_len"], c["crossover"]["kind"]) for c in doc["contexts"]] == [(32, "n/a"), (64, "n/a")]


@pytest.mark.slow
def test_tune_from_a_several_length_run_is_refused_naming_the_lengths(context_run: Path, tmp_path: Path) -> None:
    """tune makes one threshold; from a run of several lengths it says so (exit 2) rather
    than mixing the lengths' points (per-length tuning is not built yet)."""
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, sim=QUIET_SIM)
    res = run_cli("tune", "--host", "gpu", "-i", str(inv), "--from", str(context_run), "--out", str(tmp_path / "t"))
    assert res.exit_code == 2, res.output
    assert f"--input-len {SHORT},{LONG}" in res.output and "tune takes one length" in res.output
    assert not (tmp_path / "t" / "results.jsonl").exists()
