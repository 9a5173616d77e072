"""`bench`: this host's part of a concurrency sweep; results land in the run directory.

Its settings arrive typed: `specops bench` and `specops tune` parse them once into a
`BenchSettings` and give that object to the run as the `bench` variable, which the step's
`settings: "{{ bench }}"` renders to as it is (templates read it as before:
`bench.arms`)."""

from __future__ import annotations

from typing import Any

from specops.bench.facts import HEADER_FACTS, device_facts, specops_version, tree_commit
from specops.bench.settings import BenchSettings, settings_record
from specops.bench.sweep import HostSweep, matrix_for
from specops.config.playbook import Step
from specops.engines import engine_for
from specops.hostfiles.treefiles import TransportTreeFiles
from specops.records.manifest import Manifest, RunSettings
from specops.records.manifest import update as update_manifest
from specops.records.store import load_results
from specops.run import events
from specops.servers.arms import arms_from_vars
from specops.servers.plans import plan_arms
from specops.servers.slurm import job_event_line
from specops.steps.base import Outcome, StepContext, StepKind


class Bench(StepKind):
    name = "bench"
    keys = ("tree", "settings")
    required = ("tree", "settings")
    arg_types = {"tree": str, "settings": dict}

    def check_types(self, step: Step, args: Any) -> None:
        """`settings` may be the run's `BenchSettings` itself (`{{ bench }}`): checked already."""
        if isinstance(args, dict) and isinstance(args.get("settings"), BenchSettings):
            args = {k: v for k, v in args.items() if k != "settings"}
        super().check_types(step, args)

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        """The arguments, `settings` as a `BenchSettings`: the object the flow parsed, where the
        playbook says `settings: "{{ bench }}"` (a reference: nothing is parsed again), or
        literal settings a playbook gives, parsed here by the one reader. The settings and the
        arm profiles the sweep will launch are checked here, before anything runs (a bad
        threshold is bad input, not a failed sweep)."""
        args = super().render(step, variables)
        if isinstance(args, dict) and isinstance(args.get("settings"), dict):
            args = {**args, "settings": BenchSettings.from_dict(dict(args["settings"]), where=step.where)}
        arms_from_vars(variables, where=step.where)
        return args

    def _settings(self, ctx: StepContext) -> BenchSettings:
        settings = ctx.args["settings"]
        assert isinstance(settings, BenchSettings), "render makes every bench step's settings a BenchSettings"
        return settings

    def describe(self, ctx: StepContext) -> list[str]:
        s = self._settings(ctx)
        points = matrix_for(s, ctx.run_dir, ctx.host.name)
        return [f"sweep {len(points)} points: arms {','.join(s.arms)} x {s.axis()} {s.levels()} x {s.repeats} "
                f"repeats; results to {ctx.run_dir}/results.jsonl"]

    def apply(self, ctx: StepContext) -> Outcome:
        settings = self._settings(ctx)
        tree = ctx.path(str(ctx.args["tree"]))
        plans = plan_arms(ctx.transport, ctx.host, ctx.vars, settings.arms, tree, where=ctx.step.where)
        layout = engine_for(ctx.host).layout(TransportTreeFiles(ctx.transport, tree))  # its version
        device = "cpu" if plans and all(p.device == "cpu" for p in plans) else "gpu"  # what the arms run on
        facts = {"engine_version": layout.version, "sglang_commit": tree_commit(ctx.transport, tree),
                 "engine": ctx.host.engine, **device_facts(ctx.transport, device)}

        def record_host(manifest: Manifest) -> None:
            manifest.set_default("specops_version", specops_version())
            manifest.set_default("run_id", ctx.run_dir.name)
            manifest.bench = RunSettings.from_dict(settings_record(settings))
            manifest.set_default("client", {"runner": settings.runner, "seed": settings.seed,
                                            "input_len": settings.input_len, "output_len": settings.output_len,
                                            "dataset": settings.dataset, "temperature": 0})
            for key in ("engine_version", "sglang_commit", *HEADER_FACTS):
                if key in facts:
                    manifest.set_default(key, facts[key])
            manifest.host(ctx.host.name).merge(facts)

        update_manifest(ctx.run_dir, record_host)
        points = matrix_for(settings, ctx.run_dir, ctx.host.name)

        def log(kind: str, data: dict[str, Any]) -> None:
            ctx.journal.emit(events.from_callback(f"bench_{kind}", ctx.host.name, ctx.step.name, data))
            if kind == "slurm_job":  # a queued or started Slurm job: shown beside the step in the live view
                ctx.emit(job_event_line(data))

        sweep = HostSweep(host=ctx.host, transport=ctx.transport, plans=plans, settings=settings,
                          run_dir=ctx.run_dir, tree=tree, log=log, progress=ctx.run_state.on_point,
                          leases=ctx.run_state.leases, on_wait=ctx.notice)
        with ctx.run_state.sweep(ctx.host.name, sweep.launched):
            sweep.run(points)
        mine = [r for r in load_results(ctx.run_dir) if r.host == ctx.host.name]
        failed = [r for r in mine if not r.ok]
        return Outcome(changed=bool(points), data={"points": len(points), "failed_points": len(failed),
                                                   "taken_over": sweep.taken_over},
                       message=f"{len(points)} points run, {len(failed)} failed")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        settings = self._settings(ctx)
        missing = matrix_for(settings, ctx.run_dir, ctx.host.name)
        if missing:
            labels = ", ".join(f"{p.arm}@{p.level_text()}#r{p.repeat}" for p in missing[:6])
            taken = "; ".join((outcome.data.get("taken_over") or {}).values())
            return False, (f"{taken}; " if taken else "") + \
                f"{len(missing)} point(s) have no ok result ({labels}{'…' if len(missing) > 6 else ''}); " \
                f"`specops bench --resume {ctx.run_dir}` runs only those"
        return True, ""
