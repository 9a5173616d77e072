"""The readiness watch (servers.watch), the one local servers and Slurm jobs share: what it
sees in a long log. The watch is fed chunks as a poll would; no process, no host."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from specops.errors import StepError
from specops.servers import lifecycle, remote, slurm, supervisor, watch
from specops.servers.lifecycle import ServerState
from specops.servers.logwatch import failure_reason, read_new
from specops.sglang.serving import READY_LINE
from specops.transport.local import LocalTransport

KIB = 1024
#: one line of ordinary loading noise, 64 bytes
_NOISE = "[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: 9 \n"


def _state() -> ServerState:
    return ServerState(arm="baseline", kind="baseline", pid=1, pgid=1, proc_start="", port=1, command="",
                       argv=[], env={}, args_hash="", log_path="", state_path="", mechanism="",
                       started_at=0.0, workdir="")


def _noise(n_bytes: int) -> bytes:
    return (_NOISE * (n_bytes // len(_NOISE) + 1)).encode()[:n_bytes]


#: the watch each backend's readiness wait feeds (lifecycle: local servers, slurm: batch jobs)
WATCHES = {"local": lifecycle._Watch, "slurm": slurm._Watch}


def _long_log_watch(kind: str):
    """A watch that has read 600 KiB of log, in 64 KiB chunks, as a poll reads it."""
    w = WATCHES[kind](_state())
    for _ in range(600 // 64):
        w.feed(_noise(64 * KIB))
    w.feed(_noise(600 * KIB - w.offset))
    assert w.offset == 600 * KIB and not w.ready_line and w.signature is None
    return w


@pytest.mark.parametrize("kind", sorted(WATCHES))
def test_a_ready_line_early_in_a_chunk_is_seen_after_600_kib_of_log(kind: str) -> None:
    w = _long_log_watch(kind)
    w.feed(f"[t] {READY_LINE}\n".encode() + _noise(2 * KIB))
    assert w.ready_line


@pytest.mark.parametrize("kind", sorted(WATCHES))
def test_a_crash_line_early_in_a_chunk_is_seen_after_600_kib_of_log(kind: str) -> None:
    w = _long_log_watch(kind)
    w.feed(b"[t] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + _noise(2 * KIB))
    assert w.signature is not None and w.crash_at is not None


@pytest.mark.parametrize("kind", sorted(WATCHES))
def test_a_ready_line_split_across_two_chunks_is_seen(kind: str) -> None:
    w = _long_log_watch(kind)
    line = f"[t] {READY_LINE}\n".encode()
    w.feed(line[:20])
    w.feed(line[20:] + _noise(KIB))
    assert w.ready_line


@pytest.mark.parametrize("kind", sorted(WATCHES))
def test_the_kept_text_is_bounded_and_ends_with_the_newest_bytes(kind: str) -> None:
    w = _long_log_watch(kind)
    w.feed(b"the newest line\n")
    assert len(w.text) <= 512 * KIB and w.text.endswith("the newest line\n")


class _FileSource:
    """A Source over a real log file (read by offset through a LocalTransport, as both
    backends read theirs); `alive`/`health` are what a probe would have answered."""

    def __init__(self, transport: LocalTransport) -> None:
        self.transport, self.alive, self.health, self.polls = transport, True, "200", 0

    def poll(self, watches, max_bytes: int) -> None:
        self.polls += 1
        for w, c in zip(watches, read_new(self.transport, [(w.state.log_path, w.offset) for w in watches],
                                          max_bytes=max_bytes), strict=True):
            w.health = self.health
            w.feed(c.data)

    def gone(self, w) -> bool:
        return not self.alive

    def serving(self, w) -> bool:
        return True

    def fail(self, w, elapsed: float) -> StepError:
        return StepError(f"{'ended' if not self.alive else 'crashed'}: {failure_reason(w.text)}")

    def not_ready(self, w, timeout_s: float) -> StepError:
        return StepError("not ready")


def _log(tmp_path: Path, tail: bytes) -> ServerState:
    log = tmp_path / "baseline.log"
    log.write_bytes(_noise(600 * KIB) + tail)
    st = _state()
    st.log_path = str(log)
    return st


def test_the_wait_reads_a_long_log_in_chunks_and_sees_the_ready_line(tmp_path: Path) -> None:
    st = _log(tmp_path, f"[t] {READY_LINE}\n".encode() + _noise(2 * KIB))
    source = _FileSource(LocalTransport())
    got = watch.wait(LocalTransport(), source, [watch.ArmWatch(st)], 30, 0.05, max_bytes=64 * KIB)
    assert set(got) == {"baseline"} and source.polls >= 10  # 602 KiB in 64 KiB chunks


def test_the_wait_fails_an_ended_server_with_the_crash_its_drained_log_ends_with(tmp_path: Path) -> None:
    st = _log(tmp_path, b"[t] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + _noise(2 * KIB))
    source = _FileSource(LocalTransport())
    source.alive, source.health = False, "000"
    with pytest.raises(StepError) as err:
        watch.wait(LocalTransport(), source, [watch.ArmWatch(st)], 30, 0.05, max_bytes=64 * KIB)
    assert source.polls == 1  # the rest was drained, not polled
    assert err.value.message == "ended: [t] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_a_crash_line_fails_a_live_server_once_the_grace_has_passed(tmp_path: Path) -> None:
    st = _log(tmp_path, b"[t] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    source = _FileSource(LocalTransport())
    source.health = "000"
    w = watch.ArmWatch(st)
    with pytest.raises(StepError, match="^crashed: "):
        watch.wait(LocalTransport(), source, [w], 30, 0.05, max_bytes=64 * KIB)
    assert w.crash_at is not None and w.signature is not None


def test_health_waits_sglangs_budget_only_for_a_ready_arm_that_logged_no_crash() -> None:
    """Loading: a short ask (the poll repeats). Ready line logged: SGLang's health budget (its
    /health runs a generation). Ready line and then a crash line: short again, since a server
    whose scheduler died holds the request until its own budget ends, which would put the
    crash's failure a whole budget late."""
    w = watch.ArmWatch(_state())
    assert w.health_s() == remote.POLL_HEALTH_S
    w.feed(f"[t] {READY_LINE}\n".encode())
    assert w.health_s() == remote.HEALTH_PATIENCE_S > remote.POLL_HEALTH_S
    w.feed(b"[t] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert w.signature is not None and w.health_s() == remote.POLL_HEALTH_S


def test_both_backends_use_the_one_watch_and_neither_imports_the_other() -> None:
    """No second copy of the watch to drift, and no backend filled in by an import's side
    effect: lifecycle (the local supervisor) and slurm import nothing of each other;
    servers.supervisor imports both and chooses (tests/unit/test_import_graph.py keeps it so)."""
    assert issubclass(lifecycle._Watch, watch.ArmWatch) and issubclass(slurm._Watch, watch.ArmWatch)
    assert lifecycle._Watch.feed is slurm._Watch.feed is watch.ArmWatch.feed
    assert not hasattr(lifecycle, "JOBS")

    def imported(module) -> set[str]:
        tree = ast.parse(inspect.getsource(module))
        return {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names} | {
            n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}

    assert not any(m.startswith("specops.servers.slurm") for m in imported(lifecycle))
    assert not any(m.startswith("specops.servers.lifecycle") for m in imported(slurm))
    assert {"specops.servers.lifecycle", "specops.servers.slurm"} <= imported(supervisor)


#: vLLM 0.32.0 on this CPU while it compiles (tests/real_sglang/test_vllm_host.py): Python's
#: report of an exception raised in a `__del__`, after which the worker goes on and serves
_IGNORED = """(Worker pid=19363) INFO 12-04 09:28:05 [cpu_model_runner.py:87] Warming up model for the compilation...
Exception ignored in: <function CPUDNNLGEMMHandler.__del__ at 0x7fde037e7ec0>
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/vllm/_custom_ops.py", line 3728, in __del__
    self.dtor(self.handler_tensor.item())
              ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/_subclasses/fake_tensor.py", line 3162, in validate
    raise AssertionError(
AssertionError: Please convert all Tensors to FakeTensors first or instantiate FakeTensorMode with 'allow_non_fake_inputs'. Found in aten.item.default(tensor(93847672763904, size=()))
(EngineCore pid=17906) INFO 12-04 09:29:06 [shm_broadcast.py:871] No available shared memory broadcast block found in 60 seconds.
"""


def test_an_exception_python_ignored_is_not_a_crash() -> None:
    """`Exception ignored in: ...` and its traceback: the process reported it and went on."""
    w = watch.ArmWatch(_state())
    w.feed(_IGNORED.encode())
    assert w.signature is None and w.crash_at is None
    # a real crash after it is still one, and the reason is the real one
    crash = "(EngineCore pid=17906) RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2\n"
    w.feed(f"Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n{crash}".encode())
    assert w.signature is not None
    assert failure_reason(_IGNORED + "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                          + crash) == crash.split(") ", 1)[1].strip()
