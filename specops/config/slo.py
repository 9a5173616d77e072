"""The latency SLO (`--slo`, the hosts.yaml var `slo`), the objective the report optimises
(`--objective`) and the GPU-hour price (`--gpu-hour-cost`): read and checked here, where
`bench`, `tune`'s `--from` merge and `specops report` take them; decide/slo.py computes
each point's goodput and attainment against the limits.

The objective is what the crossover, the threshold, the envelope and the tax compare:
output throughput (the default), goodput (needs an SLO), or TPOT (lower is better, so it
is compared as per-user decode speed, 1000 / TPOT ms).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from specops.config.schema import suggest
from specops.errors import ConfigError

OBJECTIVES = ("throughput", "goodput", "tpot")
DEFAULT_OBJECTIVE = "throughput"
LIMITS = ("ttft_ms", "tpot_ms", "e2e_ms")      # in the order of a request's latencies
_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E"}

Slo = dict[str, float]


def parse_slo(value: Any, where: str = "bench --slo") -> Slo | None:
    """`ttft_ms=200,tpot_ms=50` (the option) or `{ttft_ms: 200, tpot_ms: 50}` (a hosts.yaml
    var) -> {limit: ms}; None for nothing. A bad key or value is a ConfigError naming it."""
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, str):
        items: list[tuple[str, Any]] = []
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            key, sep, num = part.partition("=")
            if not sep:
                raise ConfigError(f"SLO '{part}' is not LIMIT=MS (e.g. ttft_ms=200,tpot_ms=50)", where=where)
            items.append((key.strip(), num.strip()))
    elif isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    else:
        raise ConfigError(f"SLO must be LIMIT=MS pairs or a mapping of them, got {value!r}", where=where)
    slo: Slo = {}
    for key, raw in items:
        if key not in LIMITS:
            raise ConfigError(f"unknown SLO limit '{key}'{suggest(key, LIMITS)}; allowed: {', '.join(LIMITS)}",
                              where=where)
        try:
            ms = float(raw) if not isinstance(raw, bool) else math.nan
        except (TypeError, ValueError):
            ms = math.nan
        if not math.isfinite(ms) or ms <= 0:
            raise ConfigError(f"SLO limit {key} must be a positive number of milliseconds, got {raw!r}", where=where)
        slo[key] = ms
    return dict(sorted(slo.items(), key=lambda kv: LIMITS.index(kv[0]))) or None


def slo_text(slo: Mapping[str, float]) -> str:
    """`TTFT <= 200 ms and TPOT <= 50 ms`."""
    return " and ".join(f"{_LABELS[k]} <= {v:g} ms" for k, v in slo.items())


def check_objective(objective: str, slo: Slo | None, where: str = "bench --objective") -> None:
    if objective not in OBJECTIVES:
        raise ConfigError(f"unknown objective '{objective}'{suggest(objective, OBJECTIVES)}; "
                          f"allowed: {', '.join(OBJECTIVES)}", where=where)
    if objective == "goodput" and not slo:
        raise ConfigError("--objective goodput needs an SLO to count the requests that meet it",
                          where=where, hint="give --slo ttft_ms=...,tpot_ms=... (or the hosts.yaml var `slo`)")


def check_cost(value: Any, where: str = "bench --gpu-hour-cost") -> float | dict[str, float] | None:
    """A GPU-hour price in $ (a number, or {host: number}); None for nothing."""
    def one(v: Any, what: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"{what} must be a positive number of $ per GPU-hour, got {v!r}", where=where)
        return float(v)
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(h): one(v, f"gpu_hour_cost of host {h}") for h, v in sorted(value.items())} or None
    return one(value, "gpu_hour_cost")
