"""What a run records of the machine it ran on: GPUs or CPU, the tree's commit, specops's version."""

from __future__ import annotations

from typing import Any

from specops import __version__
from specops.transport.base import Transport
from specops.transport.nvidia import read_gpus
from specops.transport.probes import read_cpu


def gpu_facts(transport: Transport) -> dict[str, Any]:
    """What the manifest records of the host's GPUs: the model and count for the report's
    header, and everything nvidia-smi said (memory, driver, CUDA) for whoever reads it later."""
    inventory = read_gpus(transport)
    if inventory.error or not inventory.gpus:
        return {"gpu": "none (CPU host)", "gpu_count": 0}
    return {"gpu": inventory.gpus[0].name, "gpu_count": len(inventory.gpus), "gpus": inventory.to_dict()}


#: the facts of device_facts that the manifest also keeps at its top (the report's header)
HEADER_FACTS = ("gpu", "gpu_count", "device", "cpu", "cpu_cores")


def device_facts(transport: Transport, device: str = "gpu") -> dict[str, Any]:
    """What the manifest records of what the arms ran on: gpu_facts, or on a CPU host
    (`device: cpu`) the CPU's model, cores and memory (never "GPU: none")."""
    if device != "cpu":
        return gpu_facts(transport)
    cpu = read_cpu(transport)
    return {"device": "cpu", "cpu": cpu.describe(), "cpu_cores": cpu.cores, "cpu_facts": cpu.to_dict()}


def tree_commit(transport: Transport, tree: str) -> str | None:
    r = transport.run(["git", "-C", tree, "rev-parse", "HEAD"], timeout=30)
    return r.stdout.strip() if r.ok else None


def specops_version() -> str:
    return __version__
