"""Issue 38: nothing names a GPU on a CPU host. `stop` said "GPU memory released" wherever
`nvidia-smi` answered, and `verify`'s report for a `device: cpu` host listed the host's
GPUs, driver and CUDA. The host here has a (stand-in) nvidia-smi on PATH, as a CPU-serving
box with a GPU driver does."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.acceptance import device_facts
from specops.report.verify import Verification, report_markdown
from specops.transport.local import LocalTransport
from tests.support import nvidia_smi
from tests.support.arms import arm_vars
from tests.support.deploy import inventory, run_cli, write_yaml


@pytest.fixture
def smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    nvidia_smi.install(bindir, nvidia_smi.h100_idle(2))
    monkeypatch.setenv("PATH", f"{bindir}:{__import__('os').environ['PATH']}")
    return bindir


def test_stop_on_a_cpu_host_says_nothing_of_gpu_memory(tmp_path: Path, smi_on_path: Path) -> None:
    variables = arm_vars()
    variables["arms"] = {"baseline": variables["arms"]["baseline"]}
    inv = inventory(tmp_path, {"box": {
        "connection": "local", "engine": "sim", "device": "cpu", "workdir": str(tmp_path / "w")}}, variables)
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "launch", "server": {"arms": ["baseline"], "tree": "{{ workdir }}/sglang"}, "timeout": 300}]})
    try:
        res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb))
        assert res.exit_code == 0, res.output
    finally:
        stop = run_cli("stop", "--host", "box", "-i", str(inv))
    assert stop.exit_code == 0, stop.output
    assert "box: baseline (pid " in stop.output and "stopped" in stop.output, stop.output
    assert "GPU" not in stop.output.upper().replace("GPU_", ""), stop.output


def test_verify_report_of_a_cpu_host_names_no_gpu(smi_on_path: Path) -> None:
    with LocalTransport() as transport:
        facts = device_facts(transport, "cpu")
        gpu_facts = device_facts(transport, "gpu")
    assert facts["device"] == "cpu" and facts["cpu"] not in ("", "-")
    assert "H100" in gpu_facts["gpus"]  # the same host as a GPU host: the probe did answer
    text = report_markdown(Verification(host="box", specops_version="0", prompts=1, max_new_tokens=1, device=facts))
    assert "- device: cpu" in text and "- CPU: " in text
    assert not any(word in text for word in ("GPU", "driver", "CUDA", "H100")), text
    gpu_text = report_markdown(Verification(host="g", specops_version="0", prompts=1, max_new_tokens=1,
                                            device=gpu_facts))
    assert "- GPUs: " in gpu_text and "CUDA: " in gpu_text
