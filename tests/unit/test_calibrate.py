"""`specops calibrate` (issue 54 point 4): the fit's closed forms on exact data, and the committed
records of one real vLLM 0.32.0 run on CPU (tests/data/real_vllm_run, bench/real_crossover.py
--bench-only --keep-records) calibrated into a model that predicts its crossover within one
level. Pure computation over the fixture: nothing here depends on the machine's speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.decide.calibrate import (
    crossover_distance,
    fit_accept,
    fit_line,
    fit_linear_roof,
    fit_roof,
)
from specops.decide.summary import Crossover
from specops.sim import modelfile
from tests.support.deploy import run_cli

REAL_RUN = Path(__file__).resolve().parents[1] / "data" / "real_vllm_run"
LEVELS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def test_the_closed_forms_recover_exact_data() -> None:
    assert fit_line([1, 2, 4, 8], [12, 14, 18, 26]) == pytest.approx((10.0, 2.0))
    work = [c * 1000.0 for c in LEVELS]
    assert fit_roof(work, [w / 125.0 for w in work]) == pytest.approx(125.0)
    steps = [max(30 + 3 * c, w / 200.0) for c, w in zip(LEVELS, work, strict=True)]  # the roof from 16 on
    fit = fit_linear_roof(LEVELS, work, steps)
    assert (fit.fixed_ms, fit.per_req_ms, fit.ceiling_tok_s) == pytest.approx((30.0, 3.0, 200.0))
    assert fit.roof_from == 16.0 and fit.rms_rel_error == pytest.approx(0.0, abs=1e-9)
    line_only = fit_linear_roof(LEVELS, work, [30 + 3 * c for c in LEVELS])
    assert (line_only.fixed_ms, line_only.per_req_ms, line_only.roof_from) == pytest.approx((30.0, 3.0, None))
    assert fit_accept(LEVELS, [2.6 - 0.05 * i for i in range(6)]) == pytest.approx((2.6, 0.05, 2.35))


def test_crossovers_are_counted_in_levels() -> None:
    assert crossover_distance(Crossover("interpolated", 9.8, 8, 16), Crossover("interpolated", 12.0, 8, 16), LEVELS) == 0
    assert crossover_distance(Crossover("interpolated", 9.8, 8, 16), Crossover("interpolated", 6.0, 4, 8), LEVELS) == 1
    assert crossover_distance(Crossover("interpolated", 9.8, 8, 16), Crossover("interpolated", 3.0, 2, 4), LEVELS) == 2
    assert crossover_distance(Crossover("interpolated", 20.0, 16, 32), Crossover("never"), LEVELS) == 1
    assert crossover_distance(Crossover("every", 1.0, None, 1.0), Crossover("never"), LEVELS) == 6


def test_the_real_runs_records_calibrate_to_its_crossover(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    res = run_cli("calibrate", "--from", str(REAL_RUN), "--out", str(out), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    recorded = json.loads((REAL_RUN / "summary.json").read_text())["hosts"][0]["crossover"]
    # the measured crossover is the one the bench's own report found in these records
    assert doc["measured_crossover"]["value"] == pytest.approx(recorded["value"])
    assert (doc["measured_crossover"]["below"], doc["measured_crossover"]["above"]) == \
        (recorded["below"], recorded["above"])
    predicted = doc["predicted_crossover"]
    assert predicted["kind"] == "interpolated"
    levels = [lv["concurrency"] for lv in doc["levels"]]
    assert abs(levels.index(predicted["above"]) - levels.index(recorded["above"])) <= 1
    assert doc["crossover_within_one_level"] is True
    # EAGLE-3 ahead at the lowest level and behind at the highest, measured and predicted
    assert doc["levels"][0]["predicted_ratio"] > 1.2 and doc["levels"][-1]["predicted_ratio"] < 0.9
    # every level's throughput within 15% of the run's, both arms (the run's own noise is ~10%)
    for lv in doc["levels"]:
        for arm in ("baseline", "eagle3"):
            assert lv["predicted_tps"][arm] == pytest.approx(lv["measured_tps"][arm], rel=0.15), (lv["concurrency"], arm)
    # the engine's per-step log is read and shown beside the fit, never above it (the client sees more)
    assert all(lv["logged_step_ms"]["baseline"] < lv["effective_step_ms"]["baseline"] for lv in doc["levels"])
    params = modelfile.load(out)
    assert params.accept_len_bs1 == pytest.approx(doc["levels"][0]["measured_accept"], abs=0.05)
    assert json.loads(out.read_text())["calibration"]["from"] == str(REAL_RUN)


def test_the_words_say_both_crossovers(tmp_path: Path) -> None:
    res = run_cli("calibrate", "--from", str(REAL_RUN), "--out", str(tmp_path / "m.json"))
    assert res.exit_code == 0, res.output
    assert "baseline step:" in res.output and "EAGLE-3 step (3 drafts" in res.output
    assert "crossover: measured c~16.1 (between 16 and 32), predicted c~" in res.output
    assert "within one level" in res.output
    assert f"sim: {{model: {tmp_path / 'm.json'}}}" in res.output


def test_a_run_without_both_arms_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.loads(x) for x in (REAL_RUN / "results.jsonl").read_text().splitlines() if x.strip()]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines if r["arm"] == "baseline"))
    res = run_cli("calibrate", "--from", str(run), "--out", str(tmp_path / "m.json"))
    assert res.exit_code == 2
    assert "calibrate needs baseline and eagle3 measured at 2 levels or more" in res.output
    assert not (tmp_path / "m.json").exists()


def test_a_line_whose_best_intercept_is_negative_is_fitted_through_zero() -> None:
    """CI of stop 59: a small real run's baseline steps rose faster than a line through a
    positive fixed cost, its least-squares intercept came out -0.30 ms, and the model file
    calibrate wrote was refused by the simulator. A step's fixed cost is never below zero, so
    the fit is the best line with intercept and slope both >= 0."""
    batches, steps = [1.0, 2.0, 4.0], [1.0, 2.6, 5.5]
    fixed, per_req = fit_line(batches, steps)
    assert fixed < 0  # the unconstrained optimum, which the step model must not take
    fit = fit_linear_roof(batches, [c * 1000.0 for c in batches], steps)
    assert fit.fixed_ms == 0.0 and fit.per_req_ms > 0
    # the best line through zero: sum(w x y) / sum(w x^2) with w = 1 / y^2
    best = sum(x / y for x, y in zip(batches, steps, strict=True)) / sum((x / y) ** 2 for x, y in zip(batches, steps, strict=True))
    assert fit.roof_from is None and fit.per_req_ms == pytest.approx(best)


def test_calibrate_never_writes_a_model_file_the_simulator_refuses(tmp_path: Path) -> None:
    """The writer checks the knobs as the reader does, so a file calibrate (or anything) writes
    is one `sim: {model: FILE}` accepts; a bad knob is refused before the file exists."""
    from dataclasses import replace

    from specops.sim.model import DEFAULT_PARAMS

    out = tmp_path / "model.json"
    with pytest.raises(modelfile.ModelFileError, match=r"knobs\.baseline_step_ms' must be >= 0.0"):
        modelfile.write(out, replace(DEFAULT_PARAMS, baseline_step_ms=-0.3))
    assert not out.exists()
    assert modelfile.load(modelfile.write(out, DEFAULT_PARAMS)) == DEFAULT_PARAMS
