"""Goodput and attainment: each point against the latency SLO (the limits, the objective
and the GPU-hour price are read and checked in config/slo.py).

Serving teams decide under a latency SLO: a request counts only if its time to first token
and its time per output token stay within limits. Goodput is the requests per second that
met every limit; attainment is the share of the point's requests that did (a failed
request never does). Both are computed at report time from the per-request latencies both
runners keep in each record (`extra.request_latencies_ms`: [TTFT, TPOT, E2E] per completed
request, model milliseconds on the simulator; the builtin client measures them, the `sglang`
runner reads them from bench_serving's `--output-details`), so `specops report` gives the
same figures from the files alone. A record without them has no goodput, never a zero; one
from a bench_serving without the details says why in `extra.request_latencies_missing`.
"""

from __future__ import annotations

from typing import Mapping

from specops.config.slo import LIMITS
from specops.records.schema import LATENCIES_KEY, MISSING_KEY, ResultRecord


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
