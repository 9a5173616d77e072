"""The real tier's runtimes: one mechanism (runtime.py), one venv per pin set, every package
pinned, so a rebuild on another day gets the same venv."""

from __future__ import annotations

import pytest

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
