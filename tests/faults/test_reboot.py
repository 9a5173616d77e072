"""Fault tier: a host "rebooted" under its servers: the processes are gone (SIGKILL), the
state files are left and older than the boot, and a pid is now an unrelated process.
`status` says so, `bench` launches the arms again and completes, the stranger is untouched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.deploy import events
from tests.support.faults import alive, local_inventory, specops, stop_leftovers, wait_until, whole_records

pytestmark = pytest.mark.faults

SWEEP = ["--arms", "baseline,eagle3", "--concurrency", "1", "--repeats", "1", "--num-prompts", "4",
         "--input-len", "16", "--output-len", "8"]


def _boot_time() -> int:
    line = next(ln for ln in Path("/proc/stat").read_text().splitlines() if ln.startswith("btime "))
    return int(line.split()[1])


def test_rebooted_host_status_says_so_and_bench_relaunches(tmp_path: Path, fault_workdir: Path) -> None:
    inv = local_inventory(tmp_path, fault_workdir)
    servers = fault_workdir / ".specops/servers"
    stranger = subprocess.Popen(["sleep", "300"])  # the process that got a dead server's pid
    try:
        res = specops("bench", "--host", "local", "-i", str(inv), *SWEEP, "--keep-servers", "--out", str(tmp_path / "r1"))
        assert res.returncode == 0, res.stdout
        states = {arm: json.loads((servers / f"{arm}.json").read_text()) for arm in ("baseline", "eagle3")}
        for st in states.values():
            os.killpg(st["pgid"], signal.SIGKILL)
        wait_until(lambda: not any(alive(st["pid"]) for st in states.values()), "the servers gone")
        # what a reboot leaves: state files from before the boot, and a pid now someone else's
        # (the server led its own group, so the file's pgid is the same number: launch records it so)
        states["baseline"]["pid"] = states["baseline"]["pgid"] = stranger.pid
        (servers / "baseline.json").write_text(json.dumps(states["baseline"], indent=1) + "\n")
        before_boot = _boot_time() - 60
        for arm in states:
            os.utime(servers / f"{arm}.json", (before_boot, before_boot))

        res = specops("status", "--host", "local", "-i", str(inv))
        assert res.returncode == 1 and "Traceback" not in res.stdout, res.stdout
        for arm, st in states.items():
            assert f"local: {arm} is gone (pid {st['pid']} not running; the host rebooted since its launch)" \
                in " ".join(res.stdout.split()), res.stdout
        assert "ready" not in res.stdout

        run = tmp_path / "r2"
        res = specops("bench", "--host", "local", "-i", str(inv), *SWEEP, "--out", str(run))
        assert res.returncode == 0, res.stdout
        actions = {e["arm"]: e["action"] for e in events(run) if e["event"] == "bench_server"}
        assert set(actions) == {"baseline", "eagle3"} and "reused" not in actions.values(), actions
        assert len(whole_records(run)) == 2 and all(r["status"] == "ok" for r in whole_records(run))
        assert alive(stranger.pid), "the process that reused a server's pid was not ours to stop"
        assert not list(servers.glob("*.json")), "the bench stopped the arms it launched"
    finally:
        stranger.kill()
        stranger.wait()
        stop_leftovers(inv, "local", fault_workdir)
