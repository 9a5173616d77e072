"""Issue 12: `bench --resume DIR --extend` adds levels and repeats to a run (the points it has
are kept, never run again); `bench --json` prints summary.json and nothing else on stdout;
`specops -q` prints only the result lines."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

TINY = ["--arms", "baseline", "--input-len", "32", "--output-len", "16"]


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def test_extend_adds_levels_and_repeats_and_keeps_the_points_it_has(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    run = tmp_path / "run"
    bench = ("bench", "--host", "gpu", "-i", str(inv))
    first = run_cli(*bench, *TINY, "--concurrency", "1", "--repeats", "1", "--out", str(run), "--json")
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)  # stdout is the document, nothing else
    assert doc == json.loads((run / "summary.json").read_text())
    assert [(p["arm"], p["concurrency"], p["repeats"]) for p in doc["hosts"][0]["points"]] == [("baseline", 1, 1)]
    assert "bench: ok (1 host)" in first.stderr and " point " not in first.stderr  # no progress with --json
    measured = (run / "results.jsonl").read_text()

    refused = run_cli(*bench, "--resume", str(run), "--concurrency", "1,2")
    assert refused.exit_code == 2, refused.output
    assert "--concurrency 1,2 differs from the run's --concurrency 1" in refused.output
    assert "add --extend to add levels or repeats" in refused.output
    other = run_cli(*bench, "--resume", str(run), "--extend", "--concurrency", "2", "--seed", "9")
    assert other.exit_code == 2, other.output
    assert "--seed 9 differs from the run's --seed 1" in other.output
    assert "--extend adds only --concurrency levels and --repeats" in other.output
    alone = run_cli(*bench, "--extend", "--concurrency", "2")
    assert alone.exit_code == 2 and "give --resume DIR with it" in alone.output, alone.output
    assert (run / "results.jsonl").read_text() == measured  # nothing ran

    extended = run_cli("-q", *bench, "--resume", str(run), "--extend", "--concurrency", "2", "--repeats", "2")
    assert extended.exit_code == 0, extended.output
    assert "--extend keeps the run's points at concurrency 1 (not in --concurrency 2)" in extended.output
    # -q: the result lines only; no step or point lines, no table
    assert " 1/9 " not in extended.output and " point " not in extended.output and "┏" not in extended.output
    assert "bench: ok (1 host)" in extended.output and f"report: {run / 'report.md'}" in extended.output
    records = _records(run)
    assert (run / "results.jsonl").read_text().startswith(measured)  # the first point was kept, not re-run
    assert sorted((r["concurrency"], r["repeat"]) for r in records) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["bench"]["concurrency"] == [1, 2] and manifest["bench"]["repeats"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert [(p["concurrency"], p["repeats"]) for p in summary["hosts"][0]["points"]] == [(1, 2), (2, 2)]
    assert summary["settings"]["concurrency"] == [1, 2]
    assert "| 2 |" in (run / "report.md").read_text()

    again = run_cli(*bench, "--resume", str(run), "--extend", "--concurrency", "1,2", "--repeats", "2")
    assert again.exit_code == 0, again.output
    assert len(_records(run)) == 4  # nothing to add: nothing ran
