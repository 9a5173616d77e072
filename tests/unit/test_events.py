"""Journal events are typed (run.events) and written by one method (Journal.emit); the
lines stay what they were. tests/data/journal_main/ holds events.jsonl lines written by
main before the events had types: a deploy of a playbook touching most kinds (then its
--check and its --resume) and `specops demo --quick`'s deploy and bench."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from specops.run import events
from specops.run.engine import done_steps
from specops.run.journal import Journal, read_events, typed_events
from specops.secrets import remember
from specops.transport.base import CommandResult

DATA = Path(__file__).resolve().parents[1] / "data" / "journal_main"
OLD = sorted(DATA.glob("*.jsonl"))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("path", OLD, ids=[p.stem for p in OLD])
def test_a_journal_written_before_the_types_reads_back_whole(path: Path) -> None:
    """Every line of main's journals is a known kind, and turns back into the same line."""
    for record in _lines(path):
        ev = events.parse(record)
        assert not isinstance(ev, events.Unknown), record
        assert type(ev).EVENT == record["event"]
        assert ev.to_record() == record


def test_the_old_journals_cover_the_engine_and_step_kinds() -> None:
    """The fixture is worth its name: it holds the kinds a deploy and a bench write."""
    kinds = {type(events.parse(r)) for p in OLD for r in _lines(p)}
    assert {events.RunStart, events.Resume, events.RunDone, events.Connected, events.Secrets, events.Fail,
            events.StepStart, events.Skip, events.CheckPreview, events.Apply, events.Verify, events.Retry,
            events.Done, events.Rollback, events.Command, events.Put, events.Get, events.Note, events.Cpu,
            events.Gpus, events.Server, events.BenchLease, events.BenchServer, events.BenchPoint,
            events.BenchScheduling} <= kinds


def test_resume_reads_the_finished_steps_of_an_old_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / "deploy_playbook.jsonl", run / "events.jsonl")
    done = done_steps(run)
    before: dict[str, set[int]] = {}  # main's reading of the same lines, as dicts
    for ev in _lines(run / "events.jsonl"):
        if ev.get("event") in ("done", "skip") and "step_index" in ev and ev.get("reason") != "when":
            before.setdefault(ev["host"], set()).add(int(ev["step_index"]))
    assert done == before and set(done) == {"box", "cpubox"}  # badbox failed before its steps
    assert 3 not in done["box"]  # step 4 was skipped by its `when`, not done
    assert all(isinstance(ev, events.Event) for ev in typed_events(run))


#: Kinds the fixture does not hold, as main wrote them (keyword arguments at each site).
OLD_SHAPES: list[tuple[events.Event, set[str]]] = [
    (events.InterruptCleanup(host="h", arms=["eagle3"], action="failed", error="boom"),
     {"host", "arms", "action", "error"}),
    (events.Lease(host="h", step="s", message="waiting for run x"), {"host", "step", "message"}),
    (events.Warn(host="h", message="slow transport"), {"host", "message"}),
    (events.Warn(host="h", step="s", message="unfair"), {"host", "step", "message"}),
    (events.Fail(host="h", step=None, error="Traceback ..."), {"host", "step", "error"}),
    (events.Fail(host="h", step="s", step_index=2, error="internal"), {"host", "step", "step_index", "error"}),
    (events.Fail(host="h", step="s", step_index=2, error="e", phase="apply", rollback_failed=True),
     {"host", "step", "step_index", "error", "phase", "rollback_failed"}),
    (events.Rollback(host="h", step="s", step_index=1, notes=[], failed=["rollback command exited 1"]),
     {"host", "step", "step_index", "notes", "failed"}),
    (events.Done(host="h", step="s", step_index=1, changed=False), {"host", "step", "step_index", "changed"}),
    (events.Command(host="h", step=None, command="x", rc=-9, duration_s=1.0, timed_out=True, stdout="",
                    stderr_tail="t", stderr_file="logs/h/0001.stderr"),
     {"host", "step", "command", "rc", "duration_s", "timed_out", "stdout", "stderr_tail", "stderr_file"}),
    (events.BuiltinCheck(host="h", step="s", check="check: anchors", ok=True, lines=[]),
     {"host", "step", "check", "ok", "lines"}),
    (events.SlurmJob(host="h", step="s", arm="a", job_id="13", job_state="PENDING", reason="Resources",
                     node="", gpus=[]), {"host", "step", "arm", "job_id", "job_state", "reason", "node", "gpus"}),
]


@pytest.mark.parametrize("ev, keys", OLD_SHAPES, ids=[f"{type(e).__name__}-{i}" for i, (e, _) in enumerate(OLD_SHAPES)])
def test_kinds_not_in_the_fixture_keep_mains_keys(ev: events.Event, keys: set[str]) -> None:
    record = ev.to_record()
    assert set(record) == keys | {"ts", "event"}
    assert events.parse(record).to_record() == record


#: The sweep's log callback, as bench/sweep.py and bench/armpool.py call it.
SWEEP_LOGS: list[tuple[str, dict[str, Any]]] = [
    ("lease", {"arm": "a", "lead": True, "shared_with": []}),
    ("server", {"arm": "a", "action": "launched", "pid": 12, "mechanism": "baseline"}),
    ("relaunch", {"arm": "a"}),
    ("taken_over", {"arm": "a", "message": "run x took it over"}),
    ("client", {"where": "here, through the SSH connection", "why": "specops is not importable"}),
    ("point", {"arm": "a", "concurrency": 4, "repeat": 0, "status": "ok", "output_throughput": 10.5,
               "t0": 1.0, "wall_s": 2.0}),
    ("scheduling", {"mode": "sequential", "reason": "one GPU"}),
    ("slurm_job", {"arm": "a", "job_id": "13", "job_state": "RUNNING", "reason": "None", "node": "n1",
                   "gpus": [0]}),
]


@pytest.mark.parametrize("kind, data", SWEEP_LOGS, ids=[k for k, _ in SWEEP_LOGS])
def test_each_sweep_log_becomes_its_typed_bench_event(kind: str, data: dict[str, Any]) -> None:
    ev = events.from_callback(f"bench_{kind}", "h", "bench", data)
    assert not isinstance(ev, events.Unknown) and ev.name == f"bench_{kind}"
    assert ev.to_record() == {"ts": None, "event": f"bench_{kind}", "host": "h", "step": "bench", **data}


def test_a_callback_that_does_not_fit_its_kind_is_kept_not_raised() -> None:
    ev = events.from_callback("bench_point", "h", "bench", {"arm": "a", "surprise": 1})
    assert isinstance(ev, events.Unknown) and ev.name == "bench_point"
    assert ev.to_record() == {"ts": None, "event": "bench_point", "host": "h", "step": "bench", "arm": "a",
                              "surprise": 1}


def test_check_is_two_shapes_told_apart_by_step_index() -> None:
    preview = events.parse({"ts": 1.0, "event": "check", "host": "h", "step": "s", "step_index": 0,
                            "commands": ["x"], "status": "would run"})
    builtin = events.parse({"ts": 1.0, "event": "check", "host": "h", "step": "s", "check": "c", "ok": True,
                            "lines": []})
    assert isinstance(preview, events.CheckPreview) and isinstance(builtin, events.BuiltinCheck)


def test_emit_is_the_one_writer_stamped_and_masked(tmp_path: Path) -> None:
    remember("t3-very-secret-value")
    seen: list[events.Event] = []
    journal = Journal(tmp_path / "run", on_event=seen.append)
    journal.emit(events.Note(host="h", step="s", message="token t3-very-secret-value here"))
    journal.command("h", "s", CommandResult(command="echo", rc=0, stdout="x" * 3000, stderr="", duration_s=0.5))
    lines = list(read_events(tmp_path / "run"))
    assert [ln["event"] for ln in lines] == ["note", "command"]
    assert "t3-very-secret-value" not in (tmp_path / "run" / "events.jsonl").read_text()
    assert isinstance(seen[0], events.Note) and "t3-very-secret-value" not in seen[0].message
    assert seen[0].ts == lines[0]["ts"] and isinstance(lines[0]["ts"], float)
    command = seen[1]
    assert isinstance(command, events.Command)
    assert command.stdout is None and command.stdout_file == "logs/h/0001.stdout" and command.stderr == ""
    assert set(lines[1]) == {"ts", "event", "host", "step", "command", "rc", "duration_s", "stdout_tail",
                             "stdout_file", "stderr"}


def test_a_kind_this_version_does_not_know_reads_as_unknown() -> None:
    ev = events.parse({"ts": 2.5, "event": "from_the_future", "host": "h", "x": [1]})
    assert isinstance(ev, events.Unknown) and ev.name == "from_the_future"
    assert ev.to_record() == {"ts": 2.5, "event": "from_the_future", "host": "h", "x": [1]}


def test_an_unknown_event_is_written_under_its_own_name(tmp_path: Path) -> None:
    """A callback's misfit is journaled as it came (the name and keys its layer gave)."""
    seen: list[events.Event] = []
    journal = Journal(tmp_path / "run", on_event=seen.append)
    journal.emit(events.from_callback("bench_point", "h", "bench", {"arm": "a", "surprise": 1}))
    (line,) = read_events(tmp_path / "run")
    assert line["event"] == "bench_point" and line["surprise"] == 1
    assert isinstance(seen[0], events.Unknown) and seen[0].name == "bench_point"
