"""Variable precedence for `bench` and `tune`: which of hosts.yaml's vars, `--var` and an
earlier run's settings a command runs with.

One home for the rule "a `--var` wins over the host's vars, an option typed on the
command line wins over both", so the CLI only parses options and calls these.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from specops.config.inventory import Host, Inventory
from specops.config.optionspec import flag_words
from specops.config.slo import check_cost, parse_slo, slo_text
from specops.errors import ConfigError

#: the client settings `tune --from DIR` takes from the run's manifest (its points were
#: measured with them, so the tune's own points must be too)
FROM_RUN_KEYS = ("input_len", "output_len", "num_prompts", "prompts_per_level", "dataset", "seed", "repeats",
                 "runner")
#: of those, what an option typed beside --from sets instead: how often tune measures its own
#: points (the run's points stay as they were measured, and a median of more runs is the same
#: measurement); any other typed setting the run differs in is refused (settings_from_run)
TYPED_WINS = ("repeats",)


def slo_var(inv: Inventory, host_spec: str, extra_vars: dict[str, Any]) -> dict[str, float] | None:
    """The hosts' `slo` var (hosts.yaml or --var), when --slo is not given: one SLO for the
    run, so hosts that set different ones are refused."""
    found: dict[str, dict[str, float]] = {}
    for host in inv.select(host_spec):
        value = extra_vars.get("slo", inv.host_vars(host).get("slo"))
        slo = parse_slo(value, where=f"{inv.path}: vars.slo (host {host.name})")
        if slo:
            found[host.name] = slo
    if len({json.dumps(v, sort_keys=True) for v in found.values()}) > 1:
        shown = "; ".join(f"{h}: {slo_text(v)}" for h, v in found.items())
        raise ConfigError(f"the hosts set different SLOs ({shown}); one run has one SLO", where=f"{inv.path}: vars.slo",
                          hint="give --slo to set one for this run")
    return next(iter(found.values()), None)


def cost_var(inv: Inventory, host_spec: str, extra_vars: dict[str, Any]) -> dict[str, float] | None:
    """The hosts' `gpu_hour_cost` var (hosts.yaml or --var) when --gpu-hour-cost is not given:
    {host: $ per GPU-hour} for the hosts that set one."""
    found = {}
    for host in inv.select(host_spec):
        value = extra_vars.get("gpu_hour_cost", inv.host_vars(host).get("gpu_hour_cost"))
        if value is not None:
            cost = check_cost(value, where=f"{inv.path}: vars.gpu_hour_cost (host {host.name})")
            if isinstance(cost, float):
                found[host.name] = cost
    return found or None


def host_variables(inv: Inventory, host: Host, extra_vars: dict[str, Any]) -> dict[str, Any]:
    """The host's vars with `--var` over them."""
    return {**inv.host_vars(host), **extra_vars}


def sim_vars(inv: Inventory, host: Host, extra_vars: dict[str, Any]) -> dict[str, Any]:
    """The `sim` var (--var first, then hosts.yaml); {} when unset or not a mapping."""
    sim = extra_vars.get("sim") or inv.host_vars(host).get("sim") or {}
    return sim if isinstance(sim, dict) else {}


def phase_vars(extra_vars: dict[str, Any], arms: dict[str, Any], bench: object | None = None) -> dict[str, Any]:
    """The variables a tune phase's bench playbook runs with (also what the reuse check plans
    from); `bench`: the phase's `BenchSettings`, parsed once, which the bench step takes as it is."""
    out = {**extra_vars, "arms": arms}
    if bench is not None:
        out["bench"] = bench
    return out


def settings_from_run(from_dir: Path, old: dict[str, Any], settings: dict[str, Any],
                      typed: Collection[str] = ()) -> None:
    """`tune --from DIR`: the run's client settings (`old`, its manifest's `bench`) replace
    the command line's defaults in `settings`. Of the options `typed` on the command line,
    TYPED_WINS keep their value; any other the run differs in is refused, naming both, as is a
    run that swept several lengths (`settings` unchanged either way)."""
    swept = {k: v for k, v in old.items() if k in ("input_len", "output_len") and isinstance(v, list) and len(v) > 1}
    if swept:  # --from takes one run of one length; several lengths: tune them with --input-len L1,L2
        shown = _options_text(swept)
        raise ConfigError(f"--from {from_dir}: the run swept several context lengths ({shown}); tune takes "
                          f"one length", where="tune --from",
                          hint="its report gives a threshold per length; to tune them, run "
                               f"`specops tune {shown}` without --from (it reuses the "
                               "run's points that match)")
    clash = [key for key in FROM_RUN_KEYS if key in typed and key not in TYPED_WINS
             and old.get(key) is not None and settings.get(key) != old[key]]
    if clash:
        raise from_run_clash(from_dir, {k: old[k] for k in clash}, {k: settings.get(k) for k in clash})
    for key in FROM_RUN_KEYS:
        if old.get(key) is not None and not (key in typed and key in TYPED_WINS):
            settings[key] = old[key]


def from_run_clash(from_dir: Path, run: dict[str, Any], given: dict[str, Any]) -> ConfigError:
    """The error for options typed beside `--from DIR` whose values the run's points were not
    measured with (`run`: its values, `given`: the typed ones, by setting name)."""
    return ConfigError(f"--from {from_dir}: its points were measured with {_options_text(run)}, and tune's own "
                       f"points must be measured as they were: {_options_text(given)} cannot apply", where="tune --from",
                       hint="leave those options out (tune takes the run's), or bench a new run with them "
                            "and tune from that")


def _options_text(values: dict[str, Any]) -> str:
    """Settings (by name) as the options that ask for them, comma-separated: `--input-len 64,128`."""
    return ", ".join(" ".join(flag_words(f"--{key.replace('_', '-')}", value)) for key, value in values.items())
