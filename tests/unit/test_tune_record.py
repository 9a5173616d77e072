"""tune.json's one reader and one writer (records/tune.py): what decide/tune.py and
report/tune.py make is written as it is and read back; a file that is not a JSON object
reads as no tuning (the report then has no Tuning section) rather than failing the report."""

from __future__ import annotations

from pathlib import Path

from specops.decide.tune import TuneResult, tune_document
from specops.records.tune import TUNE_JSON, load_tune, write_tune
from specops.report.tune import lengths_document


def test_a_tune_document_is_written_and_read_back(tmp_path: Path) -> None:
    result = TuneResult(host="gpu", status="verified", threshold=6, tiers={1: 3, 7: 0}, input_len=256, output_len=64)
    doc = tune_document(result, {"coarse": [1, 4, 16], "seed": 1})
    assert write_tune(tmp_path, doc) == tmp_path / TUNE_JSON
    read = load_tune(tmp_path)
    assert read is not None and read["schema"] == "specops.tune/1" and read["settings"]["coarse"] == [1, 4, 16]
    assert read["result"]["threshold"] == 6 and read["result"]["tiers"] == {"1": 3, "7": 0}


def test_a_several_length_document_goes_through_the_same_writer(tmp_path: Path) -> None:
    short = TuneResult(host="gpu", status="verified", threshold=8, input_len=256, output_len=64, measured_points=12)
    long = TuneResult(host="gpu", status="unverified", threshold=3, input_len=4096, output_len=64, reused_points=5)
    write_tune(tmp_path, lengths_document([(tmp_path / "a", short), (tmp_path / "b", long)], (256, 64), None))
    read = load_tune(tmp_path)
    assert read is not None and read["schema"] == "specops.tune-lengths/1"
    assert [row["threshold"] for row in read["lengths"]] == [8, 3]
    assert (read["measured_points"], read["reused_points"]) == (12, 5)


def test_no_file_or_a_file_that_is_not_an_object_reads_as_none(tmp_path: Path) -> None:
    assert load_tune(tmp_path) is None
    (tmp_path / TUNE_JSON).write_text("[1, 2]\n")
    assert load_tune(tmp_path) is None
    (tmp_path / TUNE_JSON).write_text("{torn")
    assert load_tune(tmp_path) is None
