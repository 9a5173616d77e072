"""Every bench point of an adaptive arm says whether drafting was off during it and for what
share of its decode steps, from the server's own log (issue 21); the report shows it beside
the point. The simulator logs the same transition lines as the patched SGLang."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.arms import arm_vars, sim_inventory
from tests.support.deploy import run_cli


def test_adaptive_points_record_drafting_off_above_the_threshold(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")},
                        arms=arm_vars(threshold=4)["arms"])
    out = tmp_path / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,adaptive", "--concurrency", "2,16",
                  "--repeats", "1", "--input-len", "16", "--output-len", "96", "--out", str(out))
    assert res.exit_code == 0, res.output
    records = {(r["arm"], r["concurrency"]): r for r in
               (json.loads(x) for x in (out / "results.jsonl").read_text().splitlines())}
    low, high = records["adaptive", 2], records["adaptive", 16]
    assert low["drafting_off"] is False and low["drafting_off_share"] == 0.0
    assert high["drafting_off"] is True and high["drafting_off_share"] >= 0.5, high
    assert high["drafting_transitions"] >= 1
    assert records["baseline", 16]["drafting_off"] is None  # no mechanism, nothing to say
    report = (out / "report.md").read_text()
    assert "| drafting |" in report and f"off {high['drafting_off_share']:.0%}" in report
