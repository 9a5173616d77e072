"""`server` (launch arms detached, wait until ready while watching for crashes) and `stop`."""

from __future__ import annotations

from typing import Any

from specops.config.playbook import Step
from specops.config.schema import suggest
from specops.engines import engine_for
from specops.errors import ConfigError
from specops.ports import EPHEMERAL_RANGE_FILE, in_range
from specops.run import events
from specops.secrets import redact
from specops.servers import fairness_warnings, read_states, server_info
from specops.servers.arms import arms_from_vars
from specops.servers.eagle_heads import head_width_warning
from specops.servers.launch import LaunchPlan
from specops.servers.lease import join
from specops.servers.lifecycle import LaunchOutcome, check_version
from specops.servers.placement import start_waves
from specops.servers.plans import arm_requests, placements_for, plan_arms
from specops.servers.supervisor import Supervisor, supervisor_for
from specops.steps.base import Outcome, StepContext, StepKind
from specops.transport.probes import read_ephemeral


def _arm_list(step: Step, value: Any) -> None:
    if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(a, str) for a in value))):
        raise ConfigError(f"{step.label}: arms must be a list of arm names", where=step.where)


class Server(StepKind):
    name = "server"
    keys = ("arms", "tree", "reuse", "ready_timeout")
    required = ("arms", "tree")
    arg_types = {"arms": (str, list), "tree": str, "reuse": bool, "ready_timeout": (int, float)}

    def validate(self, step: Step) -> None:
        super().validate(step)
        _arm_list(step, step.args["arms"])

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        """The arguments, with every arm they name checked against the host's `arms`
        before anything runs (a typo is bad input, not a failed launch)."""
        args = super().render(step, variables)
        arms = args.get("arms") if isinstance(args, dict) else None
        names = [a.strip() for a in arms.split(",") if a.strip()] if isinstance(arms, str) else arms
        if isinstance(names, list):
            known = arms_from_vars(variables, where=step.where)
            for name in names:
                if name not in known:
                    raise ConfigError(f"{step.label}: no arm '{name}'{suggest(name, known)}; arms: "
                                      f"{', '.join(known)}", where=step.where)
        return args

    def _plans(self, ctx: StepContext) -> list[LaunchPlan]:
        """Launch plans, built once per step (is_done and apply both need them; building
        reads the tree's layout and server_args.py over the connection)."""
        arms = ctx.args["arms"]
        arms = [a.strip() for a in arms.split(",")] if isinstance(arms, str) else list(arms)
        return ctx.once("server.plans", lambda: plan_arms(ctx.transport, ctx.host, ctx.vars, arms,
                                                          str(ctx.args["tree"]), where=ctx.step.where))

    def describe(self, ctx: StepContext) -> list[str]:
        supervisor = supervisor_for(ctx.host)
        return [line for plan in self._plans(ctx) for line in supervisor.describe(plan)]

    def is_done(self, ctx: StepContext) -> bool | None:
        plans = self._plans(ctx)
        status = {s.arm: s for s in supervisor_for(ctx.host).status(ctx.transport, ctx.vars["workdir"],
                                                                     [p.arm for p in plans])}
        states = read_states(ctx.transport, ctx.vars["workdir"])
        for plan in plans:
            st, state = status.get(plan.arm), states.get(plan.arm)
            if st is None or st.state != "ready" or state is None or state.args_hash != plan.args_hash:
                return False
        ctx.facts["arms"] = {p.arm: {"mechanism": p.mechanism, "port": p.port, "action": "reused"} for p in plans}
        return True

    def _waves(self, ctx: StepContext, plans: list[LaunchPlan]) -> list[list[LaunchPlan]]:
        """Arms that start together. On an SGLang host, arms sharing a GPU start one after
        another, each ready before the next (or are refused without mem_fraction_static).
        CPU arms share the host's cores and memory: those whose KV cache their arguments fix
        (`ServingEngine.cpu_memory_fixed`) start together, then each other one once the one
        before is ready (it takes a share of the memory free when it starts)."""
        if supervisor_for(ctx.host).scheduled:  # each arm is a job of its own: the scheduler places them
            return [plans]
        cpu = [p for p in plans if p.device == "cpu"]
        rest = [p for p in plans if p.device != "cpu"]
        engine = engine_for(ctx.host)
        fixed = [p for p in cpu if engine.cpu_memory_fixed(p.argv, p.env)]
        alone = [[p] for p in cpu if p not in fixed]
        return (self._gpu_waves(ctx, rest) if rest else []) + ([fixed] if fixed else []) + alone

    def _gpu_waves(self, ctx: StepContext, plans: list[LaunchPlan]) -> list[list[LaunchPlan]]:
        placements = placements_for(ctx.transport, ctx.host, ctx.vars, where=ctx.step.where)
        if not placements:
            return [plans]
        names = {p.arm for p in plans}
        placed = [p for p in placements if p.arm in names]
        for p in placed:  # only the arms this step starts can collide
            p.shares_with = [q.arm for q in placed if q is not p and set(q.gpus) & set(p.gpus)]
        requests = [r for r in arm_requests(arms_from_vars(ctx.vars, where=ctx.step.where)) if r.name in names]
        by_arm = {p.arm: p for p in plans}
        return [[by_arm[a] for a in wave] for wave in start_waves(requests, placed)]

    def _claim(self, ctx: StepContext, plans: list[LaunchPlan]) -> dict[str, bool]:
        """Lease every arm for this run; per arm, whether this run starts it (else it joins
        the server of an earlier run with identical arguments)."""
        leads = {}
        for plan in plans:
            claim = ctx.run_state.leases.claim(ctx.transport, ctx.host.name, plan.workdir, plan.arm, plan.args_hash,
                                               plan.argv, on_wait=ctx.notice)
            leads[plan.arm] = claim.lead
        return leads

    def _start(self, ctx: StepContext, plan: LaunchPlan, lead: bool, timeout: float) -> LaunchOutcome:
        if not lead:
            state = join(ctx.run_state.leases, ctx.transport, ctx.host.name, plan.arm, plan.args_hash,
                         timeout_s=timeout)
            if state is not None:
                return LaunchOutcome(state, "shared")
        return supervisor_for(ctx.host).launch(ctx.transport, plan, reuse=bool(ctx.args.get("reuse", True)),
                                               launched_by=ctx.run_state.leases.run_id)

    def apply(self, ctx: StepContext) -> Outcome:
        plans = self._plans(ctx)
        supervisor = supervisor_for(ctx.host)
        waves = self._waves(ctx, plans)  # a refusal here changes nothing on the host
        port_warnings = _ephemeral_port_warnings(ctx, plans)
        for line in port_warnings:  # before the launch: the port may be taken by then
            ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name, message=line))
        timeout = float(ctx.args.get("ready_timeout", ctx.timeout))
        leads = self._claim(ctx, plans)  # another run's arm with other arguments: refused here, nothing changed
        outcomes: list[LaunchOutcome] = []
        ready: dict[str, float] = {}
        for wave in waves:
            started = [self._start(ctx, plan, leads[plan.arm], timeout) for plan in wave]
            outcomes += started
            ctx.run_state.launched(ctx.host.name, {o.state.arm for o in started if o.action not in ("reused", "shared")})
            for o in started:
                ctx.journal.emit(events.Server(host=ctx.host.name, step=ctx.step.name, arm=o.state.arm,
                                               action=o.action, pid=o.state.pid, port=o.state.port,
                                               mechanism=o.state.mechanism, command=redact(o.state.command),
                                               log=o.state.log_path))
            try:
                ready.update(supervisor.wait_ready(ctx.transport, [o.state for o in started], timeout_s=timeout,
                                                   poll_s=0.5, on_progress=ctx.emit,
                                                   on_event=lambda kind, data: _job_event(ctx, supervisor, kind, data)))
            except Exception:
                if ctx.run_state.interrupted.is_set():  # Ctrl-C's cleanup decides (--keep-servers)
                    raise
                # a crashed or hung arm must not keep running (and holding its GPU) after the step failed
                supervisor.stop_arms(ctx.transport, ctx.vars["workdir"],
                                     [o.state.arm for o in outcomes if o.action not in ("reused", "shared")])
                raise
        infos = {o.state.arm: server_info(ctx.transport, o.state) for o in outcomes}
        for o in outcomes:  # the tree's SGLang answered, not some other install
            check_version(ctx.transport, o.state, infos[o.state.arm])
        after = fairness_warnings(infos)
        after += [w for arm, info in infos.items() if (w := head_width_warning(ctx.transport, arm, info))]
        for w in after:
            ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name, message=w))
        warnings = port_warnings + after
        arms = {o.state.arm: {"mechanism": o.state.mechanism, "port": o.state.port, "action": o.action,
                              "pid": o.state.pid, "ready_s": round(ready.get(o.state.arm, 0.0), 2),
                              "effective_threshold": o.state.effective_threshold} for o in outcomes}
        summary = ", ".join(f"{a}: {v['action']} ({v['mechanism']})" for a, v in arms.items())
        return Outcome(changed=any(o.action not in ("reused", "shared") for o in outcomes), data={"arms": arms, "warnings": warnings},
                       message=summary + (f"; {len(warnings)} warning(s)" if warnings else ""))


def _ephemeral_port_warnings(ctx: StepContext, plans: list[LaunchPlan]) -> list[str]:
    """A warning per arm whose configured port lies in the host's ephemeral range: any outgoing
    connection or bind(0) on the host can hold it when the server binds (specops.ports)."""
    ephemeral = read_ephemeral(ctx.transport)
    inside = [p for p in plans if in_range(p.port, ephemeral)]
    low, high = ephemeral
    return [f"arm {p.arm}: port {p.port} lies in host {ctx.host.name}'s ephemeral port range {low}-{high} "
            f"({EPHEMERAL_RANGE_FILE}): an outgoing connection can hold it when the server binds; choose a port "
            f"outside it" for p in inside]


def _job_event(ctx: StepContext, supervisor: Supervisor, kind: str, data: dict[str, Any]) -> None:
    """The supervisor's news of an arm (a Slurm job: PENDING and why, RUNNING on which node)."""
    ctx.journal.emit(events.from_callback(kind, ctx.host.name, ctx.step.name, data))
    line = supervisor.event_line(kind, data)
    if line is not None:
        ctx.emit(line)


class Stop(StepKind):
    name = "stop"
    keys = ("arms",)
    arg_types = {"arms": (str, list)}

    def validate(self, step: Step) -> None:
        if step.args is None:
            step.args = {}
        super().validate(step)
        if "arms" in step.args:
            _arm_list(step, step.args["arms"])

    def _arms(self, ctx: StepContext) -> list[str] | None:
        arms = (ctx.args or {}).get("arms")
        return [a.strip() for a in arms.split(",")] if isinstance(arms, str) else arms

    def describe(self, ctx: StepContext) -> list[str]:
        return [f"stop servers {self._arms(ctx) or 'all'}: TERM the process group, KILL after grace, wait for the port"]

    def apply(self, ctx: StepContext) -> Outcome:
        results = supervisor_for(ctx.host).stop_arms(ctx.transport, ctx.vars["workdir"], self._arms(ctx))
        return Outcome(changed=bool(results), data={"stopped": [vars(r) for r in results]},
                       message=", ".join(r.arm for r in results) or "nothing running")
