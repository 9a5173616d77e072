"""Issue 17 end to end over the real sshd: the shipped deploy playbook on the default
SGLang (0.5.10.post1, adaptive by patch), then `--var sglang_ref=v0.5.23` brings up the
three arms on 0.5.23, the adaptive one native with its zero-step tier."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from specops.data import shipped_playbooks
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

DEPLOY = str(shipped_playbooks() / "deploy.yaml")


def _status(inv: Path) -> dict:
    res = run_cli("status", "--host", "gpu", "-i", str(inv), "--json")
    return {s["arm"]: s for s in json.loads(res.output)["gpu"]}


def _server_version(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10) as resp:
        return json.loads(resp.read())["version"]


@pytest.mark.slow
def test_default_then_var_ref_deploys_the_asked_version(tmp_path: Path, sshd) -> None:
    workdir = tmp_path / "w"
    inv = sim_inventory(tmp_path, sshd.host_entry(5, workdir=str(workdir)))
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert res.exit_code == 0, res.output
        st = _status(inv)
        assert st["adaptive"]["mechanism"] == "dynamic-spec-disable-patch"
        assert _server_version(st["baseline"]["port"]) == "0.5.10.post1"

        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY, "--var", "sglang_ref=v0.5.23")
        assert res.exit_code == 0, res.output
        st = _status(inv)
        assert {a: s["state"] for a, s in st.items()} == {"baseline": "ready", "eagle3": "ready", "adaptive": "ready"}
        for arm in st.values():
            assert _server_version(arm["port"]) == "0.5.23"
        assert st["adaptive"]["mechanism"] == "native-adaptive"
        state = json.loads((workdir / ".specops/servers/adaptive.json").read_text())
        assert state["ready_path"] == "/ready"
        assert "--cuda-graph-max-bs-decode" in state["argv"] and "--cuda-graph-max-bs" not in state["argv"]
        tiers = json.loads(Path(state["config_path"]).read_text())
        assert [t["candidate_steps"] for _, t in sorted(tiers.items(), key=lambda kv: int(kv[0]))] == [[3], [0]]
        assert "cuda_graph_hook.py" in " ".join(state["notes"])
        marker = json.loads((workdir / "sglang/.specops-wheel.json").read_text())
        assert marker["version"] == "0.5.23"
    finally:
        stopped = run_cli("stop", "--host", "gpu", "-i", str(inv))
    assert stopped.exit_code == 0, stopped.output
