"""The rules that moved out of cli/ (issue 22 point 4), tested without a terminal: variable
precedence (config.settings), where a bench run starts (run.resume), tune's host setup
(bench.hostops, on this machine), the progress bar on a pipe (render.bar)."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from specops.bench.hostops import free_ports
from specops.bench.schema import ResultRecord
from specops.config.inventory import load_inventory
from specops.config.settings import cost_var, host_variables, settings_from_run, sim_vars, slo_var
from specops.errors import ConfigError
from specops.render.bar import PointBar
from specops.run.resume import bench_start


def _inventory(tmp_path: Path, hosts: dict[str, dict[str, object]]) -> Path:
    doc = {"hosts": {name: {"connection": "local", "engine": "sim", "workdir": str(tmp_path / name), **h}
                     for name, h in hosts.items()}}
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_var_wins_over_the_hosts_slo_and_cost(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, {"a": {"vars": {"slo": "ttft_ms=100", "gpu_hour_cost": 2.0}}}))
    assert slo_var(inv, "a", {}) == {"ttft_ms": 100.0}
    assert slo_var(inv, "a", {"slo": "tpot_ms=20"}) == {"tpot_ms": 20.0}
    assert cost_var(inv, "a", {}) == {"a": 2.0}
    assert cost_var(inv, "a", {"gpu_hour_cost": 3.5}) == {"a": 3.5}
    host = inv.hosts["a"]
    assert host_variables(inv, host, {"slo": "x"})["slo"] == "x"
    assert sim_vars(inv, host, {"sim": "not a mapping"}) == {}


def test_hosts_with_different_slos_are_refused_naming_hosts_yaml(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, {"a": {"vars": {"slo": "ttft_ms=100"}},
                                               "b": {"vars": {"slo": "ttft_ms=200"}}}))
    with pytest.raises(ConfigError) as err:
        slo_var(inv, "a,b", {})
    assert "different SLOs" in err.value.message and "hosts.yaml" in str(err.value.where)


def test_tune_from_a_run_takes_its_client_settings_and_refuses_several_lengths(tmp_path: Path) -> None:
    settings = {"input_len": 256, "output_len": 256, "seed": 1}
    settings_from_run(tmp_path, {"input_len": 64, "seed": 7, "dataset": "random", "concurrency": [1, 2]}, settings)
    assert settings == {"input_len": 64, "output_len": 256, "seed": 7, "dataset": "random"}
    before = dict(settings)
    with pytest.raises(ConfigError) as err:
        settings_from_run(tmp_path, {"input_len": [64, 128], "seed": 9}, settings)
    assert "several context lengths" in err.value.message and "--input-len 64,128" in err.value.message
    assert settings == before  # refused: nothing changed


def test_where_a_bench_run_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--extend adds levels"):
        bench_start({}, out=None, resume=None, extend=True)
    with pytest.raises(ConfigError, match="has no manifest.json"):
        bench_start({}, out=None, resume=tmp_path)
    held = tmp_path / "held"
    held.mkdir()
    (held / "results.jsonl").write_text("")
    with pytest.raises(ConfigError, match="already holds results"):
        bench_start({}, out=held, resume=None)
    fresh = bench_start({"seed": 1}, out=tmp_path / "new", resume=None)
    assert (fresh.settings, fresh.run_dir, fresh.notes, fresh.resumed) == ({"seed": 1}, tmp_path / "new", [], False)
    (held / "manifest.json").write_text(json.dumps({"bench": {"seed": 3, "dataset_hash": "h"}}))
    resumed = bench_start({"seed": 1}, out=None, resume=held, given={})
    assert (resumed.settings, resumed.run_dir, resumed.resumed) == ({"seed": 3}, held, True)


def test_free_ports_are_free_on_this_machine(tmp_path: Path) -> None:
    host = load_inventory(_inventory(tmp_path, {"a": {}})).hosts["a"]
    ports = free_ports(host, 3)
    assert len(set(ports)) == 3
    for port in ports:  # each one binds again here
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_the_bar_on_a_pipe_prints_a_plain_line_per_point() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    rec = ResultRecord.from_dict({"host": "a", "arm": "baseline", "concurrency": 4, "repeat": 0, "status": "ok",
                                  "output_throughput": 123.4})
    with PointBar(1, console) as on_point:
        on_point(rec)
    assert "a  point baseline c=4 repeat 0: 123.4 tok/s" in out.getvalue()
    quiet = io.StringIO()
    with PointBar(1, Console(file=quiet, force_terminal=False), enabled=False) as on_point:
        on_point(rec)
    assert quiet.getvalue() == ""
