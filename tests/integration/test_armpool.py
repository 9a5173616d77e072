"""The arm pool (bench/armpool.py) with the real simulator as the servers, over LocalTransport,
with real arm leases in the host's work directory: claim, up, relaunch after a crash, down,
an arm another run took over, and two threads bringing arms up and down through one pool
(each with its own connection), as the side-by-side and Slurm sweeps do."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from specops.bench.armpool import ArmPool
from specops.errors import SpecopsError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.servers import arms_from_vars, build_launch, server_status, stop_arms
from specops.servers.launch import LaunchPlan
from specops.servers.lease import LeaseBook, LeasePolicy, TakenOver
from specops.sglang.layout import detect_layout
from specops.sim.testing import free_ports
from specops.transport.local import LocalTransport
from tests.support.waiting import wait_until

ARMS = ("baseline", "eagle3")


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[LocalTransport, str]]:
    """A local host with its own work directory; every server left running is stopped."""
    t = LocalTransport("h0")
    wd = str(tmp_path / "wd")
    yield t, wd
    stop_arms(t, wd, grace_s=2, port_wait_s=5, gpu_wait_s=5)


@pytest.fixture
def books() -> Iterator[list[LeaseBook]]:
    """Every lease book made in a test; their heartbeat threads end with it."""
    made: list[LeaseBook] = []
    yield made
    for book in made:
        book._stop.set()


def plans_for(tree: Path, wd: str) -> dict[str, LaunchPlan]:
    ports = free_ports(len(ARMS))
    arms = {"baseline": {"port": ports[0]}, "eagle3": {"port": ports[1]}}
    layout = detect_layout(LocalTreeFiles(tree))
    vars_ = {"model": "meta-llama/Llama-3.1-8B-Instruct", "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
             "max_running_requests": 32, "cuda_graph_max_bs": 32, "arms": arms}
    return {n: build_launch(a, layout, workdir=wd, python=sys.executable, engine="sim", sglang_tree=str(tree),
                            sim_options=["--sim-time-scale", "0.02"])
            for n, a in arms_from_vars(vars_).items()}


def pool_for(plans: dict[str, LaunchPlan], leases: LeaseBook | None,
             events: list[tuple[str, dict[str, Any]]]) -> ArmPool:
    return ArmPool("h0", plans, leases=leases, run_id="run-a", ready_timeout=60, keep_servers=False,
                   log=lambda kind, data: events.append((kind, data)))


def leased_pool(tree: Path, wd: str, books: list[LeaseBook]
                ) -> tuple[ArmPool, LeaseBook, list[tuple[str, dict[str, Any]]]]:
    """The two arms' pool of run-a with a lease book of its own: (pool, book, the pool's events)."""
    events: list[tuple[str, dict[str, Any]]] = []
    book = LeaseBook("run-a", "bench")
    books.append(book)
    return pool_for(plans_for(tree, wd), book, events), book, events


def states_now(t: LocalTransport, wd: str) -> dict[str, str]:
    return {s.arm: s.state for s in server_status(t, wd, list(ARMS))}


def wait_dead(t: LocalTransport, wd: str, arm: str) -> None:
    """Until the killed server reads as dead."""
    wait_until(lambda: states_now(t, wd)[arm] == "dead", f"the killed {arm} read as dead")


@pytest.mark.slow
def test_claim_up_relaunch_down_and_an_arm_taken_over(host: tuple[LocalTransport, str],
                                                      sglang_tree: Callable[[str], Path],
                                                      books: list[LeaseBook]) -> None:
    t, wd = host
    pool, book, events = leased_pool(sglang_tree("0.5.10.post1"), wd, books)

    pool.claim(t, list(ARMS))
    assert [(k, d["arm"], d["lead"]) for k, d in events] == [("lease", "baseline", True), ("lease", "eagle3", True)]
    assert pool.leased("baseline") and pool.leased("eagle3")

    pool.up(t, list(ARMS))
    assert pool.launched == set(ARMS)
    assert states_now(t, wd) == {"baseline": "ready", "eagle3": "ready"}
    assert [d["action"] for k, d in events if k == "server"] == ["launched", "launched"]

    # baseline crashes: relaunched once, on a new process; a second crash ends the sweep
    dead = pool.states["baseline"]
    os.killpg(dead.pgid, signal.SIGKILL)
    wait_dead(t, wd, "baseline")
    avoid = pool.relaunch("baseline")
    assert avoid == (dead.pid, dead.proc_start) and ("relaunch", {"arm": "baseline"}) in events
    pool.up(t, ["baseline"], avoid)
    assert pool.states["baseline"].pid != dead.pid and states_now(t, wd)["baseline"] == "ready"
    with pytest.raises(SpecopsError, match="server 'baseline' crashed again after its relaunch"):
        pool.relaunch("baseline")

    pool.down(t, ["baseline"])
    assert pool.launched == {"eagle3"} and not pool.leased("baseline")
    assert states_now(t, wd)["baseline"] == "stopped"

    # another run takes eagle3 over: this pool ends the arm and leaves its server alone
    other = LeaseBook("run-b", "bench", LeasePolicy("take_over", 5.0))
    books.append(other)
    other.claim(t, "h0", wd, "eagle3", "other-arguments", ["python3", "-m", "sglang.launch_server"])
    with pytest.raises(TakenOver) as taken:
        book.check(t, "h0", "eagle3")
    pool.end("eagle3", taken.value)
    assert pool.taken("eagle3") and "taken over by run run-b" in pool.taken_over()["eagle3"]
    assert pool.launched == set() and not pool.leased("eagle3")
    pool.stop_launched(t)
    pool.down(t, ["eagle3"])
    assert states_now(t, wd)["eagle3"] == "ready"  # run-b's now: neither the stop nor a down touched it


@pytest.mark.slow
def test_two_threads_share_one_pool(host: tuple[LocalTransport, str], sglang_tree: Callable[[str], Path],
                                    books: list[LeaseBook]) -> None:
    """As a Slurm sweep's arm threads do: each brings its arm up and down twice, with its own
    connection, through the same pool; the pool's set of arms up stays consistent."""
    t, wd = host
    pool, _book, events = leased_pool(sglang_tree("0.5.10.post1"), wd, books)
    pool.claim(t, list(ARMS))
    seen: dict[str, list[bool]] = {arm: [] for arm in ARMS}
    errors: list[BaseException] = []
    start = threading.Barrier(len(ARMS))

    def cycle(arm: str) -> None:
        mine = LocalTransport("h0")
        try:
            start.wait()
            for _ in range(2):
                pool.up(mine, [arm])
                seen[arm].append(arm in pool.launched)
                pool.down(mine, [arm])
                seen[arm].append(arm in pool.launched)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(exc)
        finally:
            mine.close()

    threads = [threading.Thread(target=cycle, args=(arm,)) for arm in ARMS]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert errors == []
    assert seen == {arm: [True, False, True, False] for arm in ARMS}
    assert pool.launched == set() and set(pool.states) == set(ARMS)
    assert not pool.leased("baseline") and not pool.leased("eagle3")
    assert states_now(t, wd) == {"baseline": "stopped", "eagle3": "stopped"}
    actions = [(d["arm"], d["action"]) for k, d in events if k == "server"]
    assert sorted(actions) == sorted([(arm, "launched") for arm in ARMS] * 2)


def test_a_replica_has_its_own_servers_and_shares_what_was_taken_over() -> None:
    """A `nodes: N` Slurm host's allocation k: own states and launched set; an arm taken over
    on the host ends it for every allocation (as when the sweep's copies shared the dict)."""
    events: list[tuple[str, dict[str, Any]]] = []
    pool = pool_for({}, None, events)
    twin = pool.replica("h0#2", {})
    assert twin.host == "h0#2" and twin.states is not pool.states and twin.launched is not pool.launched
    pool.launched.add("baseline")
    pool.end("baseline", TakenOver("arm baseline taken over by run run-b", where="host h0, arm 'baseline'"))
    assert twin.taken("baseline") and twin.taken_over() == {"baseline": "arm baseline taken over by run run-b"}
    assert pool.launched == set() and events == [("taken_over", {"arm": "baseline",
                                                                 "message": "arm baseline taken over by run run-b"})]
