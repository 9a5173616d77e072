"""How the tier runs a real SGLang server on this CPU: its environment, its flags (as data a
test can hand to specops arms: `extra_args` list + `env` dict), and a direct launcher for
tests that start a server themselves (the runtime smoke test).

The flags are what the measured reproduction needed (see shared/REAL-SGLANG-ON-CPU.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from specops.servers.launch import LaunchPlan
from specops.sim.testing import health_status
from tests.support.real_sglang.runtime import HERE, real_root

STANDINS = HERE / "standins"
READY_LINE = "The server is fired up and ready to roll!"
DECODE_LINE = "Decode batch"
STANDIN_LINE = "[specops-standin]"
#: an arm's environment variable naming a file whose presence breaks its accept path (the
#: stand-in verify kernel: specops_cpu_spec_kernels.BREAK_ACCEPT_ENV)
BREAK_ACCEPT_ENV = "SPECOPS_STANDIN_BREAK_ACCEPT"


@contextlib.contextmanager
def accept_path_broken(flag: Path) -> Iterator[None]:
    """The arm whose BREAK_ACCEPT_ENV names `flag` commits a wrong token for its first accepted
    draft while the block runs (the stand-in verify kernel reads the flag each step)."""
    flag.touch()
    try:
        yield
    finally:
        flag.unlink(missing_ok=True)
#: how long a /health request may take: SGLang's `health_generate` sleeps a second before it
#: looks whether the scheduler answered (and gives up after its own 20 s), so a shorter client
#: timeout misses every answer but a lucky one
HEALTH_TIMEOUT_S = 30.0

#: flags specops' own launch does not emit (it emits model, host, port, max running requests,
#: CUDA-graph max bs, the EAGLE flags, --mem-fraction-static and, for a cpu arm, --device cpu)
COMMON_ARGS = [
    "--disable-cuda-graph", "--max-total-tokens", "2048", "--disable-overlap-schedule",
    "--sampling-backend", "pytorch", "--grammar-backend", "none", "--skip-server-warmup", "--dtype", "float32",
]
#: EAGLE refuses torch_native ("EAGLE is not supported in decode attention backend
#: torch_native") and mixed backends fail at verify, so EAGLE arms use Triton, run by its
#: interpreter (~1 s a token here). A plain arm may use either (greedy tokens measured
#: identical); torch_native decodes in milliseconds, the interpreted Triton in ~1.7 s a token.
ATTENTION = {"baseline": "torch_native", "eagle3": "triton", "adaptive": "triton"}
#: SGLang sizes a CPU arm's KV pool as the memory free after its load minus (1 - this) x the
#: memory free before it, and says "Not enough memory" below zero: other servers loading
#: meanwhile (the other xdist worker, runtimes building beside the suite on a fresh machine)
#: may take up to this share. `--max-total-tokens` caps what is allocated whatever it is (CI,
#: 2026-12-05: 0.05 failed a launch beside the other worker's)
MEM_FRACTION_STATIC = 0.3
#: EAGLE-3 arm settings (specops arm keys); topk 1 is what the CPU stand-ins are proven for
EAGLE3_SETTINGS = {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3}


def arm_extra_args(kind: str, attention: str | None = None) -> list[str]:
    """An arm's `extra_args` for this CPU (`attention` overrides the kind's backend)."""
    return ["--attention-backend", attention or ATTENTION[kind], *COMMON_ARGS]


def cpu_flags(kind: str, attention: str | None = None) -> list[str]:
    """The whole CPU flag set, for a server launched directly (specops adds `--device cpu`
    and `--sleep-on-idle` to an arm itself: an idle scheduler otherwise spins on a core)."""
    return ["--device", "cpu", "--sleep-on-idle", "--mem-fraction-static", f"{MEM_FRACTION_STATIC:g}",
            *arm_extra_args(kind, attention)]


#: a cap for every thread pool (2 cores, and two servers may run at once)
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false"}


def eagle3_flags(draft: Path | str) -> list[str]:
    s = EAGLE3_SETTINGS
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--speculative-num-steps", str(s["num_steps"]), "--speculative-eagle-topk", str(s["eagle_topk"]),
            "--speculative-num-draft-tokens", str(s["num_draft_tokens"])]


def arm_env(tree: Path | str | None = None) -> dict[str, str]:
    """What a real CPU server needs in its environment, on top of the machine's. The stand-ins
    come first on PYTHONPATH (their sitecustomize must be found before any other); `tree`,
    when given, is an SGLang repo-shaped tree whose `python/` is put after them."""
    path = [str(STANDINS)] + ([str(Path(tree) / "python")] if tree is not None else [])
    return {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1",
            "PYTHONPATH": os.pathsep.join(path), **THREAD_ENV,
            # byte-code of the tree cached outside it (the tree stays as unpacked; launches
            # after the first skip compiling SGLang's ~2,000 modules)
            "PYTHONPYCACHEPREFIX": str(real_root() / "pycache")}


def arm_profile(kind: str, model: Path | str, *, port: int, draft: Path | str | None = None,
                tree: Path | str | None = None, nccl_port: int | None = None) -> dict[str, object]:
    """One specops arm (hosts.yaml `vars.arms.<name>`) that runs on this CPU (`nccl_port`: see
    launch_argv)."""
    extra = arm_extra_args(kind) + (["--nccl-port", str(nccl_port)] if nccl_port is not None else [])
    arm: dict[str, object] = {"kind": kind, "model": str(model), "port": port, "device": "cpu",
                              "mem_fraction_static": MEM_FRACTION_STATIC, "extra_args": extra,
                              "env": arm_env(tree)}
    if kind != "baseline":
        if draft is None:
            raise ValueError(f"a {kind} arm needs a draft model")
        arm.update({"draft_model": str(draft), **EAGLE3_SETTINGS})
    return arm


def server_env(tree: Path | str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full environment of a directly launched server: `base` (default: this process's)
    without anything that would put another SGLang or sitecustomize first, plus arm_env."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")}
    return {**env, **arm_env(tree)}


def launch_argv(python: Path | str, model: Path | str, port: int, draft: Path | str | None = None,
                attention: str | None = None, nccl_port: int | None = None) -> list[str]:
    """`python -m sglang.launch_server` on this CPU: a plain server, or EAGLE-3 with `draft`.

    `nccl_port`: without --nccl-port SGLang's scheduler binds a port the OS picks for its
    torch.distributed store, and servers started together may take one another's HTTP port
    before it is bound. Give each server an HTTP and an nccl port from one `free_ports` call."""
    kind = "baseline" if draft is None else "eagle3"
    argv = [str(python), "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
            "--port", str(port), *cpu_flags(kind, attention)]
    if nccl_port is not None:
        argv += ["--nccl-port", str(nccl_port)]
    return argv + (eagle3_flags(draft) if draft is not None else [])


@dataclass
class Server:
    """A running server started by `serve`; its log is a file (SGLang's processes write it)."""

    proc: subprocess.Popen
    port: int
    log: Path
    started: float
    ready_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def poll_ready(self) -> bool:
        """Whether the ready line is in the log and this server answers /health on its port
        (noting when); raises with the log's tail if the server has exited."""
        if self.ready_s is not None:
            return True
        if READY_LINE in self.log_text() and health_status(self.url, HEALTH_TIMEOUT_S) == 200:
            self.ready_s = time.monotonic() - self.started
            return True
        if self.proc.poll() is not None:
            raise RuntimeError(f"server on port {self.port} exited ({self.proc.returncode}) before ready:\n"
                               + self.tail())
        return False

    def wait_ready(self, timeout: float) -> float:
        """Seconds from launch to the ready line (see wait_all)."""
        wait_all([self], timeout)
        assert self.ready_s is not None
        return self.ready_s

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM the server's process group (launch_server forks the scheduler and the
        detokenizer), then SIGKILL what is left."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # children the leader left behind, too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def wait_all(servers: list[Server], timeout: float) -> None:
    """Wait for every server's ready line, watching them all at once (so each one's ready_s
    is when it got ready, to half a second); raises for the first that exits or is late."""
    deadline = min(server.started for server in servers) + timeout
    while not all([server.poll_ready() for server in servers]):  # a list: poll every one each round
        if time.monotonic() > deadline:
            late = [server for server in servers if server.ready_s is None]
            raise TimeoutError(f"server on port {late[0].port} not ready after {timeout:.0f} s:\n" + late[0].tail())
        time.sleep(0.5)


def start(python: Path | str, tree: Path | str, model: Path | str, port: int, log: Path,
          draft: Path | str | None = None, extra_args: list[str] | None = None,
          extra_env: Mapping[str, str] | None = None, attention: str | None = None,
          nccl_port: int | None = None) -> Server:
    """Start a server in its own process group, its output to `log` (the tree is only read)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = launch_argv(python, model, port, draft, attention, nccl_port) + list(extra_args or [])
    with open(log, "w") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**server_env(tree), **(extra_env or {})}, cwd=str(log.parent), start_new_session=True)
    return Server(proc, port, log, time.monotonic())


def start_plan(plan: LaunchPlan, tree: Path | str) -> Server:
    """Start what specops' own `build_launch` planned (its argv, env and, for a native adaptive
    arm, its generated tier config, written where the argv names it) as `start` starts a
    server: own process group, output to the plan's log, this machine's environment under it."""
    log = Path(plan.log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    Path(plan.cwd).mkdir(parents=True, exist_ok=True)
    if plan.config_path and plan.config_json is not None:
        Path(plan.config_path).parent.mkdir(parents=True, exist_ok=True)
        Path(plan.config_path).write_text(plan.config_json)
    with open(log, "w") as out:
        out.write("$ " + " ".join(plan.argv) + "\n")
        out.flush()
        proc = subprocess.Popen(plan.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**server_env(tree), **plan.env}, cwd=plan.cwd, start_new_session=True)
    return Server(proc, plan.port, log, time.monotonic())


@contextlib.contextmanager
def serve(python: Path | str, tree: Path | str, model: Path | str, port: int, log: Path,
          draft: Path | str | None = None, extra_args: list[str] | None = None,
          extra_env: Mapping[str, str] | None = None, attention: str | None = None,
          nccl_port: int | None = None) -> Iterator[Server]:
    """`start`, then stop (process group) on the way out, whatever happened."""
    server = start(python, tree, model, port, log, draft, extra_args, extra_env, attention, nccl_port)
    try:
        yield server
    finally:
        server.stop()
