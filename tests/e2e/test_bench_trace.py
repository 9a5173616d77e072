"""`specops bench --trace FILE` end to end on the local simulated host (issue 34 point 3): a
user's trace (the Mooncake JSONL bench_serving replays) is read up front, uploaded to the host
once, and replayed against every arm with its own arrivals and lengths; the record says which
trace it replayed; a bad trace, or a trace beside other load options, is refused before
anything runs; a resumed run refuses a trace file that changed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from specops.records import store
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

#: twelve requests over 2.4 s in two bursts, each with its own lengths
ROWS = [{"timestamp": 1000 + t, "input_length": i, "output_length": o, "hash_ids": [1]}
        for t, i, o in ((0, 16, 8), (50, 24, 12), (60, 32, 16), (70, 16, 24), (400, 48, 8), (410, 16, 32),
                        (2000, 24, 8), (2010, 32, 12), (2020, 16, 16), (2300, 40, 8), (2350, 16, 20), (2400, 24, 8))]


def _trace(tmp_path: Path, rows: list[dict] = ROWS) -> Path:
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _inventory(tmp_path: Path) -> Path:
    return sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")},
                         sim={"time_scale": 0.005, "noise": 0})


@pytest.mark.slow
def test_a_trace_is_replayed_against_every_arm(tmp_path: Path) -> None:
    trace, inv, out = _trace(tmp_path), _inventory(tmp_path), tmp_path / "run"
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--trace", str(trace),
                  "--repeats", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    sha = hashlib.sha256(trace.read_bytes()).hexdigest()
    recs = store.load_results(out)
    assert sorted(r.arm for r in recs) == ["baseline", "eagle3"]
    for rec in recs:
        assert rec.ok and rec.completed == 12 and rec.arrival == "trace" and rec.rate == round(11 / 2.4, 6)
        assert rec.extra["trace"]["sha256"] == sha and rec.extra["trace"]["requests"] == 12
        # the trace's own lengths, request by request
        assert rec.total_output_tokens == sum(r["output_length"] for r in ROWS)
        assert rec.total_input_tokens == sum(r["input_length"] for r in ROWS)
        # its own arrivals, on the simulator's model clock: the point spans at least the 2.4 s they do
        assert rec.extra["clock"] == "sim-model" and rec.duration_s > 2.4
    uploaded = tmp_path / "w/.specops/bench" / f"trace-{sha[:16]}.jsonl"
    assert uploaded.read_bytes() == trace.read_bytes()   # once, beside the server
    bench = json.loads((out / "manifest.json").read_text())["bench"]
    assert bench["trace"] == str(trace) and bench["trace_sha256"] == sha
    # a resumed run replays the same file, or none
    trace.write_text(trace.read_text().replace('"output_length": 8', '"output_length": 9', 1))
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--resume", str(out))
    assert res.exit_code == 2 and "changed since the run replayed it" in res.output, res.output


@pytest.mark.parametrize(("rows", "extra", "message"), [
    ([*ROWS[:3], {"timestamp": 5, "input_length": 0, "output_length": 2}], [], "traffic.jsonl:4"),
    (ROWS, ["--rate", "2"], "give it without --rate"),
    (ROWS, ["--runner", "sglang"], "--trace replays through specops' own client"),
    (ROWS, ["--num-prompts", "5"], "a trace replays its own 12 requests"),
    ([dict(r, timestamp=0) for r in ROWS], [], "arrives at one instant"),
])
def test_a_bad_trace_is_refused_before_anything_runs(tmp_path: Path, rows: list[dict], extra: list[str],
                                                     message: str) -> None:
    trace, inv = _trace(tmp_path, rows), _inventory(tmp_path)
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline", "--trace", str(trace), *extra,
                  "--out", str(tmp_path / "run"))
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not (tmp_path / "run").exists() and not (tmp_path / "w/.specops").exists()
