"""Issue 12: after a failure (or Ctrl-C, tests/integration/test_interrupt.py) the exact command
that resumes is printed, and running it resumes."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.support.deploy import inventory, run_cli, write_yaml


def _resume_line(output: str) -> list[str]:
    line = next(ln for ln in output.splitlines() if ln.startswith("to resume: "))
    argv = shlex.split(line.removeprefix("to resume: "))
    assert argv[0] == "specops"
    return argv[1:]


def test_failed_deploy_prints_the_command_that_resumes_it(tmp_path: Path) -> None:
    w = tmp_path / "w dir"
    inv = inventory(tmp_path, {"h": {"connection": "local", "workdir": str(w)}})
    book = write_yaml(tmp_path / "p.yaml", {"name": "r", "steps": [
        {"name": "first", "shell": "echo 1 >> {{ workdir }}/count"},
        {"name": "gate", "shell": "test -e {{ workdir }}/flag"}]})
    runs = tmp_path / "runs"
    res = run_cli("deploy", "--host", "h", "-i", str(inv), "-p", str(book), "--var", "x=a b", "--runs-dir", str(runs))
    assert res.exit_code == 1, res.output
    argv = _resume_line(res.output)
    assert argv == ["deploy", "--host", "h", "-i", str(inv), "-p", str(book), "--var", "x=a b",
                    "--runs-dir", str(runs), "--resume"]
    (w / "flag").touch()
    again = run_cli(*argv)
    assert again.exit_code == 0, again.output
    assert "to resume" not in again.output
    assert (w / "count").read_text() == "1\n"  # the finished step was not run again


def test_failed_bench_prints_the_command_that_runs_it_again(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"h": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}},
                    {"arms": {"adaptive": {"threshold": 8}}})
    book = write_yaml(tmp_path / "b.yaml", {"name": "b", "steps": [{"name": "no", "shell": "false"}]})
    out = tmp_path / "run"
    res = run_cli("bench", "--host", "h", "-i", str(inv), "--playbook", str(book), "--arms", "adaptive", "--concurrency", "1,2",
                  "--threshold", "4", "--out", str(out))
    assert res.exit_code == 1, res.output
    argv = _resume_line(res.output)
    assert argv[:2] == ["bench", "--host"] and argv[-2:] == ["--out", str(out)]
    assert "--concurrency" in argv and argv[argv.index("--concurrency") + 1] == "1,2"
    assert argv[argv.index("--threshold") + 1] == "4"
