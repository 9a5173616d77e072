"""A speculation schedule: draft steps per running-batch range, 0 meaning no drafting.

What `specops tune` finds is one of these, whatever engine measured it; each engine writes it
in its own form (`ServingEngine.schedule_forms`): SGLang's patch threshold (<= 0.5.13), its
native adaptive tiers (>= 0.5.14), vLLM's `num_speculative_tokens_per_batch_size`. The ranges
cover every batch from 1 up; the last is open (it holds for every larger batch), as each
engine's form carries its last entry forward.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Schedule:
    """(first batch of the range, draft steps) in increasing order; the first starts at 1 and
    neighbours differ in steps (a range runs to the batch before the next one's start)."""

    starts: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not self.starts or self.starts[0][0] != 1:
            raise ValueError(f"a schedule starts at running batch 1, got {self.starts!r}")
        for (a, _), (b, _) in zip(self.starts, self.starts[1:], strict=False):
            if b <= a:
                raise ValueError(f"schedule ranges must start in increasing order, got {self.starts!r}")
        if any(steps < 0 for _, steps in self.starts):
            raise ValueError(f"draft steps must be >= 0, got {self.starts!r}")

    @classmethod
    def from_tiers(cls, tiers: dict[int, int]) -> "Schedule":
        """From `{first batch: steps}` (tune's tiers, hosts.yaml's `tiers:`), merging neighbours
        with the same steps."""
        merged: list[tuple[int, int]] = []
        for start, steps in sorted(tiers.items()):
            if not merged or merged[-1][1] != steps:
                merged.append((int(start), int(steps)))
        return cls(tuple(merged))

    @classmethod
    def from_threshold(cls, threshold: int, steps: int) -> "Schedule":
        """`steps` while the running batch is <= `threshold`, none above."""
        return cls(((1, steps), (threshold + 1, 0)))

    def ranges(self, last: int) -> list[tuple[int, int, int]]:
        """Inclusive (first, last, steps) ranges; the open one ends at `last` (or its own start)."""
        ends = [s - 1 for s, _ in self.starts[1:]] + [max(last, self.starts[-1][0])]
        return [(s, e, k) for (s, k), e in zip(self.starts, ends, strict=True)]

    def steps_at(self, batch: int) -> int:
        return next(k for s, k in reversed(self.starts) if batch >= s)

    @property
    def threshold(self) -> int | None:
        """T when the schedule is one draft-step count up to T and none above (what a patch
        threshold can say); None otherwise."""
        if len(self.starts) == 2 and self.starts[0][1] > 0 and self.starts[1][1] == 0:
            return self.starts[1][0] - 1
        return None

    def text(self) -> str:
        return ", ".join(f"{s}+: {k}" for s, k in self.starts)

    def to_dict(self) -> dict[str, Any]:
        return {"tiers": {str(s): k for s, k in self.starts}, "text": self.text()}


@dataclass(frozen=True)
class ScheduleForm:
    """A schedule as one engine route takes it: the flags (or config) and where they go."""

    #: the engine and route, as a user names it ("SGLang <= 0.5.13 (dynamic-spec-disable patch)")
    route: str
    #: the launch flags that carry it (None: this route cannot say the schedule)
    flags: list[str] | None
    #: why it cannot, or what a user should know (buckets, carried-forward ranges)
    note: str = ""
    #: a file the flags name, and its text (SGLang's tier config)
    config_file: str | None = None
    config: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"route": self.route, "flags": self.flags, "note": self.note, "config_file": self.config_file,
                "config": self.config}

    def lines(self) -> list[str]:
        """What a terminal shows: the route, its flags (shell-quoted), the file, the note."""
        if self.flags is None:
            return [f"{self.route}:", f"  {self.note or 'cannot say this schedule'}"]
        out = [f"{self.route}:", "  " + shlex.join(self.flags)]
        if self.config_file and self.config is not None:
            out.append(f"  {self.config_file}: {self.config}")
        if self.note:
            out.append(f"  ({self.note})")
        return out
