"""tests/support/canary.py can fail: each kind of finding it reports, and the allowed file left out."""

from __future__ import annotations

import os
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
CANARY_ROUTES = CANARY_TEST.parent / "test_canary_routes.py"


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
    """test_canary.py's and test_canary_routes.py's ArgvSamplers scan every process on the
    machine, the other xdist worker's too: a test that puts a piece of the same value in an
    argv (on purpose, to test a mask) fails the canary whenever the two run at the same time."""
    from tests.e2e import test_canary, test_canary_routes

    owners = {CANARY_TEST: test_canary.SECRETS, CANARY_ROUTES: test_canary_routes.ALL}
    for owner, values in owners.items():
        holders = [str(path) for path in CANARY_TEST.parents[1].rglob("*.py") if path != owner
                   and any(piece in path.read_text() for piece in canary.pieces(values))]
        assert holders == [], f"pieces of {owner.name}'s secrets"


def test_pieces_cover_the_json_shell_and_repr_forms() -> None:
    """A `'`, `"` or `\\` is written differently in JSON, in a shell word and in a Python repr:
    the plain value's pieces would miss the piece that spans it."""
    value = 'ab"cd\\ef gh\'ij'
    found = canary.pieces(value)
    assert {'ab\\"cd\\\\', "gh'\"'\"'i", "f gh\\'ij"} <= set(found)
    assert canary.texts({"repr": f"x={value!r}"}, value)


def test_rewritten_finds_a_new_copy_and_a_secret_never_written_there() -> None:
    before = "arms:\n  env: {WANDB_API_KEY: inclear-Value-123}\n"
    assert canary.rewritten("h", before, before.replace("env", "ENV"), ["inclear-Value-123"], ["fromafile-Val-9"]) == []
    twice = canary.rewritten("h", before, before + "# inclear-Value-123\n", ["inclear-Value-123"], [])
    assert twice and "now 2 times, 1 before" in twice[0]
    assert canary.rewritten("h", before, before + "x: fromafile-Val-9\n", ["inclear-Value-123"], ["fromafile-Val-9"])


def test_on_a_terminal_is_a_terminal_and_keeps_what_it_showed() -> None:
    code, shown = canary.on_a_terminal([sys.executable, "-c", "import sys; print(sys.stdout.isatty(), sys.argv[1])",
                                        SECRET[3:12]], dict(os.environ))
    assert code == 0 and b"True" in shown
    assert canary.texts({"terminal": shown}, SECRET)
