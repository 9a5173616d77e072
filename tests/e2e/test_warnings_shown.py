"""Issue 38: a run's warnings reach the user: a plain `warning:` line on a pipe as it
happens, the count in the outcome line under the summary, with -q, and under --json.
Before, `deploy` journaled "attention_backend differs between arms" and printed `ok`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from specops.flows.play import report_dict
from specops.render.progress import outcome_line, result_line
from specops.run import events
from specops.run.engine import HostReport, RunReport, StepStatus
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli, write_yaml

STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def test_a_deploy_on_a_pipe_shows_its_warnings(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"] = {a: v for a, v in data["vars"]["arms"].items() if a != "adaptive"}
    data["vars"]["arms"]["eagle3"]["extra_args"] = ["--attention-backend", "triton"]
    write_yaml(inv, data)
    pb = write_yaml(tmp_path / "p.yaml", {"name": "p", "steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "launch", "server": {"arms": ["baseline", "eagle3"], "tree": "{{ workdir }}/sglang"},
         "timeout": 300}]})
    argv = [sys.executable, "-m", "specops", "deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=dict(os.environ, COLUMNS="200"))
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text
        lines = text.splitlines()
        warn = [i for i, ln in enumerate(lines) if re.match(
            rf"{STAMP}  gpu  warning: launch: attention_backend differs between arms: baseline=\S+, eagle3=triton$", ln)]
        done = next(i for i, ln in enumerate(lines) if re.match(rf"{STAMP}  gpu  2/2 launch: changed$", ln))
        assert len(warn) == 1 and warn[0] < done, text  # as it happened, before the step's own line
        assert "p: ok, 1 warning" in lines, text
        assert "warning: gpu: launch: attention_backend differs between arms: baseline=" in text.split("p: ok")[1]
    finally:
        run_cli("stop", "--host", "gpu", "-i", str(inv))


def _report(tmp_path: Path) -> RunReport:
    from specops.config.playbook import Playbook, Step

    step = Step(index=0, name="launch", kind="shell", args="true", where="p.yaml:3")
    playbook = Playbook(name="deploy", steps=[step], path=tmp_path / "p.yaml")
    warn = events.Warn(host="gpu", step="launch", message="cuda_graph_max_bs differs between arms: baseline=8, eagle3=4")
    host = HostReport("gpu", [StepStatus(status="changed")], warnings=[warn, warn])
    return RunReport("r1", tmp_path / "r1", playbook, [host])


def test_quiet_and_json_keep_the_warnings(tmp_path: Path) -> None:
    report = _report(tmp_path)
    assert outcome_line(report) == "deploy: ok, 2 warnings"
    assert result_line(report).startswith("deploy: ok, 2 warnings (1 host); run directory: ")
    assert report_dict(report)["hosts"]["gpu"]["warnings"][0] == {
        "step": "launch", "message": "cuda_graph_max_bs differs between arms: baseline=8, eagle3=4"}
    json.dumps(report_dict(report))
