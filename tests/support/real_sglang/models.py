"""The tier's tiny models, made once per machine by make_models.py with the runtime's python
and cached under `<specops cache>/real-sglang/models-<hash of make_models.py>`; made under a
file lock into a temporary folder that is renamed into place, so a half-made set is never
found. vLLM's set (make_vllm_models.py, head_dim 32, with the vLLM runtime's python) is cached
the same way under `vllm-models-<hash of both scripts>`; the heavy sets (make_heavy_models.py
over a tiny set) under `vllm-heavy-<hash>` and `sglang-heavy-<hash>`.

    python -m tests.support.real_sglang.models [vllm|vllm-heavy|sglang-heavy]   # make if needed; print time and path
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

from tests.support.real_sglang.runtime import HERE, VLLM, RuntimeBuildError, real_root, runtime_python

SCRIPT = HERE / "make_models.py"
VLLM_SCRIPT = HERE / "make_vllm_models.py"
HEAVY_SCRIPT = HERE / "make_heavy_models.py"
HEAVY = "vllm-heavy"
SGLANG_HEAVY = "sglang-heavy"
#: what SGLang logs when given the bad draft (0.5.9 and 0.5.10.post1: llama_eagle3.py)
BAD_DRAFT_ERROR = "EAGLE3 currently only supports 1 layer"


@dataclass(frozen=True)
class TinyModels:
    root: Path
    target: Path  # tiny Llama + tokenizer
    draft: Path  # EAGLE-3 head for it
    bad_draft: Path  # not an EAGLE head: the server dies with BAD_DRAFT_ERROR
    sharegpt: Path  # ShareGPT-format JSON for bench_serving
    vocab: int


@dataclass(frozen=True)
class VLLMModels:
    root: Path
    target: Path  # tiny Llama, head_dim 32, + tokenizer
    draft: Path  # EAGLE-3 head for it, without d2t/t2d
    bad_draft: Path  # the head with d2t/t2d: vLLM's worker dies loading it
    vocab: int


def models_dir() -> Path:
    return real_root() / f"models-{hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:16]}"


def vllm_models_dir() -> Path:
    digest = hashlib.sha256(SCRIPT.read_bytes() + b"\0" + VLLM_SCRIPT.read_bytes()).hexdigest()[:16]
    return real_root() / f"vllm-models-{digest}"


def vllm_heavy_dir() -> Path:
    digest = hashlib.sha256(b"\0".join(p.read_bytes() for p in (SCRIPT, VLLM_SCRIPT, HEAVY_SCRIPT))).hexdigest()[:16]
    return real_root() / f"{HEAVY}-{digest}"


#: make_heavy_models.py's arguments for SGLang's heavy set (part of its cache key)
SGLANG_HEAVY_ARGS = ("--wide-head", "--dtypes", "float32,bfloat16")


def sglang_heavy_dir() -> Path:
    digest = hashlib.sha256(b"\0".join([SCRIPT.read_bytes(), HEAVY_SCRIPT.read_bytes(),
                                        " ".join(SGLANG_HEAVY_ARGS).encode()])).hexdigest()[:16]
    return real_root() / f"{SGLANG_HEAVY}-{digest}"


def _found(root: Path) -> TinyModels:
    return TinyModels(root, root / "target", root / "draft", root / "bad-draft", root / "sharegpt.json",
                      int((root / "vocab.txt").read_text()))


def _env() -> dict[str, str]:
    """This process's environment, offline, without its PYTHONPATH (the runtime has its own)."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HF_HUB_OFFLINE": "1"}


def _make(root: Path, script: Path, python: Path, *args: str) -> None:
    """Run `script` into `root` unless a finished set is there (under the tier's models lock);
    `args` go before the output folder."""
    if (root / "vocab.txt").is_file():
        return
    real_root().mkdir(parents=True, exist_ok=True)
    with open(real_root() / ".models.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "vocab.txt").is_file():
            return
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run([str(python), str(script), *args, str(tmp)], capture_output=True, text=True,
                              timeout=900, env=_env())
        if proc.returncode != 0:
            raise RuntimeBuildError(f"{script.name} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)


def ensure_models() -> TinyModels:
    """The cached tiny models, made first if missing (builds the runtime if needed)."""
    root = models_dir()
    if not (root / "vocab.txt").is_file():
        _make(root, SCRIPT, runtime_python())
    return _found(root)


def ensure_vllm_models() -> VLLMModels:
    """vLLM's cached tiny models, made first if missing (builds the vLLM runtime if needed)."""
    root = vllm_models_dir()
    if not (root / "vocab.txt").is_file():
        _make(root, VLLM_SCRIPT, runtime_python(VLLM))
    return VLLMModels(root, root / "target", root / "draft", root / "bad-draft",
                      int((root / "vocab.txt").read_text()))


def ensure_vllm_heavy_models() -> VLLMModels:
    """The heavy vLLM set (make_heavy_models.py over vLLM's tiny set), made first if missing
    (~40 s and 1.2 GB on disk); `bad_draft` is the tiny set's."""
    tiny = ensure_vllm_models()
    root = vllm_heavy_dir()
    if not (root / "vocab.txt").is_file():
        _make(root, HEAVY_SCRIPT, runtime_python(VLLM), str(tiny.root))
    return VLLMModels(root, root / "target", root / "draft", tiny.bad_draft, int((root / "vocab.txt").read_text()))


def ensure_sglang_heavy_models() -> TinyModels:
    """The heavy SGLang set (make_heavy_models.py --wide-head over the tier's tiny set: target and
    head both hidden 2048, its tokens proved in float32 and bfloat16), made first if missing
    (~1 min, 1.2 GB); `bad_draft` is the tiny set's."""
    tiny = ensure_models()
    root = sglang_heavy_dir()
    if not (root / "vocab.txt").is_file():
        _make(root, HEAVY_SCRIPT, runtime_python(), str(tiny.root), *SGLANG_HEAVY_ARGS)
    return TinyModels(root, root / "target", root / "draft", tiny.bad_draft, root / "sharegpt.json",
                      int((root / "vocab.txt").read_text()))


def main(argv: list[str] | None = None) -> int:
    """Make the models now (CI does, beside the runtime, so the tier's own time is its tests')."""
    args = sys.argv[1:] if argv is None else argv
    which = args[0] if args[:1] in ([VLLM], [HEAVY], [SGLANG_HEAVY]) else ""
    dirs = {VLLM: vllm_models_dir, HEAVY: vllm_heavy_dir, SGLANG_HEAVY: sglang_heavy_dir, "": models_dir}
    makers = {VLLM: ensure_vllm_models, HEAVY: ensure_vllm_heavy_models, SGLANG_HEAVY: ensure_sglang_heavy_models,
              "": ensure_models}
    start = time.monotonic()
    fresh = not (dirs[which]() / "vocab.txt").is_file()
    try:
        root = makers[which]().root
    except RuntimeBuildError as exc:
        print(exc, file=sys.stderr)
        return 2
    made = "made in %.0f s" % (time.monotonic() - start) if fresh else "cached"
    label = {VLLM: "vLLM ", HEAVY: "heavy vLLM ", SGLANG_HEAVY: "heavy SGLang ", "": ""}[which]
    print(f"real-sglang {label}models {made}: {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
