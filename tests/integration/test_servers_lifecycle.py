"""Server lifecycle with the real simulator as the server, over LocalTransport: launch,
readiness with crash detection, reuse/restart, status, logs, stop."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from specops.errors import ConfigError, StepError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching.applier import apply as apply_patchset
from specops.patching.applier import revert as revert_patchset
from specops.patching.model import load_patchset
from specops.render.logs import error_blocks
from specops.report.summary import summarize
from specops.servers import (
    arms_from_vars,
    build_launch,
    fairness_warnings,
    launch_arm,
    launch_arms,
    server_info,
    server_status,
    stop_arms,
    wait_ready,
    wait_ready_many,
)
from specops.servers.launch import LaunchPlan
from specops.servers.logwatch import crash_blocks, follow
from specops.sglang.layout import detect_layout
from specops.sim.testing import free_ports
from specops.transport.local import LocalTransport
from tests.support.waiting import PollCountingTransport, wait_until

REPO = Path(__file__).resolve().parents[2]
SIM = ["--sim-time-scale", "0.02"]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[LocalTransport, str]]:
    """A local host with its own work directory; every server left running is stopped."""
    t = LocalTransport()
    wd = str(tmp_path / "wd")
    yield t, wd
    stop_arms(t, wd, grace_s=2, port_wait_s=5, gpu_wait_s=5)


def _vars(**arms) -> dict:
    return {"model": "meta-llama/Llama-3.1-8B-Instruct", "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
            "max_running_requests": 32, "cuda_graph_max_bs": 32, "arms": arms}


def _plans(tree: Path, wd: str, arms_vars: dict, layout=None) -> dict[str, LaunchPlan]:
    layout = layout or detect_layout(LocalTreeFiles(tree))
    return {n: build_launch(a, layout, workdir=wd, python=sys.executable, engine="sim",
                            sglang_tree=str(tree), sim_options=SIM)
            for n, a in arms_from_vars(arms_vars).items()}


def _patched(sglang_tree) -> Path:
    tree = sglang_tree("0.5.10.post1")
    apply_patchset(load_patchset("dynamic-spec-disable", REPO / "playbooks" / "patches"), LocalTreeFiles(tree),
                   LocalTransport())
    return tree


def _group_alive(pgid: int) -> bool:
    out = subprocess.run(["ps", "-e", "-o", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(ln.split()[0] == str(pgid) and not ln.split()[1].startswith("Z") for ln in out.splitlines())


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _generate(port: int) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", method="POST",
                                 data=json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=10).read()
    except OSError:
        pass  # the injected crash may cut a request off


def test_three_arms_ready_status_and_stop(host, sglang_tree) -> None:
    t, wd = host
    tree = _patched(sglang_tree)
    p = free_ports(3)
    plans = _plans(tree, wd, _vars(baseline={"port": p[0]}, eagle3={"port": p[1]},
                                   adaptive={"port": p[2], "threshold": 8}))
    assert plans["adaptive"].mechanism == "dynamic-spec-disable-patch"
    outs = launch_arms(t, list(plans.values()))
    assert [o.action for o in outs] == ["launched"] * 3
    ready = wait_ready_many(t, [o.state for o in outs], timeout_s=60, poll_s=0.2)
    assert set(ready) == {"baseline", "eagle3", "adaptive"}

    st = {s.arm: s for s in server_status(t, wd)}
    assert {a: s.state for a, s in st.items()} == {"baseline": "ready", "eagle3": "ready", "adaptive": "ready"}
    assert st["adaptive"].mechanism == "dynamic-spec-disable-patch" and st["eagle3"].mechanism == "eagle3"
    assert "--speculative-disable-batch-threshold 8" in st["adaptive"].command
    assert all(s.uptime_s is not None and s.uptime_s >= 0 for s in st.values())
    state_file = json.loads((Path(wd) / ".specops/servers/eagle3.json").read_text())
    assert (Path(wd) / ".specops/servers/eagle3.json").stat().st_mode & 0o777 == 0o600  # private, as Slurm's
    assert state_file["pgid"] == state_file["pid"] and state_file["args_hash"] == plans["eagle3"].args_hash

    infos = {o.state.arm: server_info(t, o.state) for o in outs}
    assert fairness_warnings(infos) == []
    # report.md judges the args the sweep records from the same servers by the same rule
    manifest = {"arms": {a: {"server_args": {k: v for k, v in i.items() if k != "internal_states"}}
                         for a, i in infos.items()}}
    assert summarize([], manifest).warnings == []

    results = stop_arms(t, wd, grace_s=5)
    assert {r.arm for r in results} == {"baseline", "eagle3", "adaptive"}
    for o in outs:
        assert not _group_alive(o.state.pgid)
        assert _port_free(o.state.port)
    assert list((Path(wd) / ".specops/servers").glob("*.json")) == []
    assert [s.state for s in server_status(t, wd, ["baseline"])] == ["stopped"]


def test_adaptive_on_unpatched_tree_is_refused_before_launch(host, sglang_tree) -> None:
    """A stale layout claims the patch; the tree's own parser refuses the flag, nothing starts."""
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    layout = detect_layout(LocalTreeFiles(tree))
    layout.dynamic_spec_disable_applied = True  # stale layout: the patch was never applied
    with pytest.raises(ConfigError) as exc:
        _plans(tree, wd, _vars(adaptive={"port": free_ports(1)[0], "threshold": 8}), layout)
    assert ("SGLang 0.5.10.post1 would refuse this launch: unrecognized arguments: "
            "--speculative-disable-batch-threshold 8") in str(exc.value)
    assert not (Path(wd) / ".specops/servers").exists()


def test_argparse_rejection_failure_line_quotes_the_error_line(host, sglang_tree) -> None:
    """The plan was made before the tree changed (patch reverted behind specops's back): the
    server dies in argparse, and the failure's first line carries SGLang's `error:` line."""
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    files = LocalTreeFiles(tree)
    dsd = load_patchset("dynamic-spec-disable")
    apply_patchset(dsd, files, LocalTransport(), run_verify_cmds=False)
    plan = _plans(tree, wd, _vars(adaptive={"port": free_ports(1)[0], "threshold": 8}))["adaptive"]
    revert_patchset(dsd, files)
    state = launch_arm(t, plan).state
    t0 = time.monotonic()
    with pytest.raises(StepError) as exc:
        wait_ready(t, state, timeout_s=60, poll_s=0.5)
    assert time.monotonic() - t0 < 30  # the dead process, not the 60 s timeout
    first = str(exc.value).splitlines()[0]
    assert "server 'adaptive'" in first and "exited" in first
    assert ("sglang serve: error: unrecognized arguments: --speculative-disable-batch-threshold 8") in first


def test_broken_server_args_fails_with_the_syntax_error_not_the_timeout(host, sglang_tree) -> None:
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    plan = _plans(tree, wd, _vars(baseline={"port": free_ports(1)[0]}))["baseline"]
    sa = tree / "python/sglang/srt/server_args.py"
    lines = sa.read_text().splitlines(keepends=True)
    i = next(n for n, ln in enumerate(lines) if '"--speculative-accept-threshold-acc",' in ln)
    # The seed bug: a new add_argument inserted inside another, multi-line add_argument call.
    lines.insert(i + 1, '        parser.add_argument("--speculative-disable-batch-threshold", type=int, default=0)\n')
    sa.write_text("".join(lines))
    # Planned now, the launch is refused: the tree's flags cannot be read.
    with pytest.raises(ConfigError) as refused:
        _plans(tree, wd, _vars(baseline={"port": plan.port}))
    assert "server_args.py" in str(refused.value) and "SyntaxError" in str(refused.value)
    # Planned before the tree broke: the server dies with the SyntaxError, seen at once.
    state = launch_arm(t, plan).state
    timeout = 60.0
    t0 = time.monotonic()
    with pytest.raises(StepError) as exc:
        wait_ready(t, state, timeout_s=timeout, poll_s=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < timeout / 2, elapsed  # the dead process, not the timeout
    msg = str(exc.value)
    assert "Traceback (most recent call last)" in msg and "SyntaxError" in msg
    assert "server_args.py" in msg and "not ready after" not in msg
    assert "SyntaxError" in msg.splitlines()[0]


def test_crash_after_requests_seen_by_status_and_errors(host, sglang_tree) -> None:
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    port = free_ports(1)[0]
    plan = _plans(tree, wd, _vars(baseline={"port": port, "extra_args": ["--sim-crash-after", "2"]}))["baseline"]
    state = launch_arm(t, plan).state
    wait_ready(t, state, timeout_s=60, poll_s=0.2)

    seen: list[str] = []
    stop = threading.Event()
    follower = PollCountingTransport()  # the same local files, its polls counted
    th = threading.Thread(target=follow, args=(follower, [state.log_path], lambda p, ls: seen.extend(ls), stop, 0.1))
    th.start()
    try:
        # its first poll takes the log's size: the requests' lines come after it
        wait_until(lambda: follower.polls >= 1, "the follower's first poll")
        for _ in range(3):
            _generate(port)
        wait_until(lambda: server_status(t, wd)[0].state == "dead", "the crash seen by status")
        wait_until(lambda: any("Traceback" in s for s in seen), "the follower streaming the traceback")
    finally:
        stop.set()
        th.join(60)
    # follow streamed the lines written after it started, and none from before.
    assert any("POST /generate" in s for s in seen) and any("Traceback" in s for s in seen)
    assert not any("ready to roll" in s for s in seen)
    blocks = crash_blocks((Path(state.log_path)).read_text())
    assert blocks and blocks[-1].startswith(("Traceback", "[")) and "Traceback" in blocks[-1]
    assert error_blocks(t, state.log_path) == blocks


def test_relaunch_reuses_same_args_and_restarts_on_change(host, sglang_tree) -> None:
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    port = free_ports(1)[0]
    plan = _plans(tree, wd, _vars(baseline={"port": port}))["baseline"]
    first = launch_arm(t, plan)
    wait_ready(t, first.state, timeout_s=60, poll_s=0.2)
    again = launch_arm(t, plan)
    assert again.action == "reused" and again.state.pid == first.state.pid

    changed = _plans(tree, wd, _vars(baseline={"port": port, "extra_args": ["--sim-seed", "7"]}))["baseline"]
    assert changed.args_hash != plan.args_hash
    restarted = launch_arm(t, changed)
    assert restarted.action == "restarted" and restarted.state.pid != first.state.pid
    assert not _group_alive(first.state.pgid)
    wait_ready(t, restarted.state, timeout_s=60, poll_s=0.2)
    # The previous run's log was kept as <arm>.log.1, not overwritten.
    assert "ready to roll" in Path(plan.log_path + ".1").read_text()


#: seconds a ready simulated server's /health takes: more than a readiness poll waits (3 s), as
#: SGLang's /health (a one-token generation) takes on a busy host (the real-SGLang tier's verify
#: once found its adaptive arm "starting" so), well inside SGLang's own 20 s health budget
SLOW_HEALTH_S = 4


def test_a_ready_server_whose_health_answers_slowly_is_ready_and_reused(host, sglang_tree) -> None:
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    ports = free_ports(2)
    plans = _plans(tree, wd, _vars(**{a: {"port": port, "extra_args": ["--sim-slow-health", str(SLOW_HEALTH_S)]}
                                      for a, port in zip(("baseline", "eagle3"), ports, strict=True)}))
    outs = launch_arms(t, list(plans.values()))
    ready = wait_ready_many(t, [o.state for o in outs], timeout_s=90, poll_s=0.2)
    assert set(ready) == {"baseline", "eagle3"}
    # status asks both endpoints side by side, each given SGLang's health budget
    assert {s.arm: (s.state, s.health) for s in server_status(t, wd)} == {
        "baseline": ("ready", "200"), "eagle3": ("ready", "200")}
    again = launch_arm(t, plans["baseline"])  # a re-deploy keeps the busy server, never restarts it
    assert again.action == "reused" and again.state.pid == outs[0].state.pid


def test_port_in_use_and_missing_model_are_reported(host, sglang_tree) -> None:
    t, wd = host
    tree = sglang_tree("0.5.10.post1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        plan = _plans(tree, wd, _vars(baseline={"port": port}))["baseline"]
        with pytest.raises(StepError) as exc:
            launch_arm(t, plan)
    assert f"port {port} is already in use" in str(exc.value)
    assert not Path(plan.state_path).exists() and not Path(plan.log_path).exists()

    missing = str(Path(wd) / "models" / "nope")
    plan = _plans(tree, wd, {**_vars(baseline={"port": free_ports(1)[0]}), "model": missing})["baseline"]
    with pytest.raises(StepError) as exc:
        launch_arm(t, plan)
    assert f"model path {missing} does not exist" in str(exc.value)


def test_stop_kills_a_group_that_ignores_term(host, tmp_path: Path) -> None:
    t, wd = host
    port = free_ports(1)[0]
    # A stand-in that ignores SIGTERM, has a child, and holds the port.
    script = (f"trap '' TERM; sleep 300 & "
              f"exec {sys.executable} -c 'import socket,time,signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
              f"s=socket.socket(); s.bind((\"127.0.0.1\", {port})); s.listen(); time.sleep(300)'")
    plan = LaunchPlan(arm="stubborn", kind="baseline", port=port, argv=["bash", "-c", script], env={},
                      mechanism="none", workdir=wd, log_path=f"{wd}/.specops/logs/stubborn.log",
                      state_path=f"{wd}/.specops/servers/stubborn.json")
    state = launch_arm(t, plan).state
    wait_until(lambda: not _port_free(port), "the stand-in holding its port")
    t0 = time.monotonic()
    (r,) = stop_arms(t, wd, ["stubborn"], grace_s=1.0)
    assert r.signal == "KILL" and r.port_free and 0.9 < time.monotonic() - t0 < 60  # killed after the grace, not left for its 300 s
    assert not _group_alive(state.pgid) and _port_free(port)
    assert stop_arms(t, wd) == []  # nothing recorded any more
