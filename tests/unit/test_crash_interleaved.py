"""A vLLM crash whose traceback has another process's log lines printed inside it: vLLM's
engine core (`EngineCore_DP0`) logs its traceback line by line while the API server
(`APIServer`) goes on logging its stats and SpecDecoding lines into the same file, so the
traceback's frames and exception line arrive with foreign lines between them. The reason is
still the engine core's exception, and the block shown is its traceback alone.

The lines' form is vLLM's logger's (`vllm/logger.py` _FORMAT with the process prefix vLLM's
multiprocessing adds, as in the crash logs users paste: vLLM issue 42363's `(APIServer pid=1)
INFO 07-29 06:36:31 [loggers.py:310] Engine 000: ...`, and `(EngineCore_DP0 pid=...) ERROR ...
[core.py:...] EngineCore encountered a fatal error.` / `Traceback (most recent call last):`
in the EngineDeadError reports, e.g. eugr/spark-vllm-docker issue 348)."""

from __future__ import annotations

from specops.servers.logwatch import crash_blocks, crash_excerpt, failure_reason
from tests.unit.test_vllm_log_forms import FORMS, STATS

_CORE = "(EngineCore_DP0 pid=2081) ERROR 07-29 06:36:35 [core.py:710] "
_API = "(APIServer pid=1) "
_EXC = "ValueError: could not broadcast input array from shape (4,) into shape (3,)"
LOG = "\n".join([
    STATS,
    _CORE + "EngineCore encountered a fatal error.",
    _CORE + "Traceback (most recent call last):",
    _CORE + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 701, in run_engine_core',
    STATS.replace("06:36:31", "06:36:35"),                    # the API server's stats line, inside the frames
    _CORE + "    engine_core.run_busy_loop()",
    _CORE + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 728, in run_busy_loop',
    FORMS[3][1],                                              # and its SpecDecoding line
    _CORE + "    self._process_engine_step()",
    _CORE + _EXC,
    _API + "ERROR 07-29 06:36:35 [async_llm.py:480] AsyncLLM output_handler failed.",
    _API + "ERROR 07-29 06:36:35 [async_llm.py:480] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
           "encountered an issue. See stack trace (above) for the root cause.",
]) + "\n"


def test_the_reason_is_the_engine_cores_exception() -> None:
    assert failure_reason(LOG) == _EXC


def test_the_block_shown_is_its_traceback_without_the_other_process_lines() -> None:
    tb = next(b for b in crash_blocks(LOG) if b.startswith("Traceback"))
    assert tb.splitlines()[-1] == _EXC and "run_busy_loop" in tb and "_process_engine_step" in tb
    assert "Avg prompt throughput" not in tb and "SpecDecoding" not in tb, tb
    assert _EXC in crash_excerpt(LOG)


def test_without_the_foreign_lines_the_same_block() -> None:
    alone = "\n".join(ln for ln in LOG.splitlines() if not ln.startswith(_API)) + "\n"
    tb = next(b for b in crash_blocks(LOG) if b.startswith("Traceback"))
    assert tb in crash_blocks(alone) and failure_reason(alone) == _EXC
