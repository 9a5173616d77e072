"""What a verified threshold costs in GPU-minutes (issue 25), on a simulated `local`-style host.

The host is the shipped `local` host (engine sim, its time scale, its arms) with three
stand-in GPUs (`gpus: [0, 1, 2]`: each arm on its own), in a scratch directory. Three runs:

(a) the exhaustive way: `specops bench` with three arms x the default levels x 3 repeats,
    one arm at a time (`--one-arm-at-a-time`), then the report's recommended threshold;
(b) `specops tune --repeats auto:3` (`--tune-repeats` changes it), in runs and a work
    directory of its own (so it reuses nothing of (a));
(c) the same bench as (a) with `--arms-at-once`: the wall ratio side by side / one at a time.

For each: GPU-minutes held (sampled: every arm whose server process is alive holds its one
stand-in GPU, from its launch to its stop; tune's candidate arms are up only while they are
verified), beside wall x 3 (every GPU kept for the whole command), the wall time, the
measuring share (the union of the points' wall intervals from the journal, over the
command's wall), and the threshold. Every command runs as a whole process
(`python -m specops`), as a user runs it.

    python bench/gpu_hours.py [--time-scale 0.1] [--skip a,b,c] [--concurrency 1,2,4,8,16,32,64]
                              [--tune-repeats auto:3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from specops.data import shipped_inventory  # noqa: E402
from specops.sim.testing import free_ports  # noqa: E402

GPUS = 3


def inventory(root: Path, name: str, scale: float | None) -> Path:
    """The shipped inventory's `local` host with three stand-in GPUs, its own work dir and ports."""
    data = yaml.safe_load(Path(shipped_inventory()).read_text())
    host = dict(data["hosts"]["local"])
    host["workdir"] = str(root / f"w-{name}")
    host["gpus"] = list(range(GPUS))
    if scale is not None:
        host["vars"] = {**host.get("vars", {}), "sim": {"time_scale": scale}}
    arms = data["vars"]["arms"]
    for arm, port in zip(arms, free_ports(len(arms)), strict=True):
        arms[arm] = {**arms[arm], "port": port}
    data["hosts"] = {"local3": host}
    path = root / f"hosts-{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Holds:
    """GPU-seconds the arms hold, sampled while a command runs: every `every` s, each
    server state file under the work dir whose process is alive holds one stand-in GPU
    (each arm has its own). An arm holds its GPU from its launch to its stop, whichever
    phase launched it: tune's candidate arms are up only while they are verified."""

    def __init__(self, workdir: Path, every: float = 0.2):
        self.dir, self.every = workdir / ".specops" / "servers", every
        self.gpu_s: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _alive(self) -> list[str]:
        arms = []
        for path in self.dir.glob("*.json"):
            try:
                pid = int(json.loads(path.read_text()).get("pid") or 0)
            except (OSError, ValueError):
                continue
            if pid > 0 and Path(f"/proc/{pid}").exists():
                arms.append(path.stem)
        return arms

    def _sample(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.every):
            now = time.perf_counter()
            for arm in self._alive():
                self.gpu_s[arm] = self.gpu_s.get(arm, 0.0) + (now - last)
            last = now

    def __enter__(self) -> "Holds":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def gpu_min(self) -> float:
        return sum(self.gpu_s.values()) / 60


def run(argv: list[str], workdir: Path) -> tuple[float, Holds]:
    """Wall seconds of one whole `python -m specops` command, and the GPU time its arms held."""
    with Holds(workdir) as holds:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "specops", *argv], cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"specops {argv[0]} failed ({proc.returncode})")
    return wall, holds


def measuring_s(run_dirs: list[Path]) -> float:
    """Seconds during which at least one point was being measured (bench_point events)."""
    spans = []
    for d in run_dirs:
        for path in d.rglob("events.jsonl"):
            for line in path.read_text().splitlines():
                ev = json.loads(line)
                if ev.get("event") == "bench_point" and isinstance(ev.get("t0"), (int, float)):
                    spans.append((ev["t0"], ev["t0"] + ev["wall_s"]))
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def scheduling_of(out: Path) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    sched = manifest["hosts"]["local3"].get("scheduling") or {}
    return f"{sched.get('mode')} ({sched.get('reason')})"


def bench(root: Path, name: str, flag: str, levels: str, scale: float | None, repeats: int = 3) -> dict[str, Any]:
    out = root / name
    inv = inventory(root, name, scale)
    wall, holds = run(["bench", "--host", "local3", "-i", str(inv), "--concurrency", levels, "--repeats", str(repeats), flag,
                       "--out", str(out), "--runs-dir", str(root / f"runs-{name}")], root / f"w-{name}")
    summary = json.loads((out / "summary.json").read_text())
    threshold = summary["hosts"][0]["recommended_threshold"]
    return {"name": name, "wall": wall, "held": holds.gpu_min, "arms": holds.gpu_s, "measuring": measuring_s([out]),
            "threshold": threshold,
            "points": sum(1 for _ in (out / "results.jsonl").open()), "scheduling": scheduling_of(out)}


def tune(root: Path, levels: str, scale: float | None, repeats: str) -> dict[str, Any]:
    out = root / "tune"
    inv = inventory(root, "tune", scale)
    wall, holds = run(["tune", "--host", "local3", "-i", str(inv), "--concurrency", levels, "--repeats", repeats,
                       "--out", str(out), "--runs-dir", str(root / "runs-tune")], root / "w-tune")
    doc = json.loads((out / "tune.json").read_text())
    result = doc.get("result", doc)
    verified = result.get("status") == "verified"
    return {"name": f"tune --repeats {repeats}", "wall": wall, "held": holds.gpu_min, "arms": holds.gpu_s,
            "measuring": measuring_s([out]),
            "threshold": result.get("threshold") if verified else None, "status": result.get("status"),
            "points": sum(1 for _ in (out / "results.jsonl").open())}


def show(row: dict[str, Any]) -> str:
    per_arm = ", ".join(f"{arm} {s / 60:.2f}" for arm, s in sorted(row["arms"].items()))
    return (f"{row['name']:<22} GPU-min held {row['held']:6.2f} (wall x {GPUS}: {row['wall'] * GPUS / 60:6.2f}; "
            f"{per_arm})\n{'':<22} wall {row['wall']:7.1f} s  measuring share "
            f"{row['measuring'] / row['wall']:.2f}  points {row['points']:3d}  threshold {row['threshold']}"
            + (f"  [{row['scheduling']}]" if row.get("scheduling") else "")
            + (f"  [tune: {row['status']}]" if row.get("status") else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, help="the simulator's time scale (default: the local host's)")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--skip", default="", help="comma list of a, b, c to leave out")
    ap.add_argument("--tune-repeats", default="auto:3", help="(b)'s tune --repeats (default auto:3)")
    ap.add_argument("--repeats", type=int, default=3, help="(a)'s and (c)'s bench --repeats (1: the smallest run)")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) - {""}
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="specops-gpu-hours-") as tmp:
        root = Path(tmp)
        if "a" not in skip:
            rows["a"] = bench(root, "a-exhaustive", "--one-arm-at-a-time", args.concurrency, args.time_scale, args.repeats)
            print(show(rows["a"]), flush=True)
        if "b" not in skip:
            rows["b"] = tune(root, args.concurrency, args.time_scale, args.tune_repeats)
            print(show(rows["b"]), flush=True)
        if "c" not in skip:
            rows["c"] = bench(root, "c-side-by-side", "--arms-at-once", args.concurrency, args.time_scale, args.repeats)
            print(show(rows["c"]), flush=True)
    if "a" in rows and "b" in rows:
        same = rows["a"]["threshold"] == rows["b"]["threshold"] and rows["b"]["threshold"] is not None
        print(f"(b)/(a) GPU-minutes held: {rows['b']['held'] / rows['a']['held']:.2f} (goal <= 0.35; wall x {GPUS}: "
              f"{rows['b']['wall'] / rows['a']['wall']:.2f}); same threshold: "
              f"{'yes' if same else 'no'} (a: {rows['a']['threshold']}, b: {rows['b']['threshold']})")
    if "a" in rows and "c" in rows:
        print(f"(c) side by side / one arm at a time, wall: {rows['c']['wall'] / rows['a']['wall']:.2f} (goal <= 0.45)")
    for key in ("a", "c"):
        if key in rows:
            print(f"measuring share, bench {rows[key]['name']}: {rows[key]['measuring'] / rows[key]['wall']:.2f} "
                  f"(goal >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
