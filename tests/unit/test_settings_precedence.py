"""Which settings a bench or tune run takes (config.settings), without a terminal: `--var`
wins over a host's `slo` and `gpu_hour_cost`, hosts with different SLOs are refused naming
hosts.yaml, and `tune --from DIR` takes the run's client settings but refuses a run that
swept several context lengths."""

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
