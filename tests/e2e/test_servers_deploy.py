"""Issue 4 end to end over the real sshd: the deploy playbook launches the three arms against
a patched 0.5.10.post1 tree (from the PyPI wheel), with crash-aware readiness, status, logs,
stop, reuse."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.support.arms import sim_inventory
from tests.support.deploy import events, inventory, run_cli, write_yaml
from tests.support.faults import wait_until

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def status(inv: Path, host: str = "gpu") -> dict:
    res = run_cli("status", "--host", host, "-i", str(inv), "--json")
    return {s["arm"]: s for s in json.loads(res.output)[host]}


@pytest.mark.slow
def test_three_arms_ready_reused_logged_and_stopped(tmp_path: Path, sshd) -> None:
    inv = sim_inventory(tmp_path, sshd.host_entry(0, workdir=str(tmp_path / "w")))
    ports = {a: v["port"] for a, v in yaml.safe_load(inv.read_text())["vars"]["arms"].items()}
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert res.exit_code == 0, res.output
        st = status(inv)
        assert {a: s["state"] for a, s in st.items()} == {"baseline": "ready", "eagle3": "ready", "adaptive": "ready"}
        assert st["adaptive"]["mechanism"] == "dynamic-spec-disable-patch"
        assert st["eagle3"]["mechanism"] == "eagle3" and st["baseline"]["mechanism"] == "none"
        state = json.loads((tmp_path / "w/.specops/servers/adaptive.json").read_text())
        assert "--speculative-disable-batch-threshold" in state["argv"] and state["args_hash"]
        # the patched tree really has the flag exactly once
        src = (tmp_path / "w/sglang/python/sglang/srt/server_args.py").read_text()
        assert src.count('"--speculative-disable-batch-threshold",') == 1
        pids = {a: s["pid"] for a, s in st.items()}

        again = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert again.exit_code == 0, again.output
        assert {a: s["pid"] for a, s in status(inv).items()} == pids, "healthy servers must be reused"
        last = sorted((tmp_path / "runs").iterdir())[-1]
        assert any(e["event"] == "skip" and e["step"] == "launch servers" for e in events(last))

        logs = run_cli("logs", "--host", "gpu", "-i", str(inv), "-n", "200")
        assert "baseline | " in logs.output and "The server is fired up and ready to roll!" in logs.output
    finally:
        stopped = run_cli("stop", "--host", "gpu", "-i", str(inv))
    assert stopped.exit_code == 0, stopped.output
    for port in ports.values():
        assert port_free(port)
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert not list((tmp_path / "w/.specops/servers").glob("*.json"))


def test_threshold_flag_on_unpatched_tree_is_refused_before_launch(tmp_path: Path, sshd) -> None:
    """An adaptive server hand-made from extra_args on an unpatched tree: the tree's own
    argparse would reject the flag, so the step fails before launching, naming flag and version."""
    inv = sim_inventory(tmp_path, sshd.host_entry(1, workdir=str(tmp_path / "w")))
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"]["eagle3"]["extra_args"] = ["--speculative-disable-batch-threshold", "8"]
    write_yaml(inv, data)
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "launch", "server": {"arms": ["eagle3"], "tree": "{{ workdir }}/sglang"}, "timeout": 120}]})
    t0 = time.monotonic()
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb))
    elapsed = time.monotonic() - t0
    assert res.exit_code == 1
    assert "SGLang 0.5.10.post1 would refuse this launch: unrecognized arguments: " \
           "--speculative-disable-batch-threshold" in res.output
    assert elapsed < 100, f"took {elapsed:.1f}s: the dead process, not the 120 s timeout, must fail the step"
    assert not (tmp_path / "w/.specops/servers/eagle3.json").exists() or status(inv)["eagle3"]["state"] != "ready"


def test_adaptive_without_any_mechanism_is_refused_before_launch(tmp_path: Path, sshd) -> None:
    inv = sim_inventory(tmp_path, sshd.host_entry(1, workdir=str(tmp_path / "w")))
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "launch", "server": {"arms": ["adaptive"], "tree": "{{ workdir }}/sglang"}}]})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb))
    assert res.exit_code == 1
    assert "dynamic-spec-disable" in res.output
    assert not (tmp_path / "w/.specops/servers/adaptive.json").exists()


BREAK = r"""
import re, sys
p = sys.argv[1]
src = open(p).read()
# the seed failure: a new add_argument pasted inside another, multi-line add_argument call
anchor = '"--speculative-accept-threshold-acc",\n'
i = src.index(anchor) + len(anchor)
src = src[:i] + '        parser.add_argument("--speculative-disable-batch-threshold", type=int, default=0)\n' + src[i:]
open(p, "w").write(src)
"""


def test_seed_scenario_syntax_error_is_quoted_and_nothing_launched(tmp_path: Path, sshd) -> None:
    inv = sim_inventory(tmp_path, sshd.host_entry(2, workdir=str(tmp_path / "w")))
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "naive sed-style patch", "shell": ["{{ python }}", "-c", BREAK, "{{ workdir }}/sglang/python/sglang/srt/server_args.py"]},
        {"name": "launch", "server": {"arms": ["baseline"], "tree": "{{ workdir }}/sglang"}, "timeout": 300}]})
    t0 = time.monotonic()
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb))
    elapsed = time.monotonic() - t0
    assert res.exit_code == 1
    run = sorted((tmp_path / "runs").iterdir())[-1]
    fail = [e for e in events(run) if e["event"] == "fail" and e.get("step") == "launch"][0]
    # the tree's flags cannot be read: refused with the interpreter's own SyntaxError, file and line
    assert "does not compile: SyntaxError" in fail["error"] and "server_args.py:" in fail["error"]
    assert not (tmp_path / "w/.specops/servers/baseline.json").exists()
    assert elapsed < 200, f"took {elapsed:.1f}s of a 300 s timeout"


def test_crash_after_requests_seen_by_status_and_logs_errors(tmp_path: Path, sshd) -> None:
    inv = sim_inventory(tmp_path, sshd.host_entry(3, workdir=str(tmp_path / "w")))
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"] = {"baseline": dict(data["vars"]["arms"]["baseline"], extra_args=["--sim-crash-after", "2"])}
    write_yaml(inv, data)
    port = data["vars"]["arms"]["baseline"]["port"]
    try:
        assert run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY).exit_code == 0
        import urllib.request

        for _ in range(3):
            try:
                body = json.dumps({"text": "hello there", "sampling_params": {"max_new_tokens": 4}}).encode()
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body), timeout=10).read()
            except Exception:  # noqa: BLE001 - the third request meets a dead server
                break
        wait_until(lambda: status(inv)["baseline"]["state"] == "dead", "the crashed server seen dead", timeout=120)
        res = run_cli("status", "--host", "gpu", "-i", str(inv))
        assert res.exit_code == 1 and "dead" in res.output
        errors = run_cli("logs", "--host", "gpu", "-i", str(inv), "--errors")
        assert "Traceback (most recent call last)" in errors.output
        assert "Scheduler hit an exception" in errors.output
        assert "ready to roll" not in errors.output, "--errors shows only the crash blocks"
    finally:
        run_cli("stop", "--host", "gpu", "-i", str(inv))


def test_logs_follow_shows_lines_appended_after_start(tmp_path: Path, sshd) -> None:
    """`logs -f` prints the tail, then each line appended later (a crash line among them, in
    the highlighted form), and a Ctrl-C ends it without a traceback of its own."""
    workdir = tmp_path / "w"
    inv = inventory(tmp_path, {"gpu": sshd.host_entry(4, workdir=str(workdir))})
    log = workdir / ".specops/logs/baseline.log"
    log.parent.mkdir(parents=True)
    log.write_text("old line\n")
    proc = subprocess.Popen([sys.executable, "-m", "specops", "logs", "--host", "gpu", "-i", str(inv), "-f", "-n", "5"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, COLUMNS="200"))
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        wait_until(lambda: any("old line" in ln for ln in seen), "the tail", proc=proc)
        with open(log, "a") as fh:
            fh.write("fresh line 1\nTraceback (most recent call last):\nfresh line 3\n")
        wait_until(lambda: any("fresh line 3" in ln for ln in seen), "the appended lines", proc=proc)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=60)
    out = "".join(seen)
    assert "fresh line 1" in out and "Traceback (most recent call last):" in out, out
    assert "KeyboardInterrupt" not in out, out
    assert proc.returncode in (0, 130), out
