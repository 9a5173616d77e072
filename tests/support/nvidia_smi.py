"""A stand-in `nvidia-smi` for hosts without a GPU: the ONE stub in the suite, because no
GPU exists here. It prints what the real tool prints for the queries specops makes
(`--query-gpu=... --format=csv,noheader,nounits`, `--query-compute-apps=...`, the plain
table's header), in the formats NVIDIA documents and real machines show: an idle
8 x H100 SXM box, an idle 1 x H200 box, and one H100 box where a foreign process holds
GPU 3. Each test says which machine it stands in for.
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

_H100_UUIDS = [f"GPU-8b2e1f7a-4c3d-{i:04x}-9e1a-3f5c7d9b{i:04x}" for i in range(8)]


def h100_idle(count: int = 8) -> dict[str, str]:
    gpus = "".join(f"{i}, {_H100_UUIDS[i]}, NVIDIA H100 80GB HBM3, 81559, 1, 535.129.03\n" for i in range(count))
    return {"gpus": gpus, "apps": "", "header": H100_HEADER}


def h100_gpu3_busy() -> dict[str, str]:
    """GPU 3 runs someone's training job (pid 48213, 70245 MiB)."""
    out = h100_idle()
    out["gpus"] = out["gpus"].replace(f"3, {_H100_UUIDS[3]}, NVIDIA H100 80GB HBM3, 81559, 1,",
                                      f"3, {_H100_UUIDS[3]}, NVIDIA H100 80GB HBM3, 81559, 70712,")
    out["apps"] = f"{_H100_UUIDS[3]}, 48213, /usr/bin/python3, 70245\n"
    return out


def h200_idle() -> dict[str, str]:
    return {"gpus": "0, GPU-1f0c9a52-77de-3b1a-84c2-5e6a0d2b9c41, NVIDIA H200, 143771, 0, 550.90.07\n",
            "apps": "", "header": H200_HEADER}


def driver_failed() -> dict[str, str]:
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    return {"gpus": msg, "apps": msg, "header": msg, "rc": "9"}


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
