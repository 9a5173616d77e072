"""Fairness: which resolved server args may differ between arms, and the warnings when others do.

One rule for `deploy` (the `server` step compares each arm's live `/server_info`) and for
`report.md` (it compares the `server_args` the sweep recorded in manifest.json, or the
launch argv when those are missing). Two copies of this list once disagreed by 16 keys,
so the same pair of servers drew different warnings from deploy and from the report.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from specops.launchargs import arg_name

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


#: Args that size or shape CUDA graphs: moot when every arm runs with --disable-cuda-graph.
CUDA_GRAPH_PREFIXES: tuple[str, ...] = ("cuda_graph_", "disable_cuda_graph_padding", "enable_cuda_graph")

#: Args whose difference changes what the arms' ratio measures (other kernels, another
#: device): the report puts them in its headline, not only under Fairness.
HEADLINE_KEYS: frozenset[str] = frozenset({
    "attention_backend", "decode_attention_backend", "prefill_attention_backend", "device",
})


def ignored(key: str) -> bool:
    """True for an arg allowed to differ between arms."""
    return key in IGNORED_KEYS or key.startswith(IGNORED_PREFIXES)


def _graphs_off(arms: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every arm runs without CUDA graphs (`--disable-cuda-graph`), so graph sizes change nothing."""
    return bool(arms) and all(args.get("disable_cuda_graph") in (True, "True", "true", 1) for args in arms.values())


def _moot(key: str, arms: Mapping[str, Mapping[str, Any]]) -> bool:
    """A difference that changes nothing measured on these arms."""
    return key.startswith(CUDA_GRAPH_PREFIXES) and _graphs_off(arms)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def _normalized(args_by_arm: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {arm: {arg_name(k): v for k, v in args.items()} for arm, args in sorted(args_by_arm.items())}


def _differences(arms: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(key, "arm=value, ...") for each arg that differs between arms and matters."""
    found: list[tuple[str, str]] = []
    if len(arms) < 2:
        return found
    for key in sorted(set().union(*arms.values())):
        if ignored(key) or _moot(key, arms):
            continue
        values = {arm: args.get(key) for arm, args in arms.items()}
        if len({_canonical(v) for v in values.values()}) > 1:
            found.append((key, ", ".join(f"{arm}={_shown(v)}" for arm, v in values.items())))
    return found


def headline_warnings(args_by_arm: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The differences that change what the arms' ratio measures (attention backend, device),
    said as the report's headline says them: a ratio between such arms is not a verdict on
    speculation (on a CPU host, Triton's interpreted EAGLE kernels against torch_native
    made the EAGLE arms ~100x slower)."""
    arms = _normalized(args_by_arm)
    on_cpu = any(str(args.get("device", "")).lower() == "cpu" for args in arms.values())
    where = " on a CPU host" if on_cpu else ""
    return [f"WARNING: {key} differs between arms{where}: {shown}; their ratio measures the difference, "
            "not speculation alone" for key, shown in _differences(arms) if key in HEADLINE_KEYS]


def fairness_warnings(args_by_arm: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Warnings for resolved args that differ between arms beyond the ignored ones, and for
    a speculative arm without --max-running-requests (SGLang would cap it at 48).

    `args_by_arm` maps an arm to its resolved args (`/server_info`, or `args_from_argv`);
    keys may be flag spellings (`--max-running-requests`)."""
    arms = _normalized(args_by_arm)
    warnings = [f"{key} differs between arms: {shown}" for key, shown in _differences(arms)]
    for arm, args in arms.items():
        if args.get("speculative_algorithm") and args.get("max_running_requests") in (None, "None"):
            warnings.append(f"{arm} speculates without --max-running-requests: SGLang caps it at "
                            f"{SPEC_RUNNING_CAP} running requests")
    return warnings
