"""`gpu_preflight`: the host's GPUs exist, are free, and each arm knows which are its own.

One `nvidia-smi` round trip, before anything is installed or launched: the GPUs (index,
name, memory, driver and CUDA version) go into the step's facts and the journal; the
arms are placed (explicit `gpus` kept, the others on distinct GPUs, tensor parallelism
from the GPU count) and the plan is printed; a GPU an arm asks for that the host lacks,
or one a process specops did not launch holds, stops the run naming GPU, process and
memory. Arms on different GPU models or tensor-parallel sizes are warned about: their
numbers would not compare.

When every arm of the step runs on the CPU (a `device: cpu` host's arms, unless one says
`device: gpu`), there is no GPU to check: nvidia-smi is not run, the journal says "GPU preflight skipped: device cpu",
and the CPU (model, cores, memory; one probe) goes into the facts instead. On a GPU host
with some CPU arms, only the GPU arms are placed.
"""

from __future__ import annotations

from specops.errors import StepError
from specops.run import events
from specops.servers import read_states
from specops.servers.arms import arms_from_vars
from specops.servers.placement import check_gpus, place_arms
from specops.servers.plans import arm_requests
from specops.steps.base import Outcome, StepContext, StepKind
from specops.transport.nvidia import GPUInventory, probe_command, read_gpus
from specops.transport.probes import cpu_probe_command, parse_cpu

#: the journal's line (an event `note`) when a CPU host's preflight has no GPU to check
CPU_SKIP_NOTE = "GPU preflight skipped: device cpu"


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

    def _names(self, ctx: StepContext) -> list[str]:
        specs = arms_from_vars(ctx.vars, where=ctx.step.where)
        wanted = ctx.args.get("arms") if isinstance(ctx.args, dict) else None
        return list(wanted) if wanted else list(specs)

    def _cpu_only(self, ctx: StepContext) -> bool:
        """Every arm this step checks runs on the CPU (an arm's device is its host's unless it
        says otherwise, so on a CPU host that is every arm without `device: gpu`)."""
        specs = arms_from_vars(ctx.vars, where=ctx.step.where)
        return all(specs[n].cpu for n in self._names(ctx) if n in specs)

    def describe(self, ctx: StepContext) -> list[str]:
        if self._cpu_only(ctx):
            return [f"# {CPU_SKIP_NOTE}", "probe: bash -c <lscpu, /proc/cpuinfo, nproc, /proc/meminfo>"]
        return ["probe: " + " ".join(probe_command()[:2]) + " <nvidia-smi --query-gpu, --query-compute-apps>"]

    def _cpu(self, ctx: StepContext) -> Outcome:
        """No GPU to check: say so, and record the CPU the arms will run on."""
        ctx.journal.emit(events.Note(host=ctx.host.name, step=ctx.step.name, message=CPU_SKIP_NOTE))
        probe = ctx.probe(cpu_probe_command())
        cpu = parse_cpu(probe.stdout)
        ctx.journal.emit(events.Cpu(host=ctx.host.name, step=ctx.step.name, device="cpu", cpu=cpu.to_dict()))
        ctx.facts.update(device="cpu", cpu=cpu.to_dict())
        return Outcome(changed=False, data={"device": "cpu", "cpu": cpu.to_dict(), "placement": []},
                       message=f"{CPU_SKIP_NOTE}; CPU: {cpu.describe()}")

    def apply(self, ctx: StepContext) -> Outcome:
        if self._cpu_only(ctx):
            return self._cpu(ctx)
        inventory = read_gpus(ctx.transport)
        if inventory.error:
            raise StepError(f"GPU preflight: {inventory.error}", hint="engine sglang needs NVIDIA GPUs and their "
                                                                     "driver (or device: cpu for SGLang's CPU "
                                                                     "serving); use engine sim for a dry run")
        specs = {n: s for n, s in arms_from_vars(ctx.vars, where=ctx.step.where).items() if not s.cpu}
        names = [n for n in self._names(ctx) if n in specs]
        host_gpus = list(ctx.host.gpus) or inventory.indices
        missing = [g for g in ctx.host.gpus if inventory.gpu(g) is None]
        if missing:
            raise StepError(f"hosts.yaml lists GPU(s) {','.join(map(str, missing))} for {ctx.host.name}; it has "
                            f"{','.join(map(str, inventory.indices)) or 'none'} ({inventory.describe()})")
        placements = [p for p in place_arms(arm_requests(specs), host_gpus) if p.arm in names]
        own = {s.pgid for s in read_states(ctx.transport, ctx.vars["workdir"]).values()}
        problems = check_gpus(inventory, placements, own, host=ctx.host.name)
        plan = [p.describe() for p in placements]
        ctx.journal.emit(events.Gpus(host=ctx.host.name, step=ctx.step.name, gpus=inventory.to_dict(),
                                     placement=plan))
        if problems:
            raise StepError("; ".join(problems), hint="stop that process, or give the arm other GPUs ('gpus: [N]')")
        notes = fairness_notes(inventory, {p.arm: p.gpus for p in placements}, {p.arm: p.tp_size for p in placements})
        for note in notes:
            ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name, message=note))
        ctx.facts.update(gpus=inventory.to_dict(), placement=plan)
        return Outcome(changed=False, data={"gpus": inventory.to_dict(), "placement": plan, "warnings": notes},
                       message=f"{inventory.describe()}; " + "; ".join(plan))
