"""A stand-in `nvidia-smi` for hosts without a GPU: the ONE stub in the suite, because no
GPU exists here. It prints what the real tool prints for the queries specops makes
(`--query-gpu=... --format=csv,noheader,nounits`, `--query-compute-apps=...`, the plain
table's header), in the formats real machines show, one driver generation after another:
an idle 8 x H100 SXM box (R535), an idle 1 x H200 box (R550), one H100 box where a foreign
process holds GPU 3, an R580 box (CUDA 13), an R610 box whose header relabels both versions,
a GPU in MIG mode, an R515 workstation card, and the ways nvidia-smi fails. Each machine says where its format comes
from; each test says which machine it stands in for.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

H100_HEADER = """Mon Nov 30 08:00:00 2026
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.129.03             Driver Version: 535.129.03   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
"""
H200_HEADER = """Mon Nov 30 08:00:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
"""
#: R580 (CUDA 13.0): the same labels; the rule under the version line is `+---+`, no longer
#: `|---|` (as printed in https://github.com/bottlerocket-os/bottlerocket-core-kit/pull/834).
R580_HEADER = """Thu Feb 19 19:24:54 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.126.09             Driver Version: 580.126.09     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
"""
#: R610 (CUDA 13.3) relabels both: `KMD Version:` and `CUDA UMD Version:` (as printed in
#: https://github.com/sgl-project/sglang/issues/27487 on 8 x B200).
R610_HEADER = """Sun Jun  7 08:16:57 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 610.43.02              KMD Version: 610.43.02     CUDA UMD Version: 13.3     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
"""
#: An A800 in MIG mode under R535 (the header as printed in
#: https://github.com/utkuozdemir/nvidia_gpu_exporter/issues/203).
A800_MIG_HEADER = """Tue Jul  9 10:00:00 2024
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.86.10              Driver Version: 535.86.10    CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
"""

A6000_HEADER = """Thu Jul 21 15:48:36 2022
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 515.48.07    Driver Version: 515.48.07    CUDA Version: 11.7     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
"""

_H100_UUIDS = [f"GPU-8b2e1f7a-4c3d-{i:04x}-9e1a-3f5c7d9b{i:04x}" for i in range(8)]
_B200_UUIDS = [f"GPU-3c1d7e20-9a4b-{i:04x}-b2f1-77e0a5c4{i:04x}" for i in range(8)]


def _row(index: int, uuid: str, name: str, total: int | str, used: int | str, driver: str, mig: str = "[N/A]") -> str:
    """One `--query-gpu` row; `mig.mode.current` is `[N/A]` on a GPU without MIG, else
    `Enabled`/`Disabled` (as in https://github.com/Syllo/nvtop/pull/470)."""
    return f"{index}, {uuid}, {name}, {total}, {used}, {driver}, {mig}\n"


def h100_idle(count: int = 8) -> dict[str, str]:
    gpus = "".join(_row(i, _H100_UUIDS[i], "NVIDIA H100 80GB HBM3", 81559, 1, "535.129.03", "Disabled")
                   for i in range(count))
    return {"gpus": gpus, "apps": "", "header": H100_HEADER}


def h100_gpu3_busy() -> dict[str, str]:
    """GPU 3 runs someone's training job (pid 48213, 70245 MiB)."""
    out = h100_idle()
    out["gpus"] = out["gpus"].replace(f"3, {_H100_UUIDS[3]}, NVIDIA H100 80GB HBM3, 81559, 1,",
                                      f"3, {_H100_UUIDS[3]}, NVIDIA H100 80GB HBM3, 81559, 70712,")
    out["apps"] = f"{_H100_UUIDS[3]}, 48213, /usr/bin/python3, 70245\n"
    return out


def h200_idle() -> dict[str, str]:
    return {"gpus": _row(0, "GPU-1f0c9a52-77de-3b1a-84c2-5e6a0d2b9c41", "NVIDIA H200", 143771, 0, "550.90.07",
                         "Disabled"),
            "apps": "", "header": H200_HEADER}


def h100_r580(count: int = 8) -> dict[str, str]:
    """An idle H100 box on an R580 driver: CUDA 13.0."""
    gpus = "".join(_row(i, _H100_UUIDS[i], "NVIDIA H100 80GB HBM3", 81559, 1, "580.126.09", "Disabled")
                   for i in range(count))
    return {"gpus": gpus, "apps": "", "header": R580_HEADER}


def b200_r610(count: int = 8) -> dict[str, str]:
    """An idle 8 x B200 on R610: the header says `KMD Version` / `CUDA UMD Version`."""
    gpus = "".join(_row(i, _B200_UUIDS[i], "NVIDIA B200", 183359, 0, "610.43.02", "Disabled") for i in range(count))
    return {"gpus": gpus, "apps": "", "header": R610_HEADER}


def a800_mig() -> dict[str, str]:
    """GPU 0 in MIG mode (36537 MiB in use by its instances), GPU 1 whole (the two values as in
    https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/pull/852)."""
    gpus = (_row(0, "GPU-ec845691-fb46-e16d-abfb-b135308cb39f", "NVIDIA A800-SXM4-80GB", 81920, 36537, "535.86.10",
                 "Enabled")
            + _row(1, "GPU-91672fbd-4bc1-0434-a653-77a9501c84de", "NVIDIA A800-SXM4-80GB", 81920, 0, "535.86.10",
                   "Disabled"))
    return {"gpus": gpus, "apps": "", "header": A800_MIG_HEADER}


def a6000_r515() -> dict[str, str]:
    """A workstation RTX A6000 on R515 (CUDA 11.7): no MIG on it, so `[N/A]` (the header as
    printed in https://github.com/NVIDIA/k8s-device-plugin/issues/324)."""
    return {"gpus": _row(0, "GPU-5d3b5c0e-41a6-7b2c-93d1-0e6f2a8b4c17", "NVIDIA RTX A6000", 49140, 5, "515.48.07"),
            "apps": "", "header": A6000_HEADER}


def driver_failed() -> dict[str, str]:
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    return {"gpus": msg, "apps": msg, "header": msg, "rc": "9"}


def no_devices() -> dict[str, str]:
    """The driver answers, no GPU is there (as reported in
    https://github.com/NVIDIA/nvidia-docker/issues/933 after a reboot)."""
    msg = "No devices were found\n"
    return {"gpus": msg, "apps": msg, "header": msg, "rc": "6"}


def nvml_mismatch() -> dict[str, str]:
    """A driver upgraded under a running kernel module (as printed in
    https://github.com/tinygrad/open-gpu-kernel-modules/issues/47)."""
    msg = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124\n"
    return {"gpus": msg, "apps": msg, "header": msg, "rc": "18"}


def install(bindir: Path, machine: dict[str, str]) -> Path:
    """Write `bindir/nvidia-smi` answering like `machine`; returns its path."""
    bindir.mkdir(parents=True, exist_ok=True)
    rc = machine.get("rc", "0")
    script = f"""#!/bin/sh
# Stand-in nvidia-smi (tests only: no GPU on this machine).
case "$*" in
  *--query-gpu=*) printf '%s' {shlex.quote(machine['gpus'])}; exit {rc} ;;
  *--query-compute-apps=pid*) printf '%s' {shlex.quote(machine['apps'])} | cut -d, -f2 | tr -d ' '; exit {rc} ;;
  *--query-compute-apps=*) printf '%s' {shlex.quote(machine['apps'])}; exit {rc} ;;
  *) printf '%s' {shlex.quote(machine['header'])}; exit {rc} ;;
esac
"""
    path = bindir / "nvidia-smi"
    path.write_text(script)
    os.chmod(path, 0o755)
    return path
