"""Unpack an SGLang wheel into a repository-shaped tree: the one unpacker.

A wheel's `sglang/X` becomes `<dest>/python/sglang/X`. This machine uses it for the cached
trees (`specops.sglang.source.ensure_tree`); the `sglang_wheel` step runs this very file
on the host with `python -c` (`script()`), so the module uses the standard library only and
takes every name it needs (package prefix, marker file, git excludes) as arguments from
`specops.sglang.paths`. Two unpackers once wrote different version files for the same wheel.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: a Windows drive (`C:`) at the start of a name or of any of its parts: no wheel member has one
_DRIVE = re.compile(r"(?:^|/)[A-Za-z]:")


class UnsafeMember(ValueError):
    """A wheel member whose name would be written outside the tree: the wheel is refused
    whole (standard library only, as the host runs this file without specops installed)."""


def _member_problem(name: str) -> str | None:
    """Why `name` cannot be unpacked under a folder, or None: an absolute path, a `..` part,
    a drive or a backslash (a separator on Windows, a trick on POSIX)."""
    if "\\" in name:
        return "has a backslash"
    if name.startswith("/"):
        return "is an absolute path"
    if _DRIVE.search(name):
        return "names a drive"
    if ".." in name.split("/"):
        return "has a '..' part"
    if "\0" in name:
        return "has a NUL byte"
    return None


def check_members(wheel: str, names: list[str]) -> None:
    """Refuse the whole wheel if one member could land outside the tree: it is read before
    anything is written, so a refused wheel leaves nothing behind."""
    for name in names:
        problem = _member_problem(name)
        if problem is not None:
            raise UnsafeMember(f"wheel {wheel}: member {name!r} {problem}; refused, nothing written")


def _version_files(pkg: str, version: str) -> None:
    """A wheel built from a git checkout may lack the version file its `version.py` imports;
    write what is missing (never overwrite) so the tree declares the wheel's version."""
    generated = os.path.join(pkg, "_version.py")
    if not os.path.exists(generated):
        with open(generated, "w") as fh:
            fh.write(f"__version__ = version = {version!r}\n")
    plain = os.path.join(pkg, "version.py")
    if not os.path.exists(plain):
        with open(plain, "w") as fh:
            fh.write(f"__version__ = {version!r}\n")


#: the tree repository's settings that keep git from starting background housekeeping in it
NO_AUTO_GC = (("gc.auto", "0"), ("maintenance.auto", "false"))


def no_auto_gc_options() -> list[str]:
    """NO_AUTO_GC as `git -c key=value` options, for one command rather than the repo's config."""
    return [arg for key, value in NO_AUTO_GC for arg in ("-c", f"{key}={value}")]


def _git_commit(tree: str, version: str, exclude: list[str]) -> None:
    """Make the tree a one-commit git repository, so patches can be diffed and reverted.

    Its git never collects garbage by itself (gc.auto 0, maintenance.auto false): a release's
    ~6,000 loose objects made `git commit` start a detached `git gc --auto`, which went on
    writing into the tree's .git after the step had finished, so the next deploy's replacement
    of the tree failed removing it ("Directory not empty")."""
    git = ["git", "-C", tree, "-c", "user.email=specops@localhost", "-c", "user.name=specops"]
    subprocess.run(["git", "init", "-q", tree], check=True, timeout=120)
    for key, value in NO_AUTO_GC:
        subprocess.run(["git", "-C", tree, "config", key, value], check=True, timeout=120)
    subprocess.run(git + ["add", "-A"], check=True, timeout=600)
    subprocess.run(git + ["commit", "-q", "-m", f"sglang {version} from its wheel"], check=True, timeout=600)
    with open(os.path.join(tree, ".git", "info", "exclude"), "a") as fh:
        fh.write("".join(f"/{name}\n" for name in exclude))


def unpack(wheel: str, dest: str, version: str, *, prefix: str = "sglang/", git: bool = False,
           exclude: list[str] | None = None, marker: str | None = None, marker_data: dict[str, str] | None = None) -> str:
    """Unpack `prefix*` members of `wheel` under `dest/python/`, atomically (a temp folder
    beside `dest`, renamed into place). With `git`, the tree is committed as one git
    repository whose excludes hold `exclude`; `marker` (written last, excluded too) records
    `marker_data`."""
    dest = dest.rstrip("/")
    with zipfile.ZipFile(wheel) as zf:
        check_members(wheel, zf.namelist())
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}-", dir=parent)
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if not name.startswith(prefix) or name.endswith("/"):
                    continue
                target = os.path.join(tmp, "python", name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with zf.open(name) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
        _version_files(os.path.join(tmp, "python", prefix.rstrip("/")), version)
        if git:
            _git_commit(tmp, version, list(exclude or []) + ([marker] if marker else []))
        if marker:
            with open(os.path.join(tmp, marker), "w") as fh:
                json.dump(marker_data or {"version": version}, fh)
        if os.path.lexists(dest):
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main(argv: list[str]) -> int:
    """`python -c SCRIPT '<json of unpack()'s keyword arguments>'`: how a host runs it. A
    refused wheel is one `error:` line and exit 2, which the step's output tail shows."""
    try:
        unpack(**json.loads(argv[0]))
    except UnsafeMember as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def script() -> str:
    """This module's own text, run on a host as `python -c SCRIPT ARGS_JSON`."""
    return Path(__file__).read_text(encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
