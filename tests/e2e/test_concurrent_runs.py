"""Issue 15's Done-when: two `specops bench` runs on one host at once, as two terminals run
them (real CLI processes, the simulator, one work directory). Run A is paused (SIGSTOP)
after its first point while run B starts, so the two always overlap however loaded the
machine is. A's heartbeat thread stops with it, so while A is paused the test beats for it
(refreshes its lease files' mtime, as A's thread would): a pause longer than EXPIRE_S, which
five CLI processes on a loaded CI machine can take, must not make A's lease look dead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from specops.hostfiles import paths
from specops.servers import stop_arms
from specops.transport.local import LocalTransport
from tests.support.arms import arm_vars
from tests.support.deploy import inventory, write_yaml
from tests.support.waiting import wait_until

SWEEP = ["--arms", "baseline", "--input-len", "16", "--output-len", "16", "--repeats", "1"]
OTHER = ["--var", "max_running_requests=32"]


class Runs:
    """`specops bench` processes against one simulated host, each with its own run directory."""

    def __init__(self, root: Path):
        self.root = root
        self.workdir = root / "w"
        self.vars = arm_vars()
        self.inv = inventory(root, {"gpu": {"connection": "local", "engine": "sim", "workdir": str(self.workdir)}},
                             self.vars)
        self.n = 0

    def over_ssh(self, entry: dict) -> None:
        """The same host (work directory, tree, ports) reached through the sshd fixture."""
        self.inv = write_yaml(self.root / "hosts-ssh.yaml", {"hosts": {"gpu": {**entry, "engine": "sim",
                                                                                "workdir": str(self.workdir)}},
                                                             "vars": self.vars})

    def start(self, levels: str, *extra: str) -> tuple[subprocess.Popen, Path]:
        self.n += 1
        out = self.root / f"run{self.n}"
        argv = [sys.executable, "-m", "specops", "bench", "--host", "gpu", "-i", str(self.inv), *SWEEP,
                "--concurrency", levels, "--out", str(out), *extra]
        log = open(self.root / f"run{self.n}.log", "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, COLUMNS="250"))
        log.close()
        return proc, out

    def finish(self, proc: subprocess.Popen, out: Path, timeout: float = 120) -> tuple[int, str]:
        try:
            rc = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        return rc, Path(f"{out}.log").read_text()

    def run(self, levels: str, *extra: str) -> tuple[int, str, Path]:
        proc, out = self.start(levels, *extra)
        rc, text = self.finish(proc, out)
        return rc, text, out


def records(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


#: pid of a paused run -> the event that stops the test's beating for it
_BEATING: dict[int, threading.Event] = {}


def _beat_for(leases: Path, run_id: str, stop: threading.Event) -> None:
    """Refresh the mtime of run `run_id`'s lease files every second until `stop`."""
    while not stop.wait(1.0):
        for path in leases.glob("*/*.json"):
            try:
                if json.loads(path.read_text()).get("run_id") == run_id:
                    os.utime(path)
            except (OSError, ValueError):
                continue  # removed or being replaced: the next round sees the new file


def paused_after_first_point(runs: Runs, levels: str) -> tuple[subprocess.Popen, Path]:
    """Run A, stopped (SIGSTOP) once its first point is written: it holds its lease and its
    server, and has points left. `resume(a)` continues it."""
    proc, out = runs.start(levels)
    wait_until(lambda: len(records(out)) >= 1 or proc.poll() is not None, "run A's first point", timeout=90)
    assert proc.poll() is None, Path(f"{out}.log").read_text()
    os.kill(proc.pid, signal.SIGSTOP)
    stop = _BEATING[proc.pid] = threading.Event()
    threading.Thread(target=_beat_for, args=(Path(paths.state_dir(str(runs.workdir)), "leases"), out.name, stop),
                     daemon=True).start()
    return proc, out


def stop_beating(proc: subprocess.Popen) -> None:
    event = _BEATING.pop(proc.pid, None)
    if event is not None:
        event.set()


def resume(proc: subprocess.Popen) -> None:
    """Continue a paused run; its own heartbeat thread takes over again."""
    stop_beating(proc)
    os.kill(proc.pid, signal.SIGCONT)


def one_config(recs: list[dict]) -> set[str]:
    return {r["server"]["args_hash"] for r in recs if r["status"] == "ok"}


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("concurrent"))


@pytest.fixture
def runs(host: Runs) -> Iterator[Runs]:
    """The module's host (its SGLang tree unpacked once); each test leaves no server and no lease."""
    local = host.inv
    yield host
    host.inv = local
    stop_arms(LocalTransport("gpu"), str(host.workdir))
    for leftover in Path(paths.state_dir(str(host.workdir)), "leases").glob("*/*"):
        leftover.unlink()


def test_identical_arguments_share_the_server_and_both_results_say_so(runs: Runs) -> None:
    a, a_out = paused_after_first_point(runs, "1,2,4,8")
    b, b_out = runs.start("1,2,4,8")
    try:
        wait_until(lambda: len(records(b_out)) >= 1 or b.poll() is not None, "run B's first point", timeout=90)
    finally:
        resume(a)
    (rc_a, text_a), (rc_b, text_b) = runs.finish(a, a_out), runs.finish(b, b_out)
    assert rc_a == 0 and rc_b == 0, text_a + text_b
    ra, rb = records(a_out), records(b_out)
    assert all(r["status"] == "ok" for r in ra + rb)
    assert one_config(ra) == one_config(rb) and len(one_config(ra)) == 1
    assert {r["server"]["pid"] for r in ra + rb} == {ra[0]["server"]["pid"]}  # one server, A's
    assert {r["server"]["launched_by"] for r in rb} == {a_out.name}
    assert rb[0]["shared_with"] == [a_out.name] and any(r["shared_with"] == [b_out.name] for r in ra)
    assert f"shared its server with run {b_out.name} (identical arguments)" in (a_out / "report.md").read_text()
    assert f"shared its server with run {a_out.name} (identical arguments)" in (b_out / "report.md").read_text()
    assert not Path(paths.server_state(str(runs.workdir), "baseline")).exists()  # the last run out stopped it


def test_other_arguments_are_refused_at_once_naming_the_holder_or_wait_for_it(runs: Runs) -> None:
    a, a_out = paused_after_first_point(runs, "1,2,4")
    try:
        t0 = time.monotonic()
        rc_b, text_b, b_out = runs.run("1,2", *OTHER)
        refused_in = time.monotonic() - t0
        deploy = subprocess.run([sys.executable, "-m", "specops", "deploy", "--host", "gpu", "-i", str(runs.inv),
                                 "--runs-dir", str(runs.root / "deploys"), *OTHER], capture_output=True, text=True,
                                timeout=120, env=dict(os.environ, COLUMNS="250"))
        other_tree = subprocess.run([sys.executable, "-m", "specops", "deploy", "--host", "gpu", "-i", str(runs.inv),
                                     "--runs-dir", str(runs.root / "deploys"), "--var", "sglang_version=0.5.4"],
                                    capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="250"))
        status = subprocess.run([sys.executable, "-m", "specops", "status", "--host", "gpu", "-i", str(runs.inv)],
                                capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="250"))
        status_json = subprocess.run([sys.executable, "-m", "specops", "status", "--host", "gpu", "-i", str(runs.inv),
                                      "--json"], capture_output=True, text=True, timeout=120)
        c, c_out = runs.start("1,2", *OTHER, "--wait", "--wait-timeout", "120")
        waiting = f"waiting for arm baseline: in use by run {a_out.name} (user "
        wait_until(lambda: waiting in Path(f"{c_out}.log").read_text() or c.poll() is not None, "run C to wait", timeout=90)
    finally:
        resume(a)
    assert rc_b == 1, text_b
    assert f"arm baseline is in use by run {a_out.name} (user " in text_b, text_b
    assert "(--max-running-requests 64 -> 32)" in text_b and "--wait" in text_b and "--take-over" in text_b
    assert records(b_out) == [] and "waiting" not in text_b and refused_in < 60
    # a deploy is refused too, naming A: here already at the patch step, which would write into the
    # tree A's server runs from (A's sweep has no adaptive arm, so its tree is unpatched)
    assert deploy.returncode == 1 and f"would change the SGLang that run {a_out.name} (user " in deploy.stdout, \
        deploy.stdout
    assert f"gpu: baseline in use by run {a_out.name} (user " in status.stdout, status.stdout  # who holds it
    # another SGLang under A's servers: refused before the tree is touched, naming A
    assert other_tree.returncode == 1, other_tree.stdout
    said = " ".join(other_tree.stdout.split())
    assert "(sglang_wheel): check failed:" in said, other_tree.stdout
    assert f"step 'sglang source from its wheel' (sglang_wheel) would change the SGLang that run {a_out.name}" in said
    held = {s["arm"]: [x["run_id"] for x in s["leases"]] for s in json.loads(status_json.stdout)["gpu"]}
    assert held["baseline"] == [a_out.name], held
    (rc_a, text_a), (rc_c, text_c) = runs.finish(a, a_out), runs.finish(c, c_out)
    assert rc_a == 0 and rc_c == 0, text_a + text_c
    ra, rc = records(a_out), records(c_out)
    assert len(ra) == 3 and all(r["status"] == "ok" and r["shared_with"] == [] for r in ra)
    assert len(one_config(ra)) == 1 and len(one_config(rc)) == 1 and one_config(ra) != one_config(rc)
    assert min(r["started_at"] for r in rc) > max(r["started_at"] for r in ra)  # C ran after A
    assert "## Servers" not in (a_out / "report.md").read_text()  # A's report: its own configuration only


def test_take_over_fails_the_holders_next_point_saying_so_never_with_a_503(runs: Runs) -> None:
    a, a_out = paused_after_first_point(runs, "1,2,4,8")
    try:
        rc_b, text_b, b_out = runs.run("1,2", *OTHER, "--take-over")
    finally:
        resume(a)
    rc_a, text_a = runs.finish(a, a_out)
    assert rc_b == 0, text_b
    assert rc_a == 1, text_a
    ra, rb = records(a_out), records(b_out)
    failed = [r for r in ra if r["status"] != "ok"]
    assert len(failed) == 1 and failed[0]["error"].startswith(f"arm baseline taken over by run {b_out.name} (user ")
    assert f"arm baseline taken over by run {b_out.name}" in text_a and f"--resume {a_out}" in text_a, text_a
    said = " ".join(str(r.get("error")) for r in ra) + text_a
    assert "HTTP 503" not in said and "not ready" not in said and "crashed" not in said, said
    ok = [r for r in ra if r["status"] == "ok"]
    assert ok and {r["server"]["pid"] for r in ok} == {ra[0]["server"]["pid"]}  # only A's own server
    assert {r["server"]["pid"] for r in rb}.isdisjoint({r["server"]["pid"] for r in ok})
    assert one_config(ok) != one_config(rb)
    assert list(Path(paths.state_dir(str(runs.workdir)), "leases").glob("*/*")) == []


def test_a_killed_holders_lease_does_not_block_the_next_run(runs: Runs) -> None:
    a, a_out = paused_after_first_point(runs, "1,2,4")
    stop_beating(a)
    a.kill()  # SIGKILL: no cleanup, its lease file and its server stay behind
    a.wait()
    leases = Path(paths.leases_dir(str(runs.workdir), "baseline"))
    assert len(list(leases.glob("*.json"))) == 1
    rc_b, text_b, b_out = runs.run("1,2", *OTHER)
    assert rc_b == 0, text_b
    assert "in use by" not in text_b and [r["status"] for r in records(b_out)] == ["ok", "ok"]
    assert not list(leases.glob("*.json"))


def test_over_ssh_a_run_with_other_arguments_is_refused_naming_the_holder(runs: Runs, sshd) -> None:
    runs.over_ssh(sshd.host_entry(0))
    a, a_out = paused_after_first_point(runs, "1,2")
    try:
        rc_b, text_b, b_out = runs.run("1", *OTHER)
    finally:
        resume(a)
    rc_a, text_a = runs.finish(a, a_out)
    assert rc_b == 1 and f"arm baseline is in use by run {a_out.name} (user " in text_b, text_b
    assert rc_a == 0 and [r["status"] for r in records(a_out)] == ["ok", "ok"], text_a
    assert records(b_out) == []
