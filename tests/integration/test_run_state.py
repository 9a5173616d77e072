"""Run state lives on the run: two runs in one process do not share launched servers, and
Ctrl-C inside `run_playbook` stops this run's servers, ends what is still running, closes
the engine and raises (it never ends the process)."""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specops.config.inventory import load_inventory
from specops.flows.play import run_playbook
from specops.run.state import Interrupted
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, write_yaml
from tests.support.waiting import wait_until


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def no_os_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """os._exit would end this test process: turn it into a failure we can see."""

    def refuse(code: int) -> None:
        raise AssertionError(f"run_playbook called os._exit({code})")

    monkeypatch.setattr(os, "_exit", refuse)


def _inventory(tmp_path: Path) -> Path:
    """Host `lab`, simulated, with the baseline arm only (one server to launch and stop)."""
    variables = arm_vars()
    variables["arms"] = {"baseline": variables["arms"]["baseline"]}
    return inventory(tmp_path, {"lab": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}},
                     variables)


LAUNCH = [{"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
          {"name": "launch", "server": {"arms": ["baseline"], "tree": "{{ workdir }}/sglang"}}]
#: A step that presses Ctrl-C (SIGINT to this process) and then keeps running.
CTRL_C = {"name": "ctrl-c", "shell": "echo $$ > {{ marker }}; kill -INT {{ pid }}; sleep 60"}


def _playbook(tmp_path: Path, name: str, steps: list[dict[str, Any]]) -> Path:
    return write_yaml(tmp_path / f"{name}.yaml", {"name": name, "steps": steps})


def _run(tmp_path: Path, playbook: Path, **kw: Any):
    inv = load_inventory(str(tmp_path / "hosts.yaml"))
    console = Console(file=open(tmp_path / "out.txt", "a"), width=200)
    try:
        return run_playbook(inv, playbook, "lab", extra_vars={"pid": os.getpid(), "marker": str(tmp_path / "marker")},
                            runs_dir=tmp_path / "runs", console=console, **kw)
    finally:
        console.file.close()


def _baseline_port(tmp_path: Path) -> int:
    """The port the journal recorded for the launched baseline."""
    for run_dir in sorted((tmp_path / "runs").iterdir()):
        for ev in events(run_dir):
            if ev["event"] == "server" and ev["arm"] == "baseline":
                return int(ev["port"])
    raise AssertionError("no baseline launch in the journal")


def _health(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as reply:
        return int(reply.status)


def _baseline_pid(tmp_path: Path) -> int:
    """The pid the journal recorded for the launched baseline (its state file goes when it stops)."""
    for run_dir in sorted((tmp_path / "runs").iterdir()):
        for ev in events(run_dir):
            if ev["event"] == "server" and ev["arm"] == "baseline":
                return int(ev["pid"])
    raise AssertionError("no baseline launch in the journal")


def test_ctrl_c_in_process_stops_this_runs_servers_and_closes_the_engine(tmp_path: Path, no_os_exit: None) -> None:
    _inventory(tmp_path)
    book = _playbook(tmp_path, "launch-then-ctrl-c", [*LAUNCH, CTRL_C])
    with pytest.raises(Interrupted):
        _run(tmp_path, book)
    pid = _baseline_pid(tmp_path)
    try:
        out = (tmp_path / "out.txt").read_text()
        assert "interrupted" in out and "lab: stopped baseline" in out, out
        wait_until(lambda: not _alive(pid), "the server this run launched gone")
        # engine.close() ended the step still running (its `sleep 60`), not the end of the sleep
        step_group = int((tmp_path / "marker").read_text())
        assert not _group_alive(step_group), "the interrupted step's processes outlived the run"
        run_dir = next((tmp_path / "runs").iterdir())
        assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
        cleanup = [e for e in events(run_dir) if e["event"] == "interrupt_cleanup"]
        assert cleanup == [{**cleanup[0], "host": "lab", "arms": ["baseline"], "action": "stopped"}]
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_two_runs_in_one_process_do_not_share_launched_servers(tmp_path: Path, no_os_exit: None) -> None:
    _inventory(tmp_path)
    first = _run(tmp_path, _playbook(tmp_path, "launch", LAUNCH), quiet=True)
    assert first.ok
    pid = _baseline_pid(tmp_path)
    try:
        assert _alive(pid)
        # A second run on the same host name launches nothing; its Ctrl-C must not stop the
        # first run's server (with module-global state it did).
        with pytest.raises(Interrupted):
            _run(tmp_path, _playbook(tmp_path, "ctrl-c", [CTRL_C]))
        out = (tmp_path / "out.txt").read_text()
        assert "interrupted" in out and "stopped" not in out, out
        # No wait: the second run's Ctrl-C cleanup is done when it raises (a stop it made would
        # have waited for the server to die), and its journal lists no cleanup at all; the
        # first run's server still answers a request sent after it.
        second = sorted((tmp_path / "runs").iterdir())[-1]
        assert json.loads((second / "run.json").read_text())["playbook"] == "ctrl-c"
        assert [e for e in events(second) if e["event"] == "interrupt_cleanup"] == []
        assert _alive(pid), "the second run stopped a server the first run launched"
        assert _health(_baseline_port(tmp_path)) == 200, "the first run's server stopped answering"
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_bench_progress_reaches_the_callback_not_the_variables(tmp_path: Path) -> None:
    """The per-point callback travels on the run, not as a template variable a playbook sees."""
    _inventory(tmp_path)
    seen: list[dict[str, Any]] = []
    bench = {"name": "bench", "bench": {"tree": "{{ workdir }}/sglang", "settings": {
        "arms": ["baseline"], "concurrency": [1], "repeats": 1, "num_prompts": 2, "input_len": 8, "output_len": 4}}}
    probe = {"name": "variables", "shell": ["echo", "{{ _bench_progress | default('absent') }}"],
             "register": "v"}
    report = _run(tmp_path, _playbook(tmp_path, "bench", [*LAUNCH, bench, probe]), quiet=True, on_point=seen.append)
    pid = _baseline_pid(tmp_path)
    try:
        assert report.ok, [(s.status, s.detail) for h in report.hosts for s in h.steps]
        assert [(r.arm, r.concurrency, r.status) for r in seen] == [("baseline", 1, "ok")]
        run_dir = report.run_dir
        out = [e for e in events(run_dir) if e["event"] == "command" and e["step"] == "variables"]
        assert out[0]["stdout"].strip() == "absent"
    finally:
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_ctrl_c_that_the_kernel_hands_to_another_thread_still_ends_the_run(tmp_path: Path,
                                                                           no_os_exit: None) -> None:
    """A process-directed SIGINT goes to any thread that does not block it. Python runs its
    handler only in the main thread, and a main thread asleep on a lock without a timeout
    never looked: Ctrl-C then waited for the running step to end (measured in CI: a
    `sleep 60` step ran to its end, 62 s, where 2.7 s is usual). Here the signal is sent to a
    step's worker thread on purpose; the step's `sleep 30` must not get to write its file."""
    _inventory(tmp_path)
    done = tmp_path / "slept"
    step = {"name": "long", "shell": f"sleep 30; echo done > {done}"}

    def press_ctrl_c_in_a_worker_thread() -> None:
        def worker_in_the_step() -> list[threading.Thread]:
            workers = [t for t in threading.enumerate() if t.name.startswith("host-")]
            started = workers and (tmp_path / "runs").is_dir() and any(
                e.get("step") == "long" and e["event"] == "step_start"
                for run in (tmp_path / "runs").iterdir() for e in events(run))
            return workers if started else []

        workers = wait_until(worker_in_the_step, "the step running in a worker thread")
        signal.pthread_kill(workers[0].ident or 0, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c_in_a_worker_thread, daemon=True)
    presser.start()
    with pytest.raises(Interrupted):
        _run(tmp_path, _playbook(tmp_path, "long", [step]))
    presser.join(5)
    assert not done.exists(), "Ctrl-C waited for the step to end"
    run_dir = next((tmp_path / "runs").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
