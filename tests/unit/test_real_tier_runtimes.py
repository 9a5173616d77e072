"""The real tier's runtimes: one mechanism (runtime.py), one venv per pin set, every package
pinned, so a rebuild on another day gets the same venv."""

from __future__ import annotations

import subprocess
import sys
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


def test_every_real_test_runs_in_one_of_the_two_groups():
    """The tier runs in two workers (`--dist loadgroup`): a test without a group would be spread
    over both, and one with two groups (a module mark beside a parameter's) would run in a third;
    a module-scoped host (three servers) of one release must stay in one worker. Read as xdist
    reads it: each collected item's xdist_group marks (tests/support/xdist_groups_probe.py)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "real_sglang",
                           "-p", "tests.support.xdist_groups_probe", "tests/real_sglang"],
                          capture_output=True, text=True, timeout=300, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = dict(ln.split()[1:3] for ln in proc.stdout.splitlines() if ln.startswith("GROUPS ") and len(ln.split()) == 3)
    items = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("GROUPS ")]
    assert items and set(items) == set(found), [i for i in items if i not in found]  # none without a group
    assert set(found.values()) == {PATCH_ROUTE_GROUP, NEWER_ENGINES_GROUP}, set(found.values())
    newer = {nodeid for nodeid, group in found.items() if group == NEWER_ENGINES_GROUP}
    modules = {nodeid.split("::")[0].rsplit("/", 1)[-1] for nodeid in newer}
    assert modules == {"test_native_host.py", "test_real_crossover.py", "test_vllm_host.py", "test_heavy_models.py",
                       "test_client_agreement.py", "test_real_crossover_sglang.py", "test_eagle_tail_attention.py"}, modules
    # the modules over several runtimes: each case with the group of the runtime it runs
    # (0.5.14's and vLLM's with the newer engines, 0.5.10.post1's with the patch route)
    newer_cases = {"test_real_crossover_sglang.py": ("[sglang-native]",), "test_eagle_tail_attention.py": ("[0.5.14]",),
                   "test_heavy_models.py": ("::test_a_widened_target_keeps_the_tiny_targets_greedy_tokens",
                                            "::test_a_build_whose_tokens_differ_fails")}
    for nodeid, group in found.items():
        module = nodeid.split("::")[0].rsplit("/", 1)[-1]
        if module in newer_cases:
            newer_case = nodeid.endswith(newer_cases[module])
            assert group == (NEWER_ENGINES_GROUP if newer_case else PATCH_ROUTE_GROUP), (nodeid, group)
