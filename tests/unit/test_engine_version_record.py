"""Issue 55: a bench run's manifest stored vLLM's release under `sglang_version`. Runs record
the engine (`hosts.<h>.engine`) and its release (`engine_version`); a manifest written before
(`sglang_version`) still reads, as the same release, and is written back byte for byte."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from specops.records import store
from specops.records.manifest import Manifest
from specops.records.schema import ResultRecord
from specops.report.artifacts import render_report
from specops.report.markdown import engine_label
from specops.report.summary_doc import summary_document
from specops.servers.launch import LaunchPlan
from specops.servers.records import ServerState

OLD = {"run_id": "r0", "sglang_version": "0.5.10.post1", "sglang_commit": "abc",
       "hosts": {"gpu": {"engine": "sglang", "sglang_version": "0.5.10.post1"}}}
NEW = {"run_id": "r1", "engine_version": "0.31.0", "hosts": {"cpu": {"engine": "vllm", "engine_version": "0.31.0"}}}


def test_an_old_manifest_reads_its_release_and_writes_back_the_same_bytes(tmp_path: Path) -> None:
    store.write_manifest(tmp_path, OLD)
    before = (tmp_path / store.MANIFEST_JSON).read_bytes()
    manifest = store.load_manifest(tmp_path)
    assert manifest.header("engine_version") == manifest.engine_release() == "0.5.10.post1"
    host = manifest.host_facts("gpu")
    assert host is not None and host.engine_release() == "0.5.10.post1" and not manifest.extra
    store.write_manifest(tmp_path, manifest)
    assert (tmp_path / store.MANIFEST_JSON).read_bytes() == before


def test_a_vllm_run_records_vllms_release_as_the_engines() -> None:
    manifest = Manifest.from_dict(NEW)
    assert not manifest.extra and manifest.sglang_version is None
    assert (engine_label(manifest), manifest.header("engine_version")) == ("vLLM", "0.31.0")
    host = manifest.host_facts("cpu")
    assert host is not None and (host.engine, host.engine_release()) == ("vllm", "0.31.0")
    assert "sglang_version" not in manifest.to_dict()


def test_the_summary_names_the_engine_of_a_run_that_recorded_it() -> None:
    from specops.report.summary import summarize

    summary = summarize([], NEW)
    doc = summary_document(summary, NEW)
    assert doc["engine"] == {"name": "vLLM", "version": "0.31.0"}
    assert "engine" not in summary_document(summarize([], OLD), OLD)  # an old run's summary stays as it was


# ----- issue 56: the per-point records and the state files say engine_version too -----------

#: bench_run_main's results.jsonl as main wrote it before records named the engine: `sglang_version`
OLD_RESULTS = Path(__file__).resolve().parents[1] / "data" / "results_sglang_version"
RUN = Path(__file__).resolve().parents[1] / "data" / "bench_run_main"


def test_old_results_read_their_release_as_the_engines_and_report_the_same(tmp_path: Path) -> None:
    """Results written with `sglang_version` load as engine_version, nothing left over in
    `extra`, are appended back under the new name, and the run's report is the one main wrote."""
    assert (OLD_RESULTS / store.RESULTS_JSONL).read_bytes().count(b'"sglang_version": "0.5.10.post1"') == 4
    records = store.load_results(OLD_RESULTS)
    assert [r.engine_version for r in records] == ["0.5.10.post1"] * 4
    assert all("sglang_version" not in r.extra and r.engine is None for r in records)
    stored = store.append_result(tmp_path / "again", records[0])
    line = (tmp_path / "again" / store.RESULTS_JSONL).read_text()
    assert '"engine_version": "0.5.10.post1"' in line and "sglang_version" not in line
    assert stored.engine_version == "0.5.10.post1"
    run = tmp_path / "run"   # the run id is the folder's name: the same as the one it was made in
    run.mkdir()
    shutil.copy(OLD_RESULTS / store.RESULTS_JSONL, run / store.RESULTS_JSONL)
    shutil.copy(RUN / store.MANIFEST_JSON, run / store.MANIFEST_JSON)
    render_report(run, plots=False)
    for name in ("report.md", "summary.json"):
        assert (run / name).read_text() == (RUN / name).read_text(), name


def test_a_record_with_both_names_keeps_the_new_one() -> None:
    record = ResultRecord.from_dict({"host": "h", "arm": "a", "concurrency": 1, "engine": "vllm",
                                     "engine_version": "0.32.0", "sglang_version": "0.31.0"})
    assert (record.engine, record.engine_version, record.extra) == ("vllm", "0.32.0", {"sglang_version": "0.31.0"})


def test_an_old_state_file_reads_its_release_as_the_engines() -> None:
    """A state file launched before the rename (`sglang_version`) still reads (`status`, `stop`,
    a resumed run's reuse check), and its args_hash input is unchanged."""
    state = {"arm": "baseline", "kind": "baseline", "pid": 4242, "pgid": 4242, "proc_start": "1", "port": 30000,
             "command": "x", "argv": ["x"], "env": {}, "args_hash": "h", "log_path": "/w/.specops/l.log",
             "state_path": "/w/.specops/servers/baseline.json", "mechanism": "none", "started_at": 0.0,
             "workdir": "/w", "sglang_version": "0.5.10.post1"}
    read = ServerState.from_json(json.dumps(state))
    assert read.engine_version == "0.5.10.post1"
    assert '"engine_version": "0.5.10.post1"' in read.to_json().decode()
    plan = LaunchPlan(arm="a", kind="baseline", port=1, argv=["x"], env={}, mechanism="none", workdir="/w",
                      log_path="/l", state_path="/s", engine_version="0.5.10.post1")
    old_hash = hashlib.sha256(json.dumps({"argv": ["x"], "env": [], "config": None, "sglang_version": "0.5.10.post1"},
                                         sort_keys=True).encode()).hexdigest()
    assert plan.args_hash == old_hash
