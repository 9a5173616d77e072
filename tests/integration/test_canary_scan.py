"""tests/support/canary.py can fail: each kind of finding it reports, and the allowed file left out."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.support import canary

SECRET = "hf_CanaryQ7xZ3kP9mW2vB8nR4tY6uJ1sD5"


def test_the_scan_finds_a_piece_in_a_file_a_name_an_output_and_an_argv(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("prefix " + SECRET[5:13] + " suffix")
    (tmp_path / SECRET[-9:]).mkdir()
    allowed = tmp_path / "secrets.env"
    allowed.write_text(f"HF_TOKEN={SECRET}\n")
    (tmp_path / "clean.log").write_text("seven characters of it are no finding: " + SECRET[:7] + " " + SECRET[-7:])
    found = canary.files([tmp_path], SECRET, [allowed])
    assert {f.split(":")[0] for f in found} == {f"file name {tmp_path / SECRET[-9:]}", f"file {tmp_path / 'a.log'}"}
    assert canary.texts({"status": "ok", "logs": "x" + SECRET[-8:]}, SECRET) == [f"output of logs: {SECRET[-8:]}"]
    with canary.ArgvSampler(SECRET) as argv:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", SECRET[:10]],
                                stdin=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while not argv.hits and time.monotonic() < deadline:  # the sampler's next pass sees it
                time.sleep(0.01)
        finally:
            proc.communicate(b"")
    assert argv.findings and f"argv of pid {proc.pid} " in argv.findings[0]
