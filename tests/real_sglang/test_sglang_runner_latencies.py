"""The `sglang` runner's per-request latencies from real bench_serving (its `--output-details`),
and goodput under an SLO from them, on real SGLang 0.5.10.post1 on this CPU.

Baseline arm only (torch_native attention decodes in milliseconds here; the EAGLE arms take
~1 s a token): deployed over the sshd fixture as tests/real_sglang/test_cpu_host.py does,
then `specops bench --runner sglang --slo ...` and `specops report --slo ...` on its files.
The SLOs are ones no real request can miss (10 minutes) or meet (a microsecond to the first
token), so nothing here depends on how fast this machine is.
"""

from __future__ import annotations

import json
import statistics

import pytest

from tests.support.arms import free_port
from tests.support.deploy import run_cli, write_yaml
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import ensure_runtime
from tests.support.real_sglang.server import arm_profile
from tests.support.standin import STANDIN_VERSION, bare_repo, build_wheels

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group("real_sglang"), pytest.mark.timeout(1800)]

PROMPTS = 3


@pytest.fixture(scope="module")
def baseline_host(tmp_path_factory, sshd):
    python = ensure_runtime().python
    models = ensure_models()
    tmp = tmp_path_factory.mktemp("real-latencies")
    arm = arm_profile("baseline", models.target, port=free_port())
    entry = {**sshd.host_entry(0, workdir=str(tmp / "w")), "engine": "sglang", "device": "cpu"}
    inv = write_yaml(tmp / "hosts.yaml", {"hosts": {"cpu": entry}, "vars": {
        "model": str(models.target), "sglang_repo": f"file://{bare_repo()}", "sglang_ref": f"v{STANDIN_VERSION}",
        "sglang_runtime": str(python), "sglang_install_deps": False,
        # the tier's runtime is CPU torch and stand-in kernels, not the release's pins: the runtime
        # check lists them as warnings (tests/e2e/test_sglang_runtime.py tests its refusal)
        "sglang_allow_runtime_mismatch": True,
        "sglang_pip_args": ["--no-index", "--find-links", str(build_wheels())],
        "max_running_requests": 8, "cuda_graph_max_bs": 8, "arms": {"baseline": arm}}})
    res = run_cli("deploy", "--host", "cpu", "-i", str(inv), "--runs-dir", str(tmp / "runs"))
    try:
        assert res.exit_code == 0, res.output
        yield inv, tmp
    finally:
        run_cli("stop", "--host", "cpu", "-i", str(inv))


def test_real_bench_serving_gives_per_request_latencies_and_goodput(baseline_host) -> None:
    inv, tmp = baseline_host
    out = tmp / "bench"
    res = run_cli("bench", "--host", "cpu", "-i", str(inv), "--arms", "baseline", "--runner", "sglang",
                  "--concurrency", "1,2", "--repeats", "1", "--num-prompts", str(PROMPTS), "--input-len", "8",
                  "--output-len", "4", "--slo", "ttft_ms=600000,tpot_ms=600000", "--keep-servers",
                  "--out", str(out))
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["runner"], r["status"], r["completed"]) for r in records] == [("sglang", "ok", PROMPTS)] * 2
    for rec in records:
        lat = rec["extra"]["request_latencies_ms"]
        assert len(lat) == PROMPTS and "request_latencies_missing" not in rec["extra"], rec["extra"]
        assert all(ttft > 0 and tpot > 0 and e2e >= ttft for ttft, tpot, e2e in lat), lat
        # bench_serving's own mean TTFT is over the same ttfts; its TPOT and E2E also wait for
        # the closing [DONE] line, which the details omit: ours are never above them
        assert statistics.fmean(x[0] for x in lat) == pytest.approx(rec["mean_ttft_ms"], abs=0.01)
        assert statistics.fmean(x[1] for x in lat) <= rec["mean_tpot_ms"] + 0.01
        assert statistics.fmean(x[2] for x in lat) <= rec["mean_e2e_ms"] + 0.01
        assert "ttfts" not in json.loads(rec["raw"])   # the arrays (generated text too) are not kept twice
    doc = json.loads((out / "summary.json").read_text())
    points = {p["concurrency"]: p for p in doc["hosts"][0]["points"]}
    by_c = {r["concurrency"]: r for r in records}
    for c in (1, 2):   # every request met a 10-minute limit
        assert points[c]["slo_attainment"] == 1.0
        assert points[c]["goodput"] == pytest.approx(PROMPTS / by_c[c]["duration_s"])
    assert "goodput and attainment per point" in (out / "report.md").read_text()

    # the same files under an SLO no request meets: goodput 0 measured, not missing
    res = run_cli("report", str(out), "--slo", "ttft_ms=0.001", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["slo"] == {"ttft_ms": 0.001}
    assert [(p["goodput"], p["slo_attainment"]) for p in doc["hosts"][0]["points"]] == [(0.0, 0.0)] * 2
