"""Issue 25: `--repeats auto[:MAX]`. The rule on records (bench/repeats.py), and through the
CLI with the simulator: a steady arm (`--sim-noise 0`: every repeat the same) stops each
point at 2 repeats, a noisy one (`--sim-noise 0.15`, redrawn every 40 decode steps, a few
draws a point) goes on at some level, and `--resume` continues a point's repeats."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from specops.bench.matrix import Point
from specops.bench.repeats import parse_repeats, settled, throughputs
from specops.bench.settings import BenchSettings
from specops.bench.sweep import unsettled
from specops.errors import ConfigError
from specops.records.schema import ResultRecord
from tests.support.arms import arm_vars
from tests.support.deploy import inventory, run_cli


def _rec(arm: str, c: int, r: int, tput: float) -> ResultRecord:
    return ResultRecord(host="h", arm=arm, concurrency=c, repeat=r, status="ok", output_throughput=tput)


def test_the_rule_stops_a_steady_point_and_goes_on_with_a_noisy_one() -> None:
    rule = parse_repeats("auto:4")
    assert (rule.auto, rule.least, rule.most) == (True, 2, 4)
    records = [_rec("baseline", 1, 0, 100.0), _rec("baseline", 1, 1, 101.0),
               _rec("baseline", 8, 0, 100.0), _rec("baseline", 8, 1, 130.0)]
    values = throughputs(records, "h")
    assert settled(rule, values, ["baseline"], "baseline", (1, None, None)) == "spread"
    assert settled(rule, values, ["baseline"], "baseline", (8, None, None)) is None
    assert settled(rule, throughputs(records[:1], "h"), ["baseline"], "baseline", (1, None, None)) is None
    more = records + [_rec("baseline", 8, r, 100.0 + 30 * (r % 2)) for r in (2, 3)]
    assert settled(rule, throughputs(more, "h"), ["baseline"], "baseline", (8, None, None)) == "max"


def test_a_clear_decision_settles_a_noisy_level() -> None:
    """EAGLE-3 at twice baseline with 10 % spread: another repeat cannot flip the decision."""
    rule = parse_repeats("auto")
    records = [_rec("baseline", 1, 0, 100.0), _rec("baseline", 1, 1, 112.0),
               _rec("eagle3", 1, 0, 200.0), _rec("eagle3", 1, 1, 225.0)]
    values = throughputs(records, "h")
    arms = ["baseline", "eagle3"]
    assert settled(rule, values, arms, "baseline", (1, None, None)) == "decision"
    close = records[:2] + [_rec("eagle3", 1, 0, 104.0), _rec("eagle3", 1, 1, 118.0)]
    assert settled(rule, throughputs(close, "h"), arms, "eagle3", (1, None, None)) is None


def test_settings_and_the_matrix_under_auto() -> None:
    settings = BenchSettings.from_dict({"arms": ["baseline"], "concurrency": [1, 8], "repeats": "auto:3"})
    assert (settings.repeats, settings.repeats_auto) == (3, True)
    points = [Point("baseline", c, r) for r in range(3) for c in (1, 8)]
    records = [_rec("baseline", 1, 0, 100.0), _rec("baseline", 1, 1, 100.5),
               _rec("baseline", 8, 0, 100.0), _rec("baseline", 8, 1, 130.0)]
    todo = unsettled(settings, [p for p in points if p.repeat == 2], records, "h")
    assert todo == [Point("baseline", 8, 2)]
    for bad in ("auto:1", "sometimes", 0):
        with pytest.raises(ConfigError, match="--repeats"):
            BenchSettings.from_dict({"repeats": bad})


def _inventory(tmp_path: Path, noise: str) -> Path:
    """A `local` host whose baseline drifts by `noise`. The builtin client declares its closed
    loop, so a refill late on a loaded machine no longer shrinks a batch (CI once measured a
    'steady' level at 4 repeats when it could): any time scale measures the same figures."""
    extra = ["--sim-noise", noise, "--decode-log-interval", "40"]
    variables = {**arm_vars(baseline={"extra_args": extra}), "sim": {"time_scale": 0.05}}
    host = {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}
    return inventory(tmp_path, {"h": host}, variables)


def _repeats(out: Path) -> Counter:
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return Counter(r["concurrency"] for r in recs if r["status"] == "ok")


ARGS = ["--arms", "baseline", "--concurrency", "1,2,4,8", "--repeats", "auto:4", "--input-len", "32",
        "--output-len", "24"]


@pytest.mark.slow
def test_steady_points_stop_at_two_noisy_ones_go_on_and_resume_continues(tmp_path: Path) -> None:
    steady = tmp_path / "steady"
    inv = _inventory(tmp_path, "0")
    res = run_cli("bench", "--host", "h", "-i", str(inv), *ARGS, "--out", str(steady))
    assert res.exit_code == 0, res.output
    assert _repeats(steady) == {1: 2, 2: 2, 4: 2, 8: 2}
    summary = json.loads((steady / "summary.json").read_text())
    assert [p["repeats"] for p in summary["hosts"][0]["points"]] == [2, 2, 2, 2]
    assert summary["settings"]["repeats"] == 4
    assert "repeats auto: 2 to 4 per point" in (steady / "report.md").read_text()

    # a run cut short after its first repeats: --resume measures each point's second one
    lines = (steady / "results.jsonl").read_text().splitlines()
    (steady / "results.jsonl").write_text("\n".join(x for x in lines if json.loads(x)["repeat"] == 0) + "\n")
    res = run_cli("bench", "--host", "h", "-i", str(inv), "--resume", str(steady))
    assert res.exit_code == 0, res.output
    assert _repeats(steady) == {1: 2, 2: 2, 4: 2, 8: 2}

    noisy = tmp_path / "noisy"
    (tmp_path / "n").mkdir()
    inv = _inventory(tmp_path / "n", "0.15")
    res = run_cli("bench", "--host", "h", "-i", str(inv), *ARGS, "--out", str(noisy))
    assert res.exit_code == 0, res.output
    counts = _repeats(noisy)
    assert all(2 <= n <= 4 for n in counts.values()) and max(counts.values()) > 2, counts
