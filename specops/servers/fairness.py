"""Fairness: which resolved server args may differ between arms, and the warnings when others do.

One rule for `deploy` (the `server` step compares each arm's live `/server_info`) and for
`report.md` (it compares the `server_args` the sweep recorded in manifest.json, or the
launch argv when those are missing). Two copies of this list once disagreed by 16 keys,
so the same pair of servers drew different warnings from deploy and from the report.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

#: SGLang caps a speculative server at this many running requests without --max-running-requests.
SPEC_RUNNING_CAP = 48

#: Args whose name starts with one of these may differ: the speculative settings themselves,
#: and the simulator's labels for its own arm (sim_arm, sim_mechanism, ...).
IGNORED_PREFIXES: tuple[str, ...] = ("speculative_", "sim_")

#: Args that may differ between arms without changing what is measured.
IGNORED_KEYS: frozenset[str] = frozenset({
    # where the arm runs and how it is reached: every arm has its own
    "host", "port", "base_gpu_id", "gpu_id", "nccl_port", "dist_init_addr", "metrics_port",
    "served_model_name", "file_storage_path", "pid_file", "api_key",
    # labels and observability
    "log_file", "log_prefix", "log_requests", "enable_metrics", "random_seed",
    # the draft side of speculation, and the dynamic-spec-disable patch's own switch
    "decrypted_draft_model_path", "decrypted_config_file", "enable_dynamic_spec_disable",
    # what /server_info reports besides args: runtime state, not configuration
    "version", "status", "internal_states", "last_gen_throughput", "memory_usage",
})


def ignored(key: str) -> bool:
    """True for an arg allowed to differ between arms."""
    return key in IGNORED_KEYS or key.startswith(IGNORED_PREFIXES)


def arg_name(flag: str) -> str:
    """`--max-running-requests` or `max-running-requests` -> `max_running_requests`."""
    return str(flag).lstrip("-").replace("-", "_")


def _scalar(text: str) -> Any:
    """A value read from argv as the server would resolve it: '256' -> 256, '0.5' -> 0.5."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def args_from_argv(argv: Sequence[Any]) -> dict[str, Any]:
    """Server args as a launch command line sets them (`--flag value`, `--flag=value`, `--switch`)."""
    parsed: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        tok = str(argv[i])
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            if eq:
                parsed[arg_name(name)] = _scalar(value)
            elif i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
                parsed[arg_name(name)] = _scalar(str(argv[i + 1]))
                i += 1
            else:
                parsed[arg_name(name)] = True
        i += 1
    return parsed


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def fairness_warnings(args_by_arm: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Warnings for resolved args that differ between arms beyond the ignored ones, and for
    a speculative arm without --max-running-requests (SGLang would cap it at 48).

    `args_by_arm` maps an arm to its resolved args (`/server_info`, or `args_from_argv`);
    keys may be flag spellings (`--max-running-requests`)."""
    arms = {arm: {arg_name(k): v for k, v in args.items()} for arm, args in sorted(args_by_arm.items())}
    warnings: list[str] = []
    if len(arms) >= 2:
        for key in sorted(set().union(*arms.values())):
            if ignored(key):
                continue
            values = {arm: args.get(key) for arm, args in arms.items()}
            if len({_canonical(v) for v in values.values()}) > 1:
                shown = ", ".join(f"{arm}={_shown(v)}" for arm, v in values.items())
                warnings.append(f"{key} differs between arms: {shown}")
    for arm, args in arms.items():
        if args.get("speculative_algorithm") and args.get("max_running_requests") in (None, "None"):
            warnings.append(f"{arm} speculates without --max-running-requests: SGLang caps it at "
                            f"{SPEC_RUNNING_CAP} running requests")
    return warnings
