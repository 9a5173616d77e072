"""`specops demo`: deploy, then bench, on the simulated `local` host (the inventory given,
else ./hosts.yaml, else the one shipped), then stop the servers it started: the whole loop
with no GPU. The CLI only calls `run_demo`."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from specops.config.inventory import default_inventory_path, load_inventory
from specops.data import default_playbook, shipped_inventory
from specops.flows.bench_run import run_bench
from specops.flows.hostops import stop_all
from specops.flows.play import run_playbook


def demo_settings(quick: bool) -> dict[str, object]:
    """The demo's sweep: every arm, a few levels, short prompts (`quick`: under a minute)."""
    return {"arms": ["baseline", "eagle3", "adaptive"], "repeats": 1 if quick else 2,
            "concurrency": [1, 4, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64],
            "input_len": 128, "output_len": 64 if quick else 128}


def run_demo(inventory_path: str | None, quick: bool, console: Console) -> int:
    """The exit code: 1 when the deploy failed (nothing benched), else the bench's."""
    inv_path = Path(inventory_path) if inventory_path else default_inventory_path()
    if not inv_path.exists():
        inv_path = shipped_inventory()
    inv = load_inventory(inv_path)
    console.print("[bold]1/2 deploy[/] on local (simulated SGLang servers)")
    deployed = run_playbook(inv, default_playbook("deploy"), "local", extra_vars={}, console=console)
    if not deployed.ok:
        return 1
    console.print("[bold]2/2 bench[/] on local")
    code = run_bench(str(inv_path), "local", dict(demo_settings(quick)), playbook=None, out=None, resume=None,
                     runs_dir=None, extra_vars={}, console=console)
    stopped = stop_all(inv.hosts["local"])
    console.print(f"demo done; stopped the simulated servers ({', '.join(stopped) or 'none'})",
                  markup=False, highlight=False)
    return code
