"""What a verified threshold costs in GPU-minutes (issue 25), on a simulated `local`-style host.

The host is the shipped `local` host (engine sim, its time scale, its arms) with three
stand-in GPUs (`gpus: [0, 1, 2]`: each arm on its own), in a scratch directory. Three runs:

(a) the exhaustive way: `specops bench` with three arms x the default levels x 3 repeats,
    one arm at a time (`--one-arm-at-a-time`), then the report's recommended threshold;
(b) `specops tune` with its defaults, in runs and a work directory of its own (so it
    reuses nothing of (a));
(c) the same bench as (a) with `--arms-at-once`: the wall ratio side by side / one at a time.

For each: GPU-minutes held = wall x the GPUs the arms hold (3: every arm keeps its GPU from
its launch in the command to the decision at its end), the wall time, the measuring share
(the union of the points' wall intervals from the journal, over the command's wall), and
the threshold. Every command runs as a whole process (`python -m specops`), as a user runs it.

    python bench/gpu_hours.py [--time-scale 0.1] [--skip a,b,c] [--concurrency 1,2,4,8,16,32,64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
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


def run(argv: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specops", *argv], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"specops {argv[0]} failed ({proc.returncode})")
    return wall


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


def bench(root: Path, name: str, flag: str, levels: str, scale: float | None) -> dict[str, Any]:
    out = root / name
    inv = inventory(root, name, scale)
    wall = run(["bench", "--host", "local3", "-i", str(inv), "--concurrency", levels, "--repeats", "3", flag,
                "--out", str(out), "--runs-dir", str(root / f"runs-{name}")])
    summary = json.loads((out / "summary.json").read_text())
    threshold = summary["hosts"][0]["recommended_threshold"]
    return {"name": name, "wall": wall, "measuring": measuring_s([out]), "threshold": threshold,
            "points": sum(1 for _ in (out / "results.jsonl").open()), "scheduling": scheduling_of(out)}


def tune(root: Path, levels: str, scale: float | None) -> dict[str, Any]:
    out = root / "tune"
    inv = inventory(root, "tune", scale)
    wall = run(["tune", "--host", "local3", "-i", str(inv), "--concurrency", levels, "--out", str(out),
                "--runs-dir", str(root / "runs-tune")])
    doc = json.loads((out / "tune.json").read_text())
    result = doc.get("result", doc)
    verified = result.get("status") == "verified"
    return {"name": "tune", "wall": wall, "measuring": measuring_s([out]),
            "threshold": result.get("threshold") if verified else None, "status": result.get("status"),
            "points": sum(1 for _ in (out / "results.jsonl").open())}


def show(row: dict[str, Any]) -> str:
    gpu_min = row["wall"] * GPUS / 60
    return (f"{row['name']:<22} GPU-min {gpu_min:7.2f}  wall {row['wall']:7.1f} s  measuring share "
            f"{row['measuring'] / row['wall']:.2f}  points {row['points']:3d}  threshold {row['threshold']}"
            + (f"  [{row['scheduling']}]" if row.get("scheduling") else "")
            + (f"  [tune: {row['status']}]" if row.get("status") else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-scale", type=float, help="the simulator's time scale (default: the local host's)")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--skip", default="", help="comma list of a, b, c to leave out")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) - {""}
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="specops-gpu-hours-") as tmp:
        root = Path(tmp)
        if "a" not in skip:
            rows["a"] = bench(root, "a-exhaustive", "--one-arm-at-a-time", args.concurrency, args.time_scale)
            print(show(rows["a"]), flush=True)
        if "b" not in skip:
            rows["b"] = tune(root, args.concurrency, args.time_scale)
            print(show(rows["b"]), flush=True)
        if "c" not in skip:
            rows["c"] = bench(root, "c-side-by-side", "--arms-at-once", args.concurrency, args.time_scale)
            print(show(rows["c"]), flush=True)
    if "a" in rows and "b" in rows:
        same = rows["a"]["threshold"] == rows["b"]["threshold"] and rows["b"]["threshold"] is not None
        print(f"(b)/(a) GPU-minutes: {rows['b']['wall'] / rows['a']['wall']:.2f} (goal <= 0.35); same threshold: "
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
