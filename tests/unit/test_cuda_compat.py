"""Issue 23: which CUDA an SGLang release needs, read from the tree's own pins, against the
CUDA the host's driver supports; a release the driver cannot run is refused before the
install step makes anything. nvidia-smi is the suite's stand-in (tests/support/nvidia_smi.py:
no GPU here); the pins are the real releases' (each cached wheel's `Requires-Dist`, which
setuptools writes from the pyproject's dependency lists, laid back out as that pyproject)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from specops.sglang import cuda
from specops.sglang.source import ensure_tree, find_wheel
from specops.transport.local import LocalTransport
from specops.transport.nvidia import read_gpus
from tests.support import nvidia_smi
from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml


def pyproject_of(version: str) -> str:
    """The release's python/pyproject.toml dependency lists, from its wheel's METADATA."""
    with zipfile.ZipFile(find_wheel(version)) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    base: list[str] = []
    extras: dict[str, list[str]] = {}
    for line in lines:
        if not line.startswith("Requires-Dist: "):
            continue
        req = line[len("Requires-Dist: "):]
        marker = req.split(";", 1)[1] if ";" in req else ""
        if "extra ==" in marker:
            name = marker.split("extra ==", 1)[1].strip().strip("\"'")
            extras.setdefault(name, []).append(req.split(";", 1)[0].strip())
        else:
            base.append(req)
    out = ["[project]", 'name = "sglang"', f'version = "{version}"', "dependencies = ["]
    out += [f"    '{r}'," for r in base] + ["]", "", "[project.optional-dependencies]"]
    for name, reqs in extras.items():
        out += [f"{name} = ["] + [f"    '{r}'," for r in reqs] + ["]"]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("version, extras, major, pinned", [
    ("0.4.10.post2", [], None, ""),          # torch only in the `srt` extra
    ("0.4.10.post2", ["srt"], 12, "torch==2.7.1"),
    ("0.5.4", [], 12, "torch==2.8.0"),
    ("0.5.9", [], 12, "torch==2.9.1, cuda-python==12.9"),
    ("0.5.10.post1", [], 12, "torch==2.9.1, cuda-python==12.9"),
    ("0.5.14", [], 13, "torch==2.11.0, cuda-python>=13.0"),
    ("0.5.19", [], 13, "torch==2.13.0, cuda-python>=13.0"),
    ("0.5.23", [], 13, "torch==2.14.1, cuda-python>=13.0"),
])
def test_each_release_needs_the_cuda_its_pins_say(version, extras, major, pinned):
    need = cuda.needed(pyproject_of(version), extras)
    assert (need.major, need.pins) == (major, pinned), need
    if major is None:
        assert "pins no torch or cuda-python" in need.why_unknown


def test_the_last_cuda_12_release_is_the_one_the_advice_names():
    """0.5.10.post1 pins CUDA 12; the next release the suite reads (0.5.14) already pins 13
    (0.5.11, between them, is the first with cuda-python>=13.0: read from its wheel once)."""
    assert cuda.needed(pyproject_of(cuda.LAST_RELEASE[12])).major == 12
    assert cuda.needed(pyproject_of("0.5.14")).major == 13


def test_the_pyproject_reader_reads_what_toml_allows():
    text = """[build-system]
requires = ["setuptools>=61.0", "wheel"]

[project]
name = "sglang"  # a comment
dependencies = ["aiohttp", "requests",
  "cuda-python==12.9",  # the bindings
  'flashinfer_python[cu13]==0.7.2',
  "torchcodec==0.9.1; sys_platform != 'linux'",
]

[project.optional-dependencies]
srt = [
    "sglang[runtime_common]",
    "torch==2.8.0",
]
"""
    assert cuda.pins(text) == {"cuda-python": ("==", "12.9"), "flashinfer-python": ("==", "0.7.2"),
                               "torchcodec": ("==", "0.9.1")}
    assert cuda.pins(text, ["srt"])["torch"] == ("==", "2.8.0")
    assert cuda.needed(text, ["srt"]).major == 12  # torch 2.8 (CUDA 12.8) and cuda-python 12.9 agree


def test_pins_that_disagree_or_another_index_are_not_guessed():
    mixed = '[project]\ndependencies = ["torch==2.14.1", "cuda-python==12.9"]\n'
    need = cuda.needed(mixed)
    assert need.major is None and "disagree" in need.why_unknown
    # torch from another index (a cu126 build, say): only cuda-python's pin speaks
    assert cuda.needed(mixed, pip_args=["--extra-index-url", "https://example.invalid/whl/cu126"]).major == 12
    assert cuda.needed('[project]\ndependencies = ["torch==2.99.0"]\n').major is None  # a torch not in the table
    assert cuda.needed(None).why_unknown == "the tree has no python/pyproject.toml"


@pytest.fixture
def host(tmp_path, monkeypatch):
    def make(machine: dict[str, str]) -> LocalTransport:
        nvidia_smi.install(tmp_path / "bin", machine)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        return LocalTransport("gpu-a", home=str(tmp_path))
    return make


def test_a_cuda_12_driver_refuses_a_cuda_13_release_in_one_line(host):
    inv = read_gpus(host(nvidia_smi.h200_idle()))  # driver 550.90.07, CUDA 12.4
    v = cuda.verdict("0.5.23", cuda.needed(pyproject_of("0.5.23")), inv)
    assert v.refuse == ("SGLang 0.5.23 needs CUDA 13 (torch==2.14.1, cuda-python>=13.0); this host's driver "
                        "550.90.07 supports CUDA 12.4: use SGLang 0.5.10.post1 or update the driver "
                        "(R580 or newer supports CUDA 13)")
    assert cuda.verdict("0.5.10.post1", cuda.needed(pyproject_of("0.5.10.post1")), inv) == cuda.Verdict()


@pytest.mark.parametrize("machine", [nvidia_smi.h100_r580, nvidia_smi.b200_r610])
def test_a_cuda_13_driver_runs_both_majors(host, machine):
    inv = read_gpus(host(machine()))
    for version in ("0.5.10.post1", "0.5.23"):
        assert cuda.verdict(version, cuda.needed(pyproject_of(version)), inv) == cuda.Verdict()


def test_what_cannot_be_told_is_a_warning_and_no_gpu_is_nothing(host):
    old = read_gpus(host(nvidia_smi.h200_idle()))
    old.cuda_version = ""  # a header that names no CUDA
    v = cuda.verdict("0.5.23", cuda.needed(pyproject_of("0.5.23")), old)
    assert v.refuse is None and "names no CUDA version for driver 550.90.07" in (v.warn or "")
    v = cuda.verdict("0.4.10.post2", cuda.needed(pyproject_of("0.4.10.post2")), old)
    assert v.refuse is None and "not known" in (v.warn or "")
    for machine in (nvidia_smi.no_devices, nvidia_smi.driver_failed):
        assert cuda.verdict("0.5.23", cuda.needed(pyproject_of("0.5.23")), read_gpus(host(machine()))) == cuda.Verdict()


# ------------------------------------------------------------------ the install step


def _tree_with_pyproject(tmp_path: Path, version: str) -> Path:
    """The files of a release's checkout the check reads: its version files and its pyproject."""
    tree = tmp_path / f"sglang-{version}"
    (tree / "python" / "sglang").mkdir(parents=True)
    for name in ("version.py", "_version.py"):
        src = ensure_tree(version) / "python" / "sglang" / name
        if src.exists():
            (tree / "python" / "sglang" / name).write_bytes(src.read_bytes())
    (tree / "python" / "pyproject.toml").write_text(pyproject_of(version))
    return tree


def _install(tmp_path: Path, tree: Path, **host) -> tuple[object, Path]:
    work = tmp_path / "w"
    inv = inventory(tmp_path, {"gpu": {"connection": "local", "engine": "sglang", "workdir": str(work), **host}})
    pb = write_yaml(tmp_path / "p.yaml", {"name": "install", "steps": [
        {"name": "install sglang", "sglang_install": {"tree": str(tree)}}]})
    return run_cli("deploy", "--host", "gpu", "-p", str(pb), "-i", str(inv)), work


def test_the_install_step_refuses_before_the_environment_is_made(tmp_path, host):
    host(nvidia_smi.h200_idle())  # the stand-in of a CUDA 12.4 driver, first on PATH
    tree = _tree_with_pyproject(tmp_path, "0.5.23")
    res, work = _install(tmp_path, tree)
    assert res.exit_code == 1, res.output
    assert "SGLang 0.5.23 needs CUDA 13 (torch==2.14.1, cuda-python>=13.0); this host's driver 550.90.07 " \
           "supports CUDA 12.4" in res.output
    assert not (work / "venv").exists(), "nothing may be made for a release the driver cannot run"
    ran = [e["command"] for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "command"]
    assert not any(" -m venv " in c or "pip install" in c for c in ran), ran


@pytest.mark.parametrize("machine, device", [(nvidia_smi.h100_r580, "gpu"), (nvidia_smi.h200_idle, "cpu")])
def test_a_driver_that_fits_or_a_cpu_host_goes_on_to_make_the_environment(tmp_path, host, machine, device):
    """Past the check, the step makes the environment: here from a python that does not
    exist, so it stops there, at once, having passed (CUDA 13 driver) or skipped (`device: cpu`)."""
    host(machine())
    tree = _tree_with_pyproject(tmp_path, "0.5.23")
    res, _ = _install(tmp_path, tree, device=device, python=str(tmp_path / "no-python"))
    assert res.exit_code == 1 and "cannot create the environment" in res.output, res.output
    assert "needs CUDA" not in res.output
    ran = [e["command"] for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "command"]
    assert any("nvidia-smi" in c for c in ran) == (device == "gpu")
