"""The closed-loop declaration a client sends the simulator with each request.

A closed-loop client keeps C requests in flight until it has sent N. Saying so in a header
(`X-Sim-Closed-Loop: id=ID;concurrency=C;requests=N`, which SGLang ignores) lets the
simulator's scheduler hold each step until the loop's refills have arrived, so what a step
holds is the workload's, not the machine's (see specops.sim.scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

#: the request header a closed-loop client declares its load with
LOOP_HEADER = "X-Sim-Closed-Loop"


class LoopHeaderError(ValueError):
    """A malformed X-Sim-Closed-Loop header (the handler answers 400 with this message)."""


@dataclass
class ClosedLoop:
    """A client that keeps `concurrency` requests in flight until it has sent `requests`."""

    key: str
    concurrency: int
    requests: int
    submitted: int = 0
    done: int = 0  # finished or aborted

    @property
    def owed(self) -> int:
        """Requests the client still has to send before the next step may run."""
        return max(0, min(self.requests, self.done + self.concurrency) - self.submitted)


def parse_loop_header(value: str | None) -> tuple[str, int, int] | None:
    """(id, concurrency, requests) from `id=ID;concurrency=C;requests=N`; None when absent."""
    if not value:
        return None
    fields = dict(part.strip().partition("=")[::2] for part in value.split(";") if part.strip())
    try:
        key, conc, total = fields["id"], int(fields["concurrency"]), int(fields["requests"])
    except (KeyError, ValueError):
        raise LoopHeaderError(f"{LOOP_HEADER} must be 'id=ID;concurrency=C;requests=N', got {value!r}") from None
    if not key or conc < 1 or total < 1:
        raise LoopHeaderError(f"{LOOP_HEADER}: id must be set and concurrency, requests >= 1, got {value!r}")
    return key, conc, total


def loop_header(key: str, concurrency: int, requests: int) -> dict[str, str]:
    """The header a closed-loop client sends with each of its requests."""
    return {LOOP_HEADER: f"id={key};concurrency={concurrency};requests={requests}"}
