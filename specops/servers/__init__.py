"""Arm servers: profiles, launch commands per SGLang layout, and their lifecycle on a host."""

from specops.servers.arms import ArmSpec, arms_from_vars
from specops.servers.fairness import fairness_warnings
from specops.servers.launch import LaunchPlan, build_launch
from specops.servers.lifecycle import (
                                       ArmStatus,
                                       LaunchOutcome,
                                       ServerState,
                                       StopResult,
                                       launch_arm,
                                       launch_arms,
                                       read_states,
                                       server_info,
                                       server_status,
                                       stop_arms,
                                       stop_states,
                                       wait_ready,
                                       wait_ready_many,
)

__all__ = [
    "ArmSpec", "arms_from_vars", "LaunchPlan", "build_launch", "fairness_warnings", "ArmStatus",
    "LaunchOutcome", "ServerState", "StopResult", "launch_arm", "launch_arms", "read_states",
    "server_info", "server_status", "stop_arms", "stop_states", "wait_ready", "wait_ready_many",
]
