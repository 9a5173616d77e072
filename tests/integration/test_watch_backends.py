"""Both supervisors' Sources (servers.lifecycle: a local process; servers.slurm: a batch job
on the real single-node cluster of tests/support/slurm.py) fed the same long logs through
the one readiness watch (servers.watch): a ready line, and separately a crash signature,
600 KiB into the log and split across two of the poll's 64 KiB chunks. Each backend gets
the same answer. The "server" is a real HTTP server whose /health answers 200 (a file)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from specops.errors import StepError
from specops.servers import lifecycle, slurm, watch
from specops.servers.records import ServerState
from specops.sglang.serving import READY_LINE
from specops.sim.testing import free_ports
from specops.transport.local import LocalTransport
from tests.support.slurm import SlurmCluster

pytestmark = pytest.mark.slow

KIB = 1024
CHUNK = 64 * KIB
#: loading noise, 64 bytes a line
_NOISE = "[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: 9 \n"
CRASH = "[t] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _noise(n_bytes: int) -> bytes:
    return (_NOISE * (n_bytes // len(_NOISE) + 1)).encode()[:n_bytes]


def _log(path: Path, line: str) -> None:
    """600 KiB of noise, then `line` starting 20 bytes before the 640 KiB chunk boundary."""
    path.write_bytes(_noise(10 * CHUNK - 20) + f"{line}\n".encode() + _noise(2 * KIB))


def _state(tmp_path: Path, port: int, log: Path) -> ServerState:
    return ServerState(arm="baseline", kind="baseline", pid=-1, pgid=-1, proc_start="", port=port, command="serve",
                       argv=[], env={}, args_hash="", log_path=str(log), state_path=str(tmp_path / "baseline.json"),
                       mechanism="none", started_at=time.time(), workdir=str(tmp_path))


@pytest.fixture
def web(tmp_path: Path) -> Path:
    d = tmp_path / "www"
    d.mkdir()
    (d / "health").write_text("ok\n")
    return d


Backend = Callable[[ServerState], tuple[Any, watch.ArmWatch]]


@pytest.fixture(params=["local", "slurm"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, web: Path) -> Iterator[tuple[Backend, int]]:
    """(a function giving the backend's Source and watch for a state, the server's port):
    a local process, or the same server as a Slurm job (its state records the job)."""
    port = free_ports(1)[0]
    transport = LocalTransport()
    serve = [sys.executable, "-m", "http.server", str(port), "--directory", str(web)]
    if request.param == "local":
        proc = subprocess.Popen(serve + ["--bind", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def local(st: ServerState) -> tuple[Any, watch.ArmWatch]:
            st.pid = st.pgid = proc.pid
            return lifecycle._Processes(transport), lifecycle._Watch(st)

        try:
            yield local, port
        finally:
            proc.kill()
            proc.wait(10)
        return
    cluster: SlurmCluster = request.getfixturevalue("slurm_clean")
    job = cluster.run("sbatch", "--parsable", "--output=/dev/null", f"--chdir={tmp_path}",
                      "--wrap", " ".join(serve + ["--bind", "0.0.0.0"])).stdout.strip().split(";")[0]

    def jobs(st: ServerState) -> tuple[Any, watch.ArmWatch]:
        st.slurm = {"job_id": job, "node": "", "gpus": [], "conf": str(cluster.conf), "state": "PENDING"}
        return slurm._Jobs(transport, lambda _k, _d: None), slurm._Watch(st)

    yield jobs, port


def test_a_ready_line_across_a_chunk_boundary_after_600_kib_is_seen_by_both(tmp_path: Path, backend) -> None:
    make, port = backend
    log = tmp_path / "baseline.log"
    _log(log, f"[t] {READY_LINE}")
    source, w = make(_state(tmp_path, port, log))
    got = watch.wait(LocalTransport(), source, [w], 60, 0.05, max_bytes=CHUNK)
    assert set(got) == {"baseline"}
    assert w.ready_line and w.signature is None and w.offset == log.stat().st_size


def test_a_crash_line_across_a_chunk_boundary_after_600_kib_fails_both(tmp_path: Path, backend) -> None:
    make, port = backend
    log = tmp_path / "baseline.log"
    _log(log, CRASH)
    source, w = make(_state(tmp_path, port, log))
    with pytest.raises(StepError) as err:
        watch.wait(LocalTransport(), source, [w], 60, 0.05, max_bytes=CHUNK)
    assert w.signature is not None and not w.ready_line and w.offset == log.stat().st_size
    assert "logged a crash" in err.value.message and "torch.OutOfMemoryError" in err.value.message
