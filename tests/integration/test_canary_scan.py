"""tests/support/canary.py can fail: each kind of finding it reports, and the allowed file left out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import canary
from tests.support.waiting import wait_until

#: not the e2e canary's value: the argv sampler reads every process on the machine, so a
#: piece of the e2e value in this test's argv, run beside test_canary.py on the other worker,
#: was a finding there (seen once, with test_weights_step's token)
SECRET = "hf_ScanTestN4pL8qR2wX6zC3vB7mK5jH9"
CANARY_TEST = Path(__file__).resolve().parents[1] / "e2e" / "test_canary.py"


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
            wait_until(lambda: argv.hits, "the sampler's next pass seeing the argv")
        finally:
            proc.communicate(b"")
    assert argv.findings and f"argv of pid {proc.pid} " in argv.findings[0]


def test_no_other_test_holds_a_piece_of_the_e2e_canary() -> None:
    """test_canary.py's ArgvSampler scans every process on the machine, the other xdist
    worker's too: a test that puts a piece of the same value in an argv (on purpose, to test
    a mask) fails the canary whenever the two run at the same time."""
    import ast

    tree = ast.parse(CANARY_TEST.read_text())
    value = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and [getattr(t, "id", None) for t in node.targets] == ["SECRET"] and isinstance(node.value, ast.Constant))
    holders = [str(path) for path in CANARY_TEST.parents[1].rglob("*.py") if path != CANARY_TEST
               and any(piece in path.read_text() for piece in canary.pieces(value))]
    assert holders == []
