"""The real tier's CPU host as a user writes it in hosts.yaml: one entry over the sshd
fixture (its engine, `device: cpu`) and, for SGLang, the variables that install a release's
tree over a cached runtime. One writer for every real module that deploys through specops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.deploy import inventory
from tests.support.real_sglang.models import TinyModels
from tests.support.standin import build_wheels


def cpu_entry(sshd: Any, workdir: Path, engine: str) -> dict[str, Any]:
    """The sshd fixture's first host, running `engine` on its CPU in `workdir`."""
    return {**sshd.host_entry(0, workdir=str(workdir)), "engine": engine, "device": "cpu"}


def sglang_inventory(tmp: Path, sshd: Any, models: TinyModels, python: Path, *, repo: Path, ref: str,
                     arms: dict[str, Any]) -> Path:
    """`tmp`/hosts.yaml: host `cpu` (workdir `tmp`/w) clones `repo` at `ref` and installs it
    editable, without its dependencies, over the runtime of `python`."""
    variables = {
        "model": str(models.target), "draft_model": str(models.draft),
        "sglang_repo": f"file://{repo}", "sglang_ref": ref,
        "sglang_runtime": str(python), "sglang_install_deps": False,
        # the tier's runtime is CPU torch and stand-in kernels, not the release's pins: the runtime
        # check lists them as warnings (tests/e2e/test_sglang_runtime.py tests its refusal)
        "sglang_allow_runtime_mismatch": True,
        "sglang_pip_args": ["--no-index", "--find-links", str(build_wheels())],
        "max_running_requests": 8, "cuda_graph_max_bs": 8, "arms": arms,
    }
    return inventory(tmp, {"cpu": cpu_entry(sshd, tmp / "w", "sglang")}, variables)
