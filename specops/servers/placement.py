"""Which GPUs each arm runs on, and whether the host lets it.

Three SGLang servers started on GPU 0 at once each size their KV cache from the memory
free when they start: the later ones fail or run with less cache, and the comparison
is broken before it starts. So arms without `gpus` get distinct GPUs, tensor parallelism
follows the GPU count, arms that share a GPU never run side by side unless each says how
much memory it takes (`mem_fraction_static`), and a GPU held by someone else is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from specops.errors import ConfigError
from specops.transport.nvidia import IDLE_MEMORY_MIB, GPUInventory


@dataclass(frozen=True)
class ArmRequest:
    """What an arm asks for: explicit GPUs or none, a tensor-parallel size or none."""

    name: str
    gpus: tuple[int, ...] | None = None
    tp_size: int | None = None
    mem_fraction_static: float | None = None


@dataclass
class Placement:
    arm: str
    gpus: list[int]
    tp_size: int
    #: "asked" (the arm's own `gpus`) or "assigned" (picked here)
    source: str
    shares_with: list[str] = field(default_factory=list)

    def describe(self) -> str:
        share = f", shares with {', '.join(self.shares_with)}" if self.shares_with else ""
        return f"{self.arm}: GPU {','.join(map(str, self.gpus))} (tp {self.tp_size}, {self.source}{share})"


def place_arms(arms: Sequence[ArmRequest], host_gpus: Sequence[int]) -> list[Placement]:
    """Give each arm its GPUs, in the arms' order (stable, so the printed plan is the
    launched one). Explicit `gpus` are kept; the others take the next GPUs of
    `host_gpus` nobody asked for, `tp_size` each (default 1); when the host has too
    few, assignment wraps around and the arms are marked as sharing."""
    if not host_gpus:
        raise ConfigError("no GPUs to place the arms on (the host reports none and sets no 'gpus')")
    taken = {g for a in arms if a.gpus for g in a.gpus}
    free = [g for g in host_gpus if g not in taken] or list(host_gpus)
    cursor = 0
    placements: list[Placement] = []
    for arm in arms:
        if arm.gpus:
            gpus, source = list(arm.gpus), "asked"
        else:
            want = arm.tp_size or 1
            if want > len(host_gpus):
                raise ConfigError(f"arm '{arm.name}' asks for tp_size {want}; the host has "
                                  f"{len(host_gpus)} GPU(s): {','.join(map(str, host_gpus))}")
            gpus = [free[(cursor + i) % len(free)] for i in range(want)]
            cursor += want
            source = "assigned"
        tp = arm.tp_size or len(gpus)
        if tp > len(gpus):
            raise ConfigError(f"arm '{arm.name}': tp_size {tp} needs {tp} GPUs, it has {len(gpus)} ({gpus})")
        placements.append(Placement(arm.name, gpus, tp, source))
    for p in placements:
        p.shares_with = [q.arm for q in placements if q is not p and set(q.gpus) & set(p.gpus)]
    return placements


def start_waves(arms: Sequence[ArmRequest], placements: Sequence[Placement]) -> list[list[str]]:
    """Arms that may be started together, wave by wave. Arms on their own GPUs start at
    once; arms sharing a GPU each need `mem_fraction_static` (else ConfigError: they
    cannot run side by side) and then start one after another, each ready before the next."""
    by_name = {a.name: a for a in arms}
    sharing = [p for p in placements if p.shares_with]
    lacking = [p.arm for p in sharing if by_name[p.arm].mem_fraction_static is None]
    if lacking:
        p = next(p for p in sharing if p.arm == lacking[0])
        gpu = sorted(set(p.gpus) & {g for q in placements if q.arm in p.shares_with for g in q.gpus})[0]
        raise ConfigError(
            f"arms {', '.join([p.arm] + p.shares_with)} share GPU {gpu} and cannot run side by side: each "
            "would size its memory pool from what is free when it starts",
            hint="give each arm its own GPUs ('gpus: [N]'), or set 'mem_fraction_static' on every arm that "
                 "shares one (e.g. 0.25 each for three arms); `specops bench` runs sharing arms one after another")
    waves: list[list[str]] = [[p.arm for p in placements if not p.shares_with]]
    waves += [[p.arm] for p in sharing]
    return [w for w in waves if w]


def check_gpus(inventory: GPUInventory, placements: Sequence[Placement], own_sessions: set[int], *,
               host: str, idle_mib: int = IDLE_MEMORY_MIB) -> list[str]:
    """Problems that must stop a launch, one line each, naming the GPU, the arm and the
    holder: a GPU the host does not have, or one held by a process specops did not
    launch (a compute process outside `own_sessions`, or memory in use with no process
    of ours on it), or one in MIG mode: CUDA sees its MIG instances, not the GPU by its
    index, so `CUDA_VISIBLE_DEVICES=N` would give the server no device (or the wrong one)."""
    if inventory.error:
        return [f"{host}: {inventory.error}"]
    problems: list[str] = []
    for p in placements:
        for index in p.gpus:
            gpu = inventory.gpu(index)
            if gpu is None:
                problems.append(f"arm '{p.arm}' asks for GPU {index}; {host} has GPUs "
                                f"{','.join(map(str, inventory.indices)) or 'none'} ({inventory.describe()})")
                continue
            if gpu.mig == "Enabled":
                problems.append(f"GPU {index} ({gpu.name}) for arm '{p.arm}' is in MIG mode: CUDA sees its MIG "
                                f"instances, not GPU {index}; give the arm a GPU with MIG disabled "
                                f"(nvidia-smi -i {index} -mig 0)")
                continue
            apps = inventory.apps_on(index)
            foreign = [a for a in apps if a.sid is None or a.sid not in own_sessions]
            ours = [a for a in apps if a not in foreign]
            if foreign:
                a = foreign[0]
                mem = f"{a.used_memory_mib} MiB" if a.used_memory_mib is not None else "memory unknown"
                who = f"pid {a.pid} {a.process_name}" + (f" (user {a.user})" if a.user else "")
                problems.append(f"GPU {index} ({gpu.name}) for arm '{p.arm}' is held by {who}, {mem}; "
                                "specops did not launch it")
            elif not ours and gpu.memory_used_mib > idle_mib:
                problems.append(f"GPU {index} ({gpu.name}) for arm '{p.arm}' has {gpu.memory_used_mib} MiB of "
                                f"{gpu.memory_total_mib} MiB in use by a process nvidia-smi does not show "
                                "(another container?)")
    return problems
