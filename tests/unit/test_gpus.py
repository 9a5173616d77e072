"""GPU preflight and placement. No GPU exists here: `nvidia-smi` is the stand-in from
tests/support/nvidia_smi.py (the only stub in the suite), printing what real 8 x H100 and
1 x H200 machines print; the probe script itself runs for real through LocalTransport."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from specops.errors import ConfigError
from specops.servers.placement import ArmRequest, check_gpus, place_arms, start_waves
from specops.transport.local import LocalTransport
from specops.transport.nvidia import parse_probe, read_gpus
from tests.support import nvidia_smi

SHIPPED = [ArmRequest("baseline"), ArmRequest("eagle3"), ArmRequest("adaptive")]


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A LocalTransport whose PATH has the stand-in nvidia-smi for `machine`."""
    def make(machine: dict[str, str]) -> LocalTransport:
        bindir = tmp_path / "bin"
        nvidia_smi.install(bindir, machine)
        monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
        return LocalTransport("gpu-a", home=str(tmp_path))
    return make


def test_probe_reads_an_idle_8xh100(host):
    inv = read_gpus(host(nvidia_smi.h100_idle()))
    assert inv.error == "" and inv.indices == list(range(8))
    assert inv.gpus[0].name == "NVIDIA H100 80GB HBM3" and inv.gpus[0].memory_total_mib == 81559
    assert (inv.driver_version, inv.cuda_version) == ("535.129.03", "12.2")
    assert inv.describe() == "8 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 535.129.03, CUDA 12.2"
    assert inv.apps == []


def test_probe_reads_a_1xh200_and_a_busy_gpu(host, tmp_path):
    inv = read_gpus(host(nvidia_smi.h200_idle()))
    assert inv.describe() == "1 x NVIDIA H200 (143771 MiB), driver 550.90.07, CUDA 12.4"
    busy = read_gpus(host(nvidia_smi.h100_gpu3_busy()))
    (app,) = busy.apps_on(3)
    assert (app.pid, app.process_name, app.used_memory_mib) == (48213, "/usr/bin/python3", 70245)
    assert busy.apps_on(2) == [] and busy.gpu(3).memory_used_mib == 70712


def test_probe_says_when_nvidia_smi_fails_or_is_missing(host, tmp_path, monkeypatch):
    inv = read_gpus(host(nvidia_smi.driver_failed()))
    assert inv.error.startswith("nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if subprocess.run(["bash", "-c", "command -v nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("this machine has a real nvidia-smi")
    inv = read_gpus(LocalTransport("cpu", home=str(tmp_path)))
    assert inv.error == "nvidia-smi not found on the host (no NVIDIA driver?)"


def test_shipped_arms_get_distinct_gpus_in_a_stable_order():
    placed = place_arms(SHIPPED, list(range(8)))
    assert [(p.arm, p.gpus, p.tp_size, p.shares_with) for p in placed] == [
        ("baseline", [0], 1, []), ("eagle3", [1], 1, []), ("adaptive", [2], 1, [])]
    assert start_waves(SHIPPED, placed) == [["baseline", "eagle3", "adaptive"]]
    # the host's own list wins over 0,1,2; explicit gpus are kept and skipped by the others
    arms = [ArmRequest("baseline", gpus=(6,)), ArmRequest("eagle3"), ArmRequest("adaptive")]
    assert [p.gpus for p in place_arms(arms, [4, 5, 6, 7])] == [[6], [4], [5]]


def test_tp_size_follows_the_gpu_count_unless_set():
    arms = [ArmRequest("baseline", gpus=(0, 1)), ArmRequest("eagle3", tp_size=2), ArmRequest("adaptive", gpus=(4, 5), tp_size=1)]
    placed = place_arms(arms, list(range(8)))
    assert [(p.gpus, p.tp_size) for p in placed] == [([0, 1], 2), ([2, 3], 2), ([4, 5], 1)]
    with pytest.raises(ConfigError, match="tp_size 4 needs 4 GPUs, it has 2"):
        place_arms([ArmRequest("baseline", gpus=(0, 1), tp_size=4)], list(range(8)))


def test_arms_sharing_a_gpu_need_a_memory_fraction_and_then_start_one_by_one():
    placed = place_arms(SHIPPED, [0])  # 1 x H200: all three on GPU 0
    assert all(p.gpus == [0] for p in placed) and placed[0].shares_with == ["eagle3", "adaptive"]
    with pytest.raises(ConfigError) as err:
        start_waves(SHIPPED, placed)
    assert "share GPU 0 and cannot run side by side" in err.value.message
    assert "mem_fraction_static" in (err.value.hint or "")
    fractions = [ArmRequest(a.name, mem_fraction_static=0.25) for a in SHIPPED]
    assert start_waves(fractions, place_arms(fractions, [0])) == [["baseline"], ["eagle3"], ["adaptive"]]


def test_preflight_refuses_missing_and_foreign_held_gpus(host):
    busy = read_gpus(host(nvidia_smi.h100_gpu3_busy()))
    placed = place_arms([ArmRequest("baseline", gpus=(3,)), ArmRequest("eagle3", gpus=(9,)), ArmRequest("adaptive")],
                        busy.indices)
    problems = check_gpus(busy, placed, own_sessions=set(), host="gpu-a")
    assert problems[0] == ("GPU 3 (NVIDIA H100 80GB HBM3) for arm 'baseline' is held by pid 48213 /usr/bin/python3, "
                           "70245 MiB; specops did not launch it")
    assert problems[1].startswith("arm 'eagle3' asks for GPU 9; gpu-a has GPUs 0,1,2,3,4,5,6,7 (8 x NVIDIA H100")
    assert len(problems) == 2  # adaptive got GPU 0: idle, fine


def test_preflight_accepts_gpus_held_by_our_own_servers(host):
    busy = read_gpus(host(nvidia_smi.h100_gpu3_busy()))
    ours = type(busy.apps[0])(busy.apps[0].gpu_uuid, 48213, "python3", 70245, sid=48200, user="ubuntu")
    busy.apps = [ours]
    placed = place_arms([ArmRequest("baseline", gpus=(3,))], busy.indices)
    assert check_gpus(busy, placed, own_sessions={48200}, host="gpu-a") == []
    assert check_gpus(busy, placed, own_sessions={1}, host="gpu-a")[0].startswith("GPU 3 (NVIDIA H100 80GB HBM3)")


def test_memory_in_use_without_a_visible_process_is_refused(host):
    inv = read_gpus(host(nvidia_smi.h100_gpu3_busy()))
    inv.apps = []  # in a container the host's processes are invisible, the memory is not
    placed = place_arms([ArmRequest("baseline", gpus=(3,))], inv.indices)
    (problem,) = check_gpus(inv, placed, own_sessions=set(), host="gpu-a")
    assert "70712 MiB of 81559 MiB in use by a process nvidia-smi does not show" in problem


def test_stub_is_what_the_probe_calls(tmp_path):
    """Guard for the stub itself: it answers the exact queries the probe makes."""
    path = nvidia_smi.install(tmp_path / "b", nvidia_smi.h200_idle())
    out = subprocess.run([str(path), "--query-gpu=index", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    assert out.startswith("0, GPU-") and Path(path).stat().st_mode & 0o111


# --- every driver generation's nvidia-smi (formats named in tests/support/nvidia_smi.py) ---------


@pytest.mark.parametrize("machine, driver, cuda", [
    (nvidia_smi.h100_idle, "535.129.03", "12.2"),    # R535: `Driver Version:` / `CUDA Version:`
    (nvidia_smi.h200_idle, "550.90.07", "12.4"),     # R550
    (nvidia_smi.h100_r580, "580.126.09", "13.0"),    # R580: CUDA 13, a `+---+` rule under the versions
    (nvidia_smi.b200_r610, "610.43.02", "13.3"),     # R610: `KMD Version:` / `CUDA UMD Version:`
    (nvidia_smi.a6000_r515, "515.48.07", "11.7"),    # R515, no MIG on the card: `[N/A]`
])
def test_every_driver_generation_gives_its_driver_and_cuda_version(host, machine, driver, cuda):
    inv = read_gpus(host(machine()))
    assert inv.error == "" and inv.gpus, inv.error
    assert (inv.driver_version, inv.cuda_version) == (driver, cuda)
    assert inv.describe().endswith(f"driver {driver}, CUDA {cuda}")


def test_the_header_alone_gives_the_versions_when_the_rows_lack_the_driver():
    """R610's relabelled header, before this change: CUDA recorded as '' (and the driver too
    where the query's driver_version cell is `[N/A]`)."""
    out = ("@@gpus\n0, GPU-x, NVIDIA B200, 183359, 0, [N/A], Disabled\n@@apps\n@@header\n"
           + nvidia_smi.R610_HEADER + "@@sessions\n@@end\n")
    inv = parse_probe(out)
    assert (inv.driver_version, inv.cuda_version) == ("610.43.02", "13.3")
    na = parse_probe("@@gpus\n0, GPU-x, NVIDIA H200, 143771, 0, 550.90.07, [N/A]\n@@apps\n@@header\n"
                     "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: N/A   |\n@@sessions\n@@end\n")
    assert na.error == "" and na.cuda_version == ""  # said as unknown, never guessed


def test_mig_mode_is_read_per_gpu(host):
    inv = read_gpus(host(nvidia_smi.a800_mig()))
    assert inv.error == "" and [g.mig for g in inv.gpus] == ["Enabled", "Disabled"]
    assert inv.mig_enabled == [0] and inv.describe().endswith(", MIG on GPU 0")
    assert inv.gpu(0).memory_used_mib == 36537
    assert read_gpus(host(nvidia_smi.a6000_r515())).gpus[0].mig == ""  # `[N/A]`: no MIG on the card


def test_na_memory_cells_are_kept_as_unknown():
    inv = parse_probe("@@gpus\n0, GPU-x, NVIDIA H100 80GB HBM3, [N/A], [N/A], 580.126.09, [N/A]\n"
                      "@@apps\n@@header\n@@sessions\n@@end\n")
    assert inv.error == "" and (inv.gpus[0].memory_total_mib, inv.gpus[0].memory_used_mib) == (0, 0)
    assert inv.describe().startswith("1 x NVIDIA H100 80GB HBM3 (? MiB)")


@pytest.mark.parametrize("machine, said, why", [
    (nvidia_smi.no_devices, "No devices were found", "sees no GPU"),
    (nvidia_smi.nvml_mismatch, "Failed to initialize NVML: Driver/library version mismatch NVML library version: "
                               "570.124", "without a reboot"),
])
def test_a_failing_nvidia_smi_is_quoted(host, machine, said, why):
    inv = read_gpus(host(machine()))
    assert inv.gpus == [] and inv.error.startswith(f"nvidia-smi failed: {said} (") and why in inv.error
    # the same words with exit status 0 (some builds) are still a failure, never "an unexpected line"
    out = "@@gpus\n" + machine()["gpus"] + "@@apps\n@@header\n@@sessions\n@@end\n"
    assert parse_probe(out).error == inv.error
