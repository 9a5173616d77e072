"""Issue 35: the secret leaks an audit found (findings 1, 3, 5), each through the
project's own writers: the Slurm state file, the journal's output tail, a step's failure
message, the install log, short and number-like declared secrets, a value with a quote."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from specops.run.journal import INLINE_OUTPUT_LIMIT, Journal
from specops.secrets import MASK, clip, parse_sources, redact, remember
from specops.servers import slurm
from specops.servers.launch import LaunchPlan
from specops.transport.base import CommandResult, command_line
from specops.transport.local import LocalTransport


def pieces(value: str, n: int = 8) -> list[str]:
    """Every `n`-character piece of `value`: none may survive anywhere a secret was."""
    return [value[i:i + n] for i in range(len(value) - n + 1)]


def assert_no_piece(text: str, value: str) -> None:
    found = [p for p in pieces(value) if p in text]
    assert not found, f"pieces of the secret survive: {found[:3]}"


def test_slurm_state_file_is_masked_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 1: submit wrote the arm's env and command in clear, 0644, on a shared filesystem."""
    token = "hf_slurmStateTokenValue0123456789"
    remember(token)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    w = str(tmp_path / "w")
    plan = LaunchPlan(arm="eagle3", kind="eagle3", port=30001,
                      argv=["python3", "-m", "sglang.launch_server", "--port", "30001"],
                      env={"HF_TOKEN": token, "HF_HOME": "/shared/hf"}, mechanism="eagle3", workdir=w,
                      log_path=f"{w}/.specops/logs/eagle3.log", state_path=f"{w}/.specops/servers/eagle3.json")
    state = slurm.submit(LocalTransport(), plan)
    assert state.slurm is not None and state.slurm["job_id"] == "4242"
    path = Path(plan.state_path)
    text = path.read_text()
    assert_no_piece(text, token)
    assert json.loads(text)["env"]["HF_TOKEN"] == MASK
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_journal_masks_output_before_it_keeps_its_tail(tmp_path: Path) -> None:
    """Finding 3: the tail was cut first, so a token two characters past the cut lost its
    first two characters, no longer matched, and 33 of its 35 characters were written."""
    token = "hf_journalTailTokenValue0123456789x"
    remember(token)
    stdout = "a" * (INLINE_OUTPUT_LIMIT + 100) + token + "b" * (500 - len(token) + 2)
    assert stdout[-500:] == token[2:] + "b" * (500 - len(token) + 2)  # the cut falls inside it
    journal = Journal(tmp_path / "run")
    journal.command("h", "s", CommandResult("cmd", 1, stdout, "", 0.1))
    journal.close()
    text = (tmp_path / "run" / "events.jsonl").read_text()
    assert_no_piece(text, token)
    assert json.loads(text.splitlines()[-1])["stdout_tail"].endswith("b")


@pytest.mark.parametrize("keep", ["end", "start"])
def test_clip_masks_first_then_cuts(keep: str) -> None:
    token = "hf_clipTokenValue0123456789abcdef"
    remember(token)
    text = "x" * 10 + token + "y" * 10
    limit = len(token) + 8  # a cut of the raw text falls inside the token, from either end
    assert any(p in (text[-limit:] if keep == "end" else text[:limit]) for p in pieces(token))
    out = clip(text, limit, keep=keep)
    assert out == ("x" * 10 + MASK + "y" * 10 if len(text) - len(token) + len(MASK) <= limit else out)
    assert len(out) <= limit and MASK in out
    assert_no_piece(out, token)


def test_a_failed_verify_message_never_holds_part_of_a_token(tmp_path: Path) -> None:
    """Finding 3 at steps/base.py: stdout's last 300 characters, cut before masking."""
    from specops.steps.base import check_user_verify

    token = "hf_verifyMessageTokenValue0123456789"
    remember(token)
    stdout = "z" * 400 + token + "q" * (300 - len(token) + 3)
    ok, seen = check_user_verify(None, {"stdout_contains": "nothing"},  # type: ignore[arg-type]
                                 CommandResult("c", 0, stdout, "", 0.0))
    assert not ok
    assert_no_piece(seen, token)


def test_the_shell_step_message_is_masked_before_it_is_shortened() -> None:
    """Finding 3 at steps/shell.py: the first 80 characters of the command, then masked."""
    from specops.steps.shell import Shell

    token = "hf_shellMessageTokenValue0123456789"
    remember(token)
    cmd = "echo " + "x" * 60 + " " + token

    class Ctx:
        args = {"cmd": cmd}

        def run(self, *a: object, **k: object) -> CommandResult:
            return CommandResult(command_line(cmd), 0, "", "", 0.0)

        def path(self, p: str) -> str:
            return p

    outcome = Shell().apply(Ctx())  # type: ignore[arg-type]
    assert_no_piece(outcome.message, token)


def test_declared_short_and_numeric_secrets_are_masked_as_whole_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 5: a declared secret that is a number, or under 4 characters, was never masked."""
    monkeypatch.setenv("SPECOPS_T_PIN", "20240517")
    monkeypatch.setenv("SPECOPS_T_SHORT", "q7z")
    sources = parse_sources({"DB_PASSWORD": {"env": "SPECOPS_T_PIN"}, "PIN_SECRET": {"env": "SPECOPS_T_SHORT"}},
                            "hosts.yaml:4")
    for source in sources.values():
        source.read()
    assert redact("password is 20240517") == f"password is {MASK}"
    assert redact("pin=q7z, next") == f"pin={MASK}, next"
    # inside a longer word or number it is another value: left alone
    assert redact("id 202405170 and q7zz") == "id 202405170 and q7zz"
    # an undeclared number is still never masked (a port, a count)
    remember("31337")
    assert redact("port 31337") == "port 31337"


def test_a_value_with_a_quote_does_not_partly_survive_in_a_quoted_command() -> None:
    """Finding 5: shlex.quote writes `'` as `'"'"'`, so neither the value nor the
    NAME='...' rule matched all of it."""
    token = "hf_quote'TokenValue0123456789"
    remember(token)
    line = command_line(["env", f"OTHER={token}", "run", token])
    assert_no_piece(redact(line), token.split("'")[1])
    assert_no_piece(redact(line), token.split("'")[0])
    unknown = shlex.join(["env", "HF_TOKEN=ab'cdefghijklmnop", "x"])  # never remembered: the NAME= rule
    assert "cdefghijklmnop" not in redact(unknown)


def test_the_install_log_is_masked_and_written_whole(tmp_path: Path) -> None:
    """Finding 5: `_save_log` wrote the pip command and its output as they were."""
    from specops.steps.sglang_install import SGLangInstall

    token = "hf_installLogTokenValue0123456789"
    remember(token)

    class Ctx:
        run_dir = tmp_path
        host = type("H", (), {"name": "h"})()

    path = SGLangInstall()._save_log(Ctx(), f"pip install --index-url https://u:{token}@x/simple",  # type: ignore[arg-type]
                                     f"Looking in indexes: https://u:{token}@x/simple\n")
    text = Path(path).read_text()
    assert_no_piece(text, token)
    assert MASK in text
    assert not [p for p in Path(path).parent.iterdir() if p.name != Path(path).name]  # no temp file left



def test_a_table_cell_is_masked_before_it_is_shortened_to_fit() -> None:
    """Finding 3 at render/fit.py (found by grep for cuts): a command line shortened in the
    middle to fit 80 columns kept most of a token, which the console's mask then missed."""
    import io

    from rich.console import Console

    from specops.render.fit import Column, fit_table

    token = "hf_tableCellTokenValue0123456789abcdef"
    remember(token)
    command = f"run --api-key {token} --port 30000 --model-path /models/x/y/z/w"
    fitted = fit_table([Column("arm"), Column("command", shrink=True)], [["eagle3", command]], width=60)
    out = io.StringIO()
    Console(file=out, width=60).print(fitted.table)
    assert_no_piece(out.getvalue(), token)
    assert not any(p in line for line in fitted.shortened for p in pieces(token))


def test_a_secret_longer_than_a_line_is_masked_before_the_console_folds_it(capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrapping is a cut too: Rich folded a long token over two lines, then the stream's
    mask matched neither half."""
    from specops.cli.options import console

    token = "hf_consoleFoldTokenValue" + "0123456789" * 6
    remember(token)
    monkeypatch.setenv("COLUMNS", "40")
    console.print(f"error: the server said {token} twice")
    out = capsys.readouterr().out
    assert MASK in out
    assert_no_piece(out.replace("\n", ""), token)
