"""The runners (bench/runners.py) against a real simulated server over LocalTransport: the
builtin client beside the server and through a tunnel, the running-batch sampler around a
point, a dead server's crash excerpt, and the sglang runner as far as it goes without
SGLang installed (its argv built from the tree's own benchmark, run with the arm's
environment, and the failed point it makes). bench_serving's output lines and their
parsing are tests/unit/test_bench_sglang_runner.py's."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from specops.bench.armpool import ArmPool
from specops.bench.runners import (
    ArmServer,
    BuiltinRunner,
    Load,
    SglangRunner,
    crash_excerpt,
    runner_for,
    runner_name,
    sampled,
    server_dead,
)
from specops.hostfiles import paths
from specops.records.schema import STATUS_FAILED
from specops.servers import stop_arms
from specops.transport.local import LocalTransport
from specops.transport.probes import read_cpu
from tests.integration.test_armpool import plans_for, wait_dead

LOAD = Load(concurrency=2, repeat=0, num_prompts=4, input_len=16, output_len=8, dataset="random", seed=1,
            timeout_s=120)


@pytest.fixture
def up(tmp_path: Path, sglang_tree: Callable[[str], Path]) -> Iterator[tuple[LocalTransport, ArmServer, Path]]:
    """The baseline arm's simulated server, up (no leases); stopped at the end."""
    t, wd = LocalTransport("h0"), str(tmp_path / "wd")
    tree = sglang_tree("0.5.10.post1")
    plans = plans_for(tree, wd)
    pool = ArmPool("h0", plans, leases=None, run_id="run-a", ready_timeout=60, keep_servers=False,
                   log=lambda _k, _d: None)
    try:
        pool.up(t, ["baseline"])
        yield t, ArmServer(pool.states["baseline"], plans["baseline"]), tree
    finally:
        stop_arms(t, wd, grace_s=2, port_wait_s=5, gpu_wait_s=5)


def test_auto_is_builtin_on_a_simulated_host_and_sglang_elsewhere() -> None:
    assert runner_name("auto", "sim") == "builtin" and runner_name("auto", "sglang") == "sglang"
    assert runner_name("sglang", "sim") == "sglang" and runner_name("builtin", "sglang") == "builtin"
    def log(_kind: str, _data: dict[str, Any]) -> None: ...

    assert isinstance(runner_for("auto", engine="sim", python="python3", tree="/t", log=log), BuiltinRunner)
    assert isinstance(runner_for("auto", engine="sglang", python="python3", tree="/t", log=log), SglangRunner)


@pytest.mark.slow
def test_builtin_runner_beside_the_server_through_a_tunnel_and_a_crash(
        up: tuple[LocalTransport, ArmServer, Path]) -> None:
    t, server, _tree = up
    events: list[tuple[str, dict[str, Any]]] = []

    beside = BuiltinRunner(sys.executable, lambda k, d: events.append((k, d)))
    rec = sampled(t, server.state, lambda: beside.measure(t, server, LOAD))
    assert beside.on_host(t) and events == []
    assert rec.ok and rec.runner == "builtin" and (rec.completed, rec.failed) == (4, 0), rec
    assert rec.output_throughput and rec.output_throughput > 0
    assert rec.running_samples is not None  # the sampler's figures were merged into the record

    # a host whose python cannot import specops: the client runs here, through a tunnel, said once
    tunnel = BuiltinRunner(str(Path(server.plan.workdir) / "no-such-python"), lambda k, d: events.append((k, d)))
    rec = tunnel.measure(t, server, LOAD)
    assert rec.ok and (rec.completed, rec.failed) == (4, 0), rec
    assert [k for k, _ in events] == ["client"] and "tunnel" in events[0][1]["why"]
    assert tunnel.client_cores(t) == os.cpu_count() and len(events) == 1

    # the server dies: a point fails, and the helpers every runner shares say so
    assert not server_dead(t, server.state)
    os.killpg(server.state.pgid, signal.SIGKILL)
    wait_dead(t, server.plan.workdir, "baseline")
    assert server_dead(t, server.state)
    rec = beside.measure(t, server, LOAD)
    assert rec.status == STATUS_FAILED and rec.failed == 4 and rec.runner == "builtin"
    assert crash_excerpt(t, server.state).strip()  # the log's last lines (a SIGKILL leaves no traceback)


@pytest.mark.slow
def test_sglang_runner_runs_the_trees_benchmark_with_the_arms_environment(
        up: tuple[LocalTransport, ArmServer, Path]) -> None:
    """No SGLang is installed beside the simulator: bench_serving's argv is built from the
    tree's own benchmark (its flags checked by its parser) and run with the server's
    python, from its neutral folder, through the arm's env file; the module is missing,
    so the point fails with bench_serving's own error (no record to parse)."""
    t, server, tree = up
    runner = SglangRunner(str(tree))
    assert runner.command(t).module == "sglang.bench_serving" and runner.command(t).version == "0.5.10.post1"
    rec = runner.measure(t, server, LOAD)
    assert rec.status == STATUS_FAILED and rec.runner == "sglang" and (rec.completed, rec.failed) == (0, 4)
    assert rec.error and rec.error.startswith("bench_serving exited 1: ") and "sglang" in rec.error, rec.error
    assert Path(paths.bench_dir(server.state.workdir)).is_dir()
    assert not Path(paths.bench_output(server.state.workdir, "baseline", 2, 0)).exists()
    assert runner.client_cores(t) == read_cpu(t).cores  # bench_serving runs on the host, not here
    # before bench_serving, one request alone reached the server (an adaptive arm drafts at batch
    # 1: its first drafting step's one-time cost stays out of the point)
    log = Path(paths.server_log(server.state.workdir, "baseline")).read_text()
    posts = [line for line in log.splitlines() if '"POST /generate HTTP/1.1" 200' in line]
    assert len(posts) == 2 and "127.0.0.1:0 " in posts[0] and "127.0.0.1:0 " not in posts[1], log[-2000:]
