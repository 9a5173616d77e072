"""The open-loop declaration a client sends the simulator with each request of a rate point.

An open-loop client sends request i at its arrival offset whatever the server does. Saying
so in a header (`X-Sim-Open-Loop: id=ID;i=INDEX;at=SECONDS;next=SECONDS;requests=N`, which
SGLang ignores; `next` is the following request's offset, absent on the last) lets the
scheduler put each request on its model clock at `origin + at` (origin: the model time the
loop's first request came in, minus its offset), never start a step after an arrival it
was told of but has not received yet, and move the model clock over idle gaps to the next
arrival: the figures of a rate point are then the workload's, not the machine's
(see specops.sim.scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specops.sim.closedloop import LoopHeaderError

#: the request header an open-loop client declares each arrival with
OPEN_HEADER = "X-Sim-Open-Loop"


@dataclass(frozen=True)
class OpenArrival:
    """One request's place in its open loop: offsets in model seconds from the loop's start."""

    key: str
    index: int
    at: float
    next: float | None
    requests: int


@dataclass
class OpenLoop:
    """A client sending `requests` requests at declared offsets; `origin` is the model time of
    offset 0, `nexts` the offsets its submitted requests declared for their successors."""

    key: str
    requests: int
    origin: float
    submitted: set[int] = field(default_factory=set)
    nexts: dict[int, float] = field(default_factory=dict)
    low: int = 0  # the lowest index not submitted yet

    def add(self, arrival: OpenArrival) -> None:
        self.submitted.add(arrival.index)
        if arrival.next is not None:
            self.nexts[arrival.index] = arrival.next
        while self.low in self.submitted:
            self.low += 1

    @property
    def complete(self) -> bool:
        return self.low >= self.requests

    def due(self) -> float | None:
        """Model time of the earliest arrival not received yet (None: none, or unknown because
        its predecessor has not come in either: it cannot be earlier than that one)."""
        if self.complete:
            return None
        if self.low == 0:
            return self.origin
        nxt = self.nexts.get(self.low - 1)
        return None if nxt is None else self.origin + nxt


def parse_open_header(value: str | None) -> OpenArrival | None:
    """The declaration from `id=ID;i=INDEX;at=SECONDS;next=SECONDS;requests=N`; None when absent."""
    if not value:
        return None
    fields_ = dict(part.strip().partition("=")[::2] for part in value.split(";") if part.strip())
    try:
        key, index, at = fields_["id"], int(fields_["i"]), float(fields_["at"])
        total = int(fields_["requests"])
        nxt = float(fields_["next"]) if fields_.get("next") else None
    except (KeyError, ValueError):
        raise LoopHeaderError(f"{OPEN_HEADER} must be 'id=ID;i=INDEX;at=SECONDS;next=SECONDS;requests=N', "
                              f"got {value!r}") from None
    if not key or total < 1 or not 0 <= index < total or at < 0 or (nxt is not None and nxt < at):
        raise LoopHeaderError(f"{OPEN_HEADER}: id must be set, 0 <= i < requests and 0 <= at <= next, got {value!r}")
    return OpenArrival(key, index, at, nxt, total)


def open_header(key: str, index: int, at: float, nxt: float | None, requests: int) -> dict[str, str]:
    """The header request `index` of an open loop sends (offsets written exactly: repr)."""
    tail = "" if nxt is None else f";next={nxt!r}"
    return {OPEN_HEADER: f"id={key};i={index};at={at!r}{tail};requests={requests}"}
