"""Real SGLang source trees, fetched once from the published wheels and cached.

The simulator reads which flags exist from a tree's own source, and the patching tests
run against real trees, so both need SGLang's files without SGLang's runtime. A wheel's
`sglang/X` is the repository's `python/sglang/X`; we unpack it in that repo shape.

Offline: set SPECOPS_SGLANG_WHEELS to a folder holding `sglang-<version>-*.whl` files;
with neither that nor the package index reachable, `ensure_tree` raises a SpecopsError
saying exactly that.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from specops.errors import ConfigError, SpecopsError
from specops.hostfiles.cache import cache_root
from specops.sglang.paths import WHEEL_PACKAGE_PREFIX
from specops.sglang.wheel import UnsafeMember, unpack

DEMO_VERSION = "0.5.10.post1"


def _find_local_wheel(version: str) -> Path | None:
    for folder in filter(None, [os.environ.get("SPECOPS_SGLANG_WHEELS"), str(cache_root() / "wheels")]):
        for candidate in sorted(Path(folder).glob(f"sglang-{version}-*.whl")):
            return candidate
    return None


def _download_wheel(version: str, dest: Path) -> Path:
    """pip download the wheel; any platform's wheel will do, we only read its sources."""
    dest.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest)]
    attempts = [
        base + [f"sglang=={version}"],
        base + ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
                "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux2014_x86_64", f"sglang=={version}"],
    ]
    last_err = ""
    for argv in attempts:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        found = sorted(dest.glob(f"sglang-{version}-*.whl"))
        if proc.returncode == 0 and found:
            return found[0]
        last_err = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
    raise SpecopsError(
        f"could not fetch the SGLang {version} wheel: {last_err}",
        where="sglang source",
        hint="offline? put sglang-<version>-*.whl in a folder and set SPECOPS_SGLANG_WHEELS to it",
    )


def wheel_version(wheel: Path) -> str:
    """`sglang-0.5.10.post1-py3-none-any.whl` -> `0.5.10.post1`."""
    return wheel.name.split("-")[1]


def unpack_wheel(wheel: Path, tree: Path) -> Path:
    """Unpack `sglang/*` of a wheel into `tree/python/sglang/*` with the one unpacker
    (the `sglang_wheel` step runs the same code on hosts). A member that would land outside
    the tree is bad input: ConfigError naming the wheel and the member, nothing written."""
    try:
        return Path(unpack(str(wheel), str(tree), wheel_version(wheel), prefix=WHEEL_PACKAGE_PREFIX))
    except UnsafeMember as exc:
        raise ConfigError(str(exc), where=str(wheel)) from exc


def find_wheel(version: str) -> Path:
    """The cached (or offline-provided) wheel of `version`, fetched once when missing."""
    return _find_local_wheel(version) or _download_wheel(version, cache_root() / "wheels")


def ensure_tree(version: str = DEMO_VERSION, root: Path | None = None) -> Path:
    """Return a repo-shaped SGLang tree (`<tree>/python/sglang/...`) for `version`, fetching once.

    Safe to call from several processes at once (parallel test workers, two terminals):
    one fetches and unpacks under a lock while the others wait, then finds the tree (the
    unpacker itself renames a finished tree into place)."""
    root = root or cache_root() / "sglang"
    tree = root / version
    if (tree / "python" / "sglang" / "srt").is_dir():
        return tree
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / "python" / "sglang" / "srt").is_dir():
            return tree
        return unpack_wheel(find_wheel(version), tree)
