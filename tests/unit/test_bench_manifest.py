"""The bench manifest's one reader, one writer and one update (records/manifest.py): typed
parts, the file unchanged byte for byte, `dict.setdefault`/`update` semantics for writers,
and hosts writing their parts from threads without losing one another's."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specops.records import manifest as run_manifest
from specops.records.manifest import ArmRecord, Manifest, RunSettings, Scheduling
from specops.secrets import MASK, remember

RUN = Path(__file__).resolve().parents[1] / "data" / "bench_run_main"


def test_odd_manifests_read_back_to_the_same_json() -> None:
    """Unknown keys, nulls, absent keys and values of another type stay as they were."""
    for data in ({}, {"b": 1, "a": {"z": [1, 2]}}, {"arms": {}}, {"bench": None, "hosts": [1]},
                 {"run_id": 7, "gpu_count": True, "bench": {"input_len": [], "slo": None, "new_setting": 1}},
                 {"hosts": {"h": {"arms": {"x": {"threshold": True, "effective_threshold": None}},
                                  "scheduling": {"mode": "x"}, "sglang_commit": None}}}):
        assert Manifest.from_dict(data).to_dict() == data, data


def test_readers_get_attributes_and_ill_typed_values_read_as_absent() -> None:
    m = Manifest.from_dict({"run_id": 7, "bench": {"concurrency": [1, 4], "input_len": [32, 64]},
                            "hosts": {"h": {"arms": {"adaptive": {"effective_threshold": 8, "notes": []}}}}})
    assert m.run_id is None and m.extra["run_id"] == 7
    assert m.settings().concurrency == [1, 4] and m.settings().input_len == [32, 64]
    host = m.host_facts("h")
    assert host is not None and host.arms is not None and host.arms["adaptive"].effective_threshold == 8
    assert m.host_facts("other") is None and Manifest().settings() == RunSettings()


def test_writers_see_dict_semantics() -> None:
    m = Manifest.from_dict({"sglang_commit": None})
    m.set_default("sglang_commit", "abc")   # present (null): kept, as dict.setdefault would
    m.set_default("run_id", "r1")
    host = m.host("gpu")
    host.merge({"engine": "sim", "gpu_count": 0, "gpus": {"n": 0}})
    host.merge({"engine": None})             # dict.update: null replaces
    host.arm_records()["baseline"] = ArmRecord.from_dict({"command": "x", "effective_threshold": None})
    host.scheduling = Scheduling("one-arm-at-a-time", "why")
    assert m.to_dict() == {"sglang_commit": None, "run_id": "r1", "hosts": {"gpu": {
        "engine": None, "gpu_count": 0, "gpus": {"n": 0},
        "arms": {"baseline": {"command": "x", "effective_threshold": None}},
        "scheduling": {"mode": "one-arm-at-a-time", "reason": "why", "asked": "auto", "fairness": []}}}}


def test_the_writer_masks_secrets_and_sorts_keys(tmp_path: Path) -> None:
    remember("hf_manifestsecret123")
    run_manifest.write(tmp_path, {"run_id": "r", "hosts": {"h": {"arms": {"a": {
        "command": "serve --api-key hf_manifestsecret123"}}}}})
    text = (tmp_path / "manifest.json").read_text()
    assert "hf_manifestsecret123" not in text and MASK in text
    assert text.index('"hosts"') < text.index('"run_id"') and text.endswith("}\n")


def test_hosts_updating_from_threads_keep_every_part(tmp_path: Path) -> None:
    def one(i: int) -> None:
        def change(m: Manifest) -> None:
            m.host(f"h{i}").merge({"engine": "sim"})
            m.set_default("run_id", "r")
        run_manifest.update(tmp_path, change)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(24)))
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert set(data["hosts"]) == {f"h{i}" for i in range(24)} and data["run_id"] == "r"


def test_the_run_from_main_round_trips_through_update(tmp_path: Path) -> None:
    """An update that changes nothing writes back the file as main wrote it."""
    (tmp_path / "manifest.json").write_bytes((RUN / "manifest.json").read_bytes())
    run_manifest.update(tmp_path, lambda m: None)
    assert (tmp_path / "manifest.json").read_bytes() == (RUN / "manifest.json").read_bytes()
