"""Waiting in tests: on a condition with a generous deadline, never on the clock (DESIGN.md,
Tests: a test does not depend on the machine's speed; CI's 2 cores may be loaded). A fixed
sleep stands for "by now it has happened", which a loaded machine breaks; a wait here polls
the condition itself and fails naming what it waited for. A negative check ("nothing
happened") waits for an event that proves the window closed, not for time to pass.
`tests/unit/test_no_fixed_sleeps.py` keeps `time.sleep` out of test bodies."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Callable

import pytest

from specops.transport.base import CommandResult
from specops.transport.local import LocalTransport

#: How often a condition is looked at: cheap enough for two busy cores, quick to notice.
POLL_S = 0.05


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60, proc: subprocess.Popen | None = None) -> Any:
    """Poll `condition` until it is truthy (and return it); fail naming `what` at the deadline
    or when `proc` ends first (with its output)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out = proc.communicate()[0] if proc.stdout is not None else ""
            pytest.fail(f"the process ended (rc {proc.returncode}) before {what}:\n{(out or '')[-3000:]}")
        time.sleep(POLL_S)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def processes(pattern: str) -> list[str]:
    """`pgrep -a -f PATTERN`: the processes on this machine whose command line matches, as
    "pid command" lines (pgrep never lists itself)."""
    out = subprocess.run(["pgrep", "-a", "-f", pattern], capture_output=True, text=True)
    return out.stdout.splitlines()


def wait_gone(pattern: str, what: str, timeout: float = 60) -> None:
    """Until no process matches `pattern` (a kill has landed); fail listing the survivors."""
    left: list[str] = []

    def gone() -> bool:
        left[:] = processes(pattern)
        return not left

    try:
        wait_until(gone, what, timeout)
    except pytest.fail.Exception:
        pytest.fail(f"timed out after {timeout} s waiting for {what}; still running: {left}")


def alive_after_signals(proc: subprocess.Popen) -> bool:
    """Whether `proc` (a child of this test) is alive once every signal already sent to it
    has landed, without waiting on the clock: the negative check "nothing signalled it".
    It is stopped and waited for: the kernel decides a fatal signal's outcome when it is
    sent (the process is dying, and a stop is dropped), so waitpid reports its end; a
    process no fatal signal reached reports stopped, and is continued."""
    os.kill(proc.pid, signal.SIGSTOP)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        os.kill(proc.pid, signal.SIGCONT)
        return True
    proc.returncode = os.waitstatus_to_exitcode(status)
    return False


class PollCountingTransport(LocalTransport):
    """The real local transport, counting the commands that have returned: a log follower
    (`specops.servers.logwatch.follow`) reads all its files in one command a poll, so the
    count says how many of its polls have read."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0

    def run(self, *args: Any, **kwargs: Any) -> CommandResult:
        result = super().run(*args, **kwargs)
        self.polls += 1
        return result

    def a_poll_since(self, what: str) -> None:
        """Until a poll that began after this call has read: the one under way may have
        read before what the test just wrote, the one after it cannot have."""
        start = self.polls
        wait_until(lambda: self.polls >= start + 2, what)
