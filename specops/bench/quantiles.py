"""Linear-interpolated percentiles (numpy's default) of client-side latencies, shared by a
point's statistics (bench/client.py) and a phase's (bench/phases.py)."""

from __future__ import annotations

from typing import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)
