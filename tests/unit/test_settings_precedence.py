"""Which settings a bench or tune run takes (config.settings), without a terminal: `--var`
wins over a host's `slo` and `gpu_hour_cost`, hosts with different SLOs are refused naming
hosts.yaml, and `tune --from DIR` takes the run's client settings but refuses a run that
swept several context lengths, and keeps a typed --repeats but refuses another typed setting
the run differs in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specops.config.inventory import load_inventory
from specops.config.settings import cost_var, host_variables, settings_from_run, sim_vars, slo_var
from specops.errors import ConfigError
from tests.support.deploy import inventory


def _host(tmp_path: Path, name: str, **keys: Any) -> dict[str, Any]:
    """A simulated `connection: local` host with its own workdir."""
    return {"connection": "local", "engine": "sim", "workdir": str(tmp_path / name), **keys}


def test_a_var_wins_over_the_hosts_slo_and_cost(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, {"a": _host(tmp_path, "a", vars={"slo": "ttft_ms=100",
                                                                               "gpu_hour_cost": 2.0})}))
    assert slo_var(inv, "a", {}) == {"ttft_ms": 100.0}
    assert slo_var(inv, "a", {"slo": "tpot_ms=20"}) == {"tpot_ms": 20.0}
    assert cost_var(inv, "a", {}) == {"a": 2.0}
    assert cost_var(inv, "a", {"gpu_hour_cost": 3.5}) == {"a": 3.5}
    host = inv.hosts["a"]
    assert host_variables(inv, host, {"slo": "x"})["slo"] == "x"
    assert sim_vars(inv, host, {"sim": "not a mapping"}) == {}


def test_hosts_with_different_slos_are_refused_naming_hosts_yaml(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, {"a": _host(tmp_path, "a", vars={"slo": "ttft_ms=100"}),
                                              "b": _host(tmp_path, "b", vars={"slo": "ttft_ms=200"})}))
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


def test_tune_from_a_run_keeps_a_typed_repeats_and_refuses_a_typed_setting_the_run_differs_in(tmp_path: Path) -> None:
    run = {"input_len": 16, "output_len": 64, "num_prompts": 64, "seed": 1, "repeats": 1}
    settings: dict[str, Any] = {"input_len": 16, "output_len": 64, "num_prompts": 64, "seed": 1, "repeats": "auto:3"}
    settings_from_run(tmp_path, run, settings, typed={"repeats", "num_prompts", "input_len"})
    assert settings["repeats"] == "auto:3"   # typed: how often tune measures its own points
    untyped = {**settings, "repeats": 5}
    settings_from_run(tmp_path, run, untyped)
    assert untyped["repeats"] == 1           # not typed: the run's
    clashing = {**settings, "num_prompts": 32, "seed": 9}
    before = dict(clashing)
    with pytest.raises(ConfigError) as err:
        settings_from_run(tmp_path, run, clashing, typed={"num_prompts", "seed", "repeats"})
    message = err.value.message
    assert "--num-prompts 64, --seed 1" in message and "--num-prompts 32, --seed 9 cannot apply" in message, message
    assert err.value.where == "tune --from" and clashing == before
