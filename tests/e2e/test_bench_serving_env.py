"""The `sglang` runner runs bench_serving as the server runs: with the server's python,
from its neutral folder (never beside an `sglang/` folder), with the arm's environment.

Before: `python3 -m sglang.bench_serving` ran with cwd = the repo root and none of the
arm's environment. Here the arm's environment carries a PYTHONPATH to a stand-in
`sglang.bench_serving` that records where and how it ran and writes a result line in
bench_serving's format; the server is the simulator (it never imports `sglang`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

STANDIN = r'''
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--output-file") + 1]
seen = {"cwd": os.getcwd(), "marker": os.environ.get("SPECOPS_TEST_MARKER"), "python": sys.executable}
with open(os.environ["SPECOPS_TEST_SEEN"], "a") as fh:
    fh.write(json.dumps(seen) + "\n")
n = int(args[args.index("--num-prompts") + 1])
with open(out, "a") as fh:
    fh.write(json.dumps({"duration": 1.0, "completed": n, "output_throughput": 10.0,
                         "request_throughput": 1.0, "mean_ttft_ms": 5.0}) + "\n")
'''


@pytest.mark.slow
def test_sglang_runner_gets_the_arms_environment_and_a_neutral_folder(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "sglang").mkdir(parents=True)
    (fake / "sglang" / "__init__.py").write_text("")
    (fake / "sglang" / "bench_serving.py").write_text(STANDIN)
    seen_file = tmp_path / "seen.jsonl"
    env = {"PYTHONPATH": str(fake), "SPECOPS_TEST_MARKER": "arm-env", "SPECOPS_TEST_SEEN": str(seen_file)}
    workdir = tmp_path / "w"
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(workdir)})
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"]["baseline"]["env"] = env
    inv.write_text(yaml.safe_dump(data))
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline", "--concurrency", "1",
                  "--repeats", "1", "--runner", "sglang", "--input-len", "8", "--output-len", "4",
                  "--out", str(tmp_path / "run"))
    assert res.exit_code == 0, res.output
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()]
    assert seen and all(s["marker"] == "arm-env" for s in seen)
    assert all(s["cwd"] == str(workdir / ".specops" / "cwd") for s in seen)
    assert not any((Path(s["cwd"]) / "sglang").exists() for s in seen)
