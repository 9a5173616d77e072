"""Arm servers: profiles, launch commands per SGLang layout, and their lifecycle on a host.

`launch_arm`, `wait_ready_many`, `stop_states`, `stop_arms`, `server_status` are
servers.supervisor's: they go through the supervisor of the plan's or state's host
(servers.lifecycle's local processes or servers.slurm's jobs)."""

from specops.servers.arms import ArmSpec, arms_from_vars
from specops.servers.fairness import fairness_warnings
from specops.servers.launch import LaunchPlan, build_launch
from specops.servers.lifecycle import server_info
from specops.servers.records import ArmStatus, LaunchOutcome, ServerState, StopResult, read_states
from specops.servers.supervisor import (
    Supervisor,
    arm_status,
    client_prefix,
    end_reason,
    launch_arm,
    launch_arms,
    server_status,
    stop_arms,
    stop_states,
    supervisor_for,
    wait_ready,
    wait_ready_many,
)

__all__ = [
    "ArmSpec", "arms_from_vars", "LaunchPlan", "build_launch", "fairness_warnings", "ArmStatus",
    "LaunchOutcome", "ServerState", "StopResult", "launch_arm", "launch_arms", "read_states",
    "server_info", "arm_status", "server_status", "stop_arms", "stop_states", "wait_ready", "wait_ready_many",
    "Supervisor", "supervisor_for", "client_prefix", "end_reason",
]
