"""A calibrated model on a `sim-vllm` host through the real CLI (issue 54 point 4): the host's
servers follow the model file it names (`sim: {model: FILE}`), `specops calibrate` recovers that
file's knobs and crossover from the bench's records, and a bad file stops the bench before any
server starts. Every figure is on the model clock (the simulator's time scale), none on the
machine's speed."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from specops.decide.calibrate import predicted_tps
from specops.sim import model as M
from specops.sim import modelfile
from specops.sim.testing import free_ports
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli
from tests.support.vllm_trees import vllm_tree  # noqa: F401 - fixture: the cached tree, laid out once

#: a model far from the demo's: steps of a CPU-sized engine, a lower accept length falling faster
KNOWN = M.ModelParams(baseline_step_ms=30.0, baseline_step_ms_per_req=3.0, baseline_ceiling_tok_s=250.0,
                      eagle_step_ms=45.0, eagle_step_ms_per_req=10.0, eagle_ceiling_tok_s=180.0,
                      accept_len_bs1=2.6, accept_decay_per_doubling=0.05, accept_len_floor=2.0, prefill_step_ms=20.0)
REPO = Path(__file__).resolve().parents[2]
LEVELS = "1,2,4,8,16,32"
INPUT_LEN, OUTPUT_LEN = 16, 32


def _bench(tmp: Path, model: Path) -> tuple[int, str, Path]:
    base, eagle = free_ports(2)
    entry = {"connection": "local", "workdir": str(tmp / "w"), "python": sys.executable, "device": "cpu"}
    inv = sim_inventory(tmp, entry, engine="sim-vllm", max_running_requests=32,
                        arms={"baseline": {"port": base}, "eagle3": {"port": eagle}},
                        sim={"time_scale": 0.01, "noise": 0, "model": str(model)})
    out = tmp / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", LEVELS,
                  "--repeats", "1", "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
                  "--num-prompts", "32", "--out", str(out))
    return res.exit_code, res.output, out


@pytest.fixture(scope="module")
def known_run(tmp_path_factory: pytest.TempPathFactory, vllm_tree: Path) -> Path:  # noqa: F811
    tmp = tmp_path_factory.mktemp("calibrated")
    code, output, out = _bench(tmp, modelfile.write(tmp / "known.json", KNOWN))
    assert code == 0, output
    return out


def _points(run: Path) -> dict[tuple[str, int], dict]:
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if x.strip()]
    return {(r["arm"], int(r["concurrency"])): r for r in rows}


@pytest.mark.slow
def test_a_sim_host_serves_the_figures_of_its_model(known_run: Path) -> None:
    points = _points(known_run)
    assert len(points) == 12 and all(r["simulated"] and r["failed"] == 0 for r in points.values())
    for (arm, c), r in points.items():
        expected = predicted_tps(KNOWN, arm, c, INPUT_LEN, OUTPUT_LEN)  # type: ignore[arg-type]
        default = predicted_tps(M.DEFAULT_PARAMS, arm, c, INPUT_LEN, OUTPUT_LEN)  # type: ignore[arg-type]
        assert r["output_throughput"] == pytest.approx(expected, rel=0.05), (arm, c)
        assert abs(r["output_throughput"] - default) > 0.2 * default, (arm, c)  # not the demo's figures
        if arm == "eagle3":
            assert r["server_accept_length"] == pytest.approx(M.accept_length(c, params=KNOWN), rel=0.06), c


@pytest.mark.slow
def test_calibrate_recovers_the_knobs_and_the_crossover(known_run: Path, tmp_path: Path) -> None:
    res = run_cli("calibrate", "--from", str(known_run), "--out", str(tmp_path / "fit.json"), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    fitted = asdict(modelfile.load(tmp_path / "fit.json"))
    for knob in ("baseline_step_ms", "baseline_step_ms_per_req", "baseline_ceiling_tok_s", "eagle_step_ms",
                 "eagle_step_ms_per_req", "eagle_ceiling_tok_s", "accept_len_bs1"):
        assert fitted[knob] == pytest.approx(getattr(KNOWN, knob), rel=0.08), knob
    assert 0 < fitted["accept_decay_per_doubling"] < 0.1  # the accept length falls with the batch
    truth = M.predicted_crossover([int(c) for c in LEVELS.split(",")], params=KNOWN)
    assert doc["measured_crossover"]["above"] == doc["predicted_crossover"]["above"] == truth
    for lv in doc["levels"]:
        assert lv["predicted_ratio"] == pytest.approx(lv["measured_ratio"], rel=0.03), lv["concurrency"]


@pytest.mark.slow
def test_a_bad_model_file_stops_the_bench_before_any_server(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": modelfile.FORMAT, "knobs": {"eagle_step_ms_per_req": -1}}))
    code, output, out = _bench(tmp_path, bad)
    assert code != 0
    assert "bad.json" in output and "field 'knobs.eagle_step_ms_per_req' must be >= 0.0" in " ".join(output.split())
    assert not (out / "results.jsonl").exists()
    assert not list((tmp_path / "w").glob(".specops/servers/*.json"))
    assert not list((tmp_path / "w").glob(".specops/logs/*.log*"))


@pytest.mark.slow
def test_the_simulator_calibrated_from_the_real_run_finds_its_crossover(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    """bench/real_crossover.py --calibrate-from: the committed real vLLM run (tests/data/real_vllm_run)
    calibrated, then a sim-vllm host naming that model benched over the same levels: its crossover
    within one level of the real one (bench/RESULTS.md, "Simulator calibrated from real vLLM")."""
    proc = subprocess.run([sys.executable, str(REPO / "bench/real_crossover.py"), "--calibrate-from",
                           str(REPO / "tests/data/real_vllm_run"), "--no-results", "--work", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])["calibrated_sim"]
    assert out["real_crossover"]["above"] == 32  # the records' own
    assert out["sim_crossover"]["kind"] == "interpolated" and out["sim_levels_from_real"] <= 1
    assert set(out["sim_ratio"]) == set(out["real_ratio"]) == {"1", "2", "4", "8", "16", "32"}
    assert out["sim_ratio"]["1"] > 1.2 and out["sim_ratio"]["32"] < 0.9
    assert not list((tmp_path / "w").glob(".specops/servers/*.json"))  # the bench stopped what it launched


@pytest.mark.slow
def test_sglangs_face_follows_the_model_too(tmp_path: Path) -> None:
    """The `sim` engine (SGLang's face) reads the same knob: its points follow the file's model."""
    model = modelfile.write(tmp_path / "known.json", KNOWN)
    base, eagle = free_ports(2)
    entry = {"connection": "local", "workdir": str(tmp_path / "w"), "python": sys.executable, "device": "cpu"}
    inv = sim_inventory(tmp_path, entry, engine="sim", max_running_requests=32,
                        arms={"baseline": {"port": base}, "eagle3": {"port": eagle}},
                        sim={"time_scale": 0.01, "noise": 0, "model": str(model)})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,16",
                  "--repeats", "1", "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
                  "--num-prompts", "16", "--out", str(tmp_path / "run"))
    assert res.exit_code == 0, res.output
    for (arm, c), r in _points(tmp_path / "run").items():
        expected = predicted_tps(KNOWN, arm, c, INPUT_LEN, OUTPUT_LEN)  # type: ignore[arg-type]
        assert r["output_throughput"] == pytest.approx(expected, rel=0.05), (arm, c)
