"""One protocol for what runs a host's arm servers, and the one place that chooses it.

A host without a `slurm:` block gets the local supervisor (servers.lifecycle: detached
processes on the host); a host with one gets the Slurm supervisor (servers.slurm: a batch
job per arm). Chosen once per host, as transport.connect chooses a transport, by
`supervisor_for(host)`; callers never ask which kind it is. Both share the one readiness
watch (servers.watch); a backend supplies only its `Source` (its probe).

Callers that hold a plan or a state rather than the host (the arm pool, Ctrl-C's cleanup,
`tune`) call the module-level functions below (`launch_arm`, `wait_ready_many`,
`stop_states`, ...; `specops.servers` exports them): the plan records the host's choice
(servers.plans adapted it with the host's supervisor) and so does a state file (the
supervisor that launched the arm wrote it). One host, one supervisor: a list that mixes
local processes and Slurm jobs (a host whose `slurm:` block came or went while its
servers ran) is refused by name, changing nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from specops.config.inventory import Host
from specops.config.slurm import SlurmSettings
from specops.servers.launch import LaunchPlan
from specops.servers.lifecycle import LocalSupervisor
from specops.servers.records import ArmStatus, LaunchOutcome, ServerState, StopResult, read_states, refuse_foreign
from specops.servers.slurm import SlurmSupervisor
from specops.transport.base import Transport


@runtime_checkable
class Supervisor(Protocol):
    """Starts, watches, stops and reaches a host's arm servers. Every call takes the
    host's transport (a sweep's threads each hold a connection of their own)."""

    #: "local" or "slurm", for messages and the journal
    kind: str
    #: True: a cluster scheduler places each arm in an allocation of its own (specops places
    #: no GPUs and starts no waves; a sweep runs the arms side by side, a thread per job)
    scheduled: bool
    #: whether an arm may run as a container (`sglang_image`)
    containers: bool

    def adapt(self, plan: LaunchPlan) -> LaunchPlan:
        """The arm's plan as this supervisor runs it (a Slurm job binds its node's interfaces)."""

    def describe(self, plan: LaunchPlan) -> list[str]:
        """What `--check` shows for the arm: the commands that would start it."""

    def launch(self, transport: Transport, plan: LaunchPlan, *, reuse: bool = True, launched_by: str | None = None,
               ephemeral: bool = False) -> LaunchOutcome:
        """Start the arm, or reuse its healthy server launched with the same args hash."""

    def wait_ready(self, transport: Transport, states: Sequence[ServerState], timeout_s: float, poll_s: float = 0.5,
                   *, max_bytes: int = 256 * 1024, on_progress: Callable[[str], None] | None = None,
                   on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, float]:
        """Seconds to ready per arm; StepError for a crash, an end or the timeout."""

    def stop(self, transport: Transport, states: Sequence[ServerState], *, grace_s: float = 10.0,
             port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
        """Stop these servers and remove their state files (the waits are a process's; a
        cancelled job's grace is the cluster's)."""

    def stop_arms(self, transport: Transport, workdir: str, arms: Sequence[str] | None = None, *,
                  grace_s: float = 10.0, port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
        """Stop the named arms (all recorded ones when None) under `workdir`."""

    def status(self, transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[ArmStatus]:
        """ready / starting / dead / stopped per arm."""

    def address(self, state: ServerState) -> str:
        """Where the host reaches the server."""

    def client_prefix(self, state: ServerState) -> list[str]:
        """The argv prefix that runs a benchmark client beside the server."""

    def end_reason(self, transport: Transport, state: ServerState) -> str | None:
        """How an ended server ended, where the backend knows more than its log (a job's state)."""

    def event_line(self, kind: str, data: dict[str, Any]) -> str | None:
        """The live view's line for one of this backend's `on_event` events, else None."""


def _supervisor(slurm: SlurmSettings | None) -> Supervisor:
    """The one place a kind of supervisor is chosen: Slurm's where there is a `slurm:` block."""
    if slurm is not None:
        return SlurmSupervisor(slurm)
    return LocalSupervisor()


def supervisor_for(host: Host) -> Supervisor:
    """The host's supervisor: Slurm's for a host with a `slurm:` block, else the local one."""
    return _supervisor(host.slurm)


def _of_plan(plan: LaunchPlan) -> Supervisor:
    return _supervisor(SlurmSettings.from_dict(plan.slurm) if plan.slurm is not None else None)


def _recorded(state: ServerState) -> Supervisor:
    """The supervisor that wrote this state file (a job's records its `conf`)."""
    return _supervisor(SlurmSettings(conf=state.slurm.get("conf")) if state.slurm else None)


def _of_states(transport: Transport, states: Sequence[ServerState]) -> Supervisor:
    """The supervisor that wrote these state files; a mix of both kinds is refused."""
    jobs = [st for st in states if st.slurm]
    if jobs and len(jobs) < len(states):
        refuse_foreign(transport, states, slurm=True)
    return _recorded(jobs[0]) if jobs else _supervisor(None)


# --- the module-level functions, for callers that hold plans or states ------------------------

def launch_arm(transport: Transport, plan: LaunchPlan, *, reuse: bool = True, launched_by: str | None = None,
               ephemeral: bool = False) -> LaunchOutcome:
    """Supervisor.launch of the plan's host."""
    return _of_plan(plan).launch(transport, plan, reuse=reuse, launched_by=launched_by, ephemeral=ephemeral)


def launch_arms(transport: Transport, plans: Sequence[LaunchPlan], *, reuse: bool = True) -> list[LaunchOutcome]:
    return [launch_arm(transport, p, reuse=reuse) for p in plans]


def wait_ready_many(transport: Transport, states: Sequence[ServerState], timeout_s: float, poll_s: float = 0.5, *,
                    max_bytes: int = 256 * 1024, on_progress: Callable[[str], None] | None = None,
                    on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, float]:
    """Supervisor.wait_ready of the states' host: seconds to ready per arm."""
    return _of_states(transport, states).wait_ready(transport, states, timeout_s, poll_s, max_bytes=max_bytes,
                                                    on_progress=on_progress, on_event=on_event)


def wait_ready(transport: Transport, state: ServerState, timeout_s: float, poll_s: float = 0.5) -> float:
    """wait_ready_many for one server; returns seconds to ready."""
    return wait_ready_many(transport, [state], timeout_s, poll_s)[state.arm]


def stop_states(transport: Transport, states: Sequence[ServerState], *, grace_s: float = 10.0,
                port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
    """Supervisor.stop of the states' host."""
    if not states:
        return []
    return _of_states(transport, states).stop(transport, states, grace_s=grace_s, port_wait_s=port_wait_s,
                                              gpu_wait_s=gpu_wait_s)


def stop_arms(transport: Transport, workdir: str, arms: Sequence[str] | None = None, grace_s: float = 10.0, *,
              port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
    """Stop the named arms (all recorded ones when None) under `workdir` on the host."""
    states = read_states(transport, workdir)
    chosen = [states[a] for a in (arms if arms is not None else sorted(states)) if a in states]
    return stop_states(transport, chosen, grace_s=grace_s, port_wait_s=port_wait_s, gpu_wait_s=gpu_wait_s)


def server_status(transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[ArmStatus]:
    """Supervisor.status of the host whose state files are under `workdir` (one round trip
    more than `supervisor_for(host).status`, to read which supervisor wrote them)."""
    return _of_states(transport, list(read_states(transport, workdir).values())).status(transport, workdir, arms)


def arm_status(transport: Transport, state: ServerState) -> ArmStatus | None:
    """Supervisor.status of one arm, through the supervisor its state records (no extra
    round trip to learn which); None when its state file is gone."""
    found = _recorded(state).status(transport, state.workdir, [state.arm])
    return next((st for st in found if st.arm == state.arm), None)


def client_prefix(state: ServerState) -> list[str]:
    """Supervisor.client_prefix: how a benchmark client runs beside the server."""
    return _recorded(state).client_prefix(state)


def end_reason(transport: Transport, state: ServerState) -> str | None:
    """Supervisor.end_reason: a Slurm job's end state and reason, None for a process."""
    return _recorded(state).end_reason(transport, state)
