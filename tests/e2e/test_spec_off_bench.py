"""Issue 39 point 4 end to end on the simulator: a spec-off arm (the EAGLE-3 server with
drafting off at every batch: native tiers of 0 steps from batch 1 on a 0.5.16 tree, the
dynamic-spec-disable patch's threshold -1 on a 0.5.10.post1 tree the bench playbook patches)
benched beside the true baseline; the report's tax of staying speculation-capable equals the
ratio computed here from results.jsonl, and is the simulator model's tax (the figures are on
its model clock, noise off)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.records import store
from specops.sim import model as M
from specops.sim.testing import free_port
from tests.support.arms import arm_vars, sim_inventory
from tests.support.deploy import run_cli


@pytest.mark.slow
@pytest.mark.parametrize(("engine", "ref", "mechanism"), [
    ("sim", "v0.5.16", "spec-off (native tiers)"),
    ("sim", "v0.5.10.post1", "spec-off (dynamic-spec-disable patch, threshold -1)"),
    ("sim-vllm", "", "spec-off (native schedule)"),
])
def test_spec_off_is_benched_beside_the_baseline_and_its_tax_reported(tmp_path: Path, engine: str, ref: str,
                                                                      mechanism: str) -> None:
    arms = {**arm_vars()["arms"], "spec-off": {"port": free_port()}}
    refs = {"sglang_ref": ref} if ref else {}
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, engine=engine, arms=arms,
                        sim={"time_scale": 0.005, "noise": 0}, **refs)
    out = tmp_path / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,spec-off", "--concurrency", "1,8",
                  "--repeats", "1", "--input-len", "32", "--output-len", "64", "--out", str(out))
    assert res.exit_code == 0, res.output
    recs = store.load_results(out)
    off = {r.concurrency: r for r in recs if r.arm == "spec-off"}
    base = {r.concurrency: r for r in recs if r.arm == "baseline"}
    assert {r.mechanism for r in off.values()} == {mechanism}
    assert all(r.accept_length in (None, 0, 1.0) for r in off.values())   # it never drafted
    if engine == "sim":   # and its own log says so: the patch's transition line, or SGLang's native lines
        assert all(r.drafting_off is True for r in off.values()), [r.to_dict() for r in off.values()]
    ratios = {c: off[c].output_throughput / base[c].output_throughput for c in (1, 8)}
    assert ratios == pytest.approx({1: 1 - M.ADAPTIVE_TAX, 8: 1 - M.ADAPTIVE_TAX}, abs=0.005)
    doc = json.loads((out / "summary.json").read_text())["hosts"][0]["speculation_capable_tax"]
    assert {x["concurrency"]: x["ratio"] for x in doc["levels"]} == pytest.approx(ratios)
    assert "tax of staying speculation-capable (spec-off / baseline" in (out / "report.md").read_text()
    assert "tax of staying speculation-capable" in res.output   # the terminal's headline says it too
    launched = json.loads((out / "manifest.json").read_text())["hosts"]["gpu"]["arms"]["spec-off"]
    assert launched["mechanism"] == mechanism
    assert ("--speculative-adaptive" in launched["argv"]) == ref.startswith("v0.5.16")
    if engine == "sim-vllm":
        config = json.loads(launched["argv"][launched["argv"].index("--speculative-config") + 1])
        assert config["num_speculative_tokens_per_batch_size"] == [[1, 64, 0]]
    assert "drafting off at every running batch" in launched["notes"][0]
