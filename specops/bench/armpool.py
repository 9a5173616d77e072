"""The arms of one host's sweep: lease them (claim), bring their servers up (launch, or
reuse, or join a run sharing them), down (release, stop what this sweep is the last user
of), relaunch a crashed one once, and leave one another run took over alone.

One pool is shared by every thread of a sweep (side-by-side points, one thread per Slurm
arm), so its bookkeeping (states, launched, relaunched, leaders, taken over) sits behind
one lock. A transport is not shared between threads: each call takes the caller's own.
The lock is never held across a remote call (a Slurm arm's launch waits for its job)."""

from __future__ import annotations

import threading
from typing import Any, Callable

from specops.errors import SpecopsError
from specops.servers import LaunchPlan, ServerState, launch_arm, stop_states, wait_ready_many
from specops.servers.lease import LeaseBook, TakenOver, join
from specops.servers.lifecycle import LaunchOutcome
from specops.transport.base import Transport

Log = Callable[[str, dict[str, Any]], None]


class ArmPool:
    """The arms of one host (`host` as results name it: `H#2` on a Slurm host's second
    allocation). `leases`: this run's arm leases (servers.lease); None: no leasing (a
    sweep driven by hand). `log` receives the pool's events (lease, server, relaunch,
    taken_over) and the readiness watch's."""

    def __init__(self, host: str, plans: dict[str, LaunchPlan], *, leases: LeaseBook | None, run_id: str,
                 ready_timeout: float, keep_servers: bool, log: Log,
                 on_wait: Callable[[str], None] | None = None) -> None:
        self.host, self.plans, self.leases, self.run_id = host, plans, leases, run_id
        self.ready_timeout, self.keep_servers, self.log, self.on_wait = ready_timeout, keep_servers, log, on_wait
        self._lock = threading.Lock()
        #: per arm, the server it measures; the live dict (one item read or written at a time
        #: is atomic; the pool's own updates hold the lock)
        self.states: dict[str, ServerState] = {}
        #: the arms whose servers this sweep launched: the live set the run state reads for
        #: Ctrl-C cleanup (run.state.Run.sweep); changed only under the lock
        self.launched: set[str] = set()
        self._relaunched: set[str] = set()
        self._leaders: dict[str, bool] = {}  # per leased arm: this run starts its server (else joins one)
        self._taken_over: dict[str, str] = {}  # arm -> what ended it: another run took it over

    def replica(self, host: str, plans: dict[str, LaunchPlan]) -> "ArmPool":
        """The pool of allocation k of a `nodes: N` Slurm host: its own servers (states,
        launched, relaunched), the lock, leaders and taken-over arms shared with this one."""
        twin = ArmPool(host, plans, leases=self.leases, run_id=self.run_id, ready_timeout=self.ready_timeout,
                       keep_servers=self.keep_servers, log=self.log, on_wait=self.on_wait)
        twin._lock, twin._leaders, twin._taken_over = self._lock, self._leaders, self._taken_over
        return twin

    # ----- what the pool knows ---------------------------------------------------------

    def leased(self, arm: str) -> bool:
        """This run holds a lease of the arm (checked around each point)."""
        return self.leases is not None and self.leases.held(self.host, arm) is not None

    def taken(self, arm: str) -> bool:
        """Another run took the arm over: its points do not run."""
        with self._lock:
            return arm in self._taken_over

    def taken_over(self) -> dict[str, str]:
        """arm -> what ended it, for the step's outcome."""
        with self._lock:
            return dict(self._taken_over)

    def restarted(self, arm: str, state: ServerState) -> None:
        """The arm's server was restarted with the same arguments (by a run sharing it)."""
        with self._lock:
            self.states[arm] = state

    # ----- claim, up, down ---------------------------------------------------------------

    def claim(self, transport: Transport, arms: list[str]) -> None:
        """Lease every arm this sweep will use before anything starts: another run holding one
        with other arguments refuses this sweep at once (or it waits, or takes the arm over)."""
        if self.leases is None:
            return
        for arm in arms:
            plan = self.plans[arm]
            claim = self.leases.claim(transport, self.host, plan.workdir, arm, plan.args_hash, plan.argv,
                                      on_wait=self.on_wait)
            with self._lock:
                self._leaders[arm] = claim.lead
            self.log("lease", {"arm": arm, "lead": claim.lead, "shared_with": claim.shared_with})

    def _start(self, transport: Transport, arm: str, avoid: tuple[int, str] | None) -> LaunchOutcome:
        """Launch or reuse the arm's server; a run sharing the arm with an earlier run of the
        same arguments joins that run's server instead (never restarting it while it starts)."""
        plan = self.plans[arm]
        with self._lock:
            follower = not self._leaders.get(arm, True)
        if self.leased(arm) and follower:
            assert self.leases is not None
            state = join(self.leases, transport, self.host, arm, plan.args_hash,
                         timeout_s=self.ready_timeout, avoid=avoid)
            if state is not None:
                return LaunchOutcome(state, "shared")
            with self._lock:
                self._leaders[arm] = True  # nobody left to start it: this run does
        return launch_arm(transport, plan, reuse=True, launched_by=self.run_id, ephemeral=not self.keep_servers)

    def up(self, transport: Transport, arms: list[str], avoid: tuple[int, str] | None = None) -> None:
        """Start (or reuse, or join) each arm's server and wait until all are ready. A failed
        wait on a leased arm checks its lease first: a server killed by a take-over raises
        TakenOver, not a crash."""
        outcomes = []
        for arm in arms:
            outcome = self._start(transport, arm, avoid)
            with self._lock:
                self.states[arm] = outcome.state
                if outcome.action not in ("reused", "shared"):
                    self.launched.add(arm)
            self.log("server", {"arm": arm, "action": outcome.action, "pid": outcome.state.pid,
                                "mechanism": outcome.state.mechanism})
            outcomes.append(outcome)
        try:
            wait_ready_many(transport, [o.state for o in outcomes], timeout_s=self.ready_timeout,
                            poll_s=0.5, on_event=self.log)
        except SpecopsError:
            for arm in arms:  # a server killed by a take-over is not a crash: say what happened
                if self.leased(arm):
                    assert self.leases is not None
                    self.leases.check(transport, self.host, arm)
            raise

    def down(self, transport: Transport, arms: list[str]) -> None:
        """Release the arms' leases; stop the servers this sweep is the last user of and that
        it launched (or that a run it shared them with launched for a sweep)."""
        stop = []
        for arm in arms:
            others = self.leases.release(self.host, arm) if self.leases is not None else []
            with self._lock:
                launched = arm in self.launched
                self.launched.discard(arm)
                state = self.states.get(arm)
                if state is None or others or arm in self._taken_over or self.keep_servers:
                    continue
                if launched or (state.ephemeral and arm in self._leaders):
                    stop.append(state)
        if stop:
            stop_states(transport, stop)

    def stop_launched(self, transport: Transport) -> None:
        """At the sweep's end (or on its failure): down every arm it launched or leased."""
        with self._lock:
            launched, leaders = set(self.launched), list(self._leaders)
        self.down(transport, sorted(launched | {a for a in leaders if self.leased(a)}))

    # ----- relaunch, taken over ----------------------------------------------------------

    def relaunch(self, arm: str) -> tuple[int, str]:
        """Mark a crashed arm relaunched (once; a second crash ends the host's sweep) and
        return its dead server's (pid, start), which the relaunch must not count as up
        (a run sharing the arm may relaunch it first). The caller brings the arm up."""
        with self._lock:
            if arm in self._relaunched:
                raise SpecopsError(f"server '{arm}' crashed again after its relaunch; stopping this host's sweep",
                                   where=f"host {self.host}")
            self._relaunched.add(arm)
            dead = self.states[arm]
        self.log("relaunch", {"arm": arm})
        return dead.pid, dead.proc_start

    def end(self, arm: str, exc: TakenOver) -> None:
        """Another run took the arm over: its server is theirs now; this sweep leaves it alone."""
        with self._lock:
            self._taken_over[arm] = exc.message
            self.launched.discard(arm)
        if self.leases is not None:
            self.leases.release(self.host, arm)
        self.log("taken_over", {"arm": arm, "message": exc.message})
