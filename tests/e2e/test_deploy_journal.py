"""The deploy that made tests/data/journal_main/deploy_*.jsonl (on main, before journal
events had types), run again by today's code: every kind it writes has the keys main
wrote, and the plain lines on a pipe (render.progress reading typed events) still say
each step's outcome. Local hosts; nvidia-smi is the suite's stand-in (no GPU here)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import nvidia_smi
from tests.support.arms import arm_vars
from tests.support.deploy import inventory, run_cli, write_yaml

DATA = Path(__file__).resolve().parents[1] / "data" / "journal_main"


def _signatures(paths: list[Path]) -> dict[str, set[tuple[str, ...]]]:
    """Per kind, the key sets its lines have."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            record: dict[str, Any] = json.loads(line)
            out.setdefault(record["event"], set()).add(tuple(sorted(record)))
    return out


def _playbook(t: Path, flaky: str) -> list[dict[str, Any]]:
    return [
        {"name": "gpus", "gpu_preflight": {}},
        {"name": "hello", "shell": {"cmd": "echo hi"}},
        {"name": "big", "shell": {"cmd": "head -c 5000 /dev/zero | tr '\\\\0' x"}},
        {"name": "never", "when": "false", "shell": {"cmd": "echo no"}},
        {"name": "put", "copy": {"src": str(t / "src.txt"), "dest": str(t / "w/dst.txt")}},
        {"name": "get", "fetch": {"src": str(t / "w/dst.txt"), "dest": "dst.txt"}},
        {"name": "ignored", "shell": {"cmd": "exit 3"}, "ignore_errors": True},
        {"name": "flaky", **({"shell": {"cmd": "exit 1"}, "retries": 1, "delay": 0, "rollback": "echo undo"}
                             if flaky == "fails" else {"shell": {"cmd": "true"}})},
    ]


@pytest.mark.slow
def test_todays_deploy_journal_has_mains_keys_for_every_kind(tmp_path: Path, monkeypatch: Any) -> None:
    t = tmp_path
    nvidia_smi.install(t / "bin", nvidia_smi.h100_idle(2))
    monkeypatch.setenv("PATH", f"{t / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("T3_SECRET", "s3cr3t-value-xyz")
    (t / "src.txt").write_text("hello\n")
    hosts = {"box": {"connection": "local", "engine": "sglang", "workdir": str(t / "w"),
                     "secrets": {"TOK": {"env": "T3_SECRET"}}},
             "cpubox": {"connection": "local", "engine": "sim", "device": "cpu", "workdir": str(t / "wc")},
             "badbox": {"connection": "local", "engine": "sim", "workdir": "/proc/nope/w"}}
    inv = inventory(t, hosts, arm_vars(baseline={"device": "cpu"}))
    pb = t / "pb.yaml"
    args = ["deploy", "--host", "box,cpubox,badbox", "-i", str(inv), "-p", str(pb), "--runs-dir", str(t / "runs")]
    write_yaml(pb, {"name": "t3", "steps": _playbook(t, "fails")})
    first = run_cli("-v", *args)
    check = run_cli(*args, "--check")
    write_yaml(pb, {"name": "t3", "steps": _playbook(t, "passes")})
    resumed = run_cli(*args, "--resume")
    assert first.exit_code and check.exit_code == 0 and resumed.exit_code, (first.output, check.output)
    runs = sorted(p for p in (t / "runs").iterdir() if p.is_dir())
    assert len(runs) == 2, (first.output, check.output, resumed.output)  # the resume went on in the first run's
    now = _signatures([r / "events.jsonl" for r in runs])
    before = _signatures([DATA / "deploy_playbook.jsonl", DATA / "deploy_check.jsonl"])
    assert now == before
    out = first.output
    assert "badbox  prepare failed: host badbox: cannot create workdir" in out
    assert "box  4/8 never: skipped: when is false" in out
    assert "box  7/8 ignored: ok, failure ignored" in out
    assert "box  8/8 flaky: verify failed (2 tries): exit code 1" in out
    assert "box  hello: $ bash -c 'echo hi'  (rc 0, " in out  # -v: a line per command
    assert "box  8/8 flaky: would run" in check.output
    assert "box  5/8 put: skipped: verified (resumed run)" in resumed.output
    assert "box  8/8 flaky: changed" in resumed.output
