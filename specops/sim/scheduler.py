"""Continuous-batching scheduler of the simulator: queue, prefill, decode steps, stats.

One asyncio task plays SGLang's scheduler: it admits waiting requests up to the running
limit (a prefill step), otherwise runs one decode step for the whole running batch, sleeps
the step's model time times the time scale, and hands each request its new tokens.

The model clock (`model_time`) is what a measurement on the simulator should read, not the
wall clock: each step adds its model time whatever the machine's speed, and the wall-clock
sleep that follows only paces it. Idle time does not move the model clock. Requests carry
their model-clock arrival and per-step emission times (`sim_arrival_t`, `sim_t`) to the client,
one stream chunk per step that gave a request tokens, however late the handler runs.

What each step holds therefore depends on the workload alone, provided the scheduler knows
the load it is offered. A closed-loop client says so: each of its requests carries
`X-Sim-Closed-Loop: id=ID;concurrency=C;requests=N` (SGLang ignores the header), and no step
runs while such a loop owes requests (fewer than min(N, done + C) submitted): its initial
burst and every refill join the step they would join on an infinitely fast machine. A loop
that owes a refill for LOOP_REFILL_TIMEOUT_S wall seconds (its client died) is dropped and
counted in `/server_info.sim_stats.loop_timeouts`. A client that cannot say it (SGLang's
`bench_serving`) gets the old grace: after a step that finished its requests the scheduler
waits up to CLIENT_GRACE_S for their refills, which a loaded machine can miss.

An open-loop client (a rate point) declares each request's arrival offset instead
(`X-Sim-Open-Loop`, specops.sim.openloop). Such a request arrives on the model clock at its
loop's origin plus its offset, whenever the handler got it; no step starts after an arrival
the loop declared but has not sent yet (the same wait and timeout as a closed loop's
refill); a request arriving during a step joins the next one; and with nothing to run, the
model clock moves over the idle gap to the next arrival: in an open loop idle time is part
of the workload, so the queue and the running batch a rate builds are exact too.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from specops.sglang.adaptive import NATIVE_START_LINE, STEP_SWITCH_LINE, decode_line_note, transition_line
from specops.sim import model as M
from specops.sim.closedloop import ClosedLoop
from specops.sim.logs import MODEL_STAMP, SimLog, decode_batch_line, prefill_batch_line
from specops.sim.openloop import OpenArrival, OpenLoop

WORDS = (
    "the of and to in is was that for on as with by at from his an were are which this be has had "
    "one their its new after who they have her she two been other when there all during into school "
    "time may years more most only over city some world would where later up such used many can state "
    "about national out known university united then made first any well also game system model token"
).split()

#: wall seconds the scheduler waits, with its model clock held, for a closed-loop client to
#: send the replacements of requests that just finished (a refill arrives in well under 1 ms on
#: an idle machine; 20 ms covers a loaded one without slowing a point's tail much)
CLIENT_GRACE_S = 0.02
#: wall seconds a declared closed loop may owe a refill (an open loop, an arrival) before the
#: scheduler stops waiting for it (its client failed): generous, since a loaded machine can
#: take seconds to send one
LOOP_REFILL_TIMEOUT_S = 60.0
#: model seconds within which a declared arrival counts as come (offsets are sums of floats)
ARRIVAL_EPS_S = 1e-9
#: what a request may declare: a closed loop (parse_loop_header), an open-loop arrival, nothing
Declared = tuple[str, int, int] | OpenArrival | None
@dataclass(frozen=True)
class Mark:
    """What one step left a request with: its stream sends one chunk per mark."""

    generated: int
    sim_t: float
    verify_steps: int


@dataclass
class SimRequest:
    """One generation request as the scheduler sees it."""

    rid: str
    prompt_tokens: int
    max_new_tokens: int
    seed: int
    created: float = field(default_factory=time.monotonic)
    sim_arrival_t: float = 0.0  # model-clock time the request arrived
    sim_t: float = 0.0  # model-clock time of its latest tokens
    rng: random.Random = field(default_factory=random.Random)
    generated: int = 0
    verify_steps: int = 0
    finished: bool = False
    aborted: bool = False
    first_token_at: float | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)
    marks: list["Mark"] = field(default_factory=list)  # one per step that emitted
    loop: ClosedLoop | None = None
    open_loop: bool = False  # declared its arrival in an open loop: no client refills it
    settled: bool = False  # counted as done by its loop

    def token_text(self, start: int, end: int) -> str:
        """Synthetic detokenized text for tokens [start, end): deterministic per request."""
        return "".join(" " + WORDS[(self.seed * 7919 + i * 104729) % len(WORDS)] for i in range(start, end))

    @property
    def accept_length(self) -> float:
        return self.generated / self.verify_steps if self.verify_steps else 0.0


@dataclass
class EngineConfig:
    arm: M.ArmModel
    max_running: int
    time_scale: float = M.DEFAULT_TIME_SCALE
    seed: int = 0
    max_total_tokens: int = M.DEFAULT_MAX_TOTAL_TOKENS
    cuda_graph_max_bs: int = 256
    max_prefill_tokens: int = 16384
    decode_log_interval: int = M.DECODE_LOG_INTERVAL
    crash_after: int | None = None  # completed requests before the injected crash
    noise: float | None = None  # relative std-dev of the step-time drift (None: the model's NOISE_REL)


class Scheduler:
    """The simulated scheduler loop; `on_crash` is awaited once when the injected crash fires."""

    def __init__(self, cfg: EngineConfig, log: SimLog, on_crash: Callable[[], Awaitable[None]] | None = None):
        self.cfg = cfg
        self.log = log
        self.on_crash = on_crash
        self.rng = random.Random(cfg.seed)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.wake = asyncio.Event()
        self.completed = 0
        self.counted = 0  # completions that count towards crash_after (excludes warmup)
        self.model_time = 0.0  # model seconds elapsed while busy or idle
        self.decode_steps = 0
        self._noise = 1.0
        self._log_tokens = 0
        self._log_model_t0 = 0.0
        self._acc_tokens = 0
        self._acc_steps = 0
        self._interval_steps = [0, 0]  # decode steps since the last Decode batch line: [all, not drafting]
        self.total_accepted = 0
        self.total_verify = 0
        self.last_gen_throughput = 0.0
        self._clock = 0.0
        self._ids = itertools.count()
        self.last_running = 0  # running requests of the last decode step (the /metrics gauge)
        self.last_steps = 0  # draft steps of the last decode step
        self.last_accept_length = 0.0  # accept length of the last logged interval
        self.submitted = 0  # requests received
        self.submitted_undeclared = 0  # of those, outside a declared loop (the grace counts them)
        self.loops: dict[str, ClosedLoop] = {}
        self.open_loops: dict[str, OpenLoop] = {}
        self.loop_timeouts = 0  # declared loops dropped because their client stopped sending
        self.output_tokens = 0  # tokens emitted, all requests
        self.busy_model_time = 0.0  # model seconds spent in prefill and decode steps
        self.steps_by_batch: dict[int, list[int]] = {}  # running batch -> [speculative steps, plain steps]
        self.drafting = True  # the patched server's state: its transition lines log each change
        self.native_steps: int | None = None  # a native adaptive server's current step count (its switch lines)
        if cfg.arm.tiers is not None:
            self.native_steps = cfg.arm.steps(1)
            log.info(NATIVE_START_LINE.format(steps=self.native_steps, candidates=cfg.arm.tiers.candidates(1)))

    # ------------------------------------------------------------------ public API
    def new_request(self, prompt_tokens: int, max_new_tokens: int, rid: str | None = None,
                    content: str = "") -> SimRequest:
        """A request; its accept-length draws come from its own generator seeded by its content
        (prompt text), so the same prompts draw the same whatever else shares their batches."""
        seed = next(self._ids) + self.cfg.seed * 1000003
        rng = random.Random(f"{self.cfg.seed}:{content}" if content else seed)
        return SimRequest(rid=rid or uuid.uuid4().hex, prompt_tokens=max(1, prompt_tokens),
                          max_new_tokens=max(0, max_new_tokens), seed=seed, rng=rng)

    def submit(self, req: SimRequest, loop: Declared = None) -> None:
        """Queue a request; `loop` is its client's declared closed loop (parse_loop_header) or
        its open-loop arrival (parse_open_header): it then arrives at its declared model time."""
        req.sim_arrival_t = req.sim_t = self.model_time
        self.submitted += 1
        if isinstance(loop, OpenArrival):
            req.sim_arrival_t = req.sim_t = self._arrive(loop)
            req.open_loop = True
        elif loop is None:
            self.submitted_undeclared += 1
        else:
            req.loop = self._join_loop(*loop)
            req.loop.submitted += 1
        self.waiting.append(req)
        self.wake.set()

    def _arrive(self, arrival: OpenArrival) -> float:
        """The model time of an open-loop request: its loop's origin (set by the loop's first
        request to come in) plus its offset."""
        lp = self.open_loops.get(arrival.key)
        if lp is None:
            lp = self.open_loops[arrival.key] = OpenLoop(arrival.key, arrival.requests, self.model_time - arrival.at)
        lp.add(arrival)
        if lp.complete:
            del self.open_loops[arrival.key]
        return lp.origin + arrival.at

    def _next_due(self) -> float | None:
        """The earliest arrival an open loop declared and has not sent yet."""
        dues = [d for lp in self.open_loops.values() if (d := lp.due()) is not None]
        return min(dues, default=None)

    def _arrived(self) -> bool:
        """Whether a waiting request has arrived by the model clock (open-loop ones may be early)."""
        return any(r.sim_arrival_t <= self.model_time + ARRIVAL_EPS_S for r in self.waiting)

    def _join_loop(self, key: str, concurrency: int, requests: int) -> ClosedLoop:
        """The loop `key`, declared now if new; a new loop ends earlier ones with nothing in flight."""
        if key not in self.loops:
            for old in [lp for lp in self.loops.values() if lp.submitted <= lp.done]:
                del self.loops[old.key]
            self.loops[key] = ClosedLoop(key, concurrency, requests)
        return self.loops[key]

    def _settle(self, req: SimRequest) -> None:
        """A finished or aborted request frees its loop's slot (once)."""
        lp = req.loop
        if lp is None or req.settled:
            return
        req.settled = True
        lp.done += 1
        if lp.done >= lp.requests:
            self.loops.pop(lp.key, None)

    def stats(self) -> dict[str, object]:
        """The simulator's own accounting (model clock, steps, tokens): what tests of its
        behaviour assert on, since none of it depends on the machine's speed."""
        return {
            "model_time_s": round(self.model_time, 6),
            "busy_model_time_s": round(self.busy_model_time, 6),
            "decode_steps": self.decode_steps,
            "output_tokens": self.output_tokens,
            "completed": self.completed,
            "loop_timeouts": self.loop_timeouts,
            "waiting": len(self.waiting),
            "accepted_tokens": self.total_accepted,
            "verify_steps": self.total_verify,
            "steps_by_batch": {str(b): {"speculative": s, "plain": p} for b, (s, p) in sorted(self.steps_by_batch.items())},
        }

    def abort(self, req: SimRequest) -> None:
        """Client went away: drop the request like SGLang's abort."""
        req.aborted = True
        if req in self.waiting:
            self.waiting.remove(req)
        self._settle(req)
        self.wake.set()

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def avg_accept_length(self) -> float:
        return self.total_accepted / self.total_verify if self.total_verify else 0.0

    def token_usage(self) -> tuple[int, float]:
        used = sum(r.prompt_tokens + r.generated for r in self.running)
        return used, used / self.cfg.max_total_tokens

    # ------------------------------------------------------------------ loop
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._clock = loop.time()
        while True:
            if not self.busy and not self.open_loops:  # idle: the model clock holds (nothing is being measured)
                self.wake.clear()
                await self.wake.wait()
                self._clock = loop.time()
            await self._await_loops()
            await self._await_arrivals()
            self.running = [r for r in self.running if not r.aborted]
            room = self.cfg.max_running - len(self.running)
            if self._arrived() and room > 0:
                await self._prefill(room)
            elif self.running:
                await self._decode()
            else:
                await self._idle_to_next_arrival()
            if self.cfg.crash_after is not None and self.counted >= self.cfg.crash_after and self.on_crash:
                await asyncio.sleep(0.05)  # let the finished streams flush, then die mid-batch
                await self.on_crash()
                return

    async def _wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait for wake-ups until `done()` holds (True) or `timeout_s` wall seconds pass (False);
        the pacing clock restarts from now either way, since the model clock held meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while not done():
                left = deadline - loop.time()
                if left <= 0:
                    return False
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), left)
                except asyncio.TimeoutError:
                    return done()
            return True
        finally:
            self._clock = loop.time()

    async def _await_loops(self) -> None:
        """Hold the next step until no declared loop owes a request: what the step holds is
        then the workload's, not the machine's. A loop owing one past LOOP_REFILL_TIMEOUT_S is
        dropped (its client failed) and counted."""
        if not any(lp.owed for lp in self.loops.values()):
            return
        if not await self._wait_until(lambda: not any(lp.owed for lp in self.loops.values()), LOOP_REFILL_TIMEOUT_S):
            for lp in [lp for lp in self.loops.values() if lp.owed]:
                self.loops.pop(lp.key, None)
                self.loop_timeouts += 1

    async def _await_arrivals(self) -> None:
        """Hold the next step until every arrival an open loop declared by the model clock's
        time has come in; a loop owing one past LOOP_REFILL_TIMEOUT_S is dropped and counted."""
        def come() -> bool:
            due = self._next_due()
            return due is None or due > self.model_time + ARRIVAL_EPS_S

        if come():
            return
        if not await self._wait_until(come, LOOP_REFILL_TIMEOUT_S):
            self._drop_owing(self.model_time)

    def _drop_owing(self, by: float) -> None:
        for lp in [lp for lp in self.open_loops.values() if (d := lp.due()) is not None and d <= by + ARRIVAL_EPS_S]:
            self.open_loops.pop(lp.key, None)
            self.loop_timeouts += 1

    async def _idle_to_next_arrival(self) -> None:
        """Nothing arrived to run: move the model clock over the idle gap to the next arrival,
        a waiting request's or one an open loop declared (waited for, as in _await_arrivals).
        Not busy time; with neither, wait for a wake-up."""
        waiting = min((r.sim_arrival_t for r in self.waiting), default=None)
        due = self._next_due()
        if due is not None and (waiting is None or due < waiting):
            if not await self._wait_until(lambda: self._next_due() != due, LOOP_REFILL_TIMEOUT_S):
                self._drop_owing(due)
            return  # the arrival is now waiting (or its loop is gone): decide again
        if waiting is None:
            self.wake.clear()
            await self.wake.wait()
            self._clock = asyncio.get_running_loop().time()
            return
        self.model_time = max(self.model_time, waiting)

    async def _await_refills(self, finished: int, since: int) -> None:
        """For clients that declared no loop: hold the model clock until `finished` requests
        arrived after `since` undeclared submissions, or CLIENT_GRACE_S wall seconds pass."""
        await self._wait_until(lambda: self.submitted_undeclared - since >= finished, CLIENT_GRACE_S)

    async def _advance(self, model_ms: float) -> None:
        """Sleep model_ms of model time on an absolute timeline (catches up when the loop lags)."""
        loop = asyncio.get_running_loop()
        self.model_time += model_ms / 1000.0
        self.busy_model_time += model_ms / 1000.0
        self._clock += model_ms / 1000.0 * self.cfg.time_scale
        delay = self._clock - loop.time()
        if delay < -0.25:  # far behind (CPU-starved): don't burst, resync
            self._clock = loop.time()
        await asyncio.sleep(max(0.0, delay))

    async def _prefill(self, room: int) -> None:
        batch: list[SimRequest] = []
        tokens = 0
        arrived = sorted((r for r in self.waiting if r.sim_arrival_t <= self.model_time + ARRIVAL_EPS_S),
                         key=lambda r: r.sim_arrival_t)  # stable: submit order among equal times
        for nxt in arrived:
            if len(batch) >= room or (batch and tokens + nxt.prompt_tokens > self.cfg.max_prefill_tokens):
                break
            batch.append(nxt)
            tokens += nxt.prompt_tokens
        for r in batch:
            self.waiting.remove(r)
        self.running.extend(batch)
        used, usage = self.token_usage()
        self.log.info(prefill_batch_line(len(batch), tokens, usage, len(self.running) - len(batch), len(self.waiting)), rank=True)
        await self._advance(M.prefill_ms(tokens, self.cfg.arm.params) * self._noise)
        now = time.monotonic()
        for r in batch:  # prefill samples each request's first token
            if r.aborted:
                continue
            r.first_token_at = now
            self._emit(r, 1)
        await self._finish_done()

    async def _decode(self) -> None:
        batch = len(self.running)
        kv = sum(r.prompt_tokens + r.generated for r in self.running)  # the context each step reads
        ms, acc = self.cfg.arm.step(batch, kv)
        k = self.cfg.arm.steps(batch)
        speculating = k > 0
        self.last_running, self.last_steps = batch, k
        self._log_transition(batch, speculating)
        self._log_switch(k)
        self.steps_by_batch.setdefault(batch, [0, 0])[0 if speculating else 1] += 1
        self._interval_steps[0] += 1
        self._interval_steps[1] += 0 if speculating else 1
        if self.decode_steps % self.cfg.decode_log_interval == 0:
            rel = M.NOISE_REL if self.cfg.noise is None else self.cfg.noise
            self._noise = max(0.85, min(1.15, self.rng.gauss(1.0, rel))) if rel > 0 else 1.0
        await self._advance(ms * self._noise)
        self.decode_steps += 1
        kmax = k + 1
        for r in self.running:
            if r.aborted or r.finished:
                continue
            if speculating:
                n = int(acc) + (1 if r.rng.random() < acc - int(acc) else 0)
                n = max(1, min(kmax, n))
                r.verify_steps += 1
                self._acc_steps += 1
                self.total_verify += 1
            else:
                n = 1
            n = self._emit(r, n)
            if speculating:
                self._acc_tokens += n
                self.total_accepted += n
        if self.decode_steps % self.cfg.decode_log_interval == 0:
            self._log_decode(batch)   # before the streams it ended can end: the step's line is in the log first
        await self._finish_done()

    def _logs_transitions(self) -> bool:
        """Whether this arm is what a dynamic-spec-disable server is (an adaptive arm with a
        threshold and no tiers): it logs transitions and notes drafting on its decode lines."""
        arm = self.cfg.arm
        return arm.arm == "adaptive" and arm.tiers is None and bool(arm.threshold)

    def _log_transition(self, batch: int, speculating: bool) -> None:
        """The line a dynamic-spec-disable server logs when drafting switches (never per step)."""
        if not self._logs_transitions() or speculating == self.drafting:
            return
        self.drafting = speculating
        self.log.info(transition_line(speculating, batch, self.cfg.arm.threshold or 0) + self._stamp(), rank=True)

    def _log_switch(self, steps: int) -> None:
        """The line a native adaptive server (0.5.14+) logs when its worker moves to another
        tier's step count (never per step)."""
        if self.native_steps is None or steps == self.native_steps:
            return
        self.log.info(STEP_SWITCH_LINE.format(old=self.native_steps, new=steps, old_tokens=self.native_steps + 1,
                                              new_tokens=steps + 1) + self._stamp())
        self.native_steps = steps

    def _emit(self, r: SimRequest, n: int) -> int:
        n = max(0, min(n, r.max_new_tokens - r.generated))
        r.generated += n
        r.sim_t = self.model_time
        r.marks.append(Mark(r.generated, r.sim_t, r.verify_steps))
        self._log_tokens += n
        self.output_tokens += n
        if r.generated >= r.max_new_tokens:
            r.finished = True
        r.event.set()
        return n

    async def _finish_done(self) -> None:
        done = [r for r in self.running if r.finished or r.aborted]
        if not done:
            return
        since = self.submitted_undeclared
        self.running = [r for r in self.running if not (r.finished or r.aborted)]
        for r in done:
            self._settle(r)
            if r.finished:
                self.completed += 1
                if not r.rid.startswith("warmup-"):
                    self.counted += 1
        # an open loop's requests are never refilled: their successors arrive at their offsets
        await self._await_refills(sum(1 for r in done if r.finished and r.loop is None and not r.open_loop), since)

    def _log_decode(self, batch: int) -> None:
        span = self.model_time - self._log_model_t0
        self.last_gen_throughput = self._log_tokens / span if span > 0 else 0.0
        self._log_tokens, self._log_model_t0 = 0, self.model_time
        acc = None
        if self.cfg.arm.arm != "baseline":
            acc = self._acc_tokens / self._acc_steps if self._acc_steps else 1.0
            self.last_accept_length = acc
            self._acc_tokens = self._acc_steps = 0
        steps, off = self._interval_steps
        self._interval_steps = [0, 0]
        note = decode_line_note(off, steps) if self._logs_transitions() else None
        used, usage = self.token_usage()
        self.log.info(decode_batch_line(batch, used, usage, acc, batch <= self.cfg.cuda_graph_max_bs,
                                        self.last_gen_throughput, len(self.waiting), note) + self._stamp(), rank=True)

    def _stamp(self) -> str:
        """The model clock a line was logged at (MODEL_STAMP): a phase run's switching lag is read
        from it, so it is the workload's, not the machine's."""
        return MODEL_STAMP.format(t=self.model_time)
