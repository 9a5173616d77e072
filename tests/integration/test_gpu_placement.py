"""GPU preflight and placement through the CLI. No GPU here: the probe runs for real
against the stand-in `nvidia-smi` of tests/support/nvidia_smi.py (the suite's one stub),
put on PATH for a `connection: local` host of engine sglang. Shared-GPU start order runs
for real with the simulator on a host that lists its GPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import nvidia_smi
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml

REPO = Path(__file__).resolve().parents[2]


def _preflight(tmp_path: Path, monkeypatch, machine: dict[str, str] | None, gpus: list[int] | None = None,
               **arms: dict) -> tuple:
    if machine is not None:
        nvidia_smi.install(tmp_path / "bin", machine)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    else:
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
    host = {"connection": "local", "engine": "sglang", "workdir": str(tmp_path / "w"), **({"gpus": gpus} if gpus else {})}
    inv = inventory(tmp_path, {"gpu-a": host}, arm_vars(**arms))
    pb = write_yaml(tmp_path / "pf.yaml", {"steps": [{"name": "gpus", "gpu_preflight": {}}]})
    res = run_cli("deploy", "--host", "gpu-a", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    return res, events(only_run_dir(tmp_path / "runs"))


def test_shipped_arms_land_on_distinct_gpus_of_an_8xh100(tmp_path, monkeypatch):
    res, ev = _preflight(tmp_path, monkeypatch, nvidia_smi.h100_idle())
    assert res.exit_code == 0, res.output
    (gpus,) = [e for e in ev if e["event"] == "gpus"]
    assert gpus["placement"] == ["baseline: GPU 0 (tp 1, assigned)", "eagle3: GPU 1 (tp 1, assigned)",
                                 "adaptive: GPU 2 (tp 1, assigned)"]
    assert gpus["gpus"]["driver_version"] == "535.129.03" and gpus["gpus"]["cuda_version"] == "12.2"
    assert len(gpus["gpus"]["gpus"]) == 8


def test_a_gpu_held_by_a_foreign_process_is_refused(tmp_path, monkeypatch):
    res, _ = _preflight(tmp_path, monkeypatch, nvidia_smi.h100_gpu3_busy(), eagle3={"gpus": [3]})
    assert res.exit_code == 1
    assert ("GPU 3 (NVIDIA H100 80GB HBM3) for arm 'eagle3' is held by pid 48213 /usr/bin/python3, 70245 MiB; "
            "specops did not launch it") in res.output


def test_fewer_gpus_than_listed_and_no_driver_are_said(tmp_path, monkeypatch):
    res, _ = _preflight(tmp_path, monkeypatch, nvidia_smi.h200_idle(), gpus=[0, 1])
    assert res.exit_code == 1 and "hosts.yaml lists GPU(s) 1 for gpu-a; it has 0 (1 x NVIDIA H200" in res.output
    (tmp_path / "b").mkdir()
    res, _ = _preflight(tmp_path / "b", monkeypatch, None)
    assert res.exit_code == 1 and "nvidia-smi not found on the host (no NVIDIA driver?)" in res.output


def test_tp_size_from_the_gpu_count_and_different_tp_is_warned(tmp_path, monkeypatch):
    res, ev = _preflight(tmp_path, monkeypatch, nvidia_smi.h100_idle(), baseline={"gpus": [0, 1]},
                         eagle3={"tp_size": 2})
    assert res.exit_code == 0, res.output
    (gpus,) = [e for e in ev if e["event"] == "gpus"]
    assert gpus["placement"][:2] == ["baseline: GPU 0,1 (tp 2, asked)", "eagle3: GPU 2,3 (tp 2, assigned)"]
    warnings = [e["message"] for e in ev if e["event"] == "warning"]
    assert "arms run with different tensor-parallel sizes: baseline=2, eagle3=2, adaptive=1" in warnings


@pytest.mark.slow
def test_arms_sharing_a_gpu_start_one_after_another(tmp_path, sglang_tree):
    """A 1-GPU host: without mem_fraction_static the launch is refused before anything
    starts; with it, each arm is ready before the next starts (the simulator's slow start
    makes each take >= 1.5 s, so overlapping starts would show)."""
    tree = sglang_tree("0.5.14")
    host = {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w"), "gpus": [0]}
    variables = {**arm_vars(), "sim": {"time_scale": 0.05, "slow_start": 1.5}}
    inv = inventory(tmp_path, {"one": host}, variables)
    pb = write_yaml(tmp_path / "launch.yaml", {"steps": [{"name": "launch", "server": {
        "arms": ["baseline", "eagle3", "adaptive"], "tree": str(tree)}, "timeout": 120}]})
    res = run_cli("deploy", "--host", "one", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1 and "share GPU 0 and cannot run side by side" in res.output
    assert not (tmp_path / "w" / ".specops" / "servers").exists()  # refused before anything started
    for arm in variables["arms"].values():
        arm["mem_fraction_static"] = 0.3
    inventory(tmp_path, {"one": host}, variables)
    try:
        res = run_cli("deploy", "--host", "one", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "r2"))
        assert res.exit_code == 0, res.output
        states = {a: json.loads((tmp_path / "w/.specops/servers" / f"{a}.json").read_text())
                  for a in ("baseline", "eagle3", "adaptive")}
        starts = sorted(s["started_at"] for s in states.values())
        assert starts[1] - starts[0] >= 1.4 and starts[2] - starts[1] >= 1.4, starts
        assert all("--mem-fraction-static" in s["argv"] and s["env"]["CUDA_VISIBLE_DEVICES"] == "0"
                   for s in states.values())
    finally:
        run_cli("stop", "--host", "one", "-i", str(inv))


def test_hosts_check_shows_what_the_preflight_would_refuse(tmp_path, monkeypatch):
    nvidia_smi.install(tmp_path / "bin", nvidia_smi.h100_gpu3_busy())
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    host = {"connection": "local", "engine": "sglang", "workdir": str(tmp_path / "w")}
    inv = inventory(tmp_path, {"gpu-a": host}, arm_vars())
    res = run_cli("hosts", "check", "--host", "gpu-a", "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    gpus = json.loads(res.output)["gpu-a"]["gpus"]
    assert "GPU 3 held by pid 48213 /usr/bin/python3, 70245 MiB" in gpus
    assert "driver 535.129.03, CUDA 12.2" in gpus and len([g for g in gpus if "H100" in g]) == 8
