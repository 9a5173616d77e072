"""The simulator's model as a value and a file (issue 54 point 4): ModelParams' defaults are the
demo's constants, a sim host names a file with `sim: {model: FILE}`, and a bad file is refused
with the file and the field named before any server starts."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specops.errors import ConfigError
from specops.sim import model as M
from specops.sim import modelfile
from specops.sim.knobs import UsageError, sim_options
from specops.sim.program import options, split_argv

FITTED = M.ModelParams(baseline_step_ms=30.0, baseline_step_ms_per_req=3.0, baseline_ceiling_tok_s=250.0,
                       eagle_step_ms=45.0, eagle_step_ms_per_req=10.0, eagle_ceiling_tok_s=180.0,
                       accept_len_bs1=2.6, accept_decay_per_doubling=0.05, accept_len_floor=2.0,
                       prefill_step_ms=20.0)


def test_the_default_params_are_the_models_constants() -> None:
    p = M.DEFAULT_PARAMS
    assert (p.baseline_step_ms, p.baseline_step_ms_per_req, p.baseline_ceiling_tok_s) == \
        (M.BASELINE_STEP_MS, M.BASELINE_STEP_MS_PER_REQ, M.BASELINE_CEILING_TOK_S)
    assert (p.eagle_step_ms, p.eagle_step_ms_per_req, p.eagle_ceiling_tok_s) == \
        (M.EAGLE_STEP_MS, M.EAGLE_STEP_MS_PER_REQ, M.EAGLE_CEILING_TOK_S)
    assert (p.accept_len_bs1, p.accept_decay_per_doubling, p.accept_len_floor, p.spec_steps) == \
        (M.EAGLE_ACCEPT_LEN_BS1, M.EAGLE_ACCEPT_DECAY_PER_DOUBLING, M.EAGLE_ACCEPT_LEN_FLOOR, M.DEFAULT_SPEC_NUM_STEPS)


def test_an_arm_steps_by_its_params() -> None:
    """The knobs reach every prediction: the step of each arm, the accept length, prefill, the crossover."""
    for arm in ("baseline", "eagle3"):
        ms, acc = M.ArmModel(arm, params=FITTED).step(4)
        expected_acc = 1.0 if arm == "baseline" else 2.6 - 0.05 * 2
        expected_ms = 30.0 + 3.0 * 4 if arm == "baseline" else max(45.0 + 10.0 * 4, 4 * expected_acc * 1000 / 180.0)
        assert (ms, acc) == pytest.approx((expected_ms, expected_acc))
        assert M.ArmModel(arm).step(4) != M.ArmModel(arm, params=FITTED).step(4)
    assert M.ArmModel("baseline", params=FITTED).step(32)[0] == pytest.approx(32 * 1000 / 250.0)  # the roof
    assert M.prefill_ms(100, FITTED) == pytest.approx(20.0 + 0.02 * 100)
    assert M.predicted_crossover([1, 2, 4, 8, 16, 32], params=FITTED) == 16
    assert M.predicted_crossover([1, 2, 4, 8, 16, 32]) != 16


def test_a_file_round_trips(tmp_path: Path) -> None:
    path = modelfile.write(tmp_path / "m.json", FITTED, {"from": "somewhere"})
    assert modelfile.load(path) == FITTED
    doc = json.loads(path.read_text())
    assert doc["format"] == modelfile.FORMAT and doc["calibration"] == {"from": "somewhere"}
    (tmp_path / "partial.json").write_text(json.dumps({"format": modelfile.FORMAT, "knobs": {"eagle_step_ms": 20}}))
    assert modelfile.load(tmp_path / "partial.json") == replace(M.DEFAULT_PARAMS, eagle_step_ms=20.0)


BAD = [
    ({"format": modelfile.FORMAT, "knobs": {"baseline_step_ms": -3}}, "field 'knobs.baseline_step_ms' must be >= 0.0"),
    ({"format": modelfile.FORMAT, "knobs": {"eagle_ceiling_tok_s": 0}}, "field 'knobs.eagle_ceiling_tok_s' must be > 0.0"),
    ({"format": modelfile.FORMAT, "knobs": {"step_ms": 3}}, "unknown knob 'knobs.step_ms'"),
    ({"format": modelfile.FORMAT, "knobs": {"spec_steps": 2.5}}, "field 'knobs.spec_steps' must be an integer"),
    ({"format": modelfile.FORMAT, "knobs": {"accept_len_bs1": "3"}}, "field 'knobs.accept_len_bs1' must be a number"),
    ({"format": modelfile.FORMAT, "knobs": {"accept_len_bs1": 2.0, "accept_len_floor": 2.5}},
     "field 'knobs.accept_len_floor' (2.5) exceeds 'knobs.accept_len_bs1'"),
    ({"format": "other/1", "knobs": {}}, "field 'format' is 'other/1'"),
    ({"format": modelfile.FORMAT, "knobs": [1]}, "field 'knobs' must be an object"),
    ({"format": modelfile.FORMAT, "knobs": {}, "extra": 1}, "unknown field 'extra'"),
]


@pytest.mark.parametrize("doc, message", BAD, ids=[m.split("'")[1] if "'" in m else m for _, m in BAD])
def test_a_bad_file_is_refused_naming_the_file_and_field(tmp_path: Path, doc: object, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as err:
        modelfile.load(path)
    assert str(path) in str(err.value) and message in str(err.value)
    # through a sim host's vars, as deploy and bench read them
    with pytest.raises(ConfigError, match="bad.json"):
        sim_options({"sim": {"time_scale": 0.05, "model": str(path)}})


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"x\.json: not JSON"):
        modelfile.load(tmp_path / "x.json")
    with pytest.raises(ConfigError, match=r"missing\.json: cannot read it"):
        sim_options({"sim": {"model": str(tmp_path / "missing.json")}})


def test_a_sim_host_passes_the_files_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    modelfile.write(tmp_path / "m.json", FITTED)
    monkeypatch.chdir(tmp_path)
    assert sim_options({"sim": {"time_scale": 0.05, "model": "m.json"}}) == \
        ["--sim-time-scale", "0.05", "--sim-model", str(tmp_path / "m.json")]
    opts = options(split_argv(["--vllm-tree", "t", "--sim-model", str(tmp_path / "m.json")], env={})[0])
    assert opts.params == FITTED
    assert options(split_argv(["--vllm-tree", "t"], env={})[0]).params == M.DEFAULT_PARAMS


def test_the_server_program_refuses_a_bad_file_before_binding(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"format": modelfile.FORMAT, "knobs": {"adaptive_tax": -1}}))
    with pytest.raises(UsageError, match=r"bad\.json: field 'knobs.adaptive_tax'"):
        options(split_argv(["--vllm-tree", "t", "--sim-model", str(tmp_path / "bad.json")], env={})[0])
    proc = subprocess.run([sys.executable, "-m", "specops.sim", "--vllm-tree", str(tmp_path), "--sim-model",
                           str(tmp_path / "bad.json"), "--model", "m", "--port", "1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "bad.json: field 'knobs.adaptive_tax' must be >= 0.0" in proc.stderr
