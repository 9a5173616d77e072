"""bench/real_crossover.py --small on real vLLM 0.32.0: the whole loop (deploy, bench, tune
--write, bench, verify, stop) through the specops CLI with the tier's tiny models, two levels of
two short requests. Structure only: which keys its last line carries, that every command ran and
the servers are gone; never a throughput ratio (CI's machine is loaded, and the tiny models
make EAGLE-3 lose everywhere: that is what the heavy set is for). Its kept records (--keep-records)
calibrate the simulator (`specops calibrate --from`), as a user does from a run of theirs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specops.sim.knobs import sim_options
from tests.support.real_sglang import NEWER_ENGINES_GROUP
from tests.support.real_sglang.crossover import check_loop_ran, check_tune_kept_its_word
from tests.support.real_sglang.models import ensure_vllm_models
from tests.support.real_sglang.runtime import VLLM, VLLM_RELEASE, ensure_runtime

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(NEWER_ENGINES_GROUP), pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
ROUTES = {"vllm", "sglang-patch", "sglang-native"}


def _section() -> str:
    """The script's own section of bench/RESULTS.md (other sections may change meanwhile)."""
    text = (REPO / "bench" / "RESULTS.md").read_text()
    start = text.find(real_crossover_heading())
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def real_crossover_heading() -> str:
    return f"## Real crossover (vLLM {VLLM_RELEASE} on CPU)"


def test_the_small_configuration_runs_the_loop_and_reports_every_route(tmp_path: Path) -> None:
    ensure_runtime(VLLM)
    ensure_vllm_models()
    work = tmp_path / "work"
    section = _section()
    records = tmp_path / "records"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "real_crossover.py"), "--small", "--route", "vllm",
                           "--work", str(work), "--keep-records", str(records)],
                          capture_output=True, text=True, timeout=1700, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc) == ROUTES, doc.keys()
    for route in ("sglang-patch", "sglang-native"):
        assert isinstance(doc[route]["infeasible"], str) and doc[route]["infeasible"], doc[route]
    vllm = doc["vllm"]
    check_loop_ran(vllm)
    tune = check_tune_kept_its_word(vllm, work)
    if tune["status"] == "verified":
        assert vllm["tuned_schedule"]["vllm"]["route"].startswith(f"vLLM >= {VLLM_RELEASE}"), vllm["tuned_schedule"]
    # the points are vLLM's: EAGLE-3's accept length from its own counters
    before = [json.loads(x) for x in (work / "bench-before" / "results.jsonl").read_text().splitlines()]
    assert before and not any(r.get("simulated") for r in before), before
    assert all(r["server_accept_length"] > 1 for r in before if r["arm"] == "eagle3"), before
    worst = vllm["adaptive_worst_envelope"]
    assert worst is None or (worst["concurrency"] in (1, 2) and worst["ratio"] > 0), worst
    assert vllm["verify"] is True, vllm.get("verify_checks")
    assert all(a and a > 1 for a in vllm["verify_accept_length"].values()), vllm["verify_accept_length"]
    # --small leaves the results file alone, and stop left no server behind
    assert _section() == section
    assert not list((work / "w" / ".specops" / "servers").glob("*.json"))
    _check_kept_records(vllm["records"], records, tmp_path)


def _check_kept_records(kept: list[str], records: Path, tmp_path: Path) -> None:
    """--keep-records (issue 54 point 4): the first bench's small files and vLLM's step times by
    batch, which `specops calibrate --from` reads into a model file a sim host accepts."""
    assert {"results.jsonl", "manifest.json", "summary.json", "steps.json", "loadavg.json"} <= set(kept), kept
    assert all((records / name).stat().st_size <= 100_000 for name in kept)
    steps = json.loads((records / "steps.json").read_text())
    assert set(steps) == {"baseline", "eagle3"}
    assert any(shape.endswith("x1") for shape in steps["baseline"]), steps  # plain decode steps
    assert any(shape.endswith("x4") for shape in steps["eagle3"]), steps    # verifies of 3 drafts + 1
    out = tmp_path / "model.json"
    cal = subprocess.run([sys.executable, "-m", "specops", "calibrate", "--from", str(records), "--out", str(out),
                          "--json"], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert cal.returncode == 0, cal.stderr[-3000:]
    levels = json.loads(cal.stdout)["levels"]
    assert [lv["concurrency"] for lv in levels] == [1.0, 2.0]
    assert all(lv["measured_accept"] is not None for lv in levels), levels
    # calibrate shows, beside each level's fit, the engine's logged step of exactly the shapes the
    # run logged. At concurrency 1 every decode step is 1x1 (baseline) or 1x4 (a verify of 3 drafts):
    # always logged. At 2, a 2x1 step needs both requests decoding at once, which a loaded machine
    # may never give 8-token requests on a 1 ms step (CI of 2026-12-06 logged none): shown where logged.
    assert set(levels[0]["logged_step_ms"]) == {"baseline", "eagle3"}, levels[0]
    for lv in levels:
        c = int(lv["concurrency"])
        shapes = {"baseline": f"{c}x1", "eagle3": f"{c}x4"}
        expected = {arm: steps[arm][shape]["median_ms"] for arm, shape in shapes.items() if shape in steps[arm]}
        assert lv["logged_step_ms"] == pytest.approx(expected), (lv, steps)
    assert sim_options({"sim": {"model": str(out)}})[-1] == str(out)  # a file a sim host accepts
