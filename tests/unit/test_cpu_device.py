"""`device: cpu` (SGLang's CPU serving): hosts.yaml and arm validation naming file:line, the
launch argv and env on real SGLang trees, no GPU placement, the CPU probe and what the
manifest, the report and `hosts check` say. Nothing here is mocked: the CPU probe runs on
this machine through LocalTransport, and a PATH without nvidia-smi proves no GPU probe ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.facts import device_facts
from specops.bench.sweep import gpus_share
from specops.config.inventory import load_inventory
from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.render.hosts import device_cell
from specops.report.markdown import render_markdown
from specops.report.summary import summarize
from specops.servers.arms import arms_from_vars
from specops.servers.launch import build_launch
from specops.servers.plans import placements_for
from specops.sglang.layout import detect_layout
from specops.sglang.source import ensure_tree
from specops.sglang.venv import InstallSettings
from specops.transport.base import HostFacts
from specops.transport.local import LocalTransport
from specops.transport.probes import gather_facts, parse_cpu, read_cpu
from tests.support.deploy import inventory, run_cli

#: As text, for the tests that name a line of hosts.yaml (file:line); ARM_VARS is the same as data.
ARMS = """\
vars:
  model: m
  draft_model: d
  arms:
    baseline: {port: 30000}
    eagle3: {port: 30001}
"""
ARM_VARS = {"model": "m", "draft_model": "d", "arms": {"baseline": {"port": 30000}, "eagle3": {"port": 30001}}}


def _arm_vars(**per_arm: dict) -> dict:
    """ARM_VARS with each named arm's settings added to its own."""
    return {**ARM_VARS, "arms": {arm: {**raw, **per_arm.get(arm, {})} for arm, raw in ARM_VARS["arms"].items()}}


def _inventory(tmp_path: Path, hosts: dict, variables: dict | None = None):
    return load_inventory(inventory(tmp_path, hosts, variables))


def _from_text(tmp_path: Path, text: str):
    """hosts.yaml written as this text: the error names one of its lines (file:line)."""
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    return load_inventory(path)


# ----- hosts.yaml and arms --------------------------------------------------------------

def test_device_defaults_to_gpu_and_cpu_is_a_variable_for_templates(tmp_path):
    inv = _inventory(tmp_path, {"a": {"address": "x"}, "b": {"address": "y", "device": "cpu"}}, ARM_VARS)
    assert inv.hosts["a"].device == "gpu" and inv.hosts["b"].device == "cpu"
    assert inv.host_vars(inv.hosts["b"])["device"] == "cpu"
    specs = arms_from_vars(inv.host_vars(inv.hosts["b"]))
    assert {s.device for s in specs.values()} == {"cpu"}
    assert {s.device for s in arms_from_vars(inv.host_vars(inv.hosts["a"])).values()} == {"gpu"}


@pytest.mark.parametrize("text, expected", [
    ("hosts:\n  a: {address: x, device: tpu}\n",
     r"hosts.yaml:2: 'device' in host 'a' must be one of gpu, cpu, got 'tpu'"),
    ("hosts:\n  a:\n    address: x\n    device: cpu\n    gpus: [0, 1]\n",
     r"hosts.yaml:5: host 'a': device cpu with gpus \[0, 1\]: a CPU host has no GPUs"),
    ("defaults: {device: cpu}\nhosts:\n  a:\n    address: x\n    gpus: [0]\n",
     r"hosts.yaml:5: host 'a': device cpu with gpus \[0\]"),
    ("hosts:\n  a:\n    address: x\n    device: cpu\n    slurm: {partition: p}\n",
     r"hosts.yaml:5: host 'a': device cpu on a Slurm host would still ask the scheduler for GPUs"),
])
def test_bad_device_settings_name_file_and_line(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=expected):
        _from_text(tmp_path, text)


def test_a_cpu_slurm_host_that_asks_for_no_gpus_is_accepted(tmp_path):
    inv = _inventory(tmp_path, {"a": {"address": "x", "device": "cpu", "slurm": {"partition": "p", "gpus_per_arm": 0}}})
    assert inv.hosts["a"].device == "cpu"


def test_the_cli_exits_2_on_a_cpu_host_with_gpus(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  a:\n    address: x\n    device: cpu\n    gpus: [0]\n")
    res = run_cli("hosts", "-i", str(path))
    assert res.exit_code == 2 and f"{path}:5:" in res.output and "device cpu with gpus" in res.output, res.output


def test_an_arm_device_overrides_the_hosts_and_cpu_arms_cannot_ask_for_gpus(tmp_path):
    inv = _inventory(tmp_path, {"box": {"address": "x", "gpus": [0, 1]}}, _arm_vars(eagle3={"device": "cpu"}))
    specs = arms_from_vars(inv.host_vars(inv.hosts["box"]))
    assert (specs["baseline"].device, specs["eagle3"].device) == ("gpu", "cpu")
    # a GPU arm on a CPU host may still name its GPUs (the host says CPU, the arm says GPU)
    inv = _inventory(tmp_path, {"box": {"address": "x", "device": "cpu"}},
                     _arm_vars(baseline={"device": "gpu", "gpus": [0]}))
    assert arms_from_vars(inv.host_vars(inv.hosts["box"]))["baseline"].gpus == [0]


@pytest.mark.parametrize("host, arm, expected", [
    ("device: cpu", "{port: 30000, gpus: [0]}",
     r"hosts.yaml:7: arm 'baseline' runs on the CPU \(the host's device is cpu\) but sets gpus"),
    ("gpus: [0]", "{port: 30000, device: cpu, gpus: [0]}",
     r"hosts.yaml:7: arm 'baseline' runs on the CPU \(its own device is cpu\) but sets gpus"),
    ("gpus: [0]", "{port: 30000, device: cpuu}",
     r"hosts.yaml:7: 'device' in arm 'baseline' must be one of gpu, cpu, got 'cpuu' \(did you mean 'cpu'\?\)"),
])
def test_bad_arm_devices_name_file_and_line(tmp_path, host, arm, expected):
    text = f"hosts:\n  box: {{address: x, {host}}}\n" + ARMS.replace("baseline: {port: 30000}", f"baseline: {arm}")
    with pytest.raises(ConfigError, match=expected):
        inv = _from_text(tmp_path, text)
        arms_from_vars(inv.host_vars(inv.hosts["box"]), where=str(tmp_path / "hosts.yaml"))


def test_a_bad_device_variable_is_refused():
    with pytest.raises(ConfigError, match="'device' must be one of gpu, cpu, got 'tpu'"):
        arms_from_vars({"model": "m", "device": "tpu", "arms": {"baseline": {}}}, where="--var")


# ----- the launch ---------------------------------------------------------------------

def _arm(device: str | None = None, **raw):
    variables = {"model": "m", "draft_model": "d", "arms": {"eagle3": raw}}
    if device:
        variables["device"] = device
    return arms_from_vars(variables)["eagle3"]


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.23"])
def test_a_cpu_arm_gets_device_cpu_and_the_cpu_engine_env_and_no_gpus(version):
    """Checked against each tree's own parser by build_launch (a flag it lacks would raise)."""
    layout = detect_layout(LocalTreeFiles(ensure_tree(version)))
    plan = build_launch(_arm("cpu", extra_args=["--attention-backend", "triton"], env={"TRITON_INTERPRET": "1"}),
                        layout, workdir="/w")
    i = plan.argv.index("--device")
    assert plan.argv[i + 1] == "cpu" and plan.argv.count("--device") == 1
    assert plan.argv[-2:] == ["--attention-backend", "triton"]  # the arm's own flags come last
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "1" and plan.env["TRITON_INTERPRET"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in plan.env and plan.device == "cpu"
    gpu = build_launch(_arm(gpus=[1]), layout, workdir="/w")
    assert "--device" not in gpu.argv and "SGLANG_USE_CPU_ENGINE" not in gpu.env
    assert gpu.env["CUDA_VISIBLE_DEVICES"] == "1" and gpu.args_hash != plan.args_hash
    # an idle SGLang scheduler polls without pause: on a CPU host it would take a core from
    # the arm being measured, so a CPU arm sleeps when idle; a GPU arm is left as SGLang has it
    assert plan.argv.count("--sleep-on-idle") == 1 and "--sleep-on-idle" not in gpu.argv
    again = build_launch(_arm("cpu", extra_args=["--sleep-on-idle"]), layout, workdir="/w")
    assert again.argv.count("--sleep-on-idle") == 1


def test_extra_args_choosing_a_device_and_arm_env_win():
    layout = detect_layout(LocalTreeFiles(ensure_tree("0.5.10.post1")))
    plan = build_launch(_arm("cpu", extra_args=["--device=cpu"], env={"SGLANG_USE_CPU_ENGINE": "0"}), layout,
                        workdir="/w")
    assert [a for a in plan.argv if a.startswith("--device")] == ["--device=cpu"]
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "0"


def test_the_simulator_gets_the_same_cpu_flags():
    tree = ensure_tree("0.5.10.post1")
    plan = build_launch(_arm("cpu"), detect_layout(LocalTreeFiles(tree)), workdir="/w", engine="sim",
                        sglang_tree=str(tree))
    assert plan.argv[1:3] == ["-m", "specops.sim"] and "--device" in plan.argv
    assert plan.env["SGLANG_USE_CPU_ENGINE"] == "1"


# ----- placement ----------------------------------------------------------------------

@pytest.fixture
def no_nvidia_smi(tmp_path, monkeypatch) -> LocalTransport:
    """A host with no nvidia-smi on PATH: a GPU probe would fail with 'nvidia-smi not found'."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    return LocalTransport("box", home=str(tmp_path))


def test_cpu_arms_are_never_placed_and_no_gpu_is_probed(tmp_path, no_nvidia_smi):
    inv = _inventory(tmp_path, {"box": {"connection": "local", "engine": "sglang", "device": "cpu"}}, ARM_VARS)
    host = inv.hosts["box"]
    assert placements_for(no_nvidia_smi, host, inv.host_vars(host)) is None


def test_on_a_gpu_host_only_the_gpu_arms_are_placed(tmp_path, no_nvidia_smi):
    inv = _inventory(tmp_path, {"box": {"connection": "local", "engine": "sglang", "gpus": [0, 1]}},
                     _arm_vars(baseline={"device": "cpu"}))
    host = inv.hosts["box"]
    placed = placements_for(no_nvidia_smi, host, inv.host_vars(host))
    assert placed is not None and [p.describe() for p in placed] == ["eagle3: GPU 0 (tp 1, assigned)"]


def test_cpu_arms_on_one_host_run_one_after_another_in_a_sweep():
    layout = detect_layout(LocalTreeFiles(ensure_tree("0.5.10.post1")))
    cpu = [build_launch(_arm("cpu", port=p), layout, workdir="/w") for p in (30000, 30001)]
    gpu = [build_launch(_arm(gpus=[g], port=30000 + g), layout, workdir="/w") for g in (0, 1)]
    assert gpus_share(cpu) and not gpus_share(gpu) and not gpus_share(cpu[:1] + gpu)


# ----- the CPU probe and what is reported ---------------------------------------------

def test_cpu_probe_parses_lscpu_cpuinfo_and_an_arm_host_without_a_model():
    x86 = "model: Intel(R) Xeon(R) Platinum 8480+\nmodel: ignored\ncores: 224\nmemory_kib: 2113645736\n"
    facts = parse_cpu(x86)
    assert (facts.model, facts.cores, facts.memory_gib) == ("Intel(R) Xeon(R) Platinum 8480+", 224, 2015.7)
    assert facts.describe() == "Intel(R) Xeon(R) Platinum 8480+ (224 cores, 2015.7 GiB)"
    assert parse_cpu("cores: 4\n").describe() == "unknown CPU (4 cores)"


def test_the_cpu_probe_runs_for_real_here(no_nvidia_smi):
    cpu = read_cpu(no_nvidia_smi)
    model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name"))
    assert cpu.model == " ".join(model.split()) and cpu.cores and cpu.cores >= 1 and cpu.memory_gib
    facts = device_facts(no_nvidia_smi, "cpu")
    assert facts["device"] == "cpu" and facts["cpu"] == cpu.describe() and "gpu" not in facts
    assert gather_facts(no_nvidia_smi, "/tmp").cpu == cpu.describe()  # `hosts check`: the same round trip


def test_report_header_and_hosts_check_say_cpu_never_gpu_none():
    manifest = {"run_id": "r1", "device": "cpu", "cpu": "AMD EPYC (2 cores, 23.5 GiB)", "cpu_cores": 2}
    text = render_markdown(summarize([], manifest), manifest)
    assert "device: `cpu` · CPU: `AMD EPYC (2 cores, 23.5 GiB)`" in text and "GPU" not in text.split("## ")[0]
    cell = device_cell(HostFacts(reachable=True, cpu="AMD EPYC (2 cores, 23.5 GiB)", device="cpu"))
    assert cell == "cpu: AMD EPYC (2 cores, 23.5 GiB)"
    assert device_cell(HostFacts(reachable=True, gpus=["NVIDIA H100 (81559 MiB)"], device="gpu")) == \
        "NVIDIA H100 (81559 MiB)"


# ----- the prepared runtime's settings ------------------------------------------------

def test_a_runtime_turns_dependencies_off_unless_asked():
    base = {"workdir": "/w"}
    assert InstallSettings.from_vars({**base, "sglang_runtime": "/opt/py"}, {}, where="x").install_deps is False
    both = InstallSettings.from_vars({**base, "sglang_runtime": "/opt/py", "sglang_install_deps": True}, {}, where="x")
    assert both.install_deps is True and both.runtime == "/opt/py"
    assert InstallSettings.from_vars(base, {}, where="x").install_deps is True
    with pytest.raises(ConfigError, match="sglang_runtime must be the path of a python on the host"):
        InstallSettings.from_vars({**base, "sglang_runtime": ""}, {}, where="x")
