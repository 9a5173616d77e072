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


# ----- bounds (issue 55 point 5): no line asks for more than a run can hold ---------------

def _row(**kw: object) -> str:
    return json.dumps({"timestamp": 5, "input_length": 4, "output_length": 2, **kw})


@pytest.mark.parametrize(("line", "message"), [
    pytest.param(_row(input_length=10**12), "'input_length' is 1000000000000 tokens: at most", id="input-length"),
    pytest.param(_row(output_length=10**9), "'output_length' is 1000000000 tokens: at most", id="output-length"),
    pytest.param(_row(timestamp=1e300), "'timestamp' is 1e+300 ms: at most", id="timestamp-huge"),
    pytest.param('{"timestamp": NaN, "input_length": 4, "output_length": 2}', "'timestamp' must be a number >= 0",
                 id="timestamp-nan"),
    pytest.param('{"timestamp": Infinity, "input_length": 4, "output_length": 2}',
                 "'timestamp' must be a number >= 0", id="timestamp-inf"),
    pytest.param('{"timestamp": 5, "input_length": 4, "output_length": 2, "x": ' + "[" * 5000 + "]" * 5000 + "}",
                 "nested deeper than", id="nesting"),          # once an uncaught RecursionError
    pytest.param(_row(hash_ids=list(range(20_000))), "bytes long: at most", id="line-size"),
    pytest.param('{"timestamp": 5, "input_length": ' + "9" * 5000 + ', "output_length": 2}', "not a JSON object",
                 id="huge-integer"),                    # once an uncaught ValueError
])
def test_a_line_past_a_bound_is_refused_naming_file_line_and_limit(tmp_path: Path, line: str, message: str) -> None:
    path = _write(tmp_path, ['{"timestamp": 0, "input_length": 4, "output_length": 2}', line])
    with pytest.raises(ConfigError) as err:
        read_trace(path)
    assert message in str(err.value) and err.value.where == f"{path}:2", str(err.value)


def test_a_line_nested_as_deep_as_python_allows_is_a_config_error_not_a_traceback(tmp_path: Path) -> None:
    deep = '{"timestamp": 5, "input_length": 4, "output_length": 2, "x": ' + "[" * 30_000 + "]" * 30_000 + "}"
    with pytest.raises(ConfigError, match="nested deeper than") as err:
        read_trace(_write(tmp_path, [deep]))
    assert err.value.where == f"{tmp_path / 'trace.jsonl'}:1"


def test_a_trace_spanning_more_than_a_day_is_refused(tmp_path: Path) -> None:
    from specops.bench import trace as module
    day_ms = module.MAX_SPAN_S * 1000
    path = _write(tmp_path, [_row(timestamp=10), _row(timestamp=day_ms + 11)])
    with pytest.raises(ConfigError, match=r"spans 86400.001 s: at most 86400 s") as err:
        read_trace(path)
    assert err.value.where == str(path)
    assert read_trace(_write(tmp_path, [_row(timestamp=10), _row(timestamp=day_ms + 10)])).duration_s == 86_400


def test_a_trace_whose_prompts_would_not_fit_in_memory_is_refused(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specops.bench.trace.MAX_TOTAL_INPUT_TOKENS", 10)
    path = _write(tmp_path, [_row(input_length=6), _row(input_length=6)])
    with pytest.raises(ConfigError, match="more than 10 input tokens in all") as err:
        read_trace(path)
    assert err.value.where == f"{path}:2"


def test_a_file_larger_than_the_cap_is_refused_before_it_is_read(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("specops.bench.trace.MAX_FILE_BYTES", 100)
    path = _write(tmp_path, [_row()] * 5)
    with pytest.raises(ConfigError, match="bytes: at most 100") as err:
        read_trace(path)
    assert err.value.where == str(path)


def test_an_ordinary_mooncake_line_is_well_inside_every_bound(tmp_path: Path) -> None:
    line = _row(timestamp=1_700_000_000_000, input_length=128_000, output_length=8_192, hash_ids=list(range(250)))
    assert read_trace(_write(tmp_path, [line])).requests == (TraceRequest(0.0, 128_000, 8_192),)
