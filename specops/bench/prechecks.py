"""What a bench checks on its hosts before anything runs: the arms, the dataset, the runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specops.bench.bench_serving import DATASET_NAMES
from specops.bench.runners import (
    runner_name,
)
from specops.bench.settings import BenchSettings, dataset_hash
from specops.config.schema import suggest
from specops.errors import ConfigError


def check_for_hosts(settings: BenchSettings, hosts: dict[str, tuple[str, Any]]) -> None:
    """Before anything runs: every arm named exists in each host's `arms`, the dataset is a
    name or a readable file, and the runner can use it. `hosts`: name -> (engine, arms var)."""
    names = sorted(set(DATASET_NAMES) | {"sharegpt"})
    is_file = Path(settings.dataset).expanduser().is_file()
    if settings.dataset not in DATASET_NAMES and not is_file:
        raise ConfigError(f"--dataset '{settings.dataset}' is neither a dataset name ({', '.join(names)}) "
                          f"nor an existing file{suggest(settings.dataset, names)}", where="bench --dataset")
    if is_file:  # read now: a file that is not UTF-8 JSON with prompts is bad input, not a failed sweep
        dataset_hash(settings)
    for host, (engine, arms) in hosts.items():
        if not isinstance(arms, dict) or not arms:
            raise ConfigError(f"host {host} has no 'arms' variable to benchmark", where="bench --arms",
                              hint="define arms in hosts.yaml vars (see the shipped hosts.yaml)")
        for arm in settings.arms:
            if arm not in arms:
                raise ConfigError(f"no arm '{arm}' on host {host}{suggest(arm, arms)}; its arms: "
                                  f"{', '.join(sorted(arms))}", where="bench --arms")
        if settings.phases is not None and runner_name(settings.runner, engine) != "builtin":
            raise ConfigError(f"--phases runs through specops' own client, which sends the timeline and "
                              f"measures each phase; host {host}'s runner is {runner_name(settings.runner, engine)}",
                              where="bench --phases", hint="add --runner builtin")
        if settings.trace is not None and runner_name(settings.runner, engine) != "builtin":
            raise ConfigError(f"--trace replays through specops' own client; host {host}'s runner is "
                              f"{runner_name(settings.runner, engine)}", where="bench --trace",
                              hint="add --runner builtin")
        if runner_name(settings.runner, engine) == "builtin" and settings.dataset != "random" and not is_file:
            raise ConfigError(f"the builtin runner (host {host}) makes random prompts or reads a file; "
                              f"--dataset {settings.dataset} needs SGLang's runner", where="bench --dataset",
                              hint="--dataset random, --dataset PATH (a ShareGPT-style JSON/JSONL file), "
                                   "or --runner sglang on an SGLang host")
