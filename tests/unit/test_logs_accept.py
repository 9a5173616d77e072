"""`specops logs` shows per arm the accept length its log shows, read as the arm's engine
declares it (engines.metrics: SGLang's `Decode batch ... accept len: X`, vLLM's `SpecDecoding
metrics: ... Mean acceptance length: X` in every form its releases printed), over a real file
read through a real transport: the text line after the arm's lines, and `--json`'s
`accept_length` (the last) and `accept_lines` (how many lines gave one)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from specops.engines.metrics import SGLANG, VLLM
from specops.render.logs import LogSource, collect, show
from specops.transport.local import LocalTransport
from tests.unit.test_vllm_log_forms import FORMS, STATS

#: SGLang issue 11948 (an EAGLE-3 server's log, 2025-10-22): two decode lines with an accept length
SGLANG_LINES = [
    "[2025-10-22 10:27:56 TP0] Prefill batch. #new-seq: 1, #new-token: 28, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, ",
    "[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 108, token usage: 0.00, accept len: 2.17, "
    "accept rate: 0.54, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0, ",
    "[2025-10-22 10:27:57 TP0] Decode batch. #running-req: 1, #token: 186, token usage: 0.00, accept len: 1.95, "
    "accept rate: 0.49, cuda graph: True, gen throughput (token/s): 178.86, #queue-req: 0, ",
]
#: a baseline's decode line (SGLang issue 2777's form, no drafting): no accept length
BASELINE_LINE = ("[2025-01-07 20:16:03 TP0] Decode batch. #running-req: 6, #token: 1200, token usage: 0.08, "
                 "gen throughput (token/s): 310.21, #queue-req: 57")


def _source(tmp_path: Path, arm: str, lines: list[str], metrics: object) -> LogSource:
    log = tmp_path / f"{arm}.log"
    log.write_text("\n".join(lines) + "\n")
    return LogSource(LocalTransport(), str(log), arm, "h", arm, metrics)  # type: ignore[arg-type]


def test_sglang_arm_shows_its_last_accept_length_and_how_many(tmp_path: Path) -> None:
    doc = collect([_source(tmp_path, "eagle3", SGLANG_LINES, SGLANG),
                   _source(tmp_path, "baseline", [BASELINE_LINE] * 3, SGLANG)], lines=1)
    assert doc["h"]["eagle3"]["accept_length"] == 1.95 and doc["h"]["eagle3"]["accept_lines"] == 2
    assert doc["h"]["eagle3"]["lines"] == [SGLANG_LINES[-1]]  # -n 1: the accept length is the whole log's
    assert doc["h"]["baseline"]["accept_length"] is None and doc["h"]["baseline"]["accept_lines"] == 0


@pytest.mark.parametrize(("where", "line", "want"), FORMS, ids=[f[0] for f in FORMS])
def test_each_vllm_form_is_the_accept_length_logs_shows(tmp_path: Path, where: str, line: str,
                                                        want: float | None) -> None:
    doc = collect([_source(tmp_path, "eagle3", [STATS, line, STATS], VLLM)], lines=5)
    assert doc["h"]["eagle3"]["accept_length"] == want, where
    assert doc["h"]["eagle3"]["accept_lines"] == (0 if want is None else 1), where


def test_vllm_arm_shows_the_last_of_its_forms(tmp_path: Path) -> None:
    lines = [STATS] + [f[1] for f in FORMS]   # every form in one log, the mean-first form last
    doc = collect([_source(tmp_path, "eagle3", lines, VLLM)], lines=2)
    assert doc["h"]["eagle3"]["accept_length"] == FORMS[-1][2]
    assert doc["h"]["eagle3"]["accept_lines"] == sum(f[2] is not None for f in FORMS)


def test_text_output_says_it_after_the_arms_lines(tmp_path: Path) -> None:
    out = io.StringIO()
    show([_source(tmp_path, "eagle3", SGLANG_LINES, SGLANG), _source(tmp_path, "baseline", [BASELINE_LINE], SGLANG)],
         lines=2, console=Console(file=out, width=400, color_system=None))
    text = out.getvalue().splitlines()
    note = "eagle3: accept length 1.95 (last of 2 spec-decode lines)"
    assert note in text and text.index(note) > max(i for i, ln in enumerate(text) if ln.startswith("eagle3 | "))
    assert not any("baseline: accept length" in ln for ln in text)


def test_an_arm_without_an_engine_or_with_errors_only_shows_none(tmp_path: Path) -> None:
    out = io.StringIO()
    show([_source(tmp_path, "eagle3", SGLANG_LINES, None)], lines=2, console=Console(file=out, color_system=None))
    assert "accept length" not in out.getvalue()
    out = io.StringIO()
    show([_source(tmp_path, "eagle3", SGLANG_LINES, SGLANG)], lines=2, errors_only=True,
         console=Console(file=out, color_system=None))
    assert "accept length" not in out.getvalue()


def test_the_cli_reads_each_arm_as_its_state_files_engine(tmp_path: Path) -> None:
    """`specops logs --json` on a local host: an arm launched by vLLM (its state file says so)
    gives the accept length of its SpecDecoding lines and none from an SGLang line; an arm
    without a state file is read as the host's engine (SGLang, hosts.yaml's default)."""
    import json

    from specops.servers.records import ServerState
    from tests.support.deploy import inventory, run_cli

    wd = tmp_path / "w"
    (wd / ".specops" / "logs").mkdir(parents=True)
    (wd / ".specops" / "servers").mkdir(parents=True)
    logs = {"vllm-eagle": [STATS, FORMS[2][1], SGLANG_LINES[1], FORMS[3][1], SGLANG_LINES[2]],
            "sglang-eagle": SGLANG_LINES + [FORMS[3][1]]}
    for arm, lines in logs.items():
        (wd / ".specops" / "logs" / f"{arm}.log").write_text("\n".join(lines) + "\n")
    state = ServerState(arm="vllm-eagle", kind="eagle3", pid=999_999, pgid=999_999, proc_start="1", port=1,
                        command="x", argv=["x"], env={}, args_hash="h",
                        log_path=str(wd / ".specops/logs/vllm-eagle.log"),
                        state_path=str(wd / ".specops/servers/vllm-eagle.json"), mechanism="none",
                        started_at=0.0, workdir=str(wd), engine="vllm")
    Path(state.state_path).write_bytes(state.to_json())
    inv = inventory(tmp_path, {"box": {"connection": "local", "workdir": str(wd)}})
    res = run_cli("logs", "--host", "box", "-i", str(inv), "--json", "-n", "1")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)["box"]
    assert (doc["vllm-eagle"]["accept_length"], doc["vllm-eagle"]["accept_lines"]) == (3.24, 2)
    assert (doc["sglang-eagle"]["accept_length"], doc["sglang-eagle"]["accept_lines"]) == (1.95, 2)
    text = run_cli("logs", "--host", "box", "-i", str(inv), "--server", "vllm-eagle", "-n", "1")
    assert text.exit_code == 0 and "vllm-eagle: accept length 3.24 (last of 2 spec-decode lines)" in text.output


def test_follow_json_gives_each_lines_accept_length(tmp_path: Path) -> None:
    """`logs -f --json`: the line object carries the accept length the line gives, as its engine reads it."""
    import json

    out = io.StringIO()
    show([_source(tmp_path, "eagle3", [STATS, FORMS[3][1]], VLLM)], lines=2,
         console=Console(file=out, color_system=None), json_lines=True)
    got = [json.loads(ln) for ln in out.getvalue().splitlines()]
    assert [g["accept_length"] for g in got] == [None, 3.24] and got[1]["line"] == FORMS[3][1]


def test_each_engines_grep_text_is_its_patterns_own() -> None:
    """The text grepped on the host is the one the engine's pattern reads, not a second copy."""
    from specops.sglang import serving as sglang_serving
    from specops.vllm import serving as vllm_serving

    assert SGLANG.accept_line == sglang_serving.ACCEPT_LINE and SGLANG.accept_line in SGLANG.decode_re.pattern
    assert VLLM.accept_re is vllm_serving.SPEC_RE and VLLM.accept_line in vllm_serving.SPEC_RE.pattern
    assert all(SGLANG.accept_line in ln for ln in SGLANG_LINES[1:]) and SGLANG.accept_line not in BASELINE_LINE
