"""Inventories for tests that launch simulated arms on sshd or local hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specops.sim.testing import free_port
from tests.support.deploy import inventory

TIME_SCALE = 0.01


def arm_vars(threshold: int = 8, **per_arm: dict[str, Any]) -> dict[str, Any]:
    """The three arms on free ports; `per_arm` adds keys to one arm (e.g. extra_args)."""
    arms = {"baseline": {"port": free_port()}, "eagle3": {"port": free_port()},
            "adaptive": {"port": free_port(), "threshold": threshold}}
    for name, extra in per_arm.items():
        arms[name].update(extra)
    return {"model": "meta-llama/Llama-3.1-8B-Instruct", "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
            "max_running_requests": 64, "cuda_graph_max_bs": 64, "arms": arms, "sglang_ref": "v0.5.10.post1",
            "sglang_repo": "https://github.com/sgl-project/sglang.git", "sim": {"time_scale": TIME_SCALE}}


def sim_inventory(tmp_path: Path, entry: dict[str, Any], name: str = "gpu", engine: str = "sim",
                  **vars_: Any) -> Path:
    """hosts.yaml with one simulated host (`engine`: `sim`, SGLang's face, or `sim-vllm`);
    `vars_` override arm_vars()."""
    return inventory(tmp_path, {name: {**entry, "engine": engine}}, {**arm_vars(), **vars_})
