"""Issue 12: everything `bench` can check is checked before the first step runs, with
did-you-mean: arm names, datasets and runners, concurrency lists, `--resume` options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli


@pytest.mark.parametrize("args, said", [
    (["--arms", "baseline,eagle"], ["no arm 'eagle' on host gpu", "did you mean 'eagle3'", "adaptive, baseline, eagle3"]),
    (["--dataset", "sharegpt"], ["builtin runner", "--dataset sharegpt needs SGLang's runner"]),
    (["--dataset", "./nope.jsonl"], ["'./nope.jsonl' is neither a dataset name", "nor an existing file"]),
    (["--dataset", "randm"], ["did you mean 'random'"]),
    (["--concurrency", "1,x"], ["--concurrency expects comma-separated integers"]),
    (["--concurrency", "1,4,4"], ["listed twice"]),
    (["--concurrency", "0,4"], ["not a positive integer"]),
])
def test_bad_bench_options_fail_before_anything_runs(tmp_path: Path, args: list[str], said: list[str]) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *args, "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 2, res.output
    for text in said:
        assert text in res.output, res.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "w").exists()


def test_resume_options_must_match_the_runs_manifest(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    run = tmp_path / "run"
    run.mkdir()
    bench = {"arms": ["baseline", "eagle3"], "concurrency": [1, 4, 16], "repeats": 2, "input_len": 32,
             "output_len": 16, "dataset": "random", "runner": "auto", "seed": 1}
    (run / "manifest.json").write_text(json.dumps({"bench": bench}))
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--resume", str(run), "--concurrency", "1,4,16,64")
    assert res.exit_code == 2, res.output
    assert "--concurrency 1,4,16,64 differs from the run's --concurrency 1,4,16" in res.output
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--resume", str(run), "--repeats", "3")
    assert res.exit_code == 2 and "--repeats 3 differs from the run's --repeats 2" in res.output, res.output
    assert not (tmp_path / "w").exists()
