"""`specops tune` on a host: the settings checked, earlier points reused, each context
length tuned into its run directory (flows.tuner's `Tuner`, its phases run through the
bench playbook), tune.json and the report written, and with `write` the verified
threshold put into hosts.yaml. The CLI parses the options, calls `tune_host` and prints
the outcome; everything a person reads while it runs goes through `say`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from specops.bench.runners import runner_name
from specops.bench.settings import BenchSettings
from specops.config.inventory import Host, Inventory, default_inventory_path, load_inventory
from specops.config.settings import from_run_clash, host_variables, phase_vars, settings_from_run, sim_vars
from specops.config.writeback import write_adaptive
from specops.data import default_playbook
from specops.decide.tune import (
    MAX_CANDIDATES,
    REUSED_FROM,
    Phase,
    TuneResult,
    length_dir,
    tune_document,
)
from specops.engines import engine_for, schedule_forms
from specops.errors import ConfigError, SpecopsError
from specops.flows.hostops import free_ports, releaser
from specops.flows.play import run_playbook
from specops.flows.reuse import Reuse, config_hashes, find_reusable
from specops.flows.tuner import Tuner
from specops.records.manifest import Manifest
from specops.records.schema import ResultRecord
from specops.records.store import append_result, load_manifest, load_results
from specops.records.tune import TUNE_JSON, write_tune
from specops.render.progress import failure_lines, warning_lines
from specops.report.artifacts import render_report
from specops.report.summary import fairness_headline
from specops.report.tune import lengths_document
from specops.run.engine import default_runs_dir
from specops.run.journal import new_run_id
from specops.servers.arms import EAGLE_DEFAULTS, ArmSpec, arms_from_vars

Say = Callable[[str], None]


@dataclass
class Tuned:
    """One context length's tune: its run directory and result."""

    run_dir: Path
    result: TuneResult
    settings: dict[str, Any]


@dataclass
class TuneOutcome:
    """Every length's tune, the top run directory, and the length `write` was for."""

    run_dir: Path
    done: list[Tuned]
    chosen: tuple[int, int]


def reused_records(from_dir: Path, host: str, arms: tuple[str, str]) -> tuple[list[ResultRecord], Manifest]:
    """`--from DIR`'s ok points of `arms` for `host` (a run of one other host name: its
    points, renamed), and its manifest."""
    if not (from_dir / "results.jsonl").exists():
        raise ConfigError(f"--from {from_dir}: no results.jsonl (not a bench run directory)")
    manifest = load_manifest(from_dir)   # an empty Manifest when the run has none
    records = [r for r in load_results(from_dir) if r.ok and r.arm in arms]
    hosts = {str(r.host) for r in records}
    mine = [r for r in records if r.host == host]
    if not mine and len(hosts) == 1:  # a run on another name for the same machine
        mine = [replace(r, host=host) for r in records]
    if not mine:
        raise ConfigError(f"--from {from_dir}: no ok baseline/eagle3 points for host '{host}' "
                          f"(it has: {', '.join(sorted(hosts)) or 'none'})")
    return mine, manifest


def from_settings(from_dir: Path, host: Host, settings: dict[str, Any], typed: Collection[str] = (),
                  coarse: list[int] | None = None) -> tuple[list[ResultRecord], list[int]]:
    """`--from DIR`: its baseline/EAGLE-3 points and client settings (one length only); its
    levels are the coarse sweep, so a typed --concurrency (`coarse`) other than them is refused
    as settings_from_run refuses the other typed settings the run differs in."""
    reused, manifest = reused_records(from_dir, host.name, ("baseline", "eagle3"))
    levels = sorted({int(r.concurrency) for r in reused})
    typed_levels = sorted(set(coarse or levels))
    if "concurrency" in typed and typed_levels != levels:
        raise from_run_clash(from_dir, {"concurrency": levels}, {"concurrency": typed_levels})
    settings_from_run(from_dir, manifest.settings().to_dict(), settings, typed)
    return reused, levels


def for_length_pair(pairs: list[tuple[int, int]], for_length: int | None) -> tuple[int, int]:
    """FOR_LENGTH_RULE: the length whose threshold --write puts into hosts.yaml."""
    if for_length is None:
        return pairs[0]
    match = [p for p in pairs if p[0] == for_length]
    if not match:
        raise ConfigError(f"--for-length {for_length} is not one of the input lengths tuned "
                          f"({', '.join(str(i) for i, _ in pairs)})", where="tune --for-length")
    return match[0]


def tune_length(inv: Inventory, host: Host, arms_raw: dict[str, Any], adaptive: ArmSpec, *, coarse: list[int],
                settings: dict[str, Any], from_dir: Path | None, reused: list[ResultRecord],
                budget_s: float | None, tier_steps: list[int], run_dir: Path, runs_dir: Path,
                reuse: bool, extra_vars: dict[str, Any], say: Say, console: Console,
                candidates: int = MAX_CANDIDATES) -> Tuned:
    """Tune one context length into its own run directory."""
    sim = sim_vars(inv, host, extra_vars)
    time_scale = float(sim.get("time_scale") or 1.0) if engine_for(host).simulated else None
    checked = BenchSettings.from_dict({**settings, "arms": ["baseline", "eagle3"], "concurrency": coarse},
                                      where="specops tune")
    if (run_dir / "results.jsonl").exists():
        raise ConfigError(f"--out {run_dir} already holds results; give a new directory")
    pair_arms = {k: v for k, v in arms_raw.items() if k != "adaptive"}
    planned = config_hashes(inv, default_playbook("bench"), host, phase_vars(extra_vars, pair_arms),
                            ["baseline", "eagle3"])
    run_dir.mkdir(parents=True, exist_ok=True)
    for rec in reused:
        append_result(run_dir, replace(rec, extra={**rec.extra, REUSED_FROM: str(from_dir)}))
    found: Reuse | None = None
    if from_dir is None and reuse:
        if planned is None:
            found = Reuse(note="the host has no engine tree yet, so no earlier run measured these servers there")
        else:
            found = find_reusable(runs_dir, host=host.name, hashes=planned[0], settings=checked,
                                  runner=runner_name(checked.runner, host.engine),
                                  exclude=[run_dir])
            for rec in found.records:
                append_result(run_dir, rec)
        say(f"{found.text()} (looked in {runs_dir}; --no-reuse measures everything)")

    said: set[str] = set()

    def run_phase(phase: Phase, arms: dict[str, Any]) -> None:
        bench = BenchSettings.from_dict({**settings, "arms": phase.arms, "concurrency": phase.levels,
                                         "repeats": phase.repeats_setting, "keep_servers": phase.keep}, where="specops tune")
        report = run_playbook(inv, default_playbook("bench"), host.name,
                              extra_vars=phase_vars(extra_vars, arms, bench),
                              run_dir=run_dir, console=console, quiet=True, label="tune")
        for line in warning_lines(report):  # each once, though every phase's launch may warn again
            if line not in said:
                said.add(line)
                say(line)
        if not report.ok:
            lines = failure_lines(report)
            raise SpecopsError(f"the {phase.name} sweep failed: " + ("; ".join(lines) or "see the journal"),
                               where=f"host {host.name}", hint=f"run directory: {run_dir}")

    # not a port an arm of hosts.yaml names: free now only because its server is not up yet
    configured = [a["port"] for a in arms_raw.values() if isinstance(a, dict) and isinstance(a.get("port"), int)]
    ports = free_ports(host, 1 + len(tier_steps), taken=configured)
    tuner = Tuner(host=host.name, arms=arms_raw, settings=settings, coarse=coarse, run_phase=run_phase,
                  records=lambda: load_results(run_dir), say=say, time_scale=time_scale, budget_s=budget_s,
                  native=None, tier_steps=tier_steps, reused_from=str(from_dir) if from_dir else None,
                  ports=ports, release=releaser(host, run_dir.name), keep_ok=bool(planned and planned[1]),
                  max_candidates=candidates, engine=engine_for(host))
    tuner.result.input_len, tuner.result.output_len = checked.lengths()[0]
    if found is not None:
        tuner.result.reuse = found.text()
    plan = tuner.plan_text()
    tuner.result.planned_points, tuner.result.estimate_s = plan.most_points, round(plan.most_s, 1)
    budget = f", budget {budget_s / 60:g} min" if budget_s is not None else ""
    say(f"tune {host.name}: {plan.likely_points} points if the first threshold verifies (~{plan.likely_s / 60:.1f} "
        f"min), at most {plan.most_points} with neighbours and tiers (~{plan.most_s / 60:.1f} min), and "
        f"{plan.recheck_points} more (~{plan.recheck_s / 60:.1f} min) for each level a candidate falls short at "
        f"(the reference arms measured again beside it); estimated "
        f"{'from the simulator model' if time_scale else 'with a guess until the first points are measured'}"
        f"{budget}")
    say(f"run directory: {run_dir}")
    tune_settings = {"coarse": coarse, "tier_steps": tier_steps, "budget_minutes": budget_s / 60 if budget_s else None,
                     "candidates": candidates,
                     "from": str(from_dir) if from_dir else None, "reuse": reuse and from_dir is None, **settings}
    try:
        tuner.run()
        _schedule(tuner.result, adaptive)
        tuner.result.unfair = unfair_arms(run_dir, from_dir)
    finally:
        write_tune(run_dir, tune_document(tuner.result, tune_settings))
        if (run_dir / "results.jsonl").exists():
            render_report(run_dir)
    return Tuned(run_dir, tuner.result, tune_settings)


def tune_host(inventory_path: str | None, host_spec: str, *, coarse: list[int], settings: dict[str, Any],
              from_dir: Path | None, budget_minutes: float | None, write: bool,
              tier_steps: list[int], out: Path | None, runs_dir: Path | None, extra_vars: dict[str, Any],
              say: Say, console: Console, lengths: list[tuple[int, int]] | None = None,
              for_length: int | None = None, reuse: bool = True, candidates: int = MAX_CANDIDATES,
              typed: Collection[str] = ()) -> TuneOutcome:
    """Tune every length on the host; `say`: the lines a person reads as it goes (a no-op
    for `--json`); `console`: the phases' (quiet) playbook runs'; `typed`: the settings typed
    on the command line (what `--from` may not replace)."""
    inv_path = Path(inventory_path) if inventory_path else default_inventory_path()
    inv = load_inventory(inv_path)
    host = inv.select_one(host_spec, "tune works on")
    variables = host_variables(inv, host, extra_vars)
    arms_raw = variables.get("arms")
    adaptive = arms_from_vars(variables, where=f"host {host.name}")["adaptive"]  # typos stop here, before anything runs
    if not isinstance(arms_raw, dict):
        raise ConfigError("tune needs the arms as a mapping in hosts.yaml vars")
    pairs = lengths or [(int(settings["input_len"]), int(settings["output_len"]))]
    if from_dir is not None and len(pairs) > 1:
        raise ConfigError("--from takes one run of one length; with several --input-len/--output-len lengths, "
                          "leave --from out (tune reuses the matching points of earlier runs itself)",
                          where="tune --from")
    chosen = for_length_pair(pairs, for_length)
    reused: list[ResultRecord] = []
    if from_dir is not None:
        reused, coarse = from_settings(from_dir, host, settings, typed, coarse)
        pairs = [(int(settings["input_len"]), int(settings["output_len"]))]
        chosen = pairs[0]
    for i, o in pairs:   # every length's settings are checked before the first one runs
        BenchSettings.from_dict({**settings, "input_len": i, "output_len": o, "arms": ["baseline", "eagle3"],
                                 "concurrency": coarse}, where="specops tune")
    runs_root = runs_dir or default_runs_dir(inv.path)
    run_dir = out or runs_root / new_run_id("tune")
    if len(pairs) > 1 and (run_dir / TUNE_JSON).exists():
        raise ConfigError(f"--out {run_dir} already holds a tune; give a new directory")
    budget_s = budget_minutes * 60.0 if budget_minutes is not None else None
    done: list[Tuned] = []
    for i, o in pairs:
        where = run_dir if len(pairs) == 1 else run_dir / length_dir(i, o)
        if len(pairs) > 1:
            say(f"-- context length: input {i}, output {o} tokens --")
        left = None if budget_s is None else max(0.0, budget_s - sum(t.result.elapsed_s for t in done))
        done.append(tune_length(inv, host, arms_raw, adaptive, coarse=coarse,
                                settings={**settings, "input_len": i, "output_len": o}, from_dir=from_dir,
                                reused=reused, budget_s=left, tier_steps=tier_steps, run_dir=where,
                                runs_dir=runs_root, reuse=reuse, extra_vars=extra_vars, say=say, console=console,
                                candidates=candidates))
    written = _write_chosen(inv_path, host, done, chosen, several=len(pairs) > 1) if write else None
    if len(pairs) > 1:
        write_tune(run_dir, lengths_document([(t.run_dir, t.result) for t in done], chosen, written))
    return TuneOutcome(run_dir, done, chosen)


def unfair_arms(run_dir: Path, from_dir: Path | None) -> list[str]:
    """The report's headline fairness warnings for the runs a tune decided from (its own, and
    --from's): arms on different attention backends or devices, whose ratios measure that
    difference rather than speculation (a CPU host's Triton-interpreted EAGLE against
    torch_native), so no schedule is written from them."""
    found = [w for d in (from_dir, run_dir) if d is not None for w in fairness_headline(load_manifest(d))]
    return list(dict.fromkeys(found))


def _schedule(result: TuneResult, adaptive: ArmSpec) -> None:
    """The verified schedule into the result, in every engine's forms (tune --emit, tune.json)."""
    schedule = result.verified_schedule(adaptive.num_steps or EAGLE_DEFAULTS["num_steps"])
    if schedule is None:
        return
    result.schedule = schedule.to_dict()
    forms = schedule_forms(schedule, draft_model=adaptive.draft_model or "DRAFT_MODEL",
                           max_batch=adaptive.cuda_graph_max_bs)
    result.forms = [f.to_dict() for f in forms]


def _pick(done: list[Tuned], chosen: tuple[int, int]) -> Tuned:
    return next(t for t in done if (t.result.input_len, t.result.output_len) == chosen)


def _write_chosen(inv_path: Path, host: Host, done: list[Tuned], chosen: tuple[int, int], *,
                  several: bool) -> str | None:
    """--write: the chosen length's verified threshold (and tiers, when they verified) into
    hosts.yaml, and where it went into that length's tune.json; None when it did not verify."""
    pick = _pick(done, chosen)
    result, threshold = pick.result, pick.result.threshold
    if not result.ok or threshold is None or result.unfair:
        return None
    tiers = result.tiers if (result.tiers_verdict or {}).get("ok") else None
    written = write_adaptive(inv_path, host.name, "adaptive", threshold=threshold, tiers=tiers,
                             groups=list(host.groups))
    result.written = written if not several else f"{written} (chosen for input {chosen[0]}, output {chosen[1]})"
    write_tune(pick.run_dir, tune_document(result, pick.settings))
    return written
