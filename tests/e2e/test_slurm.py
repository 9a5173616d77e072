"""Issue 14 end to end: a Slurm host (the sshd fixture as its login node, a real
single-node Slurm with 4 GPUs as plain files behind it, the simulator as the server).
`specops deploy` submits each arm as a batch job and waits for it; `bench` runs the client
as a step of each arm's job; crashes and an outside `scancel` fail their point with the
job's state, the arm is resubmitted once, and the sweep goes on."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

from tests.support.arms import sim_inventory
from tests.support.deploy import events, run_cli, write_yaml
from tests.support.slurm import SlurmCluster
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")


def slurm_inventory(tmp_path: Path, sshd, slurm: SlurmCluster, index: int, **arm_extra) -> Path:
    entry = {**sshd.host_entry(index, workdir=str(tmp_path / "w")), "slurm": slurm.slurm_block(time="30")}
    inv = sim_inventory(tmp_path, entry)
    if arm_extra:
        data = yaml.safe_load(inv.read_text())
        for arm, extra in arm_extra.items():
            data["vars"]["arms"][arm].update(extra)
        write_yaml(inv, data)
    return inv


def status(inv: Path) -> dict:
    res = run_cli("status", "--host", "gpu", "-i", str(inv), "--json")
    assert res.exit_code in (0, 1), res.output
    return {s["arm"]: s for s in json.loads(res.output)["gpu"]}


def results(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_deploy_status_logs_bench_and_stop_on_a_slurm_host(tmp_path: Path, sshd, slurm_clean: SlurmCluster) -> None:
    slurm = slurm_clean
    inv = slurm_inventory(tmp_path, sshd, slurm, 3)
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
    assert res.exit_code == 0, res.output
    st = status(inv)
    assert {a: s["state"] for a, s in st.items()} == {"baseline": "ready", "eagle3": "ready", "adaptive": "ready"}
    jobs = {a: s["job_id"] for a, s in st.items()}
    assert len(set(jobs.values())) == 3 and all(j.isdigit() for j in jobs.values())
    assert sorted(slurm.jobs()) == sorted(jobs.values())
    assert {s["node"] for s in st.values()} == {slurm.node}
    assert all(s["job_state"] == "RUNNING" and s["time_left_s"] and s["time_left_s"] <= 1800 for s in st.values())
    gpus = [g for s in st.values() for g in s["gpus"]]
    assert len(gpus) == 3 and len(set(gpus)) == 3, f"two arms share a GPU index: {st}"
    # the job script exported the allocation's indices, which this cluster does not do itself
    log = (tmp_path / "w/.specops/logs/baseline.log").read_text()
    assert f"CUDA_VISIBLE_DEVICES={','.join(map(str, st['baseline']['gpus']))}" in log
    last = sorted((tmp_path / "runs").iterdir())[-1]
    assert any(e["event"] == "slurm_job" and e["job_state"] == "RUNNING" for e in events(last))

    check = run_cli("hosts", "check", "--host", "gpu", "-i", str(inv), "--json")
    assert check.exit_code == 0, check.output
    assert json.loads(check.output)["gpu"]["gpus"] == [f"slurm {slurm.partition}* (up): 1 node(s), gpu:{slurm.gpus}"]
    table = run_cli("status", "--host", "gpu", "-i", str(inv))
    assert f"{jobs['eagle3']} RUNNING on {slurm.node}" in table.output
    logs = run_cli("logs", "--host", "gpu", "-i", str(inv), "--server", "baseline", "-n", "50")
    assert "The server is fired up and ready to roll!" in logs.output

    # a re-run reuses the running jobs
    again = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
    assert again.exit_code == 0, again.output
    assert {a: s["job_id"] for a, s in status(inv).items()} == jobs

    stopped = run_cli("stop", "--host", "gpu", "-i", str(inv))
    assert stopped.exit_code == 0, stopped.output
    assert f"(job {jobs['baseline']}) stopped" in stopped.output
    assert slurm.jobs() == []
    assert not list((tmp_path / "w/.specops/servers").glob("*.json"))

    out = tmp_path / "run"
    bench = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,2",
                    "--repeats", "1", "--num-prompts", "4", "--input-len", "32", "--output-len", "16",
                    "--out", str(out))
    assert bench.exit_code == 0, bench.output
    rows = results(out)
    assert sorted((r["arm"], r["concurrency"], r["status"]) for r in rows) == [
        ("baseline", 1, "ok"), ("baseline", 2, "ok"), ("eagle3", 1, "ok"), ("eagle3", 2, "ok")]
    assert slurm.jobs() == [], "the sweep cancels the jobs it submitted"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["hosts"]["gpu"]["arms"]["eagle3"]["slurm"]["node"] == slurm.node


@pytest.mark.slow
def test_an_arm_waits_pending_until_the_other_arms_job_ends(tmp_path: Path, sshd, slurm_clean: SlurmCluster) -> None:
    """Each arm asks for 3 of the 4 GPUs: the second job stays PENDING (Resources) until
    the first arm's points are done and its job cancelled; then it runs."""
    inv = slurm_inventory(tmp_path, sshd, slurm_clean, 4, baseline={"gpus": [0, 1, 2]}, eagle3={"gpus": [0, 1, 2]})
    out = tmp_path / "run"
    bench = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1",
                    "--repeats", "1", "--num-prompts", "4", "--input-len", "32", "--output-len", "16",
                    "--out", str(out))
    assert bench.exit_code == 0, bench.output
    assert sorted((r["arm"], r["status"]) for r in results(out)) == [("baseline", "ok"), ("eagle3", "ok")]
    run = [e for e in events(out) if e["event"] == "bench_slurm_job"]
    pending = [e for e in run if e["job_state"] == "PENDING" and e["reason"] == "Resources"]
    assert pending, run
    waited = pending[0]["arm"]
    other = "eagle3" if waited == "baseline" else "baseline"
    running = {e["arm"]: e for e in run if e["job_state"] == "RUNNING"}
    assert len(running[waited]["gpus"]) == 3 and len(running[other]["gpus"]) == 3
    # it ran only after the other arm's point was measured
    other_point = next(r for r in results(out) if r["arm"] == other)
    waited_point = next(r for r in results(out) if r["arm"] == waited)
    assert waited_point["started_at"] > other_point["started_at"]


@pytest.mark.slow
def test_crash_and_outside_scancel_fail_the_point_with_the_job_state(tmp_path: Path, sshd,
                                                                      slurm_clean: SlurmCluster) -> None:
    """baseline's server dies after 25 requests (9 + 10 in its c=1 and c=2 points, warm-ups
    counted, so in the middle of its c=4 point);
    eagle3's job is cancelled from outside after its first point. Each failed point names
    the job's end state, each arm is resubmitted once, and the sweep goes on (eagle3's c=4
    point is measured by its second job)."""
    slurm = slurm_clean
    inv = slurm_inventory(tmp_path, sshd, slurm, 5, baseline={"extra_args": ["--sim-crash-after", "25"]})
    out = tmp_path / "run"
    cancelled: list[str] = []

    def cancel_eagle3_after_its_first_point() -> None:
        state = tmp_path / "w/.specops/servers/eagle3.json"

        def first_point_done() -> bool:
            try:
                done = [r for r in results(out) if r["arm"] == "eagle3"]
            except (OSError, ValueError):
                done = []
            return bool(done) and state.exists()

        wait_until(first_point_done, "eagle3's first point", timeout=240)
        job = json.loads(state.read_text())["slurm"]["job_id"]
        slurm.run("scancel", job)
        cancelled.append(job)

    watcher = threading.Thread(target=cancel_eagle3_after_its_first_point, daemon=True)
    watcher.start()
    bench = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,2,4",
                    "--repeats", "1", "--num-prompts", "8", "--input-len", "32", "--output-len", "16",
                    "--out", str(out))
    watcher.join(5)
    assert cancelled, "the eagle3 job was never cancelled"
    assert bench.exit_code == 1, bench.output  # two points failed
    rows = results(out)
    by = {(r["arm"], r["concurrency"]): r for r in rows}
    assert {k: r["status"] for k, r in by.items()} == {
        ("baseline", 1): "ok", ("baseline", 2): "ok", ("baseline", 4): "failed",
        ("eagle3", 1): "ok", ("eagle3", 2): "failed", ("eagle3", 4): "ok"}
    crashed = by[("baseline", 4)]
    assert "FAILED" in crashed["error"], crashed
    assert "Scheduler hit an exception" in (crashed.get("log_excerpt") or "") + json.dumps(crashed.get("extra") or {})
    killed = by[("eagle3", 2)]
    assert f"job {cancelled[0]} CANCELLED" in killed["error"], killed
    relaunches = [e["arm"] for e in events(out) if e["event"] == "bench_relaunch"]
    assert sorted(relaunches) == ["baseline", "eagle3"]
    assert slurm.jobs() == []


@pytest.mark.slow
def test_nodes_2_runs_the_same_sweep_on_two_allocations_side_by_side(tmp_path: Path, sshd,
                                                                      slurm_clean: SlurmCluster) -> None:
    slurm = slurm_clean
    entry = {**sshd.host_entry(6, workdir=str(tmp_path / "w")), "slurm": slurm.slurm_block(nodes=2)}
    inv = sim_inventory(tmp_path, entry)
    out = tmp_path / "run"
    bench = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1,2",
                    "--repeats", "1", "--num-prompts", "4", "--input-len", "32", "--output-len", "16",
                    "--out", str(out))
    assert bench.exit_code == 0, bench.output
    got = sorted((r["host"], r["arm"], r["concurrency"], r["status"]) for r in results(out))
    assert got == sorted((h, a, c, "ok") for h in ("gpu", "gpu#2") for a in ("baseline", "eagle3") for c in (1, 2))
    manifest = json.loads((out / "manifest.json").read_text())
    jobs = [arm["slurm"] for h in ("gpu", "gpu#2") for arm in manifest["hosts"][h]["arms"].values()]
    assert len({j["job_id"] for j in jobs}) == 4
    gpus = [g for j in jobs for g in j["gpus"]]
    assert len(gpus) == 4 and len(set(gpus)) == 4, f"two jobs running at once share a GPU index: {jobs}"
    assert "gpu#2" in (out / "report.md").read_text()
    assert slurm.jobs() == []
