"""Issue 34 point 3: a user's trace file (the Mooncake JSONL that SGLang's bench_serving and
AIPerf replay) is read once, up front, into arrival offsets and lengths; a bad line stops the
run naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.bench.trace import MAX_REQUESTS, TraceRequest, read_trace
from specops.errors import ConfigError


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_offsets_come_from_the_earliest_timestamp_in_arrival_order(tmp_path: Path) -> None:
    rows = [{"timestamp": 27482, "input_length": 655, "output_length": 52, "hash_ids": [46, 47]},
            {"timestamp": 10000, "input_length": 672, "output_length": 26},
            {"timestamp": 10535, "input_length": 655, "output_length": 52},
            {"timestamp": 10535, "input_length": 7, "output_length": 3}]
    path = _write(tmp_path, [json.dumps(r) for r in rows[:2]] + [""] + [json.dumps(r) for r in rows[2:]])
    trace = read_trace(path)
    assert trace.requests == (TraceRequest(0.0, 672, 26), TraceRequest(0.535, 655, 52),
                              TraceRequest(0.535, 7, 3), TraceRequest(17.482, 655, 52))
    assert trace.duration_s == 17.482 and trace.mean_rate == pytest.approx(3 / 17.482)
    assert len(trace.sha256) == 64 and "4 requests over 17.5 s" in trace.describe()


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "not a JSON object"),
    ("[1, 2]", "must be a JSON object, got list"),
    ('{"timestamp": 1, "input_length": 4}', "missing 'output_length'"),
    ('{"timestamp": -1, "input_length": 4, "output_length": 2}', "'timestamp' must be a number >= 0, got -1"),
    ('{"timestamp": "5", "input_length": 4, "output_length": 2}', "'timestamp' must be a number >= 0, got '5'"),
    ('{"timestamp": 5, "input_length": 0, "output_length": 2}', "'input_length' must be a whole number"),
    ('{"timestamp": 5, "input_length": 4, "output_length": 2.5}', "'output_length' must be a whole number"),
    ('{"timestamp": 5, "input_length": true, "output_length": 2}', "'input_length' must be a whole number"),
])
def test_a_bad_line_is_named_by_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write(tmp_path, ['{"timestamp": 0, "input_length": 4, "output_length": 2}', line])
    with pytest.raises(ConfigError) as err:
        read_trace(path)
    assert message in str(err.value) and err.value.where == f"{path}:2"


def test_an_empty_or_missing_trace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no requests"):
        read_trace(_write(tmp_path, ["", "  "]))
    with pytest.raises(ConfigError, match="cannot read the trace"):
        read_trace(tmp_path / "absent.jsonl")


def test_a_trace_longer_than_the_cap_is_refused_at_the_first_line_past_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specops.bench.trace.MAX_REQUESTS", 3)
    path = _write(tmp_path, [json.dumps({"timestamp": i, "input_length": 1, "output_length": 1}) for i in range(4)])
    with pytest.raises(ConfigError, match="more than 3 requests") as err:
        read_trace(path)
    assert err.value.where == f"{path}:4" and MAX_REQUESTS == 100_000
