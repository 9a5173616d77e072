"""A small local image that stands in for SGLang's container image, and podman set up to run it.

No registry is reachable from the test machines, so the image is made here: a root
filesystem holding this machine's own python (the interpreter, its shared libraries, the
standard library), the packages the simulator imports (specops itself, aiohttp, yaml and
their dependencies, copied from this python's site-packages), and a stand-in `sglang`
package at the place SGLang's image has its own (`site-packages/sglang`, version
FAKE_SGLANG_VERSION), so the "patched checkout is mounted over the image's package" check
has something real to verify. It is tarred, cached under ~/.cache/specops/container-image/,
and `podman import`ed as `localhost/specops-sim:<recipe hash>`; a change to the recipe (this
file, specops's sources, the python) makes a new tag.

podman on these machines (measured on Debian 12 as root): crun fails on the cgroup setup
and the default ulimits are refused, so CONTAINERS_CONF points at a file with `runtime =
"runc"` and ulimits the kernel accepts (`containers_conf`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path.home() / ".cache" / "specops" / "container-image"
IMAGE_REPO = "localhost/specops-sim"
#: an earlier recipe's image is removed only once this old: two checkouts on one machine share the cache
STALE_RECIPE_S = 86400
FAKE_SGLANG_VERSION = "0.0.0+image"
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
"""
#: what the standard library can do without in a server image
_STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
                "dist-packages", "unittest/test"}
_FIND_MODULES = ("import json, sys, specops.sim.program\n"
                 "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))")


def missing() -> str:
    """Why the container tests cannot run here ('' when they can)."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install podman runc catatonit)"
    if os.geteuid() != 0:
        return "the container tests use rootful podman (run as root)"
    return ""


def containers_conf() -> Path:
    """The podman configuration these machines need, written once."""
    path = CACHE / "containers.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != CONTAINERS_CONF:
        path.write_text(CONTAINERS_CONF)
    return path


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(containers_conf())}


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _top_packages() -> list[Path]:
    """The files or folders, outside the standard library, of every module the simulator imports."""
    import json
    out = subprocess.run([sys.executable, "-c", _FIND_MODULES], capture_output=True, text=True, check=True,
                         cwd="/")
    stdlib = str(_stdlib()) + "/"
    tops: set[Path] = set()
    for name in json.loads(out.stdout):
        if not name or (name.startswith(stdlib) and "-packages/" not in name) or name.startswith(str(REPO) + "/"):
            continue  # specops itself is copied from this checkout
        path = Path(name)
        for parent in path.parents:  # the folder right below a sys.path entry
            if str(parent) in sys.path or parent.name in ("site-packages", "dist-packages"):
                rel = path.relative_to(parent)
                if not rel.parts[0].startswith(("__editable__", "_distutils_hack")):
                    tops.add(parent / rel.parts[0])
                break
    return sorted(tops | {REPO / "specops"})


def _libraries(files: list[Path]) -> set[str]:
    """The shared libraries (and the loader) `files` link against, as ldd names them."""
    libs: set[str] = set()
    for f in files:
        out = subprocess.run(["ldd", str(f)], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            parts = line.split()
            path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0] if parts else ""
            if path.startswith("/"):
                libs.add(path)
    return libs


def _recipe() -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(sys.version.encode() + os.path.realpath(sys.executable).encode())
    for f in sorted((REPO / "specops").rglob("*.py")):
        h.update(str(f.relative_to(REPO)).encode() + f.read_bytes())
    return h.hexdigest()[:12]


def _put(root: Path, src: str) -> None:
    """Copy `src` into `root` at its real path, and its given path as a link to it."""
    real = os.path.realpath(src)
    dest = root / real.lstrip("/")
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, dest)
    link = root / src.lstrip("/")
    if src != real and not link.exists() and not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(real)


def _rootfs(root: Path) -> None:
    python = os.path.realpath(sys.executable)
    stdlib = _stdlib()
    site = _site()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")

    def skip(d: str, names: list[str]) -> list[str]:
        rel = os.path.relpath(d, stdlib)
        return [n for n in names if (n if rel == "." else f"{rel}/{n}") in _STDLIB_SKIP]

    shutil.copytree(stdlib, root / str(stdlib).lstrip("/"), ignore=skip, symlinks=True)
    packages = _top_packages()
    target = root / str(site).lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    for top in packages:
        if top.is_dir():
            shutil.copytree(top, target / top.name, ignore=ignore, dirs_exist_ok=True)
        else:
            shutil.copy2(top, target / top.name)
    fake = target / "sglang"  # the image's own SGLang, which the mounted tree must hide
    (fake / "srt").mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text('"""The image\'s SGLang (a stand-in): the mounted tree must hide it."""\n')
    (fake / "version.py").write_text(f'__version__ = "{FAKE_SGLANG_VERSION}"\n')
    (fake / "srt" / "server_args.py").write_text("# the image's own server_args (a stand-in)\n")
    binaries = [Path(python), *(p for p in root.rglob("*.so"))]
    hostlibs = [Path(str(p).replace(str(root), "", 1)) for p in binaries[1:]]
    for lib in _libraries([Path(python), *hostlibs]) | {python}:
        _put(root, lib)
    ldlib = sysconfig.get_config_var("LDLIBRARY")
    libdir = sysconfig.get_config_var("LIBDIR")
    if ldlib and libdir and (Path(libdir) / ldlib).exists():
        _put(root, str(Path(libdir) / ldlib))
    for d in ("usr/bin", "tmp", "etc", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    py3 = root / "usr" / "bin" / "python3"
    if not py3.exists() and not py3.is_symlink():
        py3.symlink_to(python)


def build_image() -> str:
    """The image's reference, built and imported the first time its recipe is seen."""
    env = podman_env()
    tag = _recipe()
    ref = f"{IMAGE_REPO}:{tag}"
    if subprocess.run(["podman", "image", "exists", ref], env=env).returncode == 0:
        return ref
    tarball = CACHE / f"rootfs-{tag}.tar"
    if not tarball.exists():
        stage = CACHE / f"rootfs-{tag}"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        _rootfs(stage)
        part = tarball.with_suffix(".part")
        with tarfile.open(part, "w") as tar:
            for entry in sorted(stage.iterdir()):
                tar.add(entry, arcname=entry.name)
        part.rename(tarball)
        shutil.rmtree(stage, ignore_errors=True)
    subprocess.run(["podman", "import", "--change", "CMD=python3", str(tarball), ref], env=env, check=True,
                   capture_output=True)
    for old in CACHE.glob("rootfs-*.tar"):  # earlier recipes, a day old: their tarball and image
        # (a younger one may be another checkout's on this machine, its tests running now)
        if old != tarball and time.time() - old.stat().st_mtime > STALE_RECIPE_S:
            old.unlink(missing_ok=True)
            subprocess.run(["podman", "rmi", "-f", f"{IMAGE_REPO}:{old.stem.removeprefix('rootfs-')}"], env=env,
                           capture_output=True)
    return ref
