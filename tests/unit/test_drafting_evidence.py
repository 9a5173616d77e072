"""Per-point drafting evidence of an adaptive arm, read from its own log window (issue 21):
the state at the window's start comes from the last transition before it."""

from __future__ import annotations

from pathlib import Path

from specops.bench.running import RunningSampler, decode_lines_script, drafting_evidence, parse_decode_lines
from specops.sglang.adaptive import transition_line
from specops.transport.local import LocalTransport


def decode(n: int) -> str:
    return f"[2026-12-01 10:00:00] Decode batch, #running-req: {n}, #token: 40, token usage: 0.01, cpu graph: False, " \
           f"gen throughput (token/s): 6.27, #queue-req: 0\n"


def test_share_counts_decode_lines_logged_while_drafting_was_off(tmp_path: Path) -> None:
    log = tmp_path / "adaptive.log"
    before = decode(1) + "[t] " + transition_line(False, 3, 1) + "\n" + decode(3)
    log.write_text(before)
    t = LocalTransport()
    offset = len(before.encode())
    window = decode(3) + decode(3) + "[t] " + transition_line(True, 1, 1) + "\n" + decode(1)
    with open(log, "a") as fh:
        fh.write(window)
    out = t.run(decode_lines_script(str(log), offset, len(window.encode())), timeout=30).stdout
    # off when the window opened (the transition before it), two of three steps off, one transition inside
    assert drafting_evidence(out) == {"drafting_off": True, "drafting_off_share": 0.6667, "drafting_transitions": 1}


def test_no_transition_line_says_nothing_unless_the_arm_logs_them() -> None:
    lines = decode(2) + decode(2)
    assert drafting_evidence(lines) == {"drafting_off": None, "drafting_off_share": None, "drafting_transitions": None}
    assert drafting_evidence(lines, logs_transitions=True) == {
        "drafting_off": False, "drafting_off_share": 0.0, "drafting_transitions": 0}


def test_the_sampler_reads_only_the_points_window(tmp_path: Path) -> None:
    log = tmp_path / "adaptive.log"
    log.write_text(decode(1) * 5)
    sampler = RunningSampler(LocalTransport(), str(log), logs_transitions=True)
    sampler.start()
    with open(log, "a") as fh:
        fh.write("[t] " + transition_line(False, 8, 4) + "\n" + decode(8) * 4)
    rec = sampler.stop()
    assert rec["drafting_off"] is True and rec["drafting_off_share"] == 1.0 and rec["drafting_transitions"] == 1
    assert rec["running_req_p50"] == 8.0 and rec["running_source"] == "log"


#: SGLang 0.5.14's native adaptive lines, verbatim from a real server on CPU (the real tier's
#: native_check, specops' two-tier config, threshold 1): its start, a switch to 0 steps, a decode
#: line at 0 steps (its "accept len: 1.00" is no draft's), the switch back, and a drafting line
NATIVE_START = "[2026-12-04 03:13:33] AdaptiveSpeculativeParams initialized: steps=2, candidate_steps=[2]\n"
NATIVE_OFF = "[2026-12-04 03:13:35] Switch adaptive runtime state: steps 2 -> 0, draft_tokens 3 -> 1\n"
NATIVE_ON = "[2026-12-04 03:13:43] Switch adaptive runtime state: steps 0 -> 2, draft_tokens 1 -> 3\n"


def native_decode(n: int, accept: float) -> str:
    return (f"[2026-12-04 03:13:37] Decode batch, #running-req: {n}, #token: 37, token usage: 0.02, accept len: "
            f"{accept:.2f}, accept rate: 0.00, cpu graph: False, gen throughput (token/s): 0.75, #queue-req: 0\n")


def test_a_native_servers_switch_lines_are_its_drafting_evidence(tmp_path: Path) -> None:
    """SGLang's native tiers log no `specops adaptive:` line: the switch lines (and the start
    line's steps) say when it drafted, read from the window and the state before it."""
    log = tmp_path / "adaptive.log"
    before = NATIVE_START + native_decode(1, 3.0) + NATIVE_OFF
    window = native_decode(3, 1.0) + native_decode(3, 1.0) + NATIVE_ON + native_decode(1, 3.0)
    log.write_text(before + window)
    out = LocalTransport().run(decode_lines_script(str(log), len(before.encode()), len(window.encode())),
                               timeout=30).stdout
    assert drafting_evidence(out) == {"drafting_off": True, "drafting_off_share": 0.6667, "drafting_transitions": 1}
    # the decode lines logged at 0 steps carry no draft's accept length: only the drafting one counts
    figures = parse_decode_lines(out)
    assert figures.running == [3.0, 3.0, 1.0] and figures.accept == [3.0]
    # a spec-off server (every tier 0 steps) starts off and says so in its start line
    off_start = NATIVE_START.replace("steps=2, candidate_steps=[2]", "steps=0, candidate_steps=[0]")
    assert drafting_evidence(off_start + native_decode(4, 1.0)) == {
        "drafting_off": True, "drafting_off_share": 1.0, "drafting_transitions": 0}
