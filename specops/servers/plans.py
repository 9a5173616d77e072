"""From a host's variables and its SGLang tree to launch plans: the glue the `server` step
and `specops bench` share."""

from __future__ import annotations

from typing import Any, Sequence

from specops.config.inventory import Host
from specops.errors import ConfigError
from specops.servers.arms import arms_from_vars
from specops.servers.launch import LaunchPlan, build_launch
from specops.sglang.layout import BUCKET_SOURCES, SGLangLayout, detect_layout
from specops.sglang.paths import SERVER_ARGS
from specops.sglang.treefiles import TransportTreeFiles, TreeFiles
from specops.transport.base import Transport


def bucket_sources(files: TreeFiles, layout: SGLangLayout) -> dict[str, str]:
    """The tree files that may build the CUDA-graph capture list, read only for native adaptive."""
    if not layout.adaptive_zero_steps:
        return {}
    out = {}
    for rel in BUCKET_SOURCES:
        data = files.read(rel)
        if data is not None:
            out[rel] = data.decode(errors="replace")
    return out


def sim_options(variables: dict[str, Any]) -> list[str]:
    """Simulator knobs from vars (`sim: {time_scale: 0.05, crash_after: 40, ...}`), for sim hosts only."""
    opts = variables.get("sim") or {}
    if not isinstance(opts, dict):
        raise ConfigError("'sim' must be a mapping such as {time_scale: 0.05}")
    out: list[str] = []
    for key, value in opts.items():
        flag = "--sim-" + str(key).replace("_", "-")
        if value is True:
            out.append(flag)
        elif value not in (None, False):
            out += [flag, str(value)]
    return out


def plan_arms(transport: Transport, host: Host, variables: dict[str, Any], arm_names: Sequence[str],
              tree: str, *, where: str = "vars") -> list[LaunchPlan]:
    """Launch plans for the named arms on `host`, built from the tree's detected layout."""
    specs = arms_from_vars(variables, where=where)
    unknown = [a for a in arm_names if a not in specs]
    if unknown:
        raise ConfigError(f"unknown arm(s) {', '.join(unknown)}; the vars define: {', '.join(specs)}", where=where)
    tree = transport.expand(tree)
    files = TransportTreeFiles(transport, tree)
    if not files.exists(SERVER_ARGS):
        raise ConfigError(f"{tree} is not an SGLang checkout ({SERVER_ARGS} is missing); run deploy first",
                          where=f"host {host.name}")
    layout = detect_layout(files)
    sources = bucket_sources(files, layout) if "adaptive" in {specs[n].kind for n in arm_names} else {}
    workdir = transport.expand(str(variables.get("workdir") or host.workdir))
    engine = str(variables.get("engine") or host.engine)
    return [
        build_launch(specs[name], layout, workdir=workdir, python=host.python, engine=engine, sglang_tree=tree,
                     sim_options=sim_options(variables) if engine == "sim" else (),
                     bucket_sources=sources, where=f"host {host.name}, arm '{name}'")
        for name in arm_names
    ]
