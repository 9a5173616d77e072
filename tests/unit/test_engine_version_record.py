"""Issue 55: a bench run's manifest stored vLLM's release under `sglang_version`. Runs record
the engine (`hosts.<h>.engine`) and its release (`engine_version`); a manifest written before
(`sglang_version`) still reads, as the same release, and is written back byte for byte."""

from __future__ import annotations

from pathlib import Path

from specops.records import store
from specops.records.manifest import Manifest
from specops.report.markdown import engine_label
from specops.report.summary_doc import summary_document

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
