"""vLLM-shaped log output for the simulator's vLLM face: vLLM's record prefix (`(APIServer
pid=N) INFO 12-04 03:10:54 [file.py:line] msg`), and the failure blocks its processes print,
with the crash messages of `specops.vllm.crashdata`, so the readiness watch and `logs --errors`
are tested against text shaped like vLLM's."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TextIO

from specops.sglang.adaptive import DRAFTING_STATE_TEXTS
from specops.sim.logs import SimLog

#: the SGLang-shaped lines the shared scheduler writes, which a vLLM server does not
#: the scheduler's SGLang lines: its batches, the patch's transitions, the native start and switch lines
SGLANG_ONLY = ("Prefill batch", "Decode batch", *DRAFTING_STATE_TEXTS)


class VLLMLog(SimLog):
    """SimLog with vLLM's prefix; drops the scheduler's SGLang-only lines (vLLM logs its stats
    periodically instead: sim.vllm_server)."""

    def __init__(self, stream: TextIO | None = None, process: str = "APIServer"):
        super().__init__(stream)
        self.process = process

    def record(self, msg: str, where: str = "api_server.py:1", level: str = "INFO", process: str | None = None) -> None:
        ts = time.strftime("%m-%d %H:%M:%S")
        self.stream.write(f"({process or self.process} pid={os.getpid()}) {level} {ts} [{where}] {msg}\n")
        self.stream.flush()

    def block(self, text: str, process: str) -> None:
        """A multi-line block (a traceback) as vLLM's process-output prefixing writes it:
        `(EngineCore_DP0 pid=N) ` before every line."""
        for line in text.rstrip("\n").splitlines():
            self.stream.write(f"({process} pid={os.getpid()}) {line}\n")
        self.stream.flush()

    def info(self, msg: str, rank: bool = False) -> None:
        if msg.startswith(SGLANG_ONLY):
            return
        if msg.startswith("INFO:     "):  # uvicorn's own lines carry no vLLM prefix
            self.raw(msg)
            return
        self.record(msg, "core.py:1" if rank else "api_server.py:1", process="EngineCore_DP0" if rank else None)


def _frame(tree: Path, rel: str, line: int, func: str, code: str) -> str:
    return f'  File "{tree / "vllm" / rel}", line {line}, in {func}\n    {code}\n'


def engine_start_failure(log: VLLMLog, tree: Path, exc_line: str) -> None:
    """An engine core that dies while it starts: its traceback, then the API server's."""
    core = "EngineCore_DP0"
    log.record("EngineCore failed to start.", "core.py:1510", "ERROR", core)
    tb = ("Traceback (most recent call last):\n"
          + _frame(tree, "v1/engine/core.py", 1500, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)")
          + _frame(tree, "v1/engine/core.py", 120, "__init__", "self._initialize_kv_caches(vllm_config)")
          + exc_line + "\n")
    log.block(tb, core)
    log.raw("Traceback (most recent call last):\n"
            + _frame(tree, "entrypoints/openai/api_server.py", 80, "<module>", "uvloop.run(run_server(args))")
            + _frame(tree, "v1/engine/utils.py", 1431, "wait_for_engine_startup", "raise RuntimeError(")
            + "RuntimeError: Engine core initialization failed. See root cause above. "
              "Failed core proc(s): {'EngineCore_DP0': 1}")


def engine_dead(log: VLLMLog, tree: Path, exc_line: str) -> None:
    """An engine core that dies while serving: its fatal error, then the API server's EngineDeadError."""
    core = "EngineCore_DP0"
    log.record("EngineCore encountered a fatal error.", "core.py:2663", "ERROR", core)
    tb = ("Traceback (most recent call last):\n"
          + _frame(tree, "v1/engine/core.py", 2650, "run_busy_loop", "self._process_engine_step()")
          + _frame(tree, "v1/worker/gpu_model_runner.py", 3000, "execute_model", "model_output = self.model(")
          + exc_line + "\n")
    log.block(tb, core)
    log.record("AsyncLLM output_handler failed.", "async_llm.py:700", "ERROR")
    log.raw("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause.")
    sys.stdout.flush()
