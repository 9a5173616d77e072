"""The one threshold rule (decide/threshold.py): its units, and that the report, summary.json
and `specops tune` give the same threshold for the same points."""

from __future__ import annotations

import json
from pathlib import Path

from specops.decide.threshold import (
    UNIT_CONCURRENCY,
    UNIT_RUNNING,
    LevelPoint,
    choose,
)
from specops.decide.tune import Levels, choose_threshold
from specops.records import store
from specops.records.schema import ResultRecord
from specops.report.artifacts import render_report
from specops.report.summary import summarize
from specops.report.words import NO_RUNNING, threshold_choice_text, threshold_reason


def test_running_batch_units_from_the_p90_at_the_last_winning_level() -> None:
    got = choose([LevelPoint(1, 2.0, 1, 1), LevelPoint(4, 1.2, 3, 3.6), LevelPoint(8, 0.8, 7, 8)])
    assert (got.threshold, got.unit, got.level, got.losing_level) == (3, UNIT_RUNNING, 4, 8)
    assert threshold_choice_text(got) == "3 (speculate while the running batch is <= 3)"


def test_kept_below_the_median_running_batch_of_the_first_losing_level() -> None:
    got = choose([LevelPoint(4, 1.1, 4, 6), LevelPoint(5, 0.9, 5, 6)])
    assert got.threshold == 4 and "kept below the median running batch 5 at c=5" in threshold_reason(got)


def test_concurrency_units_where_the_server_reported_no_running_batch() -> None:
    got = choose([LevelPoint(1, 1.5), LevelPoint(4, 1.01), LevelPoint(8, 0.7)])
    assert (got.threshold, got.unit) == (4, UNIT_CONCURRENCY)
    assert threshold_choice_text(got) == f"4 (speculate while concurrency is <= 4; {NO_RUNNING})"


def test_a_noisy_win_above_a_loss_does_not_count_and_no_win_means_no_threshold() -> None:
    assert choose([LevelPoint(1, 1.3), LevelPoint(2, 0.95), LevelPoint(4, 1.2)]).threshold == 1
    none = choose([LevelPoint(1, 0.99), LevelPoint(2, 1.3)])
    assert none.threshold is None and threshold_choice_text(none).startswith("none: EAGLE-3 is slower than baseline")
    top = choose([LevelPoint(1, 1.3, 1, 1), LevelPoint(2, 1.3, 2, 2)])
    assert top.top and top.threshold == 2 and "highest level measured, c=2" in threshold_choice_text(top)


def _records(ratios: dict[int, float], running: dict[int, tuple[float, float]] | None) -> list[ResultRecord]:
    """Baseline 100 tok/s x c; EAGLE-3 at the given ratio; its running batch where given."""
    out = []
    for c, ratio in ratios.items():
        for arm, tps in (("baseline", 100.0 * c), ("eagle3", 100.0 * c * ratio)):
            for r in range(2):
                rec = ResultRecord(host="h", arm=arm, concurrency=c, repeat=r, status="ok",
                                   output_throughput=tps, input_len=8, output_len=8, num_prompts=16)
                if running is not None:
                    rec.running_req_p50, rec.running_req_p90 = running[c]
                out.append(rec)
    return out


# EAGLE-3 wins by 2% at c=5: the report's old rule (a 1.05x margin, in concurrency units) said
# 4, tune's (the running-batch p90 at c=5) said 5; one rule now, and it says 5.
RATIOS = {1: 2.0, 2: 1.8, 4: 1.2, 5: 1.02, 6: 0.9, 8: 0.8}
RUNNING = {1: (1.0, 1.0), 2: (2.0, 2.0), 4: (3.5, 4.0), 5: (4.5, 5.0), 6: (6.0, 7.0), 8: (7.0, 8.0)}


def test_report_summary_json_and_tune_agree_on_the_same_points(tmp_path: Path) -> None:
    records = _records(RATIOS, RUNNING)
    host = summarize(records, {}).hosts[0]
    tuned = choose_threshold(Levels.of(records, "h"))
    assert host.threshold == tuned.threshold == 5
    assert host.threshold_choice == tuned
    assert "recommended threshold: 5 (speculate while the running batch is <= 5)" in summarize(records, {}).headline
    for rec in records:
        store.append_result(tmp_path, rec, rewrite_csv=False)
    store.write_manifest(tmp_path, {"run_id": "r"})
    render_report(tmp_path, plots=False)
    doc = json.loads((tmp_path / "summary.json").read_text())
    (h,) = doc["hosts"]
    assert h["recommended_threshold"] == 5 and h["threshold_unit"] == UNIT_RUNNING
    assert h["threshold_text"] == "5 (speculate while the running batch is <= 5)"
    assert "speculate while the running batch is <= 5" in (tmp_path / "report.md").read_text()


def test_without_running_batch_both_say_concurrency() -> None:
    records = _records(RATIOS, None)
    summary = summarize(records, {})
    tuned = choose_threshold(Levels.of(records, "h"))
    assert summary.hosts[0].threshold == tuned.threshold == 5 and tuned.unit == UNIT_CONCURRENCY
    assert f"recommended threshold: 5 (speculate while concurrency is <= 5; {NO_RUNNING})" in summary.headline
