"""`gpu_preflight`: the host's GPUs exist, are free, and each arm knows which are its own.

One `nvidia-smi` round trip, before anything is installed or launched: the GPUs (index,
name, memory, driver and CUDA version) go into the step's facts and the journal; the
arms are placed (explicit `gpus` kept, the others on distinct GPUs, tensor parallelism
from the GPU count) and the plan is printed; a GPU an arm asks for that the host lacks,
or one a process specops did not launch holds, stops the run naming GPU, process and
memory. Arms on different GPU models or tensor-parallel sizes are warned about: their
numbers would not compare.
"""

from __future__ import annotations

from specops.errors import StepError
from specops.servers import read_states
from specops.servers.arms import arms_from_vars
from specops.servers.placement import check_gpus, place_arms
from specops.servers.plans import arm_requests
from specops.steps.base import Outcome, StepContext, StepKind
from specops.transport.nvidia import GPUInventory, probe_command, read_gpus


def fairness_notes(inventory: GPUInventory, placement: dict[str, list[int]], tp: dict[str, int]) -> list[str]:
    """Warnings for arms whose GPUs differ in model, or whose tensor parallelism differs."""
    notes = []
    models = {arm: sorted({g.name for i in gpus if (g := inventory.gpu(i)) is not None})
              for arm, gpus in placement.items()}
    if len({tuple(m) for m in models.values()}) > 1:
        notes.append("arms run on different GPU models: " + ", ".join(f"{a}={'/'.join(m)}" for a, m in models.items()))
    if len(set(tp.values())) > 1:
        notes.append("arms run with different tensor-parallel sizes: " + ", ".join(f"{a}={n}" for a, n in tp.items()))
    return notes


class GPUPreflight(StepKind):
    name = "gpu_preflight"
    keys = ("arms",)

    def describe(self, ctx: StepContext) -> list[str]:
        return ["probe: " + " ".join(probe_command()[:2]) + " <nvidia-smi --query-gpu, --query-compute-apps>"]

    def apply(self, ctx: StepContext) -> Outcome:
        inventory = read_gpus(ctx.transport)
        if inventory.error:
            raise StepError(f"GPU preflight: {inventory.error}", hint="engine sglang needs NVIDIA GPUs and their "
                                                                     "driver; use engine sim for a dry run")
        specs = arms_from_vars(ctx.vars, where=ctx.step.where)
        wanted = ctx.args.get("arms") if isinstance(ctx.args, dict) else None
        names = list(wanted) if wanted else list(specs)
        host_gpus = list(ctx.host.gpus) or inventory.indices
        missing = [g for g in ctx.host.gpus if inventory.gpu(g) is None]
        if missing:
            raise StepError(f"hosts.yaml lists GPU(s) {','.join(map(str, missing))} for {ctx.host.name}; it has "
                            f"{','.join(map(str, inventory.indices)) or 'none'} ({inventory.describe()})")
        placements = [p for p in place_arms(arm_requests(specs), host_gpus) if p.arm in names]
        own = {s.pgid for s in read_states(ctx.transport, ctx.vars["workdir"]).values()}
        problems = check_gpus(inventory, placements, own, host=ctx.host.name)
        plan = [p.describe() for p in placements]
        ctx.journal.event("gpus", host=ctx.host.name, step=ctx.step.name, gpus=inventory.to_dict(), placement=plan)
        if problems:
            raise StepError("; ".join(problems), hint="stop that process, or give the arm other GPUs ('gpus: [N]')")
        notes = fairness_notes(inventory, {p.arm: p.gpus for p in placements}, {p.arm: p.tp_size for p in placements})
        for note in notes:
            ctx.journal.event("warning", host=ctx.host.name, step=ctx.step.name, message=note)
        ctx.facts.update(gpus=inventory.to_dict(), placement=plan)
        return Outcome(changed=False, data={"gpus": inventory.to_dict(), "placement": plan, "warnings": notes},
                       message=f"{inventory.describe()}; " + "; ".join(plan))
