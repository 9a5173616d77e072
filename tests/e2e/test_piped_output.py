"""Issue 12: not on a terminal, one plain timestamped line per finished step and per point,
as it happens (a pipe used to see everything only after the sweep ended)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def test_piped_bench_prints_each_point_as_it_happens(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "specops", "bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3",
            "--concurrency", "1,4", "--repeats", "2", "--input-len", "32", "--output-len", "16", "--out", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, COLUMNS="200"))
    assert proc.stdout is not None
    seen: list[str] = []
    running_at_first_point = None
    try:
        for line in proc.stdout:
            seen.append(line)
            if " point " in line and running_at_first_point is None:
                running_at_first_point = proc.poll() is None and not (out / "report.md").exists()
    finally:
        proc.wait(timeout=120)
    text = "".join(seen)
    assert proc.returncode == 0, text
    assert running_at_first_point, text  # the line came while the sweep was still going
    points = [ln for ln in seen if re.match(rf"{STAMP}  gpu  point (baseline|eagle3) c=(1|4) repeat [01]: [\d.]+ tok/s$",
                                            ln.rstrip("\n"))]
    assert len(points) == 8, text
    sweep_done = next(i for i, ln in enumerate(seen) if re.match(rf"{STAMP}  gpu  \d+/\d+ sweep\b.*: ", ln))
    assert max(seen.index(p) for p in points) < sweep_done  # points come before the step that ran them ends
    assert "[/]" not in text and "\x1b[" not in text  # no markup, no colour


def test_cli_runner_deploy_prints_a_plain_line_per_step(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    pb = tmp_path / "p.yaml"
    pb.write_text("name: p\nsteps:\n  - name: first\n    shell: 'true'\n"
                  "  - name: second\n    shell: {cmd: 'true', creates: /}\n")
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb))
    assert res.exit_code == 0, res.output
    assert re.search(rf"^{STAMP}  gpu  1/2 first: changed$", res.output, re.M), res.output
    assert re.search(rf"^{STAMP}  gpu  2/2 second: skipped: already verified$", res.output, re.M), res.output
