"""A stand-in GPU host: the real SGLang source distribution as a git repository, tagged as
upstream tags it, reached over the sshd fixture, and the build backend it needs, cached.

The sdist (`pip download sglang==V --no-deps --no-binary :all:`) holds the package and
its pyproject.toml at its top; upstream keeps them under `python/`, so the repository is
laid out that way (package under `python/sglang/`, build files under `python/`). Its
build-generated `_version.py` is left out, as in a git checkout: the version then comes
from the tag, as on a real clone. The build backend (setuptools, setuptools-scm, wheel)
is downloaded once into the cache so that `pip install -e` works with `--no-index`.
"""

from __future__ import annotations

import fcntl
import functools
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from specops.sglang.source import cache_root

STANDIN_VERSION = "0.5.10.post1"
BUILD_REQUIREMENTS = ["setuptools>=61", "setuptools-scm>=8", "wheel"]
T = TypeVar("T")


def _cached(fn: Callable[..., T]) -> Callable[..., T]:
    """Build a cache entry in one process at a time (parallel test workers share the cache);
    each builder has its own lock, since `bare_repo` calls `sdist`."""
    @functools.wraps(fn)
    def locked(*args, **kwargs) -> T:
        cache_root().mkdir(parents=True, exist_ok=True)
        with open(cache_root() / f".standin-{fn.__name__}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return fn(*args, **kwargs)
    return locked


def _pip_download(args: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "-d", str(dest), *args],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"cannot download {' '.join(args)} (offline?): {(proc.stderr or proc.stdout).strip()[-300:]}")


@_cached
def sdist(version: str = STANDIN_VERSION) -> Path:
    """The cached source distribution of sglang `version`."""
    folder = cache_root() / "sdists"
    found = sorted(folder.glob(f"sglang-{version}.tar.gz"))
    if not found:
        _pip_download(["--no-deps", "--no-binary", ":all:", f"sglang=={version}"], folder)
        found = sorted(folder.glob(f"sglang-{version}.tar.gz"))
    if not found:
        pytest.skip(f"no sdist of sglang {version} in {folder}")
    return found[0]


@_cached
def build_wheels() -> Path:
    """A folder of wheels of SGLang's build backend, for `pip install --no-index --find-links`."""
    folder = cache_root() / "build-wheels"
    if not any(folder.glob("setuptools_scm-*.whl")):
        _pip_download(BUILD_REQUIREMENTS, folder)
    return folder


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                   check=True, capture_output=True, timeout=300)


@_cached
def bare_repo(version: str = STANDIN_VERSION) -> Path:
    """A bare repository with the sdist laid out as upstream, one commit tagged `v<version>`;
    built once and cached (tests clone it, never write to it)."""
    bare = cache_root() / "standin" / f"sglang-{version}.git"
    if (bare / "HEAD").exists():
        return bare
    work = bare.parent / f"sglang-{version}.work"
    shutil.rmtree(work, ignore_errors=True)
    (work / "python").mkdir(parents=True)
    with tarfile.open(sdist(version)) as tar:
        top = f"sglang-{version}/"
        for member in tar.getmembers():
            if not member.name.startswith(top) or not (member.isfile() or member.isdir()):
                continue
            rel = member.name[len(top):]
            if not rel or rel.startswith("sglang.egg-info") or rel in ("PKG-INFO", "sglang/_version.py"):
                continue
            dest = work / (rel if rel == "LICENSE" else f"python/{rel}")
            if member.isdir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None
            dest.write_bytes(src.read())
    (work / ".gitignore").write_text("python/sglang/_version.py\n*.egg-info/\n__pycache__/\n/.specops/\n")
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", f"sglang {version} (from its source distribution)")
    _git(work, "tag", f"v{version}")
    tmp = bare.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp)], check=True, capture_output=True, timeout=300)
    tmp.rename(bare)
    shutil.rmtree(work, ignore_errors=True)
    return bare


@_cached
def home_python() -> str:
    """`~/.cache/specops/standin-python`: a python reached through `~` (a symlink to this one),
    for the `python: ~/...` setting; returned in its `~` form."""
    link = cache_root() / "standin-python"
    if not link.is_symlink() or Path(link.resolve()) != Path(sys.executable).resolve():
        link.unlink(missing_ok=True)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(sys.executable)
    home = Path.home()
    try:
        return "~/" + str(link.relative_to(home))
    except ValueError:
        pytest.skip(f"the specops cache {link} is not under the home {home}")
