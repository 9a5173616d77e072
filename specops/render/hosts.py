"""`specops hosts` and `specops hosts check`: the inventory, and what each host has."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.text import Text

from specops.config.inventory import Host, Inventory
from specops.engines import engine_for
from specops.errors import SpecopsError
from specops.render.fit import Cell, Column, Fitted, fit_table
from specops.secrets import dumps_masked
from specops.servers.slurm import cluster_gpus
from specops.transport.base import HostFacts
from specops.transport.connect import open_transport
from specops.transport.nvidia import IDLE_MEMORY_MIB, GPUInventory, read_gpus
from specops.transport.probes import gather_facts


def inventory_table(inv: Inventory, width: int) -> Fitted:
    columns = [Column("host", shrink=True), Column("connection"), Column("address", shrink=True),
               Column("workdir", shrink=True), Column("engine"), Column("gpus", shrink=True),
               Column("groups", shrink=True)]
    rows: list[list[Cell]] = [[host.name, host.connection, host.describe(), host.workdir, host.engine,
                               _inventory_gpus(host), ",".join(host.groups) or "-"]
                              for host in inv.hosts.values()]
    return fit_table(columns, rows, width=width, title=f"inventory {inv.path}")


def _inventory_gpus(host: Host) -> str:
    """The inventory's `gpus` column: the listed GPUs, `cpu` for a CPU host, else `-`."""
    return "cpu" if host.device == "cpu" else ",".join(map(str, host.gpus)) or "-"


def device_cell(facts: HostFacts) -> str:
    """What `hosts check` says a host computes on: a CPU host's CPU (never "GPU: none"), else its GPUs."""
    if facts.device == "cpu":
        return f"cpu: {facts.cpu}" if facts.cpu else "cpu"
    return "; ".join(facts.gpus) or ("none" if facts.reachable else "")


def _gpu_holders(inventory: GPUInventory) -> list[str]:
    """What the GPU preflight would refuse: GPUs held by a process, or with memory in use."""
    out = []
    for gpu in inventory.gpus:
        for app in inventory.apps_on(gpu.index):
            mem = f", {app.used_memory_mib} MiB" if app.used_memory_mib is not None else ""
            out.append(f"GPU {gpu.index} held by pid {app.pid} {app.process_name}{mem}")
        if not inventory.apps_on(gpu.index) and gpu.memory_used_mib > IDLE_MEMORY_MIB:
            out.append(f"GPU {gpu.index}: {gpu.memory_used_mib} MiB in use by a process nvidia-smi does not show")
    if inventory.driver_version:
        out.append(f"driver {inventory.driver_version}, CUDA {inventory.cuda_version or '?'}")
    return out


def _facts(host: Host) -> HostFacts:

    with open_transport(host) as transport:
        try:
            host.expand_on_host(transport.expand)  # `python: ~/...` is the host's home
            facts = gather_facts(transport, host.workdir, python=host.python)
            facts.device = host.device
            if host.slurm is not None and facts.reachable:  # a login node: the GPUs are the cluster's
                facts.gpus = cluster_gpus(transport, host.slurm)
            elif facts.reachable and not engine_for(host).simulated and host.device != "cpu":
                facts.gpus += _gpu_holders(read_gpus(transport))
            return facts
        except SpecopsError as exc:
            return HostFacts(reachable=False, error=str(exc))


def check_hosts(inv: Inventory, hosts: list[Host], console: Console, as_json: bool = False,
                full: bool = False) -> bool:
    """Connect to every host at once; True when all are reachable. `full`: values in full
    (below the table) where the table shortens them to fit."""
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts)))) as pool:
        facts = dict(zip([h.name for h in hosts], pool.map(_facts, hosts), strict=True))
    if as_json:
        console.print_json(dumps_masked({name: vars(f) for name, f in facts.items()}))
    else:
        columns = [Column("host", shrink=True), Column("reachable"), Column("host key", shrink=True),
                   Column("python", shrink=True), Column("git", shrink=True), Column("free disk", shrink=True),
                   Column("device", shrink=True)]
        rows: list[list[Cell]] = []
        for host in hosts:
            f = facts[host.name]
            rows.append([host.name, Text("yes", style="green") if f.reachable else Text("no", style="red"),
                         f.host_key, f.python, f.git, f.free_disk, device_cell(f)])
        fit_table(columns, rows, width=console.width, title="hosts check").print(console, full=full)
        for host in hosts:
            if facts[host.name].error:
                console.print(f"✗ {host.name} ({host.describe()}): {facts[host.name].error}", markup=False, highlight=False)
    return all(f.reachable for f in facts.values())
