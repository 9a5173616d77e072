"""The tier's tiny models, made once per machine by make_models.py with the runtime's python
and cached under `<specops cache>/real-sglang/models-<hash of make_models.py>`; made under a
file lock into a temporary folder that is renamed into place, so a half-made set is never
found."""

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

from tests.support.real_sglang.runtime import HERE, RuntimeBuildError, real_root, runtime_python

SCRIPT = HERE / "make_models.py"
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


def models_dir() -> Path:
    return real_root() / f"models-{hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:16]}"


def _found(root: Path) -> TinyModels:
    return TinyModels(root, root / "target", root / "draft", root / "bad-draft", root / "sharegpt.json",
                      int((root / "vocab.txt").read_text()))


def _env() -> dict[str, str]:
    """This process's environment, offline, without its PYTHONPATH (the runtime has its own)."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "HF_HUB_OFFLINE": "1"}


def ensure_models() -> TinyModels:
    """The cached tiny models, made first if missing (builds the runtime if needed)."""
    root = models_dir()
    if (root / "vocab.txt").is_file():
        return _found(root)
    real_root().mkdir(parents=True, exist_ok=True)
    with open(real_root() / ".models.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / "vocab.txt").is_file():
            return _found(root)
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run([str(runtime_python()), str(SCRIPT), str(tmp)], capture_output=True, text=True,
                              timeout=600, env=_env())
        if proc.returncode != 0:
            raise RuntimeBuildError(f"{SCRIPT.name} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
        return _found(root)


def main() -> int:
    """Make the models now (CI does, beside the runtime, so the tier's own time is its tests')."""
    start = time.monotonic()
    fresh = not (models_dir() / "vocab.txt").is_file()
    try:
        models = ensure_models()
    except RuntimeBuildError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"real-sglang models {'made in %.0f s' % (time.monotonic() - start) if fresh else 'cached'}: {models.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
