"""The end-of-sweep fairness check compares the probe's arm with itself: the side-by-side
figures it takes from results.jsonl are that arm's, at that level, at the repeats measured
side by side (it once took every arm's, so baseline's and EAGLE-3's figures were mixed into
one spread, whose width let any difference pass)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from specops.bench.matrix import Point
from specops.bench.sweep import HostSweep
from specops.records.schema import ResultRecord
from specops.records.store import append_result


def record(arm: str, c: int, repeat: int, tput: float, host: str = "h") -> ResultRecord:
    return ResultRecord(host=host, arm=arm, concurrency=c, repeat=repeat, status="ok",
                        output_throughput=tput, completed=4, failed=0)


def test_side_figures_are_the_probe_arms_own_at_its_level(tmp_path: Path) -> None:
    for rec in [record("baseline", 8, 0, 500.0), record("eagle3", 8, 0, 300.0),
                record("baseline", 8, 1, 510.0), record("eagle3", 8, 1, 305.0),
                record("baseline", 16, 1, 700.0), record("baseline", 8, 2, 999.0),  # another level; not side by side
                record("baseline", 8, 1, 111.0, host="other")]:
        append_result(tmp_path, rec, rewrite_csv=False)
    together = [Point(a, c, r) for a in ("baseline", "eagle3") for c in (8, 16) for r in (0, 1)]
    sweep = SimpleNamespace(run_dir=tmp_path, host=SimpleNamespace(name="h"))
    assert sorted(HostSweep._side_figures(sweep, Point("baseline", 8, 0), together)) == [500.0, 510.0]
    assert sorted(HostSweep._side_figures(sweep, Point("eagle3", 8, 0), together)) == [300.0, 305.0]
