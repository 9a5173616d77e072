"""vLLM's dynamic speculative decoding schedule (`num_speculative_tokens_per_batch_size` in
`--speculative-config`): a list of inclusive running-batch ranges `[start, end, K]`, K = 0 no
drafting. specops writes it from a threshold (speculate K while the running batch <= T, 0
above) or from explicit tiers, and checks it with vLLM's own rules
(`vllm/v1/spec_decode/dynamic/utils.py`, 0.32.0: validate_and_normalize_dynamic_sd_schedule,
build_dynamic_sd_schedule_lookup), so a schedule vLLM would refuse is refused before launch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: the key inside `--speculative-config`
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"

Schedule = list[list[int]]


class ScheduleError(ValueError):
    """A schedule vLLM would refuse, with vLLM's own reason."""


def validate(schedule: object) -> list[tuple[int, int, int]]:
    """The schedule sorted as vLLM normalizes it, or ScheduleError with vLLM's message."""
    if schedule is None:
        raise ScheduleError(f"{SCHEDULE_KEY} is required for dynamic speculative decoding.")
    if not isinstance(schedule, list):
        raise ScheduleError(f"{SCHEDULE_KEY} must be a non-empty list of "
                            "(range_start, range_end, num_speculative_tokens) entries.")
    if not schedule:
        raise ScheduleError(f"{SCHEDULE_KEY} must not be empty.")
    parsed: list[tuple[int, int, int]] = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ScheduleError(f"Each {SCHEDULE_KEY} entry must be a 3-item sequence: "
                                "(range_start, range_end, num_speculative_tokens).")
        try:
            start, end, k = int(entry[0]), int(entry[1]), int(entry[2])
        except (TypeError, ValueError):
            raise ScheduleError(f"{SCHEDULE_KEY} entries must be integers, got {entry!r}") from None
        if start <= 0 or end <= 0:
            raise ScheduleError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise ScheduleError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
        if k < 0:
            raise ScheduleError(f"{SCHEDULE_KEY} values must be >= 0.")
        parsed.append((start, end, k))
    parsed.sort(key=lambda e: e[0])
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ScheduleError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if parsed[0][0] != 1:
        raise ScheduleError("The first batch-size range must start at 1 so every runtime batch size has a "
                            "defined schedule.")
    return parsed


def lookup(schedule: object, max_batch: int, num_tokens: int) -> list[int]:
    """vLLM's dense table: index b is the K a running batch of b drafts (index 0 unused); a gap
    carries the previous K forward, the tail the last one, every K capped at `num_tokens`."""
    if max_batch <= 0 or num_tokens <= 0:
        raise ScheduleError("the running limit and num_speculative_tokens must be > 0")
    dense = [0] * (max_batch + 1)
    nxt, last = 1, None
    for start, end, k in validate(schedule):
        if start > nxt and last is not None:
            for b in range(nxt, min(start, max_batch + 1)):
                dense[b] = min(num_tokens, last)
        for b in range(max(start, nxt), min(end, max_batch) + 1):
            dense[b] = min(num_tokens, k)
        nxt, last = max(nxt, end + 1), k
        if nxt > max_batch:
            break
    for b in range(nxt, max_batch + 1):
        dense[b] = min(num_tokens, last or 0)
    return dense


def changes(schedule: object, max_batch: int, num_tokens: int) -> dict[int, int]:
    """{first batch of each run of equal K: that K}, over 1..max_batch (what the simulator steps by)."""
    dense = lookup(schedule, max_batch, num_tokens)
    out: dict[int, int] = {}
    for b in range(1, max_batch + 1):
        if b == 1 or dense[b] != dense[b - 1]:
            out[b] = dense[b]
    return out


@dataclass(frozen=True)
class SchedulePlan:
    """A schedule for the adaptive arm, and the threshold it really gives."""

    schedule: Schedule
    #: the largest running batch that still drafts when every smaller one does (None: all do)
    effective_threshold: int | None
    source: str

    def note(self) -> str:
        shown = ", ".join(f"[{s},{e},{k}]" for s, e, k in self.schedule)
        return f"vLLM dynamic schedule {SCHEDULE_KEY}=[{shown}] ({self.source})"


def _threshold_of(schedule: Schedule, max_batch: int, num_tokens: int) -> int | None:
    dense = lookup(schedule, max_batch, num_tokens)
    for b in range(1, max_batch + 1):
        if dense[b] == 0:
            return b - 1
    return None


def from_threshold(threshold: int, num_tokens: int, max_batch: int) -> SchedulePlan:
    """Speculate `num_tokens` while the running batch <= threshold, none above: [[1,T,K],[T+1,max,0]]."""
    if threshold < 1:
        raise ScheduleError(f"the threshold must be at least 1 (a running batch), got {threshold}")
    if num_tokens < 1:
        raise ScheduleError(f"num_speculative_tokens must be at least 1, got {num_tokens}")
    schedule: Schedule = [[1, threshold, num_tokens]]
    if threshold < max_batch:
        schedule.append([threshold + 1, max_batch, 0])
    validate(schedule)
    return SchedulePlan(schedule, _threshold_of(schedule, max_batch, num_tokens), f"threshold {threshold}")


def from_tiers(tiers: Mapping[int, Any], num_tokens: int, max_batch: int) -> SchedulePlan:
    """Explicit tiers {first running batch: K or [K]} (SGLang's tier keys, one K each) as ranges."""
    if not tiers:
        raise ScheduleError("tiers must not be empty")
    starts = sorted(int(b) for b in tiers)
    schedule: Schedule = []
    for i, start in enumerate(starts):
        value = tiers[start]
        ks = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(ks) != 1:
            raise ScheduleError(f"vLLM's schedule takes one K per batch range; tier {start} has {ks}")
        end = starts[i + 1] - 1 if i + 1 < len(starts) else max(max_batch, start)
        schedule.append([start, end, int(ks[0])])
    validate(schedule)
    return SchedulePlan(schedule, _threshold_of(schedule, max_batch, num_tokens), "explicit tiers")
