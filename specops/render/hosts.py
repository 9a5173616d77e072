"""`specops hosts` and `specops hosts check`: the inventory, and what each host has."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specops.config.inventory import Host, Inventory
from specops.errors import SpecopsError
from specops.servers.slurm import cluster_gpus
from specops.transport.base import HostFacts
from specops.transport.connect import open_transport
from specops.transport.nvidia import IDLE_MEMORY_MIB, GPUInventory, read_gpus
from specops.transport.probes import gather_facts


def inventory_table(inv: Inventory) -> Table:
    table = Table(title=f"inventory {inv.path}", title_justify="left")
    for col in ("host", "connection", "address", "workdir", "engine", "gpus", "groups"):
        table.add_column(col)
    for host in inv.hosts.values():
        table.add_row(escape(host.name), host.connection, escape(host.describe()), escape(host.workdir),
                      host.engine, ",".join(map(str, host.gpus)) or "-", ",".join(host.groups) or "-")
    return table


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

    transport = open_transport(host)
    try:
        host.expand_on_host(transport.expand)  # `python: ~/...` is the host's home
        facts = gather_facts(transport, host.workdir, python=host.python)
        if host.slurm is not None and facts.reachable:  # a login node: the GPUs are the cluster's
            facts.gpus = cluster_gpus(transport, host.slurm)
        elif facts.reachable and host.engine == "sglang":
            facts.gpus += _gpu_holders(read_gpus(transport))
        return facts
    except SpecopsError as exc:
        return HostFacts(reachable=False, error=str(exc))
    finally:
        transport.close()


def check_hosts(inv: Inventory, hosts: list[Host], console: Console, as_json: bool = False) -> bool:
    """Connect to every host at once; True when all are reachable."""
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts)))) as pool:
        facts = dict(zip([h.name for h in hosts], pool.map(_facts, hosts), strict=True))
    if as_json:
        console.print_json(json.dumps({name: vars(f) for name, f in facts.items()}))
    else:
        table = Table(title="hosts check", title_justify="left")
        for col in ("host", "reachable", "host key", "python", "git", "free disk", "GPUs"):
            table.add_column(col)
        for host in hosts:
            f = facts[host.name]
            table.add_row(escape(host.name), "[green]yes[/]" if f.reachable else "[red]no[/]", escape(f.host_key),
                          escape(f.python), escape(f.git), escape(f.free_disk),
                          escape("; ".join(f.gpus) or ("none" if f.reachable else "")))
        console.print(table)
        for host in hosts:
            if facts[host.name].error:
                console.print(f"✗ {host.name} ({host.describe()}): {facts[host.name].error}", markup=False, highlight=False)
    return all(f.reachable for f in facts.values())
