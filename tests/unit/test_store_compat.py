"""Old run directories still read: tests/data/bench_run_main is a run made by main before
results became typed records (`specops bench` on the simulator, baseline and eagle3 at c=1,4,
eagle3 crashing in its c=4 point; paths rewritten to /srv/specops, and report.html rendered
without plots). Its files are today's format; these tests fail where that format drifts."""

from __future__ import annotations

import shutil
from pathlib import Path

from specops.records import store
from specops.records.schema import STATUS_FAILED, ResultRecord
from specops.report.artifacts import render_report

RUN = Path(__file__).resolve().parents[1] / "data" / "bench_run_main"


def _copy(tmp_path: Path) -> Path:
    run = tmp_path / "run"   # the run id is the folder's name: the same as the one it was made in
    run.mkdir()
    for name in (store.RESULTS_JSONL, store.MANIFEST_JSON):
        shutil.copy(RUN / name, run / name)
    return run


def test_an_old_run_loads_as_records_with_its_failure() -> None:
    records = store.load_results(RUN)
    assert all(isinstance(r, ResultRecord) for r in records)
    assert [(r.arm, r.concurrency, r.status) for r in records] == [
        ("baseline", 1, "ok"), ("baseline", 4, "ok"), ("eagle3", 1, "ok"), ("eagle3", 4, STATUS_FAILED)]
    failed = records[-1]
    assert failed.error is not None and failed.error.startswith("server 'eagle3' crashed during the point")
    assert "Scheduler hit an exception" in failed.extra["log_excerpt"]
    assert failed.server is not None and failed.server["config_hash"]
    manifest = store.load_manifest(RUN)
    assert manifest.settings().concurrency == [1, 4]
    host = manifest.host_facts("gpu")
    assert host is not None and host.arms is not None and host.scheduling is not None
    assert host.arms["eagle3"].mechanism == "eagle3" and host.arms["baseline"].effective_threshold is None
    assert host.scheduling.mode == "one-arm-at-a-time" and host.sglang_commit == manifest.sglang_commit


def test_the_manifest_written_again_is_the_same_bytes(tmp_path: Path) -> None:
    """Every part read typed (nothing left to `extra`), and written back byte for byte."""
    manifest = store.load_manifest(RUN)
    host = manifest.host("gpu")
    assert not manifest.extra and not host.extra and manifest.bench is not None and not manifest.bench.extra
    assert all(not arm.extra for arm in (host.arms or {}).values())
    store.write_manifest(tmp_path, manifest)
    assert (tmp_path / store.MANIFEST_JSON).read_bytes() == (RUN / store.MANIFEST_JSON).read_bytes()


def test_records_written_again_are_the_same_bytes(tmp_path: Path) -> None:
    for rec in store.load_results(RUN):
        store.append_result(tmp_path, rec, rewrite_csv=False)
    assert (tmp_path / store.RESULTS_JSONL).read_bytes() == (RUN / store.RESULTS_JSONL).read_bytes()


def test_the_report_of_an_old_run_is_the_one_main_wrote(tmp_path: Path) -> None:
    run = _copy(tmp_path)
    render_report(run, plots=False)
    store.write_csv(run)
    for name in ("report.md", "summary.json", "report.html", store.RESULTS_CSV):
        assert (run / name).read_text() == (RUN / name).read_text(), name
