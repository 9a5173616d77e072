"""bench/real_crossover.py --small on real vLLM 0.32.0: the whole loop (deploy, bench, tune
--write, bench, verify, stop) through the specops CLI with the tier's tiny models, two levels of
two short requests. Structure only: which keys its last line carries, that every command ran and
the servers are gone; never a throughput ratio (CI's machine is loaded, and the tiny models
make EAGLE-3 lose everywhere: that is what the heavy set is for)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.real_sglang import NEWER_ENGINES_GROUP
from tests.support.real_sglang.models import ensure_vllm_models
from tests.support.real_sglang.runtime import VLLM, VLLM_RELEASE, ensure_runtime

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(NEWER_ENGINES_GROUP), pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
ROUTES = {"vllm", "sglang-patch", "sglang-native"}
STEPS = ("deploy", "bench", "tune", "bench", "verify", "stop")


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
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "real_crossover.py"), "--small", "--work", str(work)],
                          capture_output=True, text=True, timeout=1700, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc) == ROUTES, doc.keys()
    for route in ("sglang-patch", "sglang-native"):
        assert isinstance(doc[route]["infeasible"], str) and doc[route]["infeasible"], doc[route]
    vllm = doc["vllm"]
    assert [c.split()[1] for c in vllm["commands"]] == list(STEPS), vllm["commands"]
    assert vllm["failed_commands"] == [], vllm["failed_commands"]
    ratios = vllm["eagle3_over_baseline"]
    assert set(ratios) == {"1", "2"} and all(isinstance(r, float) and r > 0 for r in ratios.values()), ratios
    assert vllm["crossover"]["kind"] in ("interpolated", "never", "every"), vllm["crossover"]
    assert vllm["tune"]["status"] in ("verified", "unverified", "no-speculation", "partial"), vllm["tune"]
    if vllm["tune"]["status"] == "verified":
        assert vllm["tuned_schedule"]["vllm"] is not None, vllm["tuned_schedule"]
    else:
        assert vllm["tuned_schedule"] is None
    worst = vllm["adaptive_worst_envelope"]
    assert worst is None or (worst["concurrency"] in (1, 2) and worst["ratio"] > 0), worst
    assert vllm["verify"] is True, vllm.get("verify_checks")
    assert all(a and a > 1 for a in vllm["verify_accept_length"].values()), vllm["verify_accept_length"]
    # --small leaves the results file alone, and stop left no server behind
    assert _section() == section
    assert not list((work / "w" / ".specops" / "servers").glob("*.json"))
