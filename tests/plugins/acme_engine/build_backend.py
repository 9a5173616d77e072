"""A PEP 517 build backend for this one-package plugin: pip builds its wheel with nothing but the
standard library (no setuptools or wheel package needed, so the test installs it offline).

It reads from pyproject.toml the lines it needs, each `key = "value"`: the project's name and
version, and its entry points."""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "acme_engine"


def _sections() -> dict[str, dict[str, str]]:
    """pyproject.toml's `key = "value"` lines by section (a TOML reader is not in Python 3.10)."""
    out: dict[str, dict[str, str]] = {}
    section = ""
    for line in (HERE / "pyproject.toml").read_text().splitlines():
        if m := re.fullmatch(r"\[(.+)\]", line.strip()):
            section = m.group(1)
        elif m := re.fullmatch(r'([\w".-]+)\s*=\s*"([^"]*)"', line.strip()):
            out.setdefault(section, {})[m.group(1).strip('"')] = m.group(2)
    return out


def _files() -> dict[str, bytes]:
    """The wheel's contents: the package, then its dist-info (RECORD last)."""
    sections = _sections()
    project = sections["project"]
    name, version = project["name"].replace("-", "_"), project["version"]
    info = f"{name}-{version}.dist-info"
    files = {p.relative_to(HERE).as_posix(): p.read_bytes() for p in sorted((HERE / PACKAGE).rglob("*.py"))}
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {version}\n"
                                 f"Summary: {project['description']}\n").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: build_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    prefix = "project.entry-points."
    groups = {s[len(prefix):].strip('"'): v for s, v in sections.items() if s.startswith(prefix)}
    files[f"{info}/entry_points.txt"] = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in groups.items()).encode()
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    return files


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings: object = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: object = None, metadata_directory: object = None) -> str:
    project = _sections()["project"]
    name = f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in _files().items():
            whl.writestr(path, data)
    return name
