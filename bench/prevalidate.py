"""Checking a large inventory before anything runs: `deploy`'s pre-run check of every step
for every host (load the inventory, resolve each host's variables, render each step's
arguments and `when:`), as `specops deploy --host all --check` does it before its first
step, without connecting anywhere.

    python bench/prevalidate.py [--hosts 2000] [--repeats 3]

Prints the median seconds to load the inventory and to check every step, and the
per-host cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.run.engine import Engine
from specops.steps import KINDS

DATA = Path(__file__).resolve().parent.parent / "specops" / "data"


def once(root: Path, hosts: int) -> tuple[float, float]:
    inventory = yaml.safe_load((DATA / "hosts.yaml").read_text())
    inventory["hosts"] = {f"h{i}": {"connection": "local", "workdir": str(root / f"w{i}"), "engine": "sim"}
                          for i in range(hosts)}
    path = root / "hosts.yaml"
    path.write_text(yaml.safe_dump(inventory))
    t0 = time.perf_counter()
    inv = load_inventory(path)
    t1 = time.perf_counter()
    engine = Engine(inv, load_playbook(DATA / "playbooks" / "deploy.yaml", KINDS), inv.select("all"),
                    extra_vars={}, runs_dir=root / "runs", check=True)
    engine.prevalidate()
    t2 = time.perf_counter()
    engine.close()
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    loads, checks = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            load, check = once(Path(tmp), args.hosts)
        loads.append(load)
        checks.append(check)
    load, check = statistics.median(loads), statistics.median(checks)
    print(f"{args.hosts} hosts: inventory loaded in {load:.2f} s, every step checked in {check:.2f} s "
          f"({check / args.hosts * 1000:.2f} ms per host)")


if __name__ == "__main__":
    main()
