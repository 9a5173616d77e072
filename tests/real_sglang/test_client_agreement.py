"""bench/client_agreement.py on a real SGLang server, at its smallest settings: it starts the
tier's plain server, runs specops's builtin client then SGLang's bench_serving (one order:
each bench_serving start costs ~8 s of imports; the script's default runs both orders) at
one closed-loop load and one rate, and prints its figures and, last, one JSON object with
each load's figures, ratios and agreement flag (issue 54, point 1).

Only the structure is checked: the figures are timings of this machine, and a loaded CI
machine must not fail on them (bench/RESULTS.md has the measured agreement). Both clients
must have completed every request and seen the same number of input and output tokens:
that is what makes their figures comparable at all. It runs the patch route's release
(0.5.10.post1) in the newer engines' xdist group, which had the time to spare
(tests/support/real_sglang/__init__.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.real_sglang import NEWER_ENGINES_GROUP
from tests.support.real_sglang.models import TinyModels
from tests.support.real_sglang.runtime import Runtime

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(NEWER_ENGINES_GROUP),
              pytest.mark.timeout(1800)]  # a first run builds the runtime (~4-9 min) in its setup

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "client_agreement.py"
METRICS = {"output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p50_itl_ms"}
SERVER = {"server_ttft_ms", "server_itl_ms", "server_e2e_ms"}


def test_client_agreement_script_prints_both_clients_figures_per_load(real_runtime: Runtime,
                                                                     tiny_models: TinyModels,
                                                                     tmp_path: Path) -> None:
    n = 4
    argv = [sys.executable, str(SCRIPT), "--concurrency", "1", "--rate", "4", "--num-prompts", str(n),
            "--input-len", "16", "--output-len", "8", "--order", "builtin-first", "--nice", str(os.nice(0)), "--workdir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "bs = sglang.bench_serving, bi = specops builtin" in proc.stdout, out[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sglang"] == "0.5.10.post1" and result["order"] == "builtin-first"
    assert isinstance(result["agree_within_5pct"], bool)
    assert set(result["loads"]) == {"c1", "r4"}
    for key, load in result["loads"].items():
        assert load["runs_each"] == 1, key
        assert [o["order"] for o in load["orders"]] == ["builtin then bench_serving"], key
        for client in ("builtin", "bench_serving"):
            figures = load[client]
            assert METRICS <= set(figures), (key, client)
            assert all(isinstance(figures[m], (int, float)) and figures[m] >= 0 for m in METRICS), (key, client)
            assert figures["total_input_tokens"] == n * 16 and figures["total_output_tokens"] == n * 8, (key, client)
        assert set(load["ratio"]) == METRICS and all(isinstance(r, float) for r in load["ratio"].values()), key
        # the server's own means during each client's runs (its /metrics histograms): what tells a
        # client's own share of its TTFT from the server's
        for client in ("builtin", "bench_serving"):
            server = {m: load[client][m] for m in SERVER}
            assert all(isinstance(v, float) and v > 0 for v in server.values()), (key, client, server)
        assert set(load["server_ratio"]) == SERVER and all(isinstance(r, float) for r in load["server_ratio"].values())
        assert isinstance(load["within_5pct"], bool) and isinstance(load["worst_deviation"], float), key
    ends = result["loads"]["r4"]["schedule_end_s"]
    assert isinstance(ends["builtin"], float) and isinstance(ends["bench_serving"], float), ends
