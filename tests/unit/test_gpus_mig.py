"""A GPU in MIG mode is refused for an arm placed on it by index: CUDA sees its MIG
instances, not the GPU, so `CUDA_VISIBLE_DEVICES=N` would start the server on no device.
`nvidia-smi` is the suite's stand-in (tests/support/nvidia_smi.py, an A800 pair with GPU 0
in MIG mode as a real R535 prints it); the probe runs for real through LocalTransport."""

from __future__ import annotations

import os

from specops.servers.placement import ArmRequest, check_gpus, place_arms
from specops.transport.local import LocalTransport
from specops.transport.nvidia import read_gpus
from tests.support import nvidia_smi
from tests.support.arms import arm_vars
from tests.support.deploy import inventory, run_cli, write_yaml


def _smi_on_path(tmp_path, monkeypatch) -> None:
    nvidia_smi.install(tmp_path / "bin", nvidia_smi.a800_mig())
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")


def _mig_gpus(tmp_path, monkeypatch):
    """The GPUs this machine's (stand-in) nvidia-smi reports: GPU 0 in MIG mode, GPU 1 not."""
    _smi_on_path(tmp_path, monkeypatch)
    return read_gpus(LocalTransport("gpu-a", home=str(tmp_path)))


def test_an_arm_on_a_mig_gpu_is_refused_in_one_line(tmp_path, monkeypatch):
    inv = _mig_gpus(tmp_path, monkeypatch)
    placements = place_arms([ArmRequest("baseline", gpus=(0,)), ArmRequest("eagle3", gpus=(1,))], inv.indices)
    problems = check_gpus(inv, placements, set(), host="gpu-a")
    assert problems == ["GPU 0 (NVIDIA A800-SXM4-80GB) for arm 'baseline' is in MIG mode: CUDA sees its MIG "
                        "instances, not GPU 0; give the arm a GPU with MIG disabled (nvidia-smi -i 0 -mig 0)"]


def test_the_gpu_with_mig_disabled_is_accepted(tmp_path, monkeypatch):
    inv = _mig_gpus(tmp_path, monkeypatch)
    placements = place_arms([ArmRequest("eagle3", gpus=(1,))], inv.indices)
    assert check_gpus(inv, placements, set(), host="gpu-a") == []


def test_the_preflight_step_stops_before_anything_starts(tmp_path, monkeypatch):
    """Through `deploy`: the default placement puts baseline on GPU 0, which is in MIG mode."""
    _smi_on_path(tmp_path, monkeypatch)
    host = {"connection": "local", "engine": "sglang", "workdir": str(tmp_path / "w")}
    inv = inventory(tmp_path, {"gpu-a": host}, arm_vars())
    pb = write_yaml(tmp_path / "pf.yaml", {"steps": [{"name": "gpus", "gpu_preflight": {}}]})
    res = run_cli("deploy", "--host", "gpu-a", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1
    assert "GPU 0 (NVIDIA A800-SXM4-80GB) for arm 'baseline' is in MIG mode" in res.output
