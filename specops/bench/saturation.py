"""Whether a rate point's server kept up with the rate it was offered.

Under an open loop a server that cannot sustain the rate builds a queue (or, with room in
its batch, a batch so large each step crawls): requests arrive faster than it finishes
them, and the point ends long after the last arrival. Its throughput then still looks like
a number; the record says `saturated` instead.

The criterion (RULE) reads only model-clock figures, never wall time: the rate requests
completed at (completed over the point's duration, first arrival to last token) against
the rate the drawn arrivals actually offered ((n - 1) over the span of their offsets). A
server that keeps up finishes the point one request's latency after the last arrival, so
the two rates are close when the point spans several latencies (the default request count,
at least 4 x the rate, spans about 4 s); one that does not finishes at its own capacity.
SGLang's bench_serving reports no offsets: its asked rate stands in for the offered one.
"""

from __future__ import annotations

from typing import Sequence

#: a point is saturated when it completes requests at less than this share of the offered rate
SATURATION_SHARE = 0.8
RULE = (f"saturated: requests completed at under {SATURATION_SHARE:.0%} of the rate the arrivals offered "
        "(completed / duration from the first arrival to the last token, against (n - 1) / the arrivals' "
        "span; model clock on the simulator)")


def offered_rate(offsets: Sequence[float]) -> float | None:
    """The rate the drawn offsets offer: (n - 1) / their span (None under 2 arrivals)."""
    if len(offsets) < 2 or offsets[-1] <= offsets[0]:
        return None
    return (len(offsets) - 1) / (offsets[-1] - offsets[0])


def is_saturated(offered: float | None, completed_rate: float | None) -> bool | None:
    """RULE; None where either rate is unknown (too few requests, none completed)."""
    if offered is None or completed_rate is None:
        return None
    return completed_rate < SATURATION_SHARE * offered
