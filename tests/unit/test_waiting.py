"""The waits the tests use (tests/support/waiting.py) fail when their condition does not
come, and the negative check sees a signal that was sent, whatever the machine's speed."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.waiting import alive_after_signals, processes, wait_gone, wait_until


def test_wait_until_returns_the_value_and_fails_naming_what_it_waited_for() -> None:
    assert wait_until(lambda: [1], "a list") == [1]
    with pytest.raises(pytest.fail.Exception, match="timed out after 0.2 s waiting for the impossible"):
        wait_until(lambda: False, "the impossible", timeout=0.2)


def test_wait_until_fails_at_once_when_the_process_it_watches_ends() -> None:
    proc = subprocess.Popen(["sh", "-c", "echo said this; exit 3"], stdout=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception, match=r"(?s)ended \(rc 3\) before the never.*said this"):
        wait_until(lambda: False, "the never", timeout=600, proc=proc)


def test_wait_gone_names_the_survivors(tmp_path: Path) -> None:
    secs = "86399"  # a duration of our own: nothing else on this machine sleeps it
    proc = subprocess.Popen(["sleep", secs])
    try:
        wait_until(lambda: processes(f"^sleep {secs}$"), "the sleep running")
        with pytest.raises(pytest.fail.Exception, match=f"still running: .*{proc.pid} sleep {secs}"):
            wait_gone(f"^sleep {secs}$", "the sleep gone", timeout=0.2)
    finally:
        proc.kill()
        proc.wait()
    wait_gone(f"^sleep {secs}$", "the killed sleep gone")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_alive_after_signals_sees_a_signal_sent_just_before(sig: int) -> None:
    """The signal is sent and the check follows at once, with no wait between: a planted
    kill must read as a kill every time (20 tries), never as alive."""
    for _ in range(20):
        proc = subprocess.Popen(["sleep", "600"])
        try:
            proc.send_signal(sig)
            assert not alive_after_signals(proc)
            assert proc.returncode == -sig
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.wait()


def test_alive_after_signals_leaves_a_live_process_running() -> None:
    proc = subprocess.Popen(["sleep", "600"])
    try:
        assert alive_after_signals(proc) and proc.poll() is None
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T", "left stopped"
    finally:
        proc.kill()
        proc.wait()
