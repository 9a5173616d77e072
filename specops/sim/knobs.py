"""The simulator's own command-line knobs, apart from SGLang's flags.

`python -m specops.sim` strips these before the tree's parser sees the rest; launch
planning strips them the same way before checking an argv against the tree's flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from specops.errors import ConfigError
from specops.sim import modelfile

#: flag -> SimOptions field, for knobs that take a value
VALUED = {"--sglang-tree": "tree", "--vllm-tree": "vllm_tree", "--sim-time-scale": "time_scale", "--sim-crash-after": "crash_after",
          "--sim-slow-start": "slow_start", "--sim-slow-health": "slow_health", "--sim-seed": "seed",
          "--sim-noise": "noise", "--sim-accept-length": "accept_length", "--sim-model": "model"}
#: flag -> SimOptions field, for switches
SWITCHES = {"--sim-fail-at-start": "fail_at_start"}
#: injected faults, not configuration: a report may combine points measured with and without them
FAULTS = ("--sim-crash-after", "--sim-slow-start", "--sim-fail-at-start")


class UsageError(Exception):
    pass


def split_knobs(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(knob values by field, the rest of argv: SGLang's flags). `--x=v` and `--x v` both work."""
    knobs: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if name in VALUED:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                val = argv[i + 1]
                i += 1
            knobs[VALUED[name]] = val
        elif a in SWITCHES:
            knobs[SWITCHES[a]] = "1"
        else:
            rest.append(a)
        i += 1
    return knobs, rest


def sim_options(variables: Mapping[str, Any]) -> list[str]:
    """Simulator knobs from vars (`sim: {time_scale: 0.05, crash_after: 40, ...}`), for sim hosts only.

    `model: FILE` (a calibrated model, sim/modelfile.py) is read here, so a bad file stops the
    command before any server starts; the servers get its absolute path."""
    opts = variables.get("sim") or {}
    if not isinstance(opts, dict):
        raise ConfigError("'sim' must be a mapping such as {time_scale: 0.05}")
    out: list[str] = []
    for key, value in opts.items():
        flag = "--sim-" + str(key).replace("_", "-")
        if key == "model" and value not in (None, False):
            path = Path(str(value)).expanduser().resolve()
            modelfile.load(path)
            out += [flag, str(path)]
            continue
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, str(value)]
    return out
