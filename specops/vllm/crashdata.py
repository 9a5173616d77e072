"""The lines vLLM's processes log when the engine core dies or fails to start, as vLLM 0.32.0's
source words them (`specops.vllm.crashlines` checks each against a tree; the unit tests check
them against the 0.32.0 tree). Each row: (message, `{}` where a value goes; the process that
logs it; its file under `vllm/`; the releases whose source has it)."""

MESSAGES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("Engine core initialization failed. See root cause above.", "api-server", "v1/engine/utils.py", ("0.32.0",)),
    ("Frontend process failed during engine core initialization.", "api-server", "v1/engine/utils.py",
     ("0.32.0",)),
    ("EngineCore failed to start.", "engine-core", "v1/engine/core.py", ("0.32.0",)),
    ("EngineCore encountered a fatal error.", "engine-core", "v1/engine/core.py", ("0.32.0",)),
    ("EngineCore encountered an issue. See stack trace (above) for the root cause.", "api-server",
     "v1/engine/exceptions.py", ("0.32.0",)),
    ("Engine core process {} died unexpectedly.", "api-server", "v1/utils.py", ("0.32.0",)),
    ("Worker proc {} died unexpectedly", "executor", "v1/executor/multiproc_executor.py", ("0.32.0",)),
    ("WorkerProc failed to start.", "worker", "v1/executor/multiproc_executor.py", ("0.32.0",)),
    ("WorkerProc initialization failed due to an exception in a background process. See stack trace for root "
     "cause.", "engine-core", "v1/executor/multiproc_executor.py", ("0.32.0",)),
)
