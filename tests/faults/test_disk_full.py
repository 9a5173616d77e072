"""Fault tier: the run directory's filesystem fills up mid-sweep (a real tmpfs, filled by
the test). A clear error naming the file, nothing already written lost or torn, and
`--resume` completes once there is room again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.faults import (
    count_lines,
    fill,
    local_inventory,
    no_temp_files,
    ok_points,
    small_filesystem,
    spawn,
    specops,
    stop_leftovers,
    wait_until,
    whole_records,
)

pytestmark = pytest.mark.faults

SWEEP = ["--arms", "baseline", "--concurrency", "1,2,4", "--repeats", "2", "--num-prompts", "4",
         "--input-len", "16", "--output-len", "8"]
MATRIX = {("baseline", c, r) for c in (1, 2, 4) for r in (0, 1)}
REPORT_FILES = ("report.md", "report.html", "summary.json", "results.csv", "manifest.json")


def _whole_jsonl(path: Path) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path.name}: torn last line {data[-120:]!r}"
    for line in data.decode().splitlines():
        assert isinstance(json.loads(line), dict)


def test_disk_full_mid_sweep_is_a_clear_error_and_resume_completes(tmp_path: Path, fault_workdir: Path) -> None:
    inv = local_inventory(tmp_path, fault_workdir)
    try:
        with small_filesystem(tmp_path / "fs") as fs:
            run = fs / "run"
            with spawn("bench", "--host", "local", "-i", str(inv), *SWEEP, "--out", str(run)) as proc:
                wait_until(lambda: count_lines(run / "results.jsonl") >= 2, "2 points written", proc=proc)
                filler = fill(fs)
                out = proc.communicate(timeout=120)[0]
            assert proc.returncode == 1, out
            assert "Traceback" not in out and "OSError" not in out, out
            assert re.search(rf"error: cannot write {re.escape(str(run))}/\S+: no space left on device", out), out
            # the run's own bookkeeping (run.json at its end) could not be written either: said, not raised
            assert "journal write(s) left out" in " ".join(out.split()) and "to resume: " in out, out

            kept = whole_records(run)
            assert len(kept) >= 2 and all(r["status"] == "ok" for r in kept)
            json.loads((run / "manifest.json").read_text())
            _whole_jsonl(run / "events.jsonl")
            assert no_temp_files(run) == []

            filler.unlink()
            res = specops("bench", "--host", "local", "-i", str(inv), "--resume", str(run))
            assert res.returncode == 0, res.stdout
            after = whole_records(run)
            assert after[:len(kept)] == kept, "what was written before the disk filled is unchanged"
            assert set(ok_points(after)) == MATRIX and len(ok_points(after)) == len(after) == len(MATRIX)

            # re-rendering the report on a full disk: each report file stays the old one, whole
            old = {name: (run / name).read_bytes() for name in REPORT_FILES}
            filler = fill(fs)
            res = specops("report", str(run))
            assert res.returncode == 1 and "no space left on device" in res.stdout and "Traceback" not in res.stdout, res.stdout
            assert {name: (run / name).read_bytes() for name in REPORT_FILES} == old
            assert no_temp_files(run) == []
            filler.unlink()
    finally:
        stop_leftovers(inv, "local", fault_workdir)
