"""One settings schema (issue 56, point 3): `BenchSettings`'s field metadata makes `specops
bench`'s options (and tune's shared ones), reads them, writes the manifest's `bench` and the
command line that asks for the same settings again. An option of `bench` that is not in the
schema, or a field whose record or command line does not read back, fails here."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import click
import pytest

from specops.bench.settings import BenchSettings, settings_from_options, settings_record, settings_words
from specops.cli.bench import bench
from specops.cli.settingopts import typed_values
from specops.cli.tune import tune
from specops.config.optionspec import option_words, options_of
from specops.errors import ConfigError
from specops.records.manifest import RunSettings
from specops.servers.arms import ArmOverrides

#: `specops bench`'s options that are not settings of the sweep: where it runs, where its run
#: directory is, how it prints, what it does about other runs' arms. A new option that changes
#: what is measured belongs in the schema (bench/settings.py), not here.
RUN_OPTIONS = {"host_spec", "inventory_path", "playbook", "out", "resume", "extend", "as_json", "runs_dir",
               "var_items", "wait", "wait_timeout", "take_over", "allow_runtime_mismatch"}


def _schema_options() -> dict[str, Any]:
    return {f.name: opt for cls in (BenchSettings, ArmOverrides) for f, opt in options_of(cls)}


def test_every_bench_option_is_in_the_schema() -> None:
    params = {p.name for p in bench.params}
    schema = _schema_options()
    assert sorted(params - set(schema) - RUN_OPTIONS) == []   # an option the schema does not describe
    assert sorted(set(schema) - params) == []                  # a schema option the command lacks
    defaults = bench.make_context("bench", ["--host", "h"]).params
    for param in bench.params:
        if param.name in schema and isinstance(param, click.Option):
            opt = schema[param.name]
            assert opt.flag in param.opts, (param.name, param.opts)
            assert defaults[param.name] == opt.default or (param.is_flag and not defaults[param.name]), param.name


def test_tunes_shared_options_are_the_schemas() -> None:
    """tune takes some of bench's options: the same flag is the same field, type and parse."""
    schema = _schema_options()
    by_flag = {opt.flag: name for name, opt in schema.items()}
    shared = [p for p in tune.params if isinstance(p, click.Option) and set(p.opts) & set(by_flag)]
    assert {p.name for p in shared} >= {"arms", "concurrency", "repeats", "num_prompts", "input_len", "output_len",
                                         "seed"}
    bench_params = {p.name: p for p in bench.params}
    for param in shared:
        assert param.name == by_flag[param.opts[0]]
        assert type(param.type) is type(bench_params[param.name].type), param.name


def test_every_recorded_setting_has_a_manifest_check() -> None:
    """The manifest's reader (records' RunSettings) has a typed, checked key for every
    setting the schema records, and a record of the schema's settings reads back typed."""
    names = {f.name for f in fields(BenchSettings)}
    assert set(RunSettings.PLAIN) == names | {"dataset_hash"}
    assert {f.name for f in fields(RunSettings)} - {"extra", "nulls"} == set(RunSettings.PLAIN)
    record = asdict(BenchSettings.from_dict({"rate": [1, 2.5], "trace": None, "gpu_hour_cost": 2.0, "slo": "ttft_ms=200"}))
    read = RunSettings.from_dict(record | {"dataset_hash": "abc"})
    assert read.extra == {} and read.rate == [1, 2.5] and read.slo == {"ttft_ms": 200.0}
    assert RunSettings.from_dict({"concurrency": "1,2"}).extra == {"concurrency": "1,2"}


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 8, "output_length": 4}) + "\n"
                            for t in (0, 500, 1500)))
    return str(path)


SETTINGS = [
    {},
    {"arms": ["baseline", "adaptive"], "concurrency": [1, 4], "repeats": "auto:4", "seed": 7, "keep_servers": True},
    {"rate": [0.5, 2], "arrival": "gamma:2", "input_len": [256, 2048], "output_len": 64, "num_prompts": 20},
    {"phases": "2/s:10s,4/s:10s", "arrival": "constant", "runner": "builtin"},
    {"slo": "ttft_ms=200,tpot_ms=50", "objective": "goodput", "gpu_hour_cost": 2.5, "scheduling": "arms-at-once",
     "prompts_per_level": 8},
    {"scheduling": "one-arm-at-a-time", "runner": "sglang"},
    "trace",
]


def _settings(case: Any, tmp_path: Path) -> BenchSettings:
    data = {"trace": _trace(tmp_path), "runner": "builtin"} if case == "trace" else dict(case)
    return BenchSettings.from_dict(data)


@pytest.mark.parametrize("case", SETTINGS)
def test_settings_read_back_from_the_manifest(case: Any, tmp_path: Path) -> None:
    """settings -> manifest record -> settings: the same; the record reads typed and writes back as it was."""
    settings = _settings(case, tmp_path)
    record = settings_record(settings)
    stored = RunSettings.from_dict(json.loads(json.dumps(record)))
    assert stored.extra == {} and stored.to_dict() == record
    again = {k: v for k, v in stored.to_dict().items() if k != "dataset_hash"}
    assert BenchSettings.from_dict(again) == settings


def _parsed(argv: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What `specops bench ARGV` would run with: its options read by the schema."""
    ctx = bench.make_context("bench", ["--host", "h", *argv])
    return settings_from_options(*typed_values(ctx, BenchSettings))


@pytest.mark.parametrize("case", SETTINGS)
def test_settings_read_back_from_their_command_line(case: Any, tmp_path: Path) -> None:
    """settings -> the command line that asks for them (the resume command's) -> settings: the same."""
    settings = _settings(case, tmp_path)
    argv = settings_words(settings_record(settings))
    settings_dict, _given = _parsed(argv)
    assert BenchSettings.from_dict(settings_dict) == settings


def test_the_command_lines_own_settings_read_back() -> None:
    """What the options typed ask for, written back as words and typed again: the same dict."""
    argv = ["--arms", "baseline,eagle3", "--rate", "1,2/s", "--arrival", "gamma:0.5", "--repeats", "auto",
            "--one-arm-at-a-time", "--input-len", "128,512", "--slo", "ttft_ms=300", "--gpu-hour-cost", "3",
            "--keep-servers"]
    settings, given = _parsed(argv)
    assert settings["rate"] == [1.0, 2.0] and settings["repeats_auto"] is True and settings["scheduling"] == \
        "one-arm-at-a-time"
    assert settings["keep_servers"] is True    # but not compared on --resume (resume=IGNORE)
    assert set(given) == {"arms", "rate", "arrival", "repeats", "repeats_auto", "scheduling", "input_len", "slo",
                          "gpu_hour_cost"}
    assert _parsed(settings_words(settings))[0] == settings


@pytest.mark.parametrize("argv, message", [
    (["--rate", "1", "--concurrency", "2"], "give --rate (open loops) or --concurrency (closed loops), not both"),
    (["--arrival", "constant"], "--arrival shapes the arrivals of --rate; give --rate too"),
    (["--concurrency", "1,x"], "--concurrency expects comma-separated integers, got '1,x'"),
    (["--input-len", "0"], "--input-len lengths must be at least 1, got 0 in '0'"),
    (["--repeats", "auto:1"], "--repeats auto:1: MAX must be at least 2"),
])
def test_a_bad_option_is_refused_naming_it(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _parsed(argv)


def test_the_threshold_is_a_typed_arm_override() -> None:
    """--threshold N: an int from the option on, set on the adaptive arm (never a dotted string)."""
    ctx = bench.make_context("bench", ["--host", "h", "--threshold", "12"])
    overrides = ArmOverrides(**typed_values(ctx, ArmOverrides)[0])
    assert overrides.threshold == 12
    assert option_words(ArmOverrides, asdict(overrides)) == ["--threshold", "12"]
    arms = {"baseline": {"port": 1}, "adaptive": {"threshold": 4, "port": 2}}
    assert overrides.applied(arms) == {"baseline": {"port": 1}, "adaptive": {"threshold": 12, "port": 2}}
    assert arms["adaptive"]["threshold"] == 4   # hosts.yaml's mapping is not changed in place
    assert ArmOverrides().applied(arms) is arms
