"""Issue 12: every table fits 80 columns on a pipe (long values shortened in the middle, not
folded into ribbons), `specops -v` shows them in full, `specops -q` only the result; and
`logs --json` is one JSON document (with -f, a JSON object per line)."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.cells import cell_len

from specops.servers.lifecycle import ServerState
from tests.support.deploy import inventory, run_cli, write_yaml

LONG_WORKDIR = "a-workdir-whose-name-is-long-enough-to-overflow-a-table-column"
COMMAND = ("/opt/venvs/sglang-0.5.10/bin/python -m sglang.launch_server --model-path "
           "/models/meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm EAGLE3 "
           "--speculative-draft-model-path /models/lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B --port 30001")
TRACEBACK = ["Traceback (most recent call last):", '  File "scheduler.py", line 1, in run',
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
#: Lines that print one path or command whole (wrapping would break copy and paste).
WHOLE = ("run directory: ", "report: ", "comparison: ", "to resume: ")
#: A pipe's progress lines: one line per event, whatever its length (`| ts`, `| grep`).
STAMPED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  ")


@pytest.fixture(autouse=True)
def _pipe_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe: 80 columns, whatever the terminal


def fits(text: str) -> None:
    wide = [ln for ln in text.splitlines() if cell_len(ln) > 80 and not ln.startswith(WHOLE) and not STAMPED.match(ln)]
    assert not wide, "\n".join(wide)


def _host(tmp_path: Path) -> tuple[Path, Path]:
    """A local host whose workdir holds two servers' state files (pids long gone) and logs."""
    wd = tmp_path / LONG_WORKDIR
    for sub in ("logs", "servers"):
        (wd / ".specops" / sub).mkdir(parents=True)
    for arm in ("baseline", "eagle3"):
        log = wd / ".specops" / "logs" / f"{arm}.log"
        log.write_text("\n".join(["ready", *(TRACEBACK if arm == "eagle3" else [])]) + "\n")
        state = ServerState(arm=arm, kind=arm, pid=999_999, pgid=999_999, proc_start="1", port=30001, command=COMMAND,
                            argv=COMMAND.split(), env={}, args_hash="h", log_path=str(log),
                            state_path=str(wd / ".specops/servers" / f"{arm}.json"), mechanism="none",
                            started_at=0.0, workdir=str(wd))
        Path(state.state_path).write_bytes(state.to_json())
    inv = inventory(tmp_path, {"box": {"connection": "local", "workdir": str(wd)}})
    return inv, wd


def test_status_and_hosts_fit_80_columns_and_v_shows_full_values(tmp_path: Path) -> None:
    inv, wd = _host(tmp_path)
    res = run_cli("status", "--host", "box", "-i", str(inv))
    assert "box" in res.output and "baseline" in res.output, res.output
    fits(res.output)
    assert COMMAND not in res.output and "shortened to fit" in res.output
    for argv in (("-v", "status"), ("status", "-v")):  # the global flag, and status's own (kept)
        full = run_cli(*argv, "--host", "box", "-i", str(inv))
        fits(full.output.replace(f"box baseline args: {COMMAND}", "").replace(f"box eagle3 args: {COMMAND}", ""))
        assert f"box baseline args: {COMMAND}" in full.output.splitlines(), full.output

    listed = run_cli("hosts", "-i", str(inv))
    assert listed.exit_code == 0, listed.output
    fits(listed.output)
    assert str(wd) not in listed.output and "…" in listed.output
    assert f"box workdir: {wd}" in run_cli("-v", "hosts", "-i", str(inv)).output.splitlines()
    checked = run_cli("hosts", "check", "-i", str(inv))
    assert "hosts check" in checked.output, checked.output
    fits(checked.output)
    stopped = run_cli("stop", "--host", "box", "-i", str(inv))
    assert "box: baseline" in stopped.output, stopped.output
    fits(stopped.output)
    assert run_cli("-q", "-v", "hosts", "-i", str(inv)).exit_code == 2


def test_deploy_summary_fits_80_columns_and_q_v_change_the_detail(tmp_path: Path) -> None:
    names = [f"a-host-with-a-rather-long-name-number-{i}" for i in range(3)]
    inv = inventory(tmp_path, {n: {"connection": "local", "workdir": str(tmp_path / n)} for n in names})
    book = write_yaml(tmp_path / "p.yaml", {"name": "p", "steps": [
        {"name": "a step whose name goes on and on about what it does", "shell": "echo one"},
        {"name": "second", "shell": "echo two"}]})
    runs = ("--runs-dir", str(tmp_path / "runs"))
    res = run_cli("deploy", "--host", "all", "-i", str(inv), "-p", str(book), *runs)
    assert res.exit_code == 0, res.output
    fits(res.output)
    assert "changed" in res.output and "$ " not in res.output
    loud = run_cli("-v", "deploy", "--host", names[0], "-i", str(inv), "-p", str(book), *runs)
    assert loud.exit_code == 0, loud.output
    assert f"  {names[0]}  second: $ bash -c 'echo two'  (rc 0, " in loud.output, loud.output
    hushed = run_cli("-q", "deploy", "--host", names[0], "-i", str(inv), "-p", str(book), *runs)
    assert hushed.exit_code == 0, hushed.output
    assert [ln.split("; ")[0] for ln in hushed.output.splitlines()] == ["p: ok (1 host)"], hushed.output


def test_compare_table_fits_80_columns(tmp_path: Path) -> None:
    first = tmp_path / "run-1"
    first.mkdir()
    records = [{"host": "gpu", "arm": arm, "concurrency": c, "repeat": r, "status": "ok", "completed": 8, "failed": 0,
                "output_throughput": tps * (1 + r / 100), "simulated": True}
               for arm, tps in (("baseline", 100.0), ("eagle3", 150.0)) for c in (1, 4) for r in (0, 1)]
    (first / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (first / "manifest.json").write_text(json.dumps({"run_id": "run-1", "bench": {"concurrency": [1, 4]}}))
    others = [tmp_path / f"a-run-directory-named-after-its-sglang-build-{i}" for i in range(3)]
    for other in others:
        shutil.copytree(first, other)
    res = run_cli("compare", str(first), *map(str, others), "--out", str(tmp_path / "cmp"))
    assert res.exit_code == 0, res.output
    fits(res.output)
    assert "1.000x" in res.output


def test_logs_json(tmp_path: Path) -> None:
    inv, wd = _host(tmp_path)
    res = run_cli("logs", "--host", "box", "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["box"]["baseline"] == {"path": str(wd / ".specops/logs/baseline.log"), "lines": ["ready"],
                                      "crashes": [], "accept_length": None, "accept_lines": 0}
    assert doc["box"]["eagle3"]["lines"] == ["ready", *TRACEBACK]
    assert doc["box"]["eagle3"]["crashes"] == ["\n".join(TRACEBACK)]
    errors = json.loads(run_cli("logs", "--host", "box", "-i", str(inv), "--errors", "--json").stdout)
    assert errors["box"]["eagle3"]["lines"] == TRACEBACK and errors["box"]["baseline"]["lines"] == []


def test_logs_follow_json_is_an_object_per_line(tmp_path: Path) -> None:
    inv, wd = _host(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "specops", "logs", "--host", "box", "-i", str(inv), "-f", "-n", "1",
                             "--server", "eagle3", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    try:
        first = json.loads(proc.stdout.readline())
        assert first == {"host": "box", "arm": "eagle3", "line": TRACEBACK[-1], "crash": True, "accept_length": None}
        # no wait: following starts where the printed tail ended (its size was read before
        # the tail was printed), so a line appended from now on is the next one out
        with open(wd / ".specops/logs/eagle3.log", "a") as fh:
            fh.write("INFO: a new line\n")
        assert json.loads(proc.stdout.readline()) == {"host": "box", "arm": "eagle3", "line": "INFO: a new line",
                                                      "crash": False, "accept_length": None}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)


def test_a_terminal_gets_the_live_view_and_it_ends(tmp_path: Path) -> None:
    """On a terminal (a pty here), the live view: it used to spin forever (the console wrote
    into the view's own stdout proxy), and a line printed under it showed `[yellow]…[/]`."""
    inv = inventory(tmp_path, {"box": {"connection": "local", "workdir": str(tmp_path / "w")}})
    book = write_yaml(tmp_path / "p.yaml", {"name": "p", "steps": [{"name": "slow", "shell": "sleep 0.6"},
                                                                    {"name": "quick", "shell": "true"}]})
    primary, secondary = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "specops", "-v", "deploy", "--host", "box", "-i", str(inv),
                             "-p", str(book), "--runs-dir", str(tmp_path / "runs")],
                            stdin=secondary, stdout=secondary, stderr=secondary, env=dict(os.environ, TERM="xterm"))
    os.close(secondary)
    chunks: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not select.select([primary], [], [], 0.5)[0]:
                continue
            try:
                data = os.read(primary, 65536)
            except OSError:  # the pty closed: the process is gone
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(timeout=5) == 0, b"".join(chunks)[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", b"".join(chunks).decode(errors="replace"))
    assert "[yellow]" not in text and "[/]" not in text, text
    assert "quick: $ bash -c true" in text and "run directory: " in text, text
