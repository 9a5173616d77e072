"""Which CUDA an SGLang release needs, read from the tree's own pins, against the CUDA the
host's driver supports (nvidia-smi's header): refused before anything is installed.

pip finds out late (a torch that installs, then cannot initialise CUDA) or the server
does, at launch, after the install step has spent its minutes. The tree says it first,
in `python/pyproject.toml`:

* `cuda-python==12.9` / `cuda-python>=13.0`: the CUDA major its bindings are built for;
* `torch==X.Y.Z`: the CUDA build `pip install torch` gets from the package index for that
  release (TORCH_CUDA below), when no other index is given in `sglang_pip_args`.

The releases' own pins (their wheels' `Requires-Dist`, the same list as the pyproject's):
0.4.10.post2 torch 2.7.1, 0.5.4 torch 2.8.0, 0.5.9 and 0.5.10.post1 torch 2.9.1 with
cuda-python==12.9 (CUDA 12); from 0.5.11 cuda-python>=13.0 with torch 2.11.0, 0.5.19 and
0.5.20 torch 2.13.0, 0.5.23 torch 2.14.1 (CUDA 13). So 0.5.10.post1 is the last CUDA 12
release. Anything the rule cannot read (no pyproject, no pin, pins that disagree, a torch
this table does not know, a driver whose header names no CUDA) is a warning, never a guess.
A driver runs every CUDA of its major up to the one it reports (minor-version
compatibility), so only the major is compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from specops.transport.nvidia import GPUInventory

PYPROJECT = "python/pyproject.toml"
#: The CUDA build of `pip install torch==X.Y` from the package index, per torch minor:
#: 12.6 for 2.7, 12.8 for 2.8-2.10, 13.0 from 2.11 (PyTorch moved its stable CUDA to 13.0 for
#: release 2.11: https://github.com/pytorch/pytorch/pull/177975; the 2.14 matrix still names
#: 13.0 the index's wheel: https://github.com/pytorch/pytorch/issues/190355).
TORCH_CUDA = {"2.7": "12.6", "2.8": "12.8", "2.9": "12.8", "2.10": "12.8", "2.11": "13.0", "2.12": "13.0",
              "2.13": "13.0", "2.14": "13.0"}
#: The newest release of each CUDA major, for the refusal's advice (from the wheels' pins).
LAST_RELEASE = {12: "0.5.10.post1"}
#: The first driver branch of each CUDA major.
DRIVER_BRANCH = {12: "R525", 13: "R580"}
_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*(==|~=|>=|===)\s*([0-9][0-9A-Za-z.+*]*)")
_INDEX_ARGS = ("--index-url", "-i", "--extra-index-url", "--find-links", "-f")


@dataclass(frozen=True)
class CudaNeed:
    """What a tree's pins say: the CUDA major it needs (None: cannot tell) and the pins read."""

    major: int | None
    pins: str  # "torch==2.14.1, cuda-python>=13.0"
    why_unknown: str = ""


@dataclass(frozen=True)
class Verdict:
    """`refuse`: the one line that stops the install; `warn`: what could not be checked."""

    refuse: str | None = None
    warn: str | None = None


# --------------------------------------------------------------------------- pyproject


def _arrays(text: str) -> dict[str, list[str]]:
    """The string arrays of a pyproject: `project.dependencies` and each
    `project.optional-dependencies.<extra>`. A small reader (Python 3.10 has no tomllib):
    tables, `key = [ ... ]` over one or many lines, quoted strings with brackets inside."""
    out: dict[str, list[str]] = {}
    table, key, buf = "", None, ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0] if '"' not in raw and "'" not in raw else raw
        if key is None:
            stripped = line.strip()
            header = re.match(r"^\[([^\]]+)\]\s*$", stripped)
            if header:
                table = header.group(1).strip()
                continue
            m = re.match(r'^([A-Za-z0-9_."\-]+)\s*=\s*\[(.*)$', stripped)
            if not m:
                continue
            key, buf = f"{table}.{m.group(1).strip(chr(34))}", m.group(2)
        else:
            buf += "\n" + line
        strings, closed = _strings_until_close(buf)
        if closed:
            out[key] = strings
            key, buf = None, ""
    return out


def _strings_until_close(buf: str) -> tuple[list[str], bool]:
    """The quoted strings of an array body, and whether its closing `]` was reached."""
    strings: list[str] = []
    i, quote, cur = 0, "", ""
    while i < len(buf):
        c = buf[i]
        if quote:
            if c == quote:
                strings.append(cur)
                quote, cur = "", ""
            else:
                cur += c
        elif c in "\"'":
            quote = c
        elif c == "#":
            nl = buf.find("\n", i)
            i = len(buf) if nl < 0 else nl
            continue
        elif c == "]":
            return strings, True
        i += 1
    return strings, False


def requirements(pyproject: str, extras: Sequence[str] = ()) -> list[str]:
    """The requirement strings pip installs for the tree: `project.dependencies`, then
    those of each extra asked for, as written (markers kept)."""
    arrays = _arrays(pyproject)
    reqs = list(arrays.get("project.dependencies", []))
    for extra in extras:
        reqs += arrays.get(f"project.optional-dependencies.{extra}", [])
    return reqs


def pins(pyproject: str, extras: Sequence[str] = ()) -> dict[str, tuple[str, str]]:
    """`{"torch": ("==", "2.14.1"), "cuda-python": (">=", "13.0")}` from the dependencies
    pip installs: the project's own and those of the extras asked for (`sglang[srt]` up to
    0.5.1 pinned torch only there)."""
    out: dict[str, tuple[str, str]] = {}
    for req in requirements(pyproject, extras):
        m = _PIN.match(req.split(";", 1)[0])
        if m:
            name = m.group(1).lower().replace("_", "-")
            out.setdefault(name, (m.group(2), m.group(3)))
    return out


def _major(version: str) -> int | None:
    m = re.match(r"(\d+)", version)
    return int(m.group(1)) if m else None


def needed(pyproject: str | None, extras: Sequence[str] = (), pip_args: Sequence[str] = ()) -> CudaNeed:
    """The CUDA major the tree's pins need. torch's pin counts only where pip installs torch
    from the package index (no `--index-url` and the like in `pip_args`)."""
    if pyproject is None:
        return CudaNeed(None, "", f"the tree has no {PYPROJECT}")
    found = pins(pyproject, extras)
    said: dict[str, int] = {}
    shown = []
    if "torch" in found:
        op, version = found["torch"]
        shown.append(f"torch{op}{version}")
        minor = ".".join(version.split(".")[:2])
        other_index = any(a.split("=", 1)[0] in _INDEX_ARGS for a in pip_args)
        if op == "==" and minor in TORCH_CUDA and not other_index:
            said["torch"] = _major(TORCH_CUDA[minor]) or 0
    if "cuda-python" in found:
        op, version = found["cuda-python"]
        shown.append(f"cuda-python{op}{version}")
        if op in ("==", "~=", ">=", "==="):
            said["cuda-python"] = _major(version) or 0
    text = ", ".join(shown)
    if len(set(said.values())) > 1:
        return CudaNeed(None, text, "its pins disagree (" + ", ".join(f"{k}: CUDA {v}" for k, v in said.items()) + ")")
    if not said:
        why = f"{PYPROJECT} pins {text}, which says no CUDA" if text else f"{PYPROJECT} pins no torch or cuda-python"
        return CudaNeed(None, text, why)
    return CudaNeed(next(iter(said.values())), text)


# --------------------------------------------------------------------------- the verdict


def driver_cuda(inventory: GPUInventory) -> tuple[int, int] | None:
    """(major, minor) of the CUDA the driver supports, from nvidia-smi's header."""
    m = re.match(r"(\d+)\.(\d+)", inventory.cuda_version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def verdict(version: str | None, need: CudaNeed, inventory: GPUInventory) -> Verdict:
    """Refuse when the driver's CUDA major is below the tree's; warn when either is unknown.
    No GPUs (nvidia-smi missing or failing: the GPU preflight says so) is nothing to judge."""
    if inventory.error or not inventory.gpus:
        return Verdict()
    release = f"SGLang {version}" if version else "this SGLang tree"
    if need.major is None:
        return Verdict(warn=f"{release}: which CUDA it needs is not known ({need.why_unknown}); not checked "
                            f"against this host's driver {inventory.driver_version or '?'}")
    have = driver_cuda(inventory)
    if have is None:
        return Verdict(warn=f"{release} needs CUDA {need.major} ({need.pins}); nvidia-smi names no CUDA version "
                            f"for driver {inventory.driver_version or '?'}: not checked")
    if have[0] >= need.major:
        return Verdict()
    fits = LAST_RELEASE.get(have[0])
    use = f"use SGLang {fits} or " if fits else ""
    branch = DRIVER_BRANCH.get(need.major)
    update = f"update the driver ({branch} or newer supports CUDA {need.major})" if branch else "update the driver"
    return Verdict(refuse=f"{release} needs CUDA {need.major} ({need.pins}); this host's driver "
                          f"{inventory.driver_version or '?'} supports CUDA {have[0]}.{have[1]}: {use}{update}")
