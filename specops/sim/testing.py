"""Helpers to run the real simulator as a subprocess (tests, demos) and to load it.

`run_sim` starts `python -m specops.sim` in its own process group, waits until it is ready
(/health 200 and the ready line in its log) and kills the whole group on exit. `drive` is a
small closed-loop streaming client that reports throughput in *model* units, converting
the wall clock with the server's `sim_time_scale`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from specops.ports import local_ephemeral, safe_block
from specops.sglang.serving import READY_LINE
from specops.sim.closedloop import loop_header

if TYPE_CHECKING:
    import aiohttp


class SimStartError(RuntimeError):
    """The simulator exited or never became ready; carries its exit code and log text."""

    def __init__(self, message: str, returncode: int | None, log: str):
        super().__init__(f"{message} (exit code {returncode})\n--- log tail ---\n{log[-4000:]}")
        self.returncode = returncode
        self.log = log


@dataclass
class SimProcess:
    port: int
    url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get_json(self, path: str, timeout: float = 5.0) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
            body: dict[str, Any] = json.loads(resp.read())  # every simulator endpoint answers an object
            return body

    def server_info(self) -> dict[str, Any]:
        return self.get_json("/server_info")

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.process.wait(timeout=timeout)


_next_port: int | None = None


def _worker_range() -> tuple[int, int]:
    """This xdist worker's share of the safe block (specops.ports: outside this machine's
    ephemeral range, where every outgoing connection's source port and every bind(0) land,
    with each port's gRPC twin outside it too, and no port another's twin): two workers never
    pick the same port, and a port picked a moment ago is not picked again (walked in order)."""
    low, high = safe_block(local_ephemeral(), where="the tests' port picker")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    span = (high - low + 1) // max(count, 1)
    start = low + min(index, count - 1) * span
    return start, start + span - 1


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free right now (all sockets held until all are chosen):
    the one port picker for tests, benchmarks and the simulator's helpers (_worker_range says
    where they come from and why)."""
    global _next_port
    low, high = _worker_range()
    if _next_port is None or not low <= _next_port <= high:
        _next_port = low + (os.getpid() * 7919) % (high - low + 1)
    socks: list[socket.socket] = []
    try:
        for _ in range(high - low + 1):
            if len(socks) == n:
                break
            port, _next_port = _next_port, (low if _next_port >= high else _next_port + 1)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise OSError(f"no {n} free loopback ports in {low}-{high}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def health_status(url: str, timeout: float = 1.0) -> int | None:
    """HTTP status of /health, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as resp:
            status: int = resp.status  # urlopen's answer is untyped in the stubs
            return status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def start_sim(tree: str | Path, args: Sequence[str], port: int | None = None, log_path: str | Path | None = None,
              env: dict[str, str] | None = None, face: str = "sglang") -> SimProcess:
    """Launch the simulator detached in its own session, output to log_path; does not wait.
    `face`: `sglang` (an SGLang tree) or `vllm` (a vLLM tree, vLLM's flags)."""
    args = list(args)
    if "--port" in args:
        port = int(args[args.index("--port") + 1])
    else:
        port = port or free_port()
        args += ["--port", str(port)]
    if "--host" not in args:
        args += ["--host", "127.0.0.1"]
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="specops-sim-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    argv = [sys.executable, "-m", "specops.sim", f"--{face}-tree", str(tree), *args]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=full_env, start_new_session=True)
    return SimProcess(port=port, url=f"http://127.0.0.1:{port}", log_path=log_path, process=proc, argv=argv)


def wait_ready(sim: SimProcess, timeout: float = 30.0, ready_line: str = READY_LINE) -> None:
    """Ready = alive, /health 200 and the ready line logged; raises SimStartError otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = sim.process.poll()
        if rc is not None:
            raise SimStartError("simulator exited before it was ready", rc, sim.log_text())
        if health_status(sim.url) == 200 and ready_line in sim.log_text():
            return
        time.sleep(0.05)
    raise SimStartError(f"simulator not ready after {timeout:.0f}s", sim.process.poll(), sim.log_text())


def stop_sim(sim: SimProcess, grace: float = 5.0) -> None:
    """TERM the process group, then KILL what is left."""
    if sim.process.poll() is None:
        try:
            os.killpg(sim.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            sim.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(sim.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            sim.process.wait(timeout=grace)


@contextmanager
def run_sim(tree: str | Path, args: Sequence[str], port: int | None = None, log_path: str | Path | None = None,
            env: dict[str, str] | None = None, ready_timeout: float = 30.0, wait: bool = True,
            face: str = "sglang", ready_line: str = READY_LINE) -> Iterator[SimProcess]:
    """Start the simulator, wait for readiness (unless wait=False), always kill its group at exit."""
    sim = start_sim(tree, args, port=port, log_path=log_path, env=env, face=face)
    try:
        if wait:
            wait_ready(sim, ready_timeout, ready_line)
        yield sim
    finally:
        stop_sim(sim)


# ---------------------------------------------------------------------- load generator


async def _one(session: aiohttp.ClientSession, url: str, prompt: str, max_new_tokens: int,
               headers: dict[str, str] | None = None) -> tuple[int, float, float, float]:
    """(tokens, arrival, first token, last token) of one streamed request, on the model clock."""
    payload = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                                  "ignore_eos": True}, "stream": True}
    tokens, first, meta = 0, None, {}
    async with session.post(url + "/generate", json=payload, headers=headers) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            meta = json.loads(line[5:])["meta_info"]
            if first is None:
                first = meta["sim_t"]
            tokens = meta["completion_tokens"]
    return tokens, meta["sim_arrival_t"], first if first is not None else meta["sim_t"], meta["sim_t"]


async def drive(url: str, concurrency: int, num_requests: int, max_new_tokens: int = 64, input_words: int = 32) -> dict[str, float | None]:
    """Closed loop: `concurrency` streams at a time until `num_requests` are done.

    Every figure is read from the simulator's model clock (the stamps each chunk carries), so
    it does not depend on the machine's speed: output_throughput is tokens per model second.
    Each request's prompt differs (a word per index), as a benchmark's prompts do.
    """
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        left = num_requests
        results: list[tuple[int, float, float, float]] = []
        headers = loop_header(uuid.uuid4().hex, min(concurrency, num_requests), num_requests)

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                prompt = " ".join([f"word{left}"] + ["word"] * (input_words - 1))
                results.append(await _one(session, url, prompt, max_new_tokens, headers))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    tokens = sum(r[0] for r in results)
    duration = max(r[3] for r in results) - min(r[1] for r in results)
    ttfts = [r[2] - r[1] for r in results]
    return {
        "completed": len(results), "output_tokens": tokens, "wall_s": wall, "duration_s": duration,
        "output_throughput": tokens / duration if duration > 0 else None,
        "mean_ttft_ms": sum(ttfts) / len(ttfts) * 1000 if ttfts else None,
    }
