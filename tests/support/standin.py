"""A stand-in GPU host: the real SGLang source distribution as a git repository, tagged as
upstream tags it, reached over the sshd fixture, and the build backend it needs, cached.
For a release with no pure-Python sdist that runs here (0.5.14), `wheel_repo` makes the
repository from the release's wheel instead.

The sdist (`pip download sglang==V --no-deps --no-binary :all:`) holds the package and
its pyproject.toml at its top; upstream keeps them under `python/`, so the repository is
laid out that way (package under `python/sglang/`, build files under `python/`). Its
build-generated `_version.py` is left out, as in a git checkout: the version then comes
from the tag, as on a real clone. The build backend (setuptools, setuptools-scm, wheel)
is downloaded once into the cache so that `pip install -e` works with `--no-index`.
"""

from __future__ import annotations

import email.parser
import fcntl
import functools
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from specops.hostfiles.cache import cache_root
from specops.sglang.source import ensure_tree, find_wheel
from specops.sglang.wheel import no_auto_gc_options

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
    return _commit_bare(work, bare, f"sglang {version} (from its source distribution)", f"v{version}")


def _commit_bare(work: Path, bare: Path, message: str, tag: str) -> Path:
    """Commit `work` as one tagged commit, cloned bare into `bare` (renamed into place: a
    reader never sees half a repository), `work` removed."""
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    # no detached `git gc --auto` left writing into `work` while it is removed below
    _git(work, *no_auto_gc_options(), "commit", "-q", "-m", message)
    _git(work, "tag", tag)
    tmp = bare.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp)], check=True, capture_output=True, timeout=300)
    tmp.rename(bare)
    shutil.rmtree(work, ignore_errors=True)
    return bare


#: the build files upstream keeps in `python/pyproject.toml`, as far as an editable install of
#: the wheel's files needs them: setuptools with the version from the tag, the wheel's own
#: `Requires-Dist` as the dependencies (the install step's runtime check reads them)
WHEEL_PYPROJECT = """[build-system]
requires = ["setuptools>=61.0", "setuptools-scm>=8.0", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
dynamic = ["version"]
requires-python = ">=3.10"
dependencies = [
{dependencies}]

[tool.setuptools.packages.find]
include = ["sglang*"]

[tool.setuptools.package-data]
"*" = ["*.so", "*.json", "*.jinja", "*.yaml"]

[tool.setuptools_scm]
root = ".."
version_file = "sglang/_version.py"
fallback_version = "0.0.0.dev0"
"""


def _wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's unconditional `Requires-Dist` lines (extras left out, as pip leaves them)."""
    import zipfile
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(name).decode())
    return [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]


@_cached
def wheel_repo(version: str) -> Path:
    """A bare repository laid out as upstream's (`python/sglang/`, `python/pyproject.toml`)
    from the files of sglang `version`'s wheel (0.5.14's has one compiled file, its gRPC
    core; the rest is the Python upstream's tag holds), one commit tagged `v<version>`.
    Its `_version.py` is left out, as in a git checkout: the tag gives the version. The
    CPU stand-ins are not in it: the tier's arms put them on the servers' PYTHONPATH."""
    bare = cache_root() / "standin" / f"sglang-{version}-wheel.git"
    if (bare / "HEAD").exists():
        return bare
    work = bare.parent / f"sglang-{version}-wheel.work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ensure_tree(version) / "python" / "sglang", work / "python" / "sglang",
                    ignore=shutil.ignore_patterns("__pycache__", "_version.py"))
    # markers quoted with ' as upstream writes them (specops' pyproject reader takes no escapes)
    requirements = [r.replace('"', "'") for r in _wheel_requirements(find_wheel(version))]
    deps = "".join(f'  "{r}",\n' for r in requirements)
    (work / "python" / "pyproject.toml").write_text(WHEEL_PYPROJECT.format(dependencies=deps))
    (work / ".gitignore").write_text("python/sglang/_version.py\n*.egg-info/\n__pycache__/\n/.specops/\n")
    return _commit_bare(work, bare, f"sglang {version} (from its wheel)", f"v{version}")


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
