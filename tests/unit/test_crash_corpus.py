"""The crash reader against real log text pasted in public issues (tests/data/sglang_logs),
and against what each supported SGLang release's own source says it logs: its death
messages (specops/sglang/crashdata.py, extracted again here from every cached tree), its
ready line and its `Decode batch` line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specops.bench.running import parse_decode_lines
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.render.logs import error_blocks
from specops.servers.lifecycle import ServerState, _fail, _Watch
from specops.servers.logwatch import (
    ATTACHED,
    DEATH,
    ECHO,
    SIGNATURES,
    crash_blocks,
    crash_excerpt,
    failure_reason,
    find_signature,
    sigkill_note,
)
from specops.sglang import crashlines
from specops.sglang.crashdata import MESSAGES
from specops.sglang.serving import READY_LINE
from specops.sglang.source import ensure_tree
from specops.transport.local import LocalTransport

#: one worker builds the module's fixtures once (two would each build them)
pytestmark = pytest.mark.xdist_group("crash_corpus")

CORPUS = Path(__file__).resolve().parents[1] / "data" / "sglang_logs"


def _body(name: str) -> str:
    """A corpus file's log text (its `# source:` / `# what:` header left out)."""
    text = (CORPUS / name).read_text()
    head, sep, body = text.partition("# ---\n")
    assert sep and "# source: https://" in head, f"{name} must name its source"
    return body


def _state(arm: str) -> ServerState:
    return ServerState(arm=arm, kind=arm, pid=1, pgid=1, proc_start="", port=30000, command="x", argv=["x"], env={},
                       args_hash="", log_path=f"/w/{arm}.log", state_path="/s", mechanism="none", started_at=0.0,
                       workdir="/w")


#: file -> the start of the line a failure must lead with
LEADS = {
    "scheduler_exception_cut_off.log": "[2025-04-17 16:15:33 TP0] Scheduler hit an exception",
    "fatal_python_error_aborted.log": "Fatal Python error: Aborted",
    "fatal_python_error_segfault.log": "Fatal Python error: Segmentation fault",
    "nccl_watchdog_illegal_memory_access.log": "[rank4]:[E219 10:36:52.051413081 ProcessGroupNCCL.cpp:1595]",
    "sigquit_before_scheduler_traceback.log": "[2026-05-01 15:16:15 TP2] Scheduler hit an exception",
    "rank0_scheduler_dead_exit_minus9.log": "[12-16 14:27:08] Rank 0 scheduler is dead.",
    "scheduler_died_during_initialization.log": "RuntimeError: Rank 0 scheduler died during initialization",
    "scheduler_valueerror_at_load.log": "ValueError: TP rank 1 could finish the model loading",
    "sigquit_gloo_then_scheduler.log": "[2025-04-21 04:13:43 TP3] Scheduler hit an exception",
    "torch_out_of_memory.log": "torch.OutOfMemoryError: CUDA out of memory.",
    "terminate_what_illegal_memory_access.log": "what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog",
}


def test_every_corpus_file_is_judged() -> None:
    crashes = {p.name for p in CORPUS.glob("*.log")} - {"old_release_ready_and_decode.log"}
    assert crashes == set(LEADS)


@pytest.mark.parametrize("name", sorted(LEADS))
def test_the_reader_finds_the_crash_and_leads_with_the_line_to_read(name: str) -> None:
    """On main, 9 of these 11 led with a stack frame (`File "...", line N`, `frame #0: ...`,
    `self.load_model()`) or found no crash at all (a segfault, an NCCL abort)."""
    text = _body(name)
    assert crash_blocks(text), "no crash found"
    reason = failure_reason(text)
    assert reason is not None and reason.startswith(LEADS[name]), reason
    assert not reason.startswith(("File ", "frame #")) and "line " not in reason.split(",")[0]
    # the excerpt a failure quotes holds the line it leads with
    assert LEADS[name] in crash_excerpt(text)


@pytest.mark.parametrize("name", sorted(LEADS))
def test_the_readiness_watch_sees_each_crash_and_its_failure_line_leads_with_it(name: str) -> None:
    text = _body(name)
    w = _Watch(_state("baseline"))
    w.feed(text.encode())
    assert w.signature is not None and w.crash_at is not None
    w.alive = False
    err = _fail(LocalTransport("gpu"), w, 3.0)
    first = err.message.splitlines()[0]
    assert first.startswith("server 'baseline' exited 3.0s after the readiness wait began (") and LEADS[name] in first


def test_a_sigkill_is_explained_unless_the_log_already_names_the_oom_killer() -> None:
    dead = _body("rank0_scheduler_dead_exit_minus9.log")  # "Exit code: -9", nothing more
    assert sigkill_note(dead) and "OOM killer" in sigkill_note(dead)  # type: ignore[operator]
    w = _Watch(_state("eagle3"), alive=False)
    w.feed(dead.encode())
    assert "dmesg -T | grep -i oom" in (_fail(LocalTransport("gpu"), w, 1.0).hint or "")
    assert sigkill_note(_body("scheduler_died_during_initialization.log")) is None  # SGLang says it itself
    assert sigkill_note(_body("scheduler_valueerror_at_load.log")) is None
    assert sigkill_note("loading shards\nKilled\n")


@pytest.mark.parametrize("name", ["fatal_python_error_segfault.log", "nccl_watchdog_illegal_memory_access.log",
                                  "terminate_what_illegal_memory_access.log", "sigquit_gloo_then_scheduler.log"])
def test_logs_errors_finds_on_the_host_what_the_whole_text_holds(tmp_path: Path, name: str) -> None:
    """`logs --errors` greps the host's log for the same signatures (an ERE built from them)."""
    log = tmp_path / "baseline.log"
    body = _body(name)
    log.write_text("".join(f"[t] Decode batch, #running-req: {i}, #token: 9, \n" for i in range(300)) + body)
    assert error_blocks(LocalTransport(), str(log)) == crash_blocks(body)


def test_a_faulthandler_dump_is_one_block_with_its_threads() -> None:
    (block,) = crash_blocks(_body("fatal_python_error_aborted.log"))
    assert block.startswith("Fatal Python error: Aborted")
    assert block.count("(most recent call first):") == 2 and block.endswith("in forward_thread_func")


def test_an_old_release_log_is_read_for_its_ready_and_decode_lines() -> None:
    text = _body("old_release_ready_and_decode.log")
    assert READY_LINE in text and crash_blocks(text) == []
    assert parse_decode_lines(text).running == [1.0, 1.0]


# ---------------------------------------------------------------- from the trees' own source


@pytest.fixture(scope="module")
def extracted() -> dict[str, list[crashlines.Message]]:
    return {v: crashlines.extract(LocalTreeFiles(ensure_tree(v))) for v in crashlines.RELEASES}


def test_the_committed_messages_are_what_the_trees_say(extracted) -> None:
    """crashdata.py is generated (`python -m specops.sglang.crashlines --write`); stale data fails here."""
    rows = crashlines.union(extracted.items())
    assert crashlines.render_module(rows, crashlines.RELEASES) == crashlines.DATA_MODULE.read_text()


@pytest.mark.parametrize("version", crashlines.RELEASES)
def test_each_release_logs_its_deaths_in_words_the_reader_knows(extracted, version: str) -> None:
    texts = {m.text for m in extracted[version]}
    processes = {m.process for m in extracted[version]}
    assert {"launcher", "scheduler", "tokenizer", "detokenizer"} <= processes
    assert {"Scheduler hit an exception:", "TokenizerManager hit an exception:",
            "DetokenizerManager hit an exception:", "Initialization failed. Please see the error messages above.",
            "Received sigquit from a child process. It usually means the child failed."} <= texts
    dead = [t for t in texts if t.startswith("Rank {} scheduler")]  # "is dead" to 0.5.9, "died during ..." after
    assert len(dead) == 1
    for m in extracted[version]:
        line = "[2026-01-01 00:00:00 TP0] " + m.text.replace("{}", "0") + " Traceback (most recent call last):"
        assert find_signature(line) is not None, m.text


def test_the_readers_rank_sglangs_words() -> None:
    ranks = {s.text: s.rank for s in SIGNATURES}
    assert ranks["Scheduler hit an exception"] == DEATH
    assert ranks["Received sigquit from a child process. It usually means the child failed."] == ECHO
    assert ranks["Initialization failed. Please see the error messages above."] == ECHO
    assert {t for t, *_ in MESSAGES} >= {"Exit code:", "Subprocess {} (pid={}) crashed with exit code {}. "
                                                        "Triggering SIGQUIT for cleanup..."}


def test_the_cause_beats_the_launchers_echo_of_it() -> None:
    """A complete 0.5.23-shaped start failure: the scheduler's traceback, the launcher's sigquit
    line, then its own traceback ending "Initialization failed. Please see the error messages above."."""
    text = ("[2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/t/python/sglang/srt/managers/scheduler.py", line 6300, in run_scheduler_process\n'
            "    scheduler = Scheduler(server_args, port_args)\n"
            "ValueError: think_end_token '</think>' must encode to exactly one token\n"
            "[2026-01-01 10:00:00] Received sigquit from a child process. It usually means the child failed.\n"
            "Traceback (most recent call last):\n"
            '  File "/t/python/sglang/srt/entrypoints/engine.py", line 2031, in _wait_for_scheduler_ready\n'
            '    raise RuntimeError(\n'
            "RuntimeError: Initialization failed. Please see the error messages above.\n")
    assert failure_reason(text) == "ValueError: think_end_token '</think>' must encode to exactly one token"
    blocks = crash_blocks(text)
    assert len(blocks) == 2 and blocks[0].endswith("It usually means the child failed.")
    assert ATTACHED > DEATH


def _ready_literals(files: LocalTreeFiles) -> set[str]:
    data = files.read("python/sglang/srt/entrypoints/http_server.py")
    assert data is not None
    return {n.value for n in ast.walk(ast.parse(data)) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and "fired up" in n.value}


@pytest.mark.parametrize("version", crashlines.RELEASES)
def test_every_release_logs_the_ready_line_word_for_word(version: str) -> None:
    assert _ready_literals(LocalTreeFiles(ensure_tree(version))) == {READY_LINE}


def _decode_formats(tree: Path) -> list[list[ast.JoinedStr]]:
    """Per function that builds SGLang's `Decode batch` line: its f-strings in order (the
    `msg = f"Decode batch..."` and the `msg += f"accept len: ..."` that follow)."""
    found = []
    for path in (tree / "python/sglang/srt").rglob("*.py"):
        source = path.read_text(errors="replace")
        if "Decode batch" not in source:
            continue
        for fn in ast.walk(ast.parse(source)):
            if not isinstance(fn, ast.FunctionDef):
                continue
            parts = [n for n in ast.walk(fn) if isinstance(n, ast.JoinedStr)
                     and any(isinstance(v, ast.Constant) and ("Decode batch" in v.value or "accept len" in v.value)
                             for v in n.values)]
            if any("Decode batch" in ast.unparse(p) for p in parts):
                found.append(sorted(parts, key=lambda n: n.lineno))
    return found


def _render(node: ast.JoinedStr, iter_msg: str) -> str:
    out = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            out.append(str(v.value))
            continue
        assert isinstance(v, ast.FormattedValue)
        name = ast.unparse(v.value)
        out.append("7" if "running" in name else iter_msg if "iter" in name else
                   "#token: 1000, token usage: 0.05, " if "token" in name else
                   "2.31" if "accept_length" in name else "0.58" if "rate" in name else "1")
    return "".join(out)


@pytest.mark.parametrize("version", crashlines.RELEASES)
def test_the_decode_line_reader_reads_every_format_a_release_prints(version: str) -> None:
    formats = _decode_formats(ensure_tree(version))
    assert formats, "no Decode batch line in the tree"
    for parts in formats:
        for iter_msg in ("", " [4242]"):  # LOG_FORWARD_ITERS off and on
            line = "[2026-01-01 10:00:00 TP0] " + "".join(_render(p, iter_msg) for p in parts)
            figs = parse_decode_lines(line)
            assert figs.running == [7.0], line
            assert figs.accept == ([2.31] if "accept len" in line else []), line
