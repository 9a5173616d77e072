"""Issue 55 point 5: an exception nobody expected ends the command with one masked line and
exit 1; the full traceback (masked too) goes to a 0600 file the line names. click's own
usage errors, SpecopsError and Ctrl-C keep their own lines and codes."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from specops.cli import main
from specops.errors import ConfigError
from specops.secrets import remember

SECRET = "hf_crashreportsecretvalue"


def _cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exc: BaseException, *args: str) -> Result:
    monkeypatch.setenv("SPECOPS_CACHE", str(tmp_path / "cache"))

    def boom(*_a: object, **_k: object) -> None:
        raise exc

    monkeypatch.setattr("specops.cli.hosts.load_inventory", boom)
    return CliRunner().invoke(main, list(args or ["hosts"]), catch_exceptions=False)


def test_an_unexpected_exception_is_one_masked_line_and_a_private_traceback(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    remember(SECRET, declared=True)
    res = _cli(monkeypatch, tmp_path, RuntimeError(f"token {SECRET} refused\nsecond line"))
    assert res.exit_code == 1 and res.exception is not None and isinstance(res.exception, SystemExit)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unexpected RuntimeError: token *** refused"), res.stderr
    assert SECRET not in res.stderr and "Traceback" not in res.stderr
    m = re.search(r"full traceback in (\S+)\)", lines[0])
    assert m is not None, lines[0]
    saved = Path(m[1])
    assert saved.parent == tmp_path / "cache" / "errors"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600 and stat.S_IMODE(saved.parent.stat().st_mode) == 0o700
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: token *** refused" in text
    assert SECRET not in text and "specops hosts" in text


def test_a_traceback_that_cannot_be_saved_still_ends_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the folder would go")
    res = _cli(monkeypatch, tmp_path, ValueError("bad"))
    assert res.exit_code == 1 and len(res.stderr.splitlines()) == 1
    assert "error: unexpected ValueError: bad (traceback not saved:" in res.stderr, res.stderr


def test_a_long_message_is_cut_to_one_readable_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    res = _cli(monkeypatch, tmp_path, KeyError("k" * 5000))
    line = res.stderr.splitlines()[0]
    assert res.exit_code == 1 and len(res.stderr.splitlines()) == 1 and len(line) < 700 and "..." in line


def test_ctrl_c_usage_errors_and_specops_errors_keep_their_codes(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    res = _cli(monkeypatch, tmp_path, KeyboardInterrupt())
    assert res.exit_code == 130 and res.stderr.strip() == "interrupted"
    res = _cli(monkeypatch, tmp_path, ConfigError("hosts.yaml: bad key"))
    assert res.exit_code == 2 and res.stderr.strip() == "error: hosts.yaml: bad key"
    res = _cli(monkeypatch, tmp_path, RuntimeError("x"), "hosts", "--no-such-option")
    assert res.exit_code == 2 and "No such option" in res.stderr and "unexpected" not in res.stderr
    res = _cli(monkeypatch, tmp_path, RuntimeError("x"), "--version")
    assert res.exit_code == 0 and "specops" in res.output
    assert not (tmp_path / "cache" / "errors").exists()
