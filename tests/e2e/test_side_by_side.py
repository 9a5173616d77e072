"""Issue 25: arms measured side by side on their own (stand-in) GPUs, through the real CLI
and the simulator: the figures agree with one-arm-at-a-time ones, a failed fairness check
falls back to one arm at a time and says why, arms sharing a GPU still interleave.

Every figure compared is read on the simulators' model clock, which a closed-loop client's
declared refills hold (specops.sim.scheduler), so three clients and three simulators at once
on 2 cores change how long a point takes, not what it measures: the simulators run fast
(time scale 0.01; at 0.2 the file took 62 s alone, now 40 s). The starved case is made on
purpose."""

from __future__ import annotations

import dataclasses
import json
import statistics
import threading
from pathlib import Path

import pytest

from specops.bench.scheduling import decide
from specops.bench.sweep import HostSweep
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, run_cli

LEVELS = "1,4,8"   # the fairness probe is the median level: 4
SMALL = ["--concurrency", LEVELS, "--repeats", "2", "--input-len", "32", "--output-len", "24"]
ARMS = ("baseline", "eagle3", "adaptive")
SIM_TIME_SCALE = 0.01


def _inventory(tmp_path: Path, gpus: list[int], **per_arm: dict) -> Path:
    variables = {**arm_vars(**per_arm), "sim": {"time_scale": SIM_TIME_SCALE}}
    host = {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w"), "gpus": gpus}
    return inventory(tmp_path, {"gpu3": host}, variables)


def _bench(inv: Path, out: Path, *flags: str):
    res = run_cli("bench", "--host", "gpu3", "-i", str(inv), *SMALL, *flags, "--out", str(out))
    assert res.exit_code == 0, res.output
    return res


def _scheduling(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["hosts"]["gpu3"]["scheduling"]


def _medians(out: Path) -> dict[tuple[str, int], float]:
    by: dict[tuple[str, int], list[float]] = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        assert rec["status"] == "ok", rec
        by.setdefault((rec["arm"], rec["concurrency"]), []).append(rec["output_throughput"])
    return {k: statistics.median(v) for k, v in by.items()}


@pytest.mark.slow
def test_side_by_side_figures_agree_with_one_arm_at_a_time(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, [0, 1, 2])
    _bench(inv, tmp_path / "at-once", "--arms-at-once")
    _bench(inv, tmp_path / "one", "--one-arm-at-a-time")

    sched = _scheduling(tmp_path / "at-once")
    assert sched["mode"] == "arms-at-once" and "--arms-at-once" in sched["reason"]
    assert [(c["phase"], c["ok"]) for c in sched["fairness"]] == [("start", True), ("end", True)], sched
    assert {a["arm"] for a in sched["fairness"][0]["arms"]} == set(ARMS)
    assert _scheduling(tmp_path / "one") == {"mode": "one-arm-at-a-time", "reason": "--one-arm-at-a-time",
                                             "asked": "one-arm-at-a-time", "fairness": []}
    report = (tmp_path / "at-once" / "report.md").read_text()
    assert "scheduling on gpu3: arms-at-once" in report and "fairness check end: passed" in report

    together, alone = _medians(tmp_path / "at-once"), _medians(tmp_path / "one")
    assert set(together) == set(alone) == {(a, c) for a in ARMS for c in (1, 4, 8)}
    for key, value in alone.items():
        assert abs(together[key] - value) / value <= 0.10, (key, together[key], value)
    journal = [e for e in events(tmp_path / "at-once") if e["event"] == "bench_scheduling"]
    assert journal and journal[-1]["mode"] == "arms-at-once"


@pytest.mark.slow
def test_a_starved_client_fails_the_fairness_check_and_the_sweep_interleaves(tmp_path: Path, monkeypatch) -> None:
    """Test-only starvation: while it measures beside the other arms (the sweep's named
    side-by-side threads), the eagle3 arm's client keeps only one request in flight,
    as a client short of CPU would. Alone it measures normally."""
    measure = HostSweep._measure

    def starved(self: HostSweep, point):
        side_by_side = threading.current_thread().name.startswith(("fair-", "sweep-"))
        if side_by_side and point.arm == "eagle3":
            point = dataclasses.replace(point, concurrency=1)
        return measure(self, point)

    monkeypatch.setattr(HostSweep, "_measure", starved)
    inv = _inventory(tmp_path, [0, 1, 2])
    res = _bench(inv, tmp_path / "run", "--arms-at-once")

    sched = _scheduling(tmp_path / "run")
    assert sched["mode"] == "one-arm-at-a-time", sched
    assert sched["reason"].startswith("fairness check failed at the start (eagle3: ")
    assert sched["reason"].endswith("fell back to one arm at a time")
    (check,) = sched["fairness"]
    eagle = next(a for a in check["arms"] if a["arm"] == "eagle3")
    assert not eagle["agree"] and eagle["side_by_side"] < eagle["alone"]
    assert "fairness check start: FAILED (eagle3:" in (tmp_path / "run" / "report.md").read_text()
    assert res.exit_code == 0
    # every point measured alone: eagle3 at c=4 as fast as its unstarved figure
    figures = _medians(tmp_path / "run")
    assert figures[("eagle3", 4)] >= 0.9 * eagle["alone"]


@pytest.mark.slow
def test_arms_sharing_a_gpu_still_interleave(tmp_path: Path) -> None:
    inv = _inventory(tmp_path, [0], **{a: {"mem_fraction_static": 0.3} for a in ARMS})
    res = run_cli("bench", "--host", "gpu3", "-i", str(inv), "--concurrency", "1,4", "--repeats", "1",
                  "--input-len", "16", "--output-len", "16", "--arms-at-once", "--out", str(tmp_path / "run"))
    assert res.exit_code == 0, res.output
    sched = _scheduling(tmp_path / "run")
    assert sched["mode"] == "one-arm-at-a-time" and sched["fairness"] == []
    assert sched["reason"].startswith("arms share a GPU") and "--arms-at-once does not apply" in sched["reason"]


def test_the_rule_needs_two_cores_per_arm_unless_told() -> None:
    assert decide("auto", arms=3, shares_gpu=False, cores=4).mode == "one-arm-at-a-time"
    assert decide("auto", arms=3, shares_gpu=False, cores=4).reason == \
        "4 CPU cores < 6 (2 per arm measured at once)"
    assert decide("auto", arms=3, shares_gpu=False, cores=6).mode == "arms-at-once"
    assert decide("arms-at-once", arms=3, shares_gpu=False, cores=2).mode == "arms-at-once"
    assert decide("one-arm-at-a-time", arms=3, shares_gpu=False, cores=64).mode == "one-arm-at-a-time"
    assert decide("arms-at-once", arms=3, shares_gpu=True, cores=64).mode == "one-arm-at-a-time"
    assert decide("auto", arms=1, shares_gpu=False, cores=64).reason == "one arm to measure"
