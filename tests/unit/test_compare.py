"""`specops compare`: two runs point by point, differences marked only beyond the spread,
different client settings refused unless allowed."""

from __future__ import annotations

import json
from pathlib import Path

from specops.records import store
from specops.records.schema import ResultRecord
from tests.support.deploy import inventory, run_cli


def _run(root: Path, name: str, tps: dict[str, dict[int, list[float]]], input_len: int = 32) -> Path:
    run = root / name
    for arm, levels in tps.items():
        for c, values in levels.items():
            for r, v in enumerate(values):
                store.append_result(run, ResultRecord(host="gpu-a", arm=arm, mechanism="m", concurrency=c, repeat=r,
                                                      completed=16, output_throughput=v), rewrite_csv=False)
    store.write_manifest(run, {"run_id": name, "bench": {"input_len": input_len, "output_len": 32, "runner": "builtin"}})
    return run


BEFORE = {"baseline": {1: [100, 104], 8: [600, 610]}, "eagle3": {1: [150, 152], 8: [400, 420]}}
AFTER = {"baseline": {1: [101, 103], 8: [605, 615]}, "eagle3": {1: [151, 153], 8: [500, 515]}}


def test_compare_marks_only_differences_beyond_the_spread(tmp_path):
    a, b = _run(tmp_path, "before", BEFORE), _run(tmp_path, "after", AFTER)
    res = run_cli("compare", str(a), str(b), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    points = {(p["arm"], p["concurrency"]): p["runs"] for p in doc["points"]}
    eagle8 = points[("eagle3", 8)][1]
    assert eagle8["beyond_spread"] is True and abs(eagle8["ratio_to_first"] - 507.5 / 410) < 1e-9
    assert points[("baseline", 8)][1]["beyond_spread"] is False  # 600-610 vs 605-615 overlap: noise
    assert points[("eagle3", 1)][1]["beyond_spread"] is False
    out = tmp_path / "compare-before-vs-after"
    assert sorted(p.name for p in out.iterdir()) == ["compare.json", "compare.md", "compare.png"]
    md = (out / "compare.md").read_text()
    assert "| 8 | eagle3 | 410.0 (400-420) | 507.5 (500-515) 1.238x * |" in md
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_shows_each_runs_envelope_and_speculation_tax(tmp_path):
    a = _run(tmp_path, "before", {**BEFORE, "adaptive": {1: [147, 149], 8: [540, 550]}})
    b = _run(tmp_path, "after", {**AFTER, "adaptive": {1: [150, 152], 8: [600, 610]}})
    res = run_cli("compare", str(a), str(b), "--json")
    assert res.exit_code == 0, res.output
    before, after = json.loads(res.output)["runs"]
    # before: adaptive 545 over the better arm's 605 at c=8 (148/151 at c=1)
    assert before["envelope"]["worst"]["concurrency"] == 8
    assert abs(before["envelope"]["worst"]["ratio"] - 545 / 605) < 1e-9
    assert abs(after["envelope"]["mean"] - (151 / 152 + 605 / 610) / 2) < 1e-9
    assert before["speculation_tax"]["source"] == "none"   # no evidence, no threshold in these manifests
    md = (tmp_path / "compare-before-vs-after" / "compare.md").read_text()
    assert "| before | 0.901x at c=8 | 0.940x | n/a (" in md


def test_compare_refuses_runs_with_different_settings_unless_asked(tmp_path):
    a, b = _run(tmp_path, "short", BEFORE), _run(tmp_path, "long", AFTER, input_len=1024)
    res = run_cli("compare", str(a), str(b))
    assert res.exit_code == 2
    assert "different client settings: input_len: 32 in short, 1024 in long" in res.output
    assert "--allow-different" in res.output
    assert not (tmp_path / "compare-short-vs-long").exists()  # nothing written for a refusal
    res = run_cli("compare", str(a), str(b), "--allow-different", "--out", str(tmp_path / "cmp"))
    assert res.exit_code == 0, res.output
    assert "warning: settings differ: input_len" in res.output
    assert "Settings that differ (compared anyway)" in (tmp_path / "cmp" / "compare.md").read_text()


def test_compare_needs_bench_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    res = run_cli("compare", str(tmp_path / "empty"), str(tmp_path / "empty"))
    assert res.exit_code == 2 and "has no results.jsonl (not a bench run directory)" in res.output


def test_report_json_and_report_of_two_runs_points_to_compare(tmp_path):
    a, b = _run(tmp_path, "before", BEFORE), _run(tmp_path, "after", AFTER)
    res = run_cli("report", str(a), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)  # stdout is the document and nothing else
    assert doc["schema"] == "specops.summary/2" and doc["hosts"][0]["host"] == "gpu-a"
    res = run_cli("report", str(a), str(b))
    assert res.exit_code == 2 and f"specops compare {a} {b}" in res.output


def test_stop_json_on_a_host_with_nothing_running(tmp_path):
    inv = inventory(tmp_path, {"box": {"connection": "local", "workdir": str(tmp_path / "w")}})
    res = run_cli("stop", "--host", "box", "-i", str(inv), "--json")
    assert res.exit_code == 0 and json.loads(res.output) == {"ok": True, "hosts": {"box": []}}
