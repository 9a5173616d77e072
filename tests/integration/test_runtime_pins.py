"""Issue 38, point 4: a runtime against the release's own pins, judged by the runtime's
python. A real release's pyproject.toml (SGLang 0.5.10.post1's sdist, the stand-in repo's
source) against a real venv: no package installed but one hand-made distribution (a
`*.dist-info/METADATA` is a real distribution to importlib.metadata) at a version outside
its pin. Both ways the host may judge: with `packaging` (copied into the venv from this
interpreter) and without it (a bare venv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import packaging
import pytest

from specops.sglang import cuda, runtime_pins
from tests.support.standin import STANDIN_VERSION, sdist


def _pyproject(name: str = "pyproject.toml") -> str:
    with tarfile.open(sdist(STANDIN_VERSION)) as tar:
        member = tar.extractfile(f"sglang-{STANDIN_VERSION}/{name}")
        assert member is not None
        return member.read().decode()


def _venv(tmp_path: Path, with_packaging: bool) -> Path:
    venv = tmp_path / ("venv-pkg" if with_packaging else "venv-bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    dist = site / "transformers-4.57.1.dist-info"  # the release pins transformers==5.3.0
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.57.1\n")
    if with_packaging:
        shutil.copytree(Path(packaging.__file__).parent, site / "packaging")
    return venv / "bin" / "python"


@pytest.mark.parametrize("with_packaging", [True, False], ids=["packaging", "no-packaging"])
def test_a_venv_with_a_wrong_transformers_and_no_torchao_is_named(tmp_path: Path, with_packaging: bool) -> None:
    reqs = cuda.requirements(_pyproject())
    assert "transformers==5.3.0" in reqs and "torchao==0.9.0" in reqs  # the real pins, read by the one reader
    python = _venv(tmp_path, with_packaging)
    proc = subprocess.run(runtime_pins.command(str(python), reqs), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pins = runtime_pins.parse(proc.stdout)
    assert len(pins) == len(reqs)
    bad = {p.name: p.problem() for p in runtime_pins.unmet(pins)}
    assert bad["transformers"] == "transformers: pinned ==5.3.0, installed 4.57.1"
    assert bad["torchao"] == "torchao: pinned ==0.9.0, not installed"
    assert bad["IPython"] == "IPython: required, not installed"
    if with_packaging:  # markers judged: decord2 is for ARM Linux only, so not required here
        assert "decord2" not in bad and not runtime_pins.unjudged(pins)
    else:  # without packaging a marker cannot be judged: said, never a guess
        assert "decord2" in {p.name for p in runtime_pins.unjudged(pins)}


def test_the_plain_comparison_without_packaging_agrees_on_ranges(tmp_path: Path) -> None:
    python = _venv(tmp_path, with_packaging=False)
    site = next((python.parent.parent / "lib").glob("python3.*/site-packages"))
    for name, version in (("pyzmq", "26.2.0"), ("llguidance", "0.8.1"), ("torch", "2.9.1+cpu"), ("openai", "2.6.1")):
        dist = site / f"{name}-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    reqs = ["pyzmq>=25.1.2", "llguidance>=0.7.11,<0.8.0", "torch==2.9.1", "openai==2.6.1", "openai~=2.5"]
    proc = subprocess.run(runtime_pins.command(str(python), reqs), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [p.ok for p in runtime_pins.parse(proc.stdout)] == [True, False, True, True, True]
