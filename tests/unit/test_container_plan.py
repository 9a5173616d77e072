"""The container route's pure parts: validation at file:line, and the run command built from a
launch plan. The GPU flags are checked as argv only: no GPU here (what the runtime maps from
them, `--gpus` or CDI, needs one)."""

from __future__ import annotations

from specops.servers.container import ImageFacts, adapt_plan, container_name, gpu_flags, run_argv
from specops.servers.launch import LaunchPlan
from tests.support.deploy import inventory, run_cli

FACTS = ImageFacts("docker", "lmsysorg/sglang:v0.5.10.post1-cu126", "sha256:abc", None,
                   "/usr/local/lib/python3.12/dist-packages/sglang")


def _plan(**kw) -> LaunchPlan:
    base = dict(arm="eagle3", kind="eagle3", port=30001, mechanism="eagle3", workdir="/w",
                argv=["/w/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/llama",
                      "--port", "30001"],
                env={"CUDA_VISIBLE_DEVICES": "2,3", "NCCL_DEBUG": "WARN"},
                log_path="/w/.specops/logs/eagle3.log", state_path="/w/.specops/servers/eagle3.json",
                cwd="/w/.specops/cwd", secrets_file="/w/.specops/secrets.env")
    base.update(kw)
    return LaunchPlan(**base)  # type: ignore[arg-type]


def test_the_run_command_maps_gpus_mounts_the_tree_and_keeps_values_off_the_argv():
    plan = adapt_plan(_plan(), FACTS, "/w/sglang", engine="sglang", home="/home/u")
    argv = run_argv(plan)
    assert argv[:4] == ["docker", "run", "--rm", "--name"] and argv[4] == container_name("/w", "eagle3")
    assert "--init" in argv and argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("--gpus") + 1] == '"device=2,3"'
    assert "/w/sglang/python/sglang:/usr/local/lib/python3.12/dist-packages/sglang:ro" in argv
    assert "/models/llama:/models/llama:ro" in argv and "/home/u/.cache/huggingface:/home/u/.cache/huggingface:rw" in argv
    assert "CUDA_VISIBLE_DEVICES" not in plan.env, "the runtime renumbers the mapped GPUs from 0"
    assert not any("WARN" in a for a in argv), "env values come from the env files, read inside"
    tail = argv[argv.index("--") + 1:]
    assert tail[:3] == ["python3", "-m", "sglang.launch_server"]
    files = argv[argv.index("specops-env") + 1:argv.index("--")]
    assert files == ["/w/.specops/servers/eagle3.env", "/w/.specops/secrets.env"]


def test_podman_gets_cdi_devices_and_the_simulator_no_gpu_flag():
    assert gpu_flags("podman", ["0", "1"]) == ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=1"]
    plan = adapt_plan(_plan(), FACTS, "/w/sglang", engine="sim", home="/home/u")
    argv = run_argv(plan)
    assert "--gpus" not in argv and "--device" not in argv


def test_another_image_is_another_server():
    a = adapt_plan(_plan(), FACTS, "/w/sglang", engine="sglang", home="/h")
    b = adapt_plan(_plan(), ImageFacts(**{**FACTS.__dict__, "image_id": "sha256:def"}), "/w/sglang",
                   engine="sglang", home="/h")
    assert a.args_hash != b.args_hash and _plan().args_hash == _plan().args_hash


def _deploy_with(tmp_path, **host_vars):
    inv = inventory(tmp_path, {"gpu": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w"),
                                       "vars": host_vars}})
    return run_cli("deploy", "--host", "gpu", "-i", str(inv), "--check")


def test_a_bad_runtime_or_image_is_named_at_its_line(tmp_path):
    res = _deploy_with(tmp_path, container_runtime="dockr")
    assert res.exit_code == 2
    assert "container_runtime must be one of podman, docker" in res.output and "docker" in res.output
    assert "hosts.yaml:" in res.output
    (tmp_path / "b").mkdir()
    res = _deploy_with(tmp_path / "b", sglang_image="lmsysorg/sglang:v1; rm -rf /")
    assert res.exit_code == 2 and "sglang_image must be an image reference" in res.output and "hosts.yaml:" in res.output
