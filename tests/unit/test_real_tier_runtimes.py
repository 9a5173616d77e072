"""The real tier's runtimes: one mechanism (runtime.py), one venv per pin set, every package
pinned, so a rebuild on another day gets the same venv."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.support.real_sglang import NEWER_ENGINES_GROUP, PATCH_ROUTE_GROUP
from tests.support.real_sglang.runtime import (
    DEFAULT,
    PIN_FILES,
    RUNTIMES,
    RuntimeBuildError,
    pin_files,
    runtime_dir,
    runtime_hash,
)


def test_each_release_runs_on_its_pin_set():
    assert pin_files() == pin_files("0.5.9") == pin_files("0.5.10.post1") == PIN_FILES
    assert runtime_dir("0.5.9") == runtime_dir(DEFAULT) != runtime_dir("0.5.14")
    assert pin_files("0.5.14")[1].name == "requirements-0.5.14.txt"
    with pytest.raises(RuntimeBuildError, match="no pin set for SGLang 0.5.23"):
        runtime_hash("0.5.23")


@pytest.mark.parametrize("release", sorted(RUNTIMES))
def test_every_package_is_pinned(release):
    for pin in pin_files(release)[1:]:
        lines = [ln.strip() for ln in pin.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert lines and all("==" in ln and not ln.startswith("-") for ln in lines), (pin.name, lines)


def test_the_0514_runtime_pins_what_0514_pins():
    pins = dict(ln.split("==") for ln in pin_files("0.5.14")[1].read_text().splitlines()
                if "==" in ln and not ln.startswith("#"))
    assert (pins["torch"], pins["transformers"]) == ("2.11.0", "5.8.1")
    assert pins["numpy"].startswith("2.3.")  # numpy >= 2.4 breaks the Triton interpreter
    assert pins["soundfile"] == "0.13.1"  # 0.5.14's first launch died without it


def test_every_real_module_runs_in_one_of_the_two_groups():
    """The tier runs in two workers (`--dist loadgroup`): a module without a group would have its
    tests spread over both, and its module-scoped host (three servers) deployed twice at once."""
    here = Path(__file__).resolve().parents[1] / "real_sglang"
    groups: dict[str, list[str]] = {}
    for path in sorted(here.glob("test_*.py")):
        marks = importlib.import_module(f"tests.real_sglang.{path.stem}").pytestmark
        names = [m.name for m in marks]
        assert "real_sglang" in names, path.name
        (group,) = [m.args[0] for m in marks if m.name == "xdist_group"]
        groups.setdefault(group, []).append(path.stem)
    assert set(groups) == {PATCH_ROUTE_GROUP, NEWER_ENGINES_GROUP}, groups
    assert groups[NEWER_ENGINES_GROUP] == ["test_heavy_models", "test_native_host", "test_real_crossover", "test_vllm_host"], groups
