"""The state of one run while it runs: its journal, the arms it launched on each host, the
sweeps under way, the progress callback, and the cleanup Ctrl-C needs.

One `Run` per Engine, reachable from every StepContext; nothing here is module-global,
so two runs in one process (`specops demo`, a notebook, CliRunner tests) never see each
other's servers. The one exception is the redaction registry (`specops.secrets`): it is
process-wide on purpose, since output with no run at hand must be masked too, and
sharing it only ever masks more (its comment says why).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from specops.records.schema import ResultRecord
from specops.run.events import InterruptCleanup
from specops.run.journal import Journal
from specops.servers import stop_arms
from specops.servers.lease import LeaseBook
from specops.transport.base import Transport

#: Called once per written benchmark point (the record as written to results.jsonl).
PointCallback = Callable[[ResultRecord], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, after the run stopped what it launched and closed its connections; the CLI
    turns it into exit code 130 (it has already said what it did)."""


@dataclass
class Cleanup:
    """What Ctrl-C did on one host, for the lines the CLI prints."""

    host: str
    arms: list[str]
    action: str  # "stopped", "kept" or "failed"
    error: str = ""

    def line(self) -> str:
        arms = ", ".join(self.arms)
        if self.action == "kept":
            return f"{self.host}: leaving {arms} running (--keep-servers)"
        if self.action == "failed":
            return f"{self.host}: could not stop {arms}: {self.error}"
        return f"{self.host}: stopped {arms}"


class Run:
    """One run's live state. Thread-safe: host threads record into it concurrently."""

    def __init__(self, run_dir: Path, *, on_point: PointCallback | None = None, leases: LeaseBook | None = None):
        self.run_dir = run_dir
        self.on_point: PointCallback = on_point or (lambda _rec: None)
        #: the arms this run leases on each host (servers.lease), released when the run ends
        self.leases = leases or LeaseBook(run_dir.name)
        self.journal: Journal | None = None
        #: set on Ctrl-C: from then on the interrupt's cleanup (and --keep-servers) decides
        #: what keeps running, not a step failing because its command was ended
        self.interrupted = threading.Event()
        self._lock = threading.Lock()
        self._launched: dict[str, set[str]] = {}
        #: per host, the live `launched` sets of sweeps under way (a sweep stops its own arms
        #: when it ends; while it runs, Ctrl-C must know about them)
        self._sweeps: dict[str, list[set[str]]] = {}

    def launched(self, host: str, arms: list[str] | set[str]) -> None:
        """Record arms this run started on `host` (not the ones it reused)."""
        with self._lock:
            self._launched.setdefault(host, set()).update(arms)

    @contextmanager
    def sweep(self, host: str, launched: set[str]) -> Iterator[None]:
        """While the block runs, the arms in `launched` (a set the sweep keeps current)
        count as this run's on `host`."""
        with self._lock:
            self._sweeps.setdefault(host, []).append(launched)
        try:
            yield
        finally:
            with self._lock:
                self._sweeps[host].remove(launched)

    def arms(self, host: str) -> list[str]:
        """The arms this run launched on `host` that may still be running."""
        with self._lock:
            found = set(self._launched.get(host, set()))
            for live in self._sweeps.get(host, []):
                found |= live
        return sorted(found)

    def _still_used(self, host: str, arm: str) -> bool:
        """Release this run's lease of the arm; whether another live run still holds one."""
        try:
            return bool(self.leases.release(host, arm))
        except Exception:  # noqa: BLE001 - the host may be unreachable after Ctrl-C: stop as before
            return False

    def stop_launched(self, transports: Mapping[str, Transport], workdirs: Mapping[str, str], *,
                      keep: bool = False) -> list[Cleanup]:
        """Stop (or, with `keep`, leave) what this run launched, host by host; a failure on one
        host is reported and the next host still cleaned up."""
        self.interrupted.set()
        done = []
        for host, transport in transports.items():
            arms = self.arms(host)
            # an arm another run still uses (identical arguments) stays up: that run stops it when done
            arms = [a for a in arms if not self._still_used(host, a)]
            if not arms:
                continue
            if keep:
                done.append(Cleanup(host, arms, "kept"))
                continue
            try:
                stop_arms(transport, transport.expand(workdirs[host]), arms)
            except Exception as exc:  # noqa: BLE001 - report and go on to the next host
                done.append(Cleanup(host, arms, "failed", str(exc)))
                continue
            with self._lock:
                self._launched.pop(host, None)
            done.append(Cleanup(host, arms, "stopped"))
        if self.journal is not None:
            for c in done:
                self.journal.emit(InterruptCleanup(host=c.host, arms=c.arms, action=c.action, error=c.error))
        return done
