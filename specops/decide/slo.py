"""Latency SLOs, goodput, the objective the report optimises, and the GPU-hour price.

Serving teams decide under a latency SLO: a request counts only if its time to first token
and its time per output token stay within limits. Goodput is the requests per second that
met every limit; attainment is the share of the point's requests that did (a failed
request never does). Both are computed at report time from the per-request latencies both
runners keep in each record (`extra.request_latencies_ms`: [TTFT, TPOT, E2E] per completed
request, model milliseconds on the simulator; the builtin client measures them, the `sglang`
runner reads them from bench_serving's `--output-details`), so `specops report` gives the
same figures from the files alone. A record without them has no goodput, never a zero; one
from a bench_serving without the details says why in `extra.request_latencies_missing`.

The objective (`--objective`) is what the crossover, the threshold, the envelope and the
tax compare: output throughput (the default), goodput (needs an SLO), or TPOT (lower is
better, so it is compared as per-user decode speed, 1000 / TPOT ms).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from specops.bench.schema import ResultRecord
from specops.config.schema import suggest
from specops.errors import ConfigError

OBJECTIVES = ("throughput", "goodput", "tpot")
DEFAULT_OBJECTIVE = "throughput"
LIMITS = ("ttft_ms", "tpot_ms", "e2e_ms")      # in the order of a request's latencies
LATENCIES_KEY = "request_latencies_ms"
MISSING_KEY = "request_latencies_missing"     # why a record has no per-request latencies
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


def request_latencies(record: ResultRecord) -> list[list[float | None]] | None:
    lat = record.extra.get(LATENCIES_KEY)
    return lat if isinstance(lat, list) else None


def latencies_missing(record: ResultRecord) -> str | None:
    """Why the record has no per-request latencies, where its runner said so."""
    why = record.extra.get(MISSING_KEY) if request_latencies(record) is None else None
    return why if isinstance(why, str) and why else None


def meets(latencies: list[float | None], slo: Mapping[str, float]) -> bool:
    """One request against every limit (a one-token request has no TPOT: that limit holds)."""
    for i, key in enumerate(LIMITS):
        limit = slo.get(key)
        value = latencies[i] if i < len(latencies) else None
        if limit is not None and value is not None and value > limit:
            return False
        if limit is not None and value is None and key != "tpot_ms":
            return False
    return True


def point_goodput(record: ResultRecord, slo: Mapping[str, float] | None) -> tuple[float | None, float | None]:
    """(goodput in requests/s, attainment 0..1) of one point; (None, None) without an SLO or
    without per-request latencies."""
    lat = request_latencies(record)
    duration = record.duration_s
    if not slo or lat is None or not isinstance(duration, (int, float)) or duration <= 0:
        return None, None
    met = sum(1 for one in lat if isinstance(one, list) and meets(one, slo))
    failed = record.failed
    total = len(lat) + (failed if isinstance(failed, int) and failed > 0 else 0)
    return met / float(duration), (met / total if total else None)


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
