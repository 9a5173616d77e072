"""One wheel unpacker: the tree the `sglang_wheel` step lays out on a host is the tree
`ensure_tree` caches on this machine, file for file (the two unpackers once wrote
different version files for the same wheel)."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.sglang.flags import tree_version
from specops.sglang.layout import detect_layout
from specops.sglang.paths import SERVER_ARGS, WHEEL_MARKER
from specops.sglang.source import find_wheel, unpack_wheel
from tests.support.deploy import inventory, run_cli, write_yaml


def _files(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(tree).parts and p.name != WHEEL_MARKER}


def _synthetic_wheel(folder: Path, version: str) -> Path:
    """A wheel built from a git checkout: version.py imports a _version.py that is not there."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr("sglang/version.py", "from sglang._version import __version__\n")
        zf.writestr("sglang/srt/server_args.py", "class ServerArgs:\n    pass\n")
        zf.writestr(f"sglang-{version}.dist-info/METADATA", "Name: sglang\n")
    return wheel


@pytest.mark.parametrize("version", ["9.9.9rc1", "0.4.10.post2"])
def test_host_tree_equals_local_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    if version == "9.9.9rc1":
        wheels = tmp_path / "wheels"
        _synthetic_wheel(wheels, version)
        monkeypatch.setenv("SPECOPS_SGLANG_WHEELS", str(wheels))
    wheel = find_wheel(version)
    local = unpack_wheel(wheel, tmp_path / "local")

    inv = inventory(tmp_path, {"h": {"connection": "local", "workdir": str(tmp_path / "w")}})
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "tree", "sglang_wheel": {"version": version, "dest": "{{ workdir }}/sglang"}}]})
    res = run_cli("deploy", "--host", "h", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    host = tmp_path / "w/sglang"

    assert _files(host) == _files(local)
    assert (host / SERVER_ARGS).is_file() and (tmp_path / "w/.specops/wheels" / wheel.name).is_file()
    for tree in (host, local):
        assert tree_version(LocalTreeFiles(tree)) == detect_layout(LocalTreeFiles(tree)).version == version
    marker = json.loads((host / WHEEL_MARKER).read_text())
    assert marker["version"] == version and len(marker["wheel_sha256"]) == 64
    status = subprocess.run(["git", "-C", str(host), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""  # the marker and .specops/ are excluded, the rest committed
