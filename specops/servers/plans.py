"""From a host's variables and its SGLang tree to launch plans: the glue the `server` step
and `specops bench` share."""

from __future__ import annotations

from typing import Any, Sequence

from specops.config.inventory import Host
from specops.engines import engine_named
from specops.engines.base import EngineLayout
from specops.errors import ConfigError, StepError
from specops.hostfiles import paths
from specops.hostfiles.treefiles import TransportTreeFiles, TreeFiles
from specops.servers import container
from specops.servers.arms import ArmSpec, arms_from_vars
from specops.servers.launch import LaunchPlan, build_launch
from specops.servers.placement import ArmRequest, Placement, place_arms
from specops.servers.supervisor import supervisor_for
from specops.sglang.layout import BUCKET_SOURCES, SGLangLayout
from specops.transport.base import Transport
from specops.transport.nvidia import read_gpus


def bucket_sources(files: TreeFiles, layout: EngineLayout) -> dict[str, str]:
    """The tree files that may build the CUDA-graph capture list, read only for SGLang's native adaptive."""
    if not isinstance(layout, SGLangLayout) or not layout.adaptive_zero_steps:
        return {}
    out = {}
    for rel in BUCKET_SOURCES:
        data = files.read(rel)
        if data is not None:
            out[rel] = data.decode(errors="replace")
    return out


def arm_requests(specs: dict[str, ArmSpec]) -> list[ArmRequest]:
    return [ArmRequest(s.name, tuple(s.gpus) if s.gpus else None, s.tp_size, s.mem_fraction_static)
            for s in specs.values()]


def host_gpu_indices(transport: Transport, host: Host) -> list[int]:
    """The host's `gpus:` from the inventory, else what nvidia-smi lists (one round trip)."""
    if host.gpus:
        return list(host.gpus)
    inventory = read_gpus(transport)
    if inventory.error:
        raise StepError(f"cannot place the arms on GPUs: {inventory.error}", where=f"host {host.name}",
                        hint="install the NVIDIA driver, or list the host's GPUs as 'gpus: [0, 1]' in hosts.yaml")
    return inventory.indices


def placements_for(transport: Transport, host: Host, variables: dict[str, Any], *,
                   where: str = "vars") -> list[Placement] | None:
    """Every arm's GPUs and tensor parallelism on an SGLang host (None on a simulated one
    that lists no `gpus`, and where every arm runs on the CPU).
    All arms of the vars are placed, in their order, so `bench --arms eagle3` finds eagle3
    on the GPU deploy gave it. CPU arms (`device: cpu`) are never placed: they have no GPUs."""
    if engine_named(str(variables.get("engine") or host.engine)).simulated and not host.gpus:
        return None  # a simulated host is placed only when hosts.yaml gives it GPUs to place on
    specs = {name: spec for name, spec in arms_from_vars(variables, where=where).items() if not spec.cpu}
    if not specs:
        return None  # nothing to ask nvidia-smi about
    return place_arms(arm_requests(specs), host_gpu_indices(transport, host))


def plan_arms(transport: Transport, host: Host, variables: dict[str, Any], arm_names: Sequence[str],
              tree: str, *, where: str = "vars") -> list[LaunchPlan]:
    """Launch plans for the named arms on `host`, built from the tree's detected layout."""
    specs = arms_from_vars(variables, where=where)
    unknown = [a for a in arm_names if a not in specs]
    if unknown:
        raise ConfigError(f"unknown arm(s) {', '.join(unknown)}; the vars define: {', '.join(specs)}", where=where)
    tree = transport.expand(tree)
    files = TransportTreeFiles(transport, tree)
    engine = str(variables.get("engine") or host.engine)
    serving = engine_named(engine, where=f"host {host.name}")
    if not files.exists(serving.tree_marker):
        raise ConfigError(f"{tree} is not {serving.tree_name} ({serving.tree_marker} is missing); run deploy first",
                          where=f"host {host.name}")
    layout = serving.layout(files)
    supervisor = supervisor_for(host)
    # where a scheduler places each arm's job (Slurm), the login node has no GPUs to place on
    for placement in (placements_for(transport, host, variables, where=where) if not supervisor.scheduled
                      else None) or []:
        specs[placement.arm].gpus, specs[placement.arm].tp_size = placement.gpus, placement.tp_size
    sources = bucket_sources(files, layout) if "adaptive" in {specs[n].kind for n in arm_names} else {}
    workdir = transport.expand(str(variables.get("workdir") or host.workdir))
    python = serving.server_python(host.python, variables, transport.expand)
    plans = [
        build_launch(specs[name], layout, workdir=workdir, python=python, engine=engine, sglang_tree=tree,
                     sim_options=serving.launch_options(variables),
                     bucket_sources=sources, where=f"host {host.name}, arm '{name}'")
        for name in arm_names
    ]
    if host.secrets:  # loaded by the process that starts each server (the engine sent the file)
        for plan in plans:
            plan.secrets_file = paths.secrets_env(workdir)
    image = container.ContainerSettings.from_vars(variables, where=where)
    if image is not None and not isinstance(layout, SGLangLayout):
        raise ConfigError(f"sglang_image is SGLang's container route; engine {engine} has none yet",
                          where=f"host {host.name}", hint="drop sglang_image for that host")
    if image is not None:  # each arm a container of the image, the tree mounted over its sglang
        if not supervisor.containers:
            raise ConfigError("sglang_image on a Slurm host is not supported (pyxis/enroot containers are not "
                              "built yet)", where=f"host {host.name}", hint="drop sglang_image for that host")
        facts = container.image_facts(transport, image, tree)
        plans = [container.adapt_plan(p, facts, tree, engine=engine, home=transport.home) for p in plans]
    # as the host's supervisor runs them (on a Slurm host: a batch job each, behind the login node)
    return [supervisor.adapt(p) for p in plans]
