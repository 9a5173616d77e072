"""Fault tier, without root: a real process whose file-size limit (RLIMIT_FSIZE) the
kernel enforces makes every write path fail the way a full disk does (EFBIG instead of
ENOSPC). Appends leave no torn line, replacements leave the old file, the journal goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults

SCRIPT = textwrap.dedent('''
    import json, os, resource, signal, sys
    from pathlib import Path
    from specops.fsutil import WriteError, append_whole, atomic_write
    from specops.run.events import Note
    from specops.run.journal import Journal

    d = Path(sys.argv[1])
    line = b'{"n": 1, "pad": "' + b"x" * 80 + b'"}\\n'   # 100 bytes
    append_whole(d / "r.jsonl", line * 39)
    atomic_write(d / "m.json", "{}\\n")
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (3950, 3950))
    try:
        append_whole(d / "r.jsonl", line)  # 3900 + 100 > 3950: 50 bytes written, then EFBIG
    except WriteError as exc:
        print("append:", exc.message, "|", exc.hint)
    try:
        atomic_write(d / "m.json", "x" * 5000)
    except WriteError as exc:
        print("replace:", exc.message)
    j = Journal(d / "run")
    for i in range(100):
        j.emit(Note(host="h", step=f"s{i}", message="y" * 70))
    print("journal:", j.write_problem())
''')


def test_writes_past_a_limit_fail_whole(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert f"append: cannot write {tmp_path}/r.jsonl: file too large | every line before is whole" in out, out
    assert (tmp_path / "r.jsonl").read_bytes().count(b"\n") == 39 and (tmp_path / "r.jsonl").stat().st_size == 3900
    assert f"replace: cannot write {tmp_path}/m.json: file too large" in out, out
    assert (tmp_path / "m.json").read_text() == "{}\n" and not list(tmp_path.glob("*.specops-tmp"))
    assert "journal: cannot write" in out and "events.jsonl: file too large" in out and "left out" in out, out
    events = (tmp_path / "run/events.jsonl").read_bytes()
    assert events.endswith(b"\n") and 0 < events.count(b"\n") < 100 and len(events) <= 3950
