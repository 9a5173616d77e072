"""Issue 38, point 6: every script under bench/ runs, at its smallest settings, as a user
runs it (a subprocess from the repository root), exits 0 and prints its figures. Nothing
ran them, so a refactor broke two silently (`compare_bench_serving.py` and
`client_capacity.py` subscripted the ResultRecord runners return since issue 24). The
figures are not judged (they are timings of this machine): only that they are printed.
A developer's machine may skip a script whose needs it lacks (the skip says which); in CI
every script runs: .ci/run installs the test extra (mutmut included) and builds the runtime
first, and a missing need there fails (issue 53: two scripts skipped in CI unseen)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.real_sglang.runtime import STAMP, runtime_dir

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _real_runtime() -> Path | None:
    """The real-SGLang tier's runtime (.ci/run builds it before the tests), when built."""
    root = runtime_dir()
    return root / "bin" / "python" if (root / STAMP).exists() else None


@dataclass(frozen=True)
class Script:
    name: str
    args: list[str]
    figures: str  # a regex the output must match: the script's own figures line
    needs: list[str] = field(default_factory=list)  # modules the script imports beyond specops's own


def _scripts() -> list[Script]:
    return [
        Script("client_capacity.py", ["--levels", "1", "--prompts-per-slot", "2", "--output-len", "4"],
               r"highest sustained streamed rate: \d+ tok/s at concurrency 1"),
        Script("compare_bench_serving.py", ["--concurrency", "1", "--num-prompts", "2", "--input-len", "8",
                                            "--output-len", "4", "--workdir", "{tmp}/bs"],
               r"(?m)^\s+1\s+2 \|\s+[\d.]+\s+[\d.]+"),
        Script("crash_detect.py", ["--runs", "1", "--poll", "0.5"], r"specops wait_ready, poll 0.5 s\s+[\d.]+s"),
        Script("fanout.py", ["--counts", "1", "--repeats", "1", "--steps", "1", "--no-fabric"],
               r"N=1\s+[\d.]+ s"),
        Script("gpu_hours.py", ["--skip", "b,c", "--concurrency", "1", "--repeats", "1", "--time-scale", "0.02"],
               r"measuring share, bench a-exhaustive: [\d.]+"),
        Script("large_output.py", ["--mb", "0.2"], r"fabric Connection.run\s+[\d.]+ s", needs=["fabric"]),
        Script("logs.py", ["--size-mb", "1", "--append-mb", "1", "--tmp", "{tmp}"], r"sshd sent\s+[\d.]+ MiB"),
        Script("mutation.py", ["patching", "--sample", "1", "--jobs", "1", "--workdir", "{tmp}/mut"],
               r"patching: \d+/\d+ killed", needs=["mutmut"]),
        Script("overhead.py", ["--steps", "1", "--repeats", "1"], r"specops\s+[\d.]+ s"),
        Script("prevalidate.py", ["--hosts", "5", "--repeats", "1"], r"5 hosts: inventory loaded in [\d.]+ s"),
        Script("sglang_real_parser.py", ["{tree}"], r'"names": \["--model-path"', needs=["msgspec", "pydantic", "yaml",
                                                                                "packaging"]),
        Script("version_matrix.py", ["--versions", "0.5.10.post1", "--offline", "--no-deploy"],
               r"1 ok, 0 refused of 1 releases"),
    ]


def _skip(reason: str) -> None:
    """Skip where a developer lacks a script's needs; in CI (which installs the test extra and
    builds the runtime before the suite) the same lack is a failure, not a skip nobody reads."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"in CI every bench script runs: {reason}")
    pytest.skip(reason)


#: scripts that start a real engine themselves: their smoke run is a real-tier test (named here)
REAL_TIER = {"client_agreement.py": "tests/real_sglang/test_client_agreement.py",
             "real_crossover.py": "tests/real_sglang/test_real_crossover.py"}


def test_every_script_under_bench_is_listed() -> None:
    """A new script gets a smoke run here, or in the real tier's test named in REAL_TIER (or this fails)."""
    assert sorted(p.name for p in BENCH.glob("*.py")) == sorted([s.name for s in _scripts()] + list(REAL_TIER))
    assert all((REPO / test).is_file() for test in REAL_TIER.values())


@pytest.mark.parametrize("script", _scripts(), ids=lambda s: s.name)
def test_the_script_runs_at_its_smallest_settings(script: Script, tmp_path: Path) -> None:
    python = sys.executable
    missing = _missing(*script.needs)
    if missing and script.name == "sglang_real_parser.py" and _real_runtime() is not None:
        python, missing = str(_real_runtime()), []  # its own interpreter: the tier's runtime has its packages
    if missing:  # the real parser's own venv, not built; every other script's needs are in the test extra
        _skip(f"{script.name} needs {', '.join(missing)}, which this machine lacks (pip install -e '.[test]')")
    args = [a.replace("{tmp}", str(tmp_path)) for a in script.args]
    if script.name == "compare_bench_serving.py":
        runtime = _real_runtime()
        if runtime is None:
            _skip("compare_bench_serving.py needs bench_serving's packages (transformers, datasets, ...): "
                        "the real-SGLang tier's runtime, which .ci/run builds, is not built on this machine")
        args += ["--python", str(runtime)]
    if "{tree}" in args:
        from specops.sglang.source import ensure_tree

        args = [str(ensure_tree("0.5.10.post1")) if a == "{tree}" else a for a in args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([python, str(BENCH / script.name), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(script.figures, proc.stdout), out[-4000:]
