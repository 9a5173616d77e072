"""Crash blocks, tails by offset, follow, and `specops logs` rendering, on real files."""

from __future__ import annotations

import threading
from pathlib import Path

from rich.console import Console

from specops.render.logs import LogSource, error_blocks, show
from specops.servers.lifecycle import ServerState, _loading_line, _Watch
from specops.servers.logwatch import (
    crash_blocks,
    crash_excerpt,
    failure_reason,
    find_signature,
    follow,
    tail_lines,
)
from specops.transport.local import LocalTransport
from tests.support.waiting import PollCountingTransport, wait_until

SYNTAX_TB = """[2025-01-01 10:00:00] server_args=ServerArgs(...)
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/x/python/sglang/launch_server.py", line 7, in <module>
    from sglang.srt.server_args import prepare_server_args
  File "/x/python/sglang/srt/server_args.py", line 1201
    parser.add_argument(
                       ^
SyntaxError: '(' was never closed
"""

SCHED_TB = """[2025-01-01 10:00:01 TP0] Decode batch, #running-req: 4, #token: 100, gen throughput (token/s): 300.0
[2025-01-01 10:00:02 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/scheduler.py", line 10, in event_loop
    self.run_batch()
  File "/x/scheduler.py", line 20, in run_batch
    raise ValueError("boom")
ValueError: boom

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/scheduler.py", line 30, in handler
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB
[2025-01-01 10:00:03] Received sigquit from a child process. It usually means the child failed.
"""


class CountingTransport(LocalTransport):
    """The real local transport, counting the bytes each read pulls."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes_read = 0

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        data = super().read_range(path, offset, length)
        self.bytes_read += len(data)
        return data


def test_crash_blocks_quote_whole_tracebacks_not_one_line() -> None:
    (block,) = crash_blocks(SYNTAX_TB)
    assert block.startswith("Traceback (most recent call last):")
    assert "server_args.py\", line 1201" in block and "parser.add_argument(" in block
    assert block.endswith("SyntaxError: '(' was never closed")

    blocks = crash_blocks(SCHED_TB)
    assert len(blocks) == 1  # the chained traceback is one block
    assert "Scheduler hit an exception" in blocks[0]
    assert "ValueError: boom" in blocks[0]
    # the launcher's "Received sigquit" right after the traceback is part of the same story
    *_, exc, echo = blocks[0].splitlines()
    assert exc == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert echo.endswith("Received sigquit from a child process. It usually means the child failed.")


def test_signature_lines_outside_tracebacks_and_clean_logs() -> None:
    text = ("usage: launch_server.py [-h] [--model-path MODEL_PATH]\n"
            "launch_server.py: error: unrecognized arguments: --speculative-disable-batch-threshold 8\n")
    assert crash_blocks(text) == [text.splitlines()[1]]
    assert find_signature("ERROR: [Errno 98] error while attempting to bind: address already in use") \
        == "Address already in use"
    clean = "[x] Decode batch, #running-req: 1\n[x] The server is fired up and ready to roll!\n"
    assert crash_blocks(clean) == []
    assert crash_excerpt(clean).endswith("ready to roll!")


ARGPARSE = """usage: sglang serve [-h] --model-path MODEL_PATH [--host HOST] [--port PORT]
                    [--cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE]
sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill
"""


def test_failure_reason_is_the_argparse_error_line_or_the_exception_line() -> None:
    """The defect: an argparse rejection gave a failure line with no reason at all."""
    assert failure_reason(ARGPARSE) == ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
                                        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    assert failure_reason(SYNTAX_TB) == "SyntaxError: '(' was never closed"
    assert failure_reason(SCHED_TB) == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert failure_reason("loading weights\nKilled\n\n") == "Killed"
    assert failure_reason("") is None


def test_tail_lines_reads_from_the_end_only(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with log.open("w") as fh:
        for i in range(200_000):
            fh.write(f"line {i} " + "x" * 40 + "\n")
    size = log.stat().st_size
    t = CountingTransport()
    last = tail_lines(t, str(log), 5, chunk=4096)
    assert [ln.split()[1] for ln in last] == ["199995", "199996", "199997", "199998", "199999"]
    assert t.bytes_read <= 4096 and size > 9_000_000
    # More lines than one chunk holds, and a file without a final newline.
    with log.open("a") as fh:
        fh.write("partial")
    last = tail_lines(t, str(log), 300, chunk=1000)
    assert len(last) == 300 and last[-1] == "partial" and last[0].startswith("line 199701 ")


def test_follow_sees_appends_truncation_and_rotation(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("old 1\nold 2\n")
    seen: list[str] = []
    stop = threading.Event()
    transport = PollCountingTransport()
    th = threading.Thread(target=follow, args=(transport, [str(log)], lambda p, ls: seen.extend(ls), stop, 0.05))
    th.start()
    try:
        # its first poll takes the file's size: what is appended after that is new
        wait_until(lambda: transport.polls >= 1, "the follower's first poll")
        with log.open("a") as fh:
            fh.write("new 1\nnew ")
            fh.flush()
            transport.a_poll_since("a poll that read the unfinished line")
            fh.write("2\n")
        wait_until(lambda: "new 2" in seen, "the finished line")
        log.write_text("after truncate\n")  # shrinks: read again from the start
        wait_until(lambda: "after truncate" in seen, "the truncated file's line")
        log.rename(tmp_path / "a.log.1")  # rotated: a new file at the same path
        (tmp_path / "a.log").write_text("fresh file line that is long enough to pass the old offset\n")
        wait_until(lambda: any(s.startswith("fresh file") for s in seen), "the rotated file's line")
    finally:
        stop.set()
        th.join(60)
    assert "old 1" not in seen and "new" not in seen  # only whole lines appended after start
    assert seen[:2] == ["new 1", "new 2"]


def test_show_prefixes_highlights_and_does_not_interpret_markup(tmp_path: Path) -> None:
    a, b = tmp_path / "baseline.log", tmp_path / "eagle3.log"
    a.write_text("ok [bold]not markup[/] here\nlast a\n")
    b.write_text("boot\n" + SYNTAX_TB)
    t = LocalTransport()
    console = Console(record=True, width=200, force_terminal=True, color_system="truecolor")
    show([LogSource(t, str(a), "baseline"), LogSource(t, str(b), "eagle3")], lines=3, console=console)
    plain = console.export_text(clear=False)
    assert "baseline | ok [bold]not markup[/] here" in plain
    assert "eagle3 | SyntaxError: '(' was never closed" in plain
    assert "boot" not in plain  # only the last 3 lines
    html = console.export_html(inline_styles=True)
    red_line = next(ln for ln in html.splitlines() if "SyntaxError" in ln)
    assert "color: #800000" in red_line or "color: #ff0000" in red_line or "#cd0000" in red_line

    one = Console(record=True, width=200)
    show([LogSource(t, str(a), "baseline")], lines=1, console=one)
    assert one.export_text().strip() == "last a"  # no prefix for a single server


def test_errors_only_shows_the_crash_blocks(tmp_path: Path) -> None:
    log = tmp_path / "adaptive.log"
    log.write_text("".join(f"[t] Decode batch, #running-req: {i}\n" for i in range(5000)) + SCHED_TB + "tail\n")
    t = LocalTransport()
    blocks = error_blocks(t, str(log))
    assert len(blocks) == 1 and blocks[0].endswith("It usually means the child failed.")
    assert blocks == crash_blocks(log.read_text())  # grep + windows find what the whole text holds
    console = Console(record=True, width=200)
    show([LogSource(t, str(log), "adaptive")], lines=50, errors_only=True, console=console)
    out = console.export_text()
    assert "Decode batch" not in out and "ValueError: boom" in out and "tail" not in out


def test_sources_for_lists_arm_logs_and_follow_prefixes(tmp_path: Path) -> None:
    from specops.render.logs import sources_for

    logs = tmp_path / "wd" / ".specops" / "logs"
    logs.mkdir(parents=True)
    (logs / "baseline.log").write_text("b0\n")
    (logs / "eagle3.log").write_text("e0\n")
    (logs / "eagle3.log.1").write_text("rotated\n")
    t = LocalTransport()
    srcs = sources_for(t, str(tmp_path / "wd"))
    assert [s.label for s in srcs] == ["baseline", "eagle3"]
    console = Console(record=True, width=200)
    stop = threading.Event()
    th = threading.Thread(target=show, args=(srcs,), kwargs=dict(lines=1, follow=True, console=console,
                                                                 stop_event=stop, interval=0.05))
    th.start()
    try:
        # following starts where the printed tails ended: append once both are printed
        wait_until(lambda: "eagle3 | e0" in console.export_text(clear=False), "both tails printed")
        with (logs / "eagle3.log").open("a") as fh:
            fh.write("e1 appended\n")
        wait_until(lambda: "e1 appended" in console.export_text(clear=False), "the appended line")
    finally:
        stop.set()
        th.join(60)
    out = console.export_text()
    assert "baseline | b0" in out and "eagle3 | e0" in out and "eagle3 | e1 appended" in out


def test_follow_from_where_the_tail_ended_loses_no_line(tmp_path: Path) -> None:
    """`logs -f` prints a tail, then follows. Lines written between the two (a busy server,
    a slow start on a loaded host) must appear: following starts where the tail ended, not
    at whatever the end is by the time the follower runs (that lost them, under load)."""
    log = tmp_path / "arm.log"
    log.write_text("old line\n")
    t = LocalTransport("local", home=str(tmp_path))
    printed_to = log.stat().st_size
    assert tail_lines(t, str(log), 5, end=printed_to) == ["old line"]
    with open(log, "a") as fh:  # written after the tail, before the follower's first read
        fh.write("in between\n")
    seen: list[str] = []
    stop = threading.Event()

    def on_lines(path: str, lines: list[str]) -> None:
        seen.extend(lines)
        if "after start" in lines:
            stop.set()

    worker = threading.Thread(target=follow, args=(t, [str(log)], on_lines, stop, 0.05),
                              kwargs={"start_at": {str(log): printed_to}}, daemon=True)
    worker.start()
    wait_until(lambda: "in between" in seen, "the follower's first read")
    with open(log, "a") as fh:
        fh.write("after start\n")
    worker.join(60)
    stop.set()
    assert seen == ["in between", "after start"]


def test_the_live_line_shows_each_loading_arm_and_its_last_log_line(tmp_path: Path) -> None:
    def watch(arm: str, text: str) -> _Watch:
        st = ServerState(arm=arm, kind=arm, pid=1, pgid=1, proc_start="", port=1, command="", argv=[], env={},
                         args_hash="", log_path="", state_path="", mechanism="", started_at=0.0, workdir="")
        w = _Watch(st)
        w.text = text
        return w

    line = _loading_line([watch("baseline", "x\nLoading safetensors checkpoint shards:  50% 2/4\n\n"),
                          watch("eagle3", "")], 12.4)
    assert line == "12s baseline: Loading safetensors checkpoint shards:  50% 2/4 | eagle3: starting"


def test_an_echo_line_never_outranks_what_it_echoes() -> None:
    """"Initialization failed. Please see the error messages above." also holds the startup
    signature "Initialization failed": it still only points at the lines above it."""
    text = ("[t] Rank 0 scheduler is dead. Please check if there are relevant logs.\n"
            "[t] Exit code: -9\n"
            "[t] Initialization failed. Please see the error messages above.\n")
    assert failure_reason(text) == "[t] Rank 0 scheduler is dead. Please check if there are relevant logs."
    assert find_signature(text.splitlines()[1]) == "Exit code"


# ---------------------------------------------------------------- bounded reads (issue 35, finding 8)

class _Counting(LocalTransport):
    """LocalTransport that counts what read_range reads."""

    reads = 0
    read_bytes = 0

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        data = super().read_range(path, offset, length)
        self.reads += 1
        self.read_bytes += len(data)
        return data


def test_tail_of_a_64_mib_log_without_newlines_reads_a_bounded_amount(tmp_path: Path) -> None:
    from specops.servers.logwatch import MAX_LINE, TAIL_MAX_BYTES
    log = tmp_path / "huge.log"
    with open(log, "wb") as fh:
        fh.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes, no newline, made at once
        fh.seek((64 << 20) - 6)
        fh.write(b"the-end")
    t = _Counting()
    lines = tail_lines(t, str(log), 30)
    assert t.read_bytes <= TAIL_MAX_BYTES and t.reads <= TAIL_MAX_BYTES // (64 * 1024)
    assert len(lines) == 1 and lines[0].endswith("the-end") and len(lines[0]) <= MAX_LINE + 40


def test_a_tail_cut_inside_a_secret_shows_no_piece_of_it(tmp_path: Path) -> None:
    """The read starts TAIL_MAX_BYTES before the end: the secret straddles that cut."""
    from specops.secrets import remember
    from specops.servers.logwatch import TAIL_MAX_BYTES
    secret = "hf_tailcutCANARY0123456789abcdefXYZ"
    remember(secret)
    log = tmp_path / "cut.log"
    body = b"x" * (TAIL_MAX_BYTES - 10) + b"\nlast line\n"
    log.write_bytes(b"y" * 1000 + secret.encode() + body[len(secret) - 12:])
    shown = "\n".join(tail_lines(LocalTransport(), str(log), 5))
    assert "last line" in shown
    assert not any(secret[i:i + 8] in shown for i in range(len(secret) - 7))


def test_follow_keeps_at_most_one_capped_line_of_a_writer_without_newlines() -> None:
    from specops.secrets import remember
    from specops.servers.logwatch import _GUARD, MAX_LINE, _Cursor
    secret = "hf_followCANARY0123456789abcdefXYZ"
    remember(secret)
    cur = _Cursor(0, "1")
    out: list[str] = []
    piece = b"z" * (MAX_LINE - 5) + secret.encode()  # the secret straddles MAX_LINE
    out += cur.take(piece)
    for _ in range(256):  # 64 MiB more of the same line, 256 KiB a read
        out += cur.take(b"z" * (256 << 10))
        assert len(cur.partial) <= MAX_LINE + _GUARD
    out += cur.take(b"z\nnext line\npart")
    assert len(out) == 2 and out[0].endswith("[... line cut: no newline]") and len(out[0]) <= MAX_LINE + 40
    assert out[1] == "next line" and cur.partial == b"part"
    assert not any(secret[i:i + 8] in out[0] for i in range(len(secret) - 7))


#: vLLM 0.32.0's logger (vllm/logger.py _FORMAT, NewLineFormatter): every line of a logged
#: traceback carries the process, level, time and source prefix
_VLLM_TB = (
    "(EngineCore pid=17906) ERROR 12-04 09:41:15 [core.py:1100] EngineCore failed to start.\r\n"
    "(EngineCore pid=17906) ERROR 12-04 09:41:15 [core.py:1100] Traceback (most recent call last):\r\n"
    "(EngineCore pid=17906) ERROR 12-04 09:41:15 [core.py:1100]   File \"/v/vllm/v1/engine/core.py\", line 1090, "
    "in run_engine_core\r\n"
    "(EngineCore pid=17906) ERROR 12-04 09:41:15 [core.py:1100]     engine_core = EngineCoreProc(*args, **kwargs)\r\n"
    "(EngineCore pid=17906) ERROR 12-04 09:41:15 [core.py:1100] RuntimeError: Unsupported CPU attention "
    "configuration: head_dim=16 isa=2\n"
    "(APIServer pid=15020) INFO 12-04 09:41:16 [launcher.py:1] Shutting down\n"
)


def test_vllms_log_prefix_is_set_aside_in_the_crash_shown() -> None:
    from specops.servers.logwatch import crash_blocks, crash_excerpt, failure_reason

    assert failure_reason(_VLLM_TB) == "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2"
    excerpt = crash_excerpt(_VLLM_TB)
    assert "Traceback (most recent call last):\n  File \"/v/vllm/v1/engine/core.py\", line 1090" in excerpt, excerpt
    assert "pid=" not in excerpt and "[core.py:1100]" not in excerpt, excerpt
    assert any(b.startswith("Traceback") and b.endswith("head_dim=16 isa=2") for b in crash_blocks(_VLLM_TB))
