"""SGLang-shaped log output and the tracebacks the simulator prints when it fails.

Log watchers (readiness, `specops logs --errors`) must be tested against text shaped like
SGLang's, so the prefix, the ready line, the Decode batch line and the failure blocks
follow what SGLang's own logger and scheduler print.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import TextIO

from specops.sglang.adaptive import ALL_OFF_NOTE
from specops.sglang.paths import EAGLE_WORKERS, LAUNCH_SERVER, PKG

#: what the simulator adds to its decode, transition and switch lines: the model clock (seconds)
#: the line was logged at (a decode line: its step's end; a transition: the step's start);
#: bench/switching.py reads it (MODEL_STAMP_RE) where a real server's lines have only wall time
MODEL_STAMP = "[model t={t:.6f}s]"
MODEL_STAMP_RE = re.compile(r"\[model t=(?P<t>[0-9.]+)s\]")


class SimLog:
    """Line-flushed writer with SGLang's `[YYYY-mm-dd HH:MM:SS TP0] ` prefix."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout

    def _prefix(self, rank: bool) -> str:
        ts = time.strftime("%Y-%m-%d %H:%M:%S")
        return f"[{ts} TP0] " if rank else f"[{ts}] "

    def info(self, msg: str, rank: bool = False) -> None:
        """One log record; multi-line messages keep the prefix on the first line only, like logging."""
        self.stream.write(self._prefix(rank) + msg + "\n")
        self.stream.flush()

    def raw(self, text: str) -> None:
        self.stream.write(text if text.endswith("\n") else text + "\n")
        self.stream.flush()


def decode_batch_line(running: int, tokens: int, usage: float, accept_len: float | None, cuda_graph: bool,
                      gen_throughput: float, queued: int, drafting_note: str | None = None) -> str:
    """The periodic scheduler line, field for field as SGLang's scheduler_metrics_mixin formats it;
    `drafting_note` (sglang.adaptive.decode_line_note) as a dynamic-spec-disable server writes it:
    ALL_OFF_NOTE in place of the accept figures, a mixed note after them."""
    msg = f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
    if drafting_note == ALL_OFF_NOTE:
        msg += drafting_note
    elif accept_len is not None:
        msg += f"accept len: {accept_len:.2f}, accept rate: {min(1.0, accept_len / 4):.2f}, " + (drafting_note or "")
    msg += f"cuda graph: {cuda_graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queued}, "
    return msg


def prefill_batch_line(new_seq: int, new_tokens: int, usage: float, running: int, queued: int) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: 0, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queued}, "
    )


# ------------------------------------------------------------------ failure text


def _def_line(tree: Path, rel: str, func: str, fallback: int) -> int:
    """Line of `def func` in the tree's file (so frames point at real code), else a fallback."""
    path = tree / PKG / rel
    try:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.match(rf"\s*def {re.escape(func)}\b", line):
                return i + 1
    except OSError:
        pass
    return fallback


def _frame(tree: Path, rel: str, func: str, code: str, fallback: int, offset: int = 0) -> str:
    path = tree / PKG / rel
    return f'  File "{path}", line {_def_line(tree, rel, func, fallback) + offset}, in {func}\n    {code}\n'


def scheduler_crash_traceback(tree: Path, speculative: bool, exc_line: str) -> str:
    """What `Scheduler hit an exception: ...` carries when a decode step dies on the GPU."""
    worker = "speculative/eagle_worker.py" if (tree / EAGLE_WORKERS[0]).exists() else "speculative/eagle_worker_v2.py"
    frames = [
        _frame(tree, "srt/managers/scheduler.py", "run_scheduler_process", "scheduler.run_event_loop()", 3600, 55),
        _frame(tree, "srt/managers/scheduler.py", "event_loop_overlap", "batch_result = self.run_batch(batch)", 1331, 20),
        _frame(tree, "srt/managers/scheduler.py", "run_batch", "batch_result = self.model_worker.forward_batch_generation(", 2636, 60),
    ]
    if speculative:
        frames.append(_frame(tree, "srt/" + worker, "forward_batch_generation", "self.verify(batch, spec_info)", 280, 30))
        frames.append(_frame(tree, "srt/" + worker, "verify", "logits_output, can_run_cuda_graph = self.target_worker.forward_batch_generation(", 600, 40))
    else:
        frames.append(_frame(tree, "srt/managers/tp_worker.py", "forward_batch_generation", "logits_output, can_run_cuda_graph = self.model_runner.forward(", 380, 30))
    frames.append(_frame(tree, "srt/model_executor/model_runner.py", "forward", "output = self._forward_raw(", 2000, 20))
    frames.append(_frame(tree, "srt/model_executor/cuda_graph_runner.py", "replay", "self.graphs[self.bs].replay()", 800, 25))
    return "Traceback (most recent call last):\n" + "".join(frames) + exc_line + "\n"


def init_failure_traceback(tree: Path, exc_line: str) -> str:
    """What a scheduler that fails while building its memory pool prints."""
    frames = [
        _frame(tree, "srt/managers/scheduler.py", "run_scheduler_process", "scheduler = Scheduler(", 3600, 40),
        _frame(tree, "srt/managers/scheduler.py", "__init__", "self.init_model_worker()", 288, 90),
        _frame(tree, "srt/managers/tp_worker.py", "__init__", "self.model_runner = ModelRunner(", 80, 60),
        _frame(tree, "srt/model_executor/model_runner.py", "__init__", "self.initialize(min_per_gpu_memory)", 250, 120),
        _frame(tree, "srt/model_executor/model_runner.py", "init_memory_pool", 'raise RuntimeError(', 1500, 60),
    ]
    return "Traceback (most recent call last):\n" + "".join(frames) + exc_line + "\n"


def launcher_failure_traceback(tree: Path, message: str) -> str:
    """The main process's traceback once a scheduler died during initialization."""
    lines = [
        "Traceback (most recent call last):\n",
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n',
        '  File "<frozen runpy>", line 88, in _run_code\n',
        f'  File "{tree / LAUNCH_SERVER}", line 32, in <module>\n    run_server(server_args)\n',
        _frame(tree, "srt/entrypoints/http_server.py", "launch_server", "tokenizer_manager, template_manager, scheduler_info, port_args = _launch_subprocesses(", 1800, 30),
        _frame(tree, "srt/entrypoints/engine.py", "_launch_subprocesses", "raise RuntimeError(", 700, 150),
    ]
    return "".join(lines) + f"RuntimeError: {message}\n"


def import_failure_traceback(tree: Path, exc_only: list[str]) -> str:
    """`python -m sglang.launch_server` dying at import of a module that does not compile."""
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{tree / LAUNCH_SERVER}", line 7, in <module>\n'
        "    from sglang.srt.server_args import prepare_server_args\n"
        + "".join(exc_only)
    )
