"""The run directory and the sweep order: append as points finish, resume the gaps,
survive a torn line, keep the ABC/CBA interleaving."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import subprocess
import sys

import pytest

from specops.bench.matrix import Point, missing_points, plan_points, points_for_arm
from specops.errors import ConfigError, SpecopsError
from specops.records import store
from specops.records.schema import CSV_COLUMNS, ResultRecord


def _rec(arm: str, c: int, r: int, status: str = "ok", tps: float = 100.0, **kw) -> ResultRecord:
    return ResultRecord(host="local", arm=arm, mechanism="sim", concurrency=c, repeat=r, completed=8,
                        failed=0 if status == "ok" else 8, duration_s=1.0, output_throughput=tps,
                        status=status, error=None if status == "ok" else "server died", **kw)


def test_plan_interleaves_repeats_across_arms():
    points = plan_points(["A", "B", "C"], [4, 1], 3)
    arm_sequence = [arm for arm, _ in itertools.groupby(p.arm for p in points)]
    # ABC, CBA, ABC: C and A are reused across the repeat boundary (one launch each).
    assert arm_sequence == ["A", "B", "C", "B", "A", "B", "C"]
    assert points[:2] == [Point("A", 1, 0), Point("A", 4, 0)]  # levels ascend within an arm's turn
    assert len(points) == 3 * 2 * 3 and len(set(points)) == len(points)
    assert [p.repeat for p in points_for_arm(points, "B")] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("arms, levels, repeats, where", [
    ([], [1], 1, "--arms"), (["a", "a"], [1], 1, "--arms"), (["a"], [0], 1, "--concurrency"),
    (["a"], [1, 1], 1, "--concurrency"), (["a"], [1], 0, "--repeats"),
])
def test_plan_rejects_bad_matrices(arms, levels, repeats, where):
    with pytest.raises(ConfigError) as info:
        plan_points(arms, levels, repeats)
    assert where in str(info.value)


def test_append_writes_jsonl_and_csv_at_once(tmp_path):
    store.append_result(tmp_path, _rec("baseline", 1, 0, accept_length=None))
    store.append_result(tmp_path, _rec("eagle3", 1, 0, accept_length=3.5, raw='{"x": NaN}', input_len=256))
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["raw"] == '{"x": NaN}'
    rows = list(csv.reader((tmp_path / "results.csv").open()))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 3
    second = dict(zip(rows[0], rows[2], strict=True))
    assert second["accept_length"] == "3.5"
    # which run, whether the point counts, and how long the prompts were: on every row
    assert (second["run_id"], second["status"], second["input_len"]) == (tmp_path.name, "ok", "256")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_missing_points_reruns_failed_and_unrun_points(tmp_path):
    matrix = plan_points(["baseline", "eagle3"], [1, 4], 2)
    for p in matrix[:5]:
        store.append_result(tmp_path, _rec(p.arm, p.concurrency, p.repeat, status="failed" if p == matrix[2] else "ok"))
    todo = missing_points(tmp_path, matrix)
    assert todo == [matrix[2]] + matrix[5:]
    # The failed point is re-run and succeeds: the CSV keeps one row per point, the ok one.
    store.append_result(tmp_path, _rec(matrix[2].arm, matrix[2].concurrency, matrix[2].repeat, tps=123.0))
    assert missing_points(tmp_path, matrix) == matrix[5:]
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert len(rows) == 5
    assert [r["output_throughput"] for r in rows if (r["arm"], r["concurrency"], r["repeat"]) ==
            (matrix[2].arm, str(matrix[2].concurrency), str(matrix[2].repeat))] == ["123"]
    # Another host's results do not count for this host.
    assert missing_points(tmp_path, matrix, host="gpu-a") == matrix


def test_torn_last_line_is_skipped_with_warning_and_cut_before_the_next_append(tmp_path, caplog):
    store.append_result(tmp_path, _rec("baseline", 1, 0))
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"host": "local", "arm": "eagle3", "concurr')   # the crash happened here
    with caplog.at_level(logging.WARNING, logger="specops.records.store"):
        records = store.load_results(tmp_path)
    assert [r.arm for r in records] == ["baseline"]
    assert "torn last line" in caplog.text
    store.append_result(tmp_path, _rec("eagle3", 1, 0))
    assert [r.arm for r in store.load_results(tmp_path)] == ["baseline", "eagle3"]
    assert (tmp_path / "results.jsonl").read_text().count("\n") == 2


def test_complete_last_line_without_newline_is_kept(tmp_path):
    (tmp_path / "results.jsonl").write_text(json.dumps(_rec("baseline", 2, 0).to_dict()))
    store.append_result(tmp_path, _rec("eagle3", 2, 0))
    assert [r.arm for r in store.load_results(tmp_path)] == ["baseline", "eagle3"]


def test_corrupt_middle_line_names_file_and_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_rec("baseline", 1, 0).to_dict()) + "\nnot json\n" +
                    json.dumps(_rec("eagle3", 1, 0).to_dict()) + "\n")
    with pytest.raises(SpecopsError) as info:
        store.load_results(tmp_path)
    assert f"{path}:2" in str(info.value)


def test_killed_writer_loses_at_most_the_point_in_flight(tmp_path):
    """A real process appends points and is SIGKILLed mid-way: every line on disk parses."""
    script = (
        "import sys, os, signal\n"
        "from specops.records import store\n"
        "from specops.records.schema import ResultRecord\n"
        "for i in range(1000):\n"
        "    store.append_result(sys.argv[1], ResultRecord(arm='a', concurrency=1, repeat=i), rewrite_csv=False)\n"
        "    if i == 40: os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=60)
    assert proc.returncode == -9
    assert [r.repeat for r in store.load_results(tmp_path)] == list(range(41))


def test_manifest_round_trip_is_atomic_and_sorted(tmp_path):
    assert store.load_manifest(tmp_path).to_dict() == {}
    store.write_manifest(tmp_path, {"b": 1, "a": {"z": [1, 2]}})
    text = (tmp_path / "manifest.json").read_text()
    assert text.index('"a"') < text.index('"b"')
    assert store.load_manifest(tmp_path).to_dict() == {"a": {"z": [1, 2]}, "b": 1}
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(SpecopsError, match="manifest"):
        store.load_manifest(tmp_path)


def test_concurrent_appends_from_threads_keep_every_point(tmp_path):
    """Arms on different hosts report at once: no line is lost or interleaved, CSV complete."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda i: store.append_result(tmp_path, _rec(f"arm{i % 4}", 1, i)), range(40)))
    assert sorted(r.repeat for r in store.load_results(tmp_path)) == list(range(40))
    assert len(list(csv.DictReader((tmp_path / "results.csv").open()))) == 40
