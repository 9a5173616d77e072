"""A CPU host (`device: cpu`) end to end with the simulator on a `connection: local` host:
deploy skips the GPU preflight and says so, records the CPU, launches each arm with
`--device cpu` and `SGLANG_USE_CPU_ENGINE=1` (read back from the running process), and a
one-level bench's manifest and report say cpu, never "GPU: none". `hosts check` too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import nvidia_smi
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml


def _proc_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item)


@pytest.mark.slow
def test_a_cpu_host_deploys_and_benches_with_device_cpu(tmp_path: Path) -> None:
    wd = tmp_path / "w"
    variables = arm_vars()
    variables["arms"] = {k: v for k, v in variables["arms"].items() if k in ("baseline", "eagle3")}
    variables["arms"]["eagle3"]["extra_args"] = ["--attention-backend", "triton", "--disable-cuda-graph"]
    variables["arms"]["eagle3"]["env"] = {"TRITON_INTERPRET": "1"}
    inv = inventory(tmp_path, {"box": {"connection": "local", "engine": "sim", "device": "cpu", "workdir": str(wd)}},
                    variables)
    try:
        res = run_cli("deploy", "--host", "box", "-i", str(inv), "--runs-dir", str(tmp_path / "runs"))
        assert res.exit_code == 0, res.output
        ev = events(only_run_dir(tmp_path / "runs"))
        notes = [e for e in ev if e["event"] == "note" and e.get("step") == "gpu preflight"]
        assert [n["message"] for n in notes] == ["GPU preflight skipped: device cpu"], ev
        (cpu,) = [e for e in ev if e["event"] == "cpu"]
        assert cpu["device"] == "cpu" and cpu["cpu"]["cores"] >= 1 and cpu["cpu"]["model"]
        assert not any("nvidia-smi" in json.dumps(e) for e in ev)  # no GPU probe ran
        for arm in ("baseline", "eagle3"):
            state = json.loads((wd / ".specops" / "servers" / f"{arm}.json").read_text())
            argv = state["argv"]
            assert argv[argv.index("--device") + 1] == "cpu" and argv.count("--device") == 1, argv
            env = _proc_env(state["pid"])  # what the running server really got
            assert env.get("SGLANG_USE_CPU_ENGINE") == "1" and "CUDA_VISIBLE_DEVICES" not in env, env
        assert _proc_env(json.loads((wd / ".specops/servers/eagle3.json").read_text())["pid"])[
            "TRITON_INTERPRET"] == "1"

        out = tmp_path / "bench"
        bench = run_cli("bench", "--host", "box", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1",
                        "--repeats", "1", "--num-prompts", "2", "--input-len", "16", "--output-len", "8",
                        "--out", str(out))
        assert bench.exit_code == 0, bench.output
        manifest = json.loads((out / "manifest.json").read_text())
        host = manifest["hosts"]["box"]
        assert manifest["device"] == host["device"] == "cpu" and host["cpu"] == manifest["cpu"]
        assert host["cpu_cores"] == cpu["cpu"]["cores"] and "gpu" not in manifest and "gpu" not in host
        assert {a["device"] for a in host["arms"].values()} == {"cpu"}
        (facts_line,) = [ln for ln in (out / "report.md").read_text().splitlines() if ln.startswith("- run: ")]
        assert "device: `cpu`" in facts_line and f"CPU: `{manifest['cpu']}`" in facts_line, facts_line
        assert "GPU" not in facts_line

        checked = run_cli("hosts", "check", "-i", str(inv), "--json")
        assert checked.exit_code == 0, checked.output
        facts = json.loads(checked.output)["box"]
        assert facts["device"] == "cpu" and facts["cpu"] == manifest["cpu"] and facts["gpus"] == []
        table = run_cli("hosts", "check", "-i", str(inv))
        assert "cpu: " in table.output and "none" not in table.output, table.output
    finally:
        run_cli("stop", "--host", "box", "-i", str(inv))


@pytest.mark.parametrize("host_device, arms, placed", [
    ("gpu", {"baseline": {"device": "cpu"}}, ["eagle3: GPU 0 (tp 1, assigned)", "adaptive: GPU 1 (tp 1, assigned)"]),
    ("cpu", {"eagle3": {"device": "gpu"}}, ["eagle3: GPU 0 (tp 1, assigned)"]),
])
def test_the_gpu_preflight_places_only_the_gpu_arms(tmp_path, monkeypatch, host_device, arms, placed):
    """A GPU host with a CPU arm, and a CPU host with a GPU arm: the preflight runs (against the
    suite's stand-in nvidia-smi, tests/support/nvidia_smi.py: no GPU here) for the GPU arms only."""
    nvidia_smi.install(tmp_path / "bin", nvidia_smi.h100_idle())
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    host = {"connection": "local", "engine": "sglang", "device": host_device, "workdir": str(tmp_path / "w")}
    inv = inventory(tmp_path, {"box": host}, arm_vars(**arms))
    pb = write_yaml(tmp_path / "pf.yaml", {"steps": [{"name": "gpus", "gpu_preflight": {}}]})
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    ev = events(only_run_dir(tmp_path / "runs"))
    (gpus,) = [e for e in ev if e["event"] == "gpus"]
    assert gpus["placement"] == placed
    assert not [e for e in ev if e["event"] == "note"]  # GPU arms: the preflight was not skipped


@pytest.mark.parametrize("fixed, launched", [
    (True, ["baseline", "eagle3", "adaptive"]),   # KV sized by their arguments: one wave
    (False, ["baseline"]),                        # a share of the free memory each: one after another
])
def test_cpu_arms_whose_kv_cache_their_arguments_fix_start_together(tmp_path: Path, fixed, launched) -> None:
    """CPU arms start together only where each one's `--max-total-tokens` fixes its KV cache
    (ServingEngine.cpu_memory_fixed); else each waits for the one before to be ready, since it
    takes a share of the memory free when it starts. Seen without a clock: the first arm dies at
    start, so an arm launched at all was launched beside it; the failed step stops every arm it started."""
    wd = tmp_path / "w"
    kv = ["--max-total-tokens", "4096"] if fixed else []
    variables = arm_vars(baseline={"extra_args": [*kv, "--sim-fail-at-start"]},
                         eagle3={"extra_args": kv}, adaptive={"extra_args": kv})
    inv = inventory(tmp_path, {"box": {"connection": "local", "engine": "sim", "device": "cpu", "workdir": str(wd)}},
                    variables)
    try:
        res = run_cli("deploy", "--host", "box", "-i", str(inv), "--runs-dir", str(tmp_path / "runs"))
        assert res.exit_code != 0 and "baseline" in res.output, res.output
        ev = events(only_run_dir(tmp_path / "runs"))
        assert [e["arm"] for e in ev if e["event"] == "server"] == launched, ev
        assert not list((wd / ".specops" / "servers").glob("*.json")), "the failed launch leaves no server running"
    finally:
        run_cli("stop", "--host", "box", "-i", str(inv))
