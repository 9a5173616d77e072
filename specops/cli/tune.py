"""`specops tune`: sweep, choose the adaptive threshold (and tiers), verify, optionally write it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import click

from specops.bench.artifacts import render_report
from specops.bench.reuse import Reuse, config_hashes, find_reusable
from specops.bench.store import append_result, load_manifest, load_results
from specops.bench.sweep import BenchSettings
from specops.bench.tune import (
    REUSED_FROM,
    TUNE_JSON,
    Phase,
    Tuner,
    TuneResult,
    length_dir,
    lengths_table,
    write_lengths,
    write_tune,
)
from specops.cli.exits import exit_with
from specops.cli.options import console, host_option, inventory_option, parse_vars, var_option
from specops.config.inventory import Inventory, default_inventory_path, load_inventory
from specops.config.writeback import write_adaptive
from specops.data import default_playbook
from specops.errors import ConfigError, SpecopsError
from specops.render.progress import failure_lines
from specops.run.engine import default_runs_dir
from specops.run.journal import new_run_id
from specops.run.play import run_playbook
from specops.servers.arms import arms_from_vars
from specops.servers.lifecycle import read_states, stop_states
from specops.transport.connect import open_transport


def _ints(value: str, option: str) -> list[int]:
    try:
        levels = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated integers, got '{value}'") from None
    if not levels or min(levels) < 0:
        raise ConfigError(f"{option} expects non-negative integers, got '{value}'")
    return levels


def _lengths(value: str, option: str) -> list[int]:
    """A length or a comma list of lengths, in the order given."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option} expects a length or comma-separated lengths, got '{value}'",
                          where=f"tune {option}") from None
    if not out or min(out) < 1:
        raise ConfigError(f"{option} must be at least 1, got '{value}'", where=f"tune {option}")
    if len(set(out)) != len(out):
        raise ConfigError(f"{option} lists a length twice: '{value}'", where=f"tune {option}")
    return out


def _say(line: str) -> None:
    console.print(line, markup=False, highlight=False)


def _reused_records(from_dir: Path, host: str, arms: tuple[str, str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if not (from_dir / "results.jsonl").exists():
        raise ConfigError(f"--from {from_dir}: no results.jsonl (not a bench run directory)")
    manifest = load_manifest(from_dir) if (from_dir / "manifest.json").exists() else {}
    records = [r for r in load_results(from_dir) if r.get("status") == "ok" and r.get("arm") in arms]
    hosts = {str(r.get("host")) for r in records}
    mine = [r for r in records if r.get("host") == host]
    if not mine and len(hosts) == 1:  # a run on another name for the same machine
        mine = [{**r, "host": host} for r in records]
    if not mine:
        raise ConfigError(f"--from {from_dir}: no ok baseline/eagle3 points for host '{host}' "
                          f"(it has: {', '.join(sorted(hosts)) or 'none'})")
    return mine, manifest


_FREE_PORTS = ("import socket\nsocks = [socket.socket() for _ in range({n})]\n"
               "for s in socks: s.bind(('127.0.0.1', 0))\nprint(' '.join(str(s.getsockname()[1]) for s in socks))")


def _free_ports(host: Any, n: int) -> list[int]:
    """Ports free on the host right now, for the arms tune adds (adaptive-t*, eagle3-k*):
    the profiles' own ports may be held by deployed servers, the next ones by anybody."""
    with open_transport(host) as transport:
        res = transport.run([host.python, "-c", _FREE_PORTS.format(n=n)], timeout=60)
    try:
        ports = [int(p) for p in res.stdout.split()] if res.ok else []
    except ValueError:
        ports = []
    return ports if len(ports) == n else []


def _phase_vars(extra_vars: dict[str, Any], arms: dict[str, Any], bench: dict[str, Any] | None = None) -> dict[str, Any]:
    """The variables a phase's bench playbook runs with (also what the reuse check plans from)."""
    out = {**extra_vars, "arms": arms}
    if bench is not None:
        out["bench"] = bench
    return out


def _release(host: Any, run_id: str) -> Callable[[list[str]], None]:
    """Stop the named arms' servers that this run launched and a phase kept up (a server
    someone else launched, e.g. by `specops deploy`, is left alone)."""
    def release(arms: list[str]) -> None:
        with open_transport(host) as transport:
            states = read_states(transport, host.workdir)
            mine = [states[a] for a in arms if a in states and states[a].launched_by == run_id]
            if mine:
                stop_states(transport, mine)
    return release


@dataclass
class _Tuned:
    """One context length's tune: its run directory and result."""

    run_dir: Path
    result: TuneResult
    settings: dict[str, Any]


def _tune_length(inv: Inventory, host: Any, arms_raw: dict[str, Any], *, coarse: list[int],
                 settings: dict[str, Any], from_dir: Path | None, reused: list[dict[str, Any]],
                 budget_s: float | None, as_json: bool, tier_steps: list[int], run_dir: Path, runs_dir: Path,
                 reuse: bool, extra_vars: dict[str, Any], say: Callable[[str], None]) -> _Tuned:
    """Tune one context length into its own run directory."""
    sim: dict[str, Any] = extra_vars.get("sim") or inv.host_vars(host).get("sim") or {}
    if not isinstance(sim, dict):
        sim = {}
    time_scale = float(sim.get("time_scale") or 1.0) if host.engine == "sim" else None
    checked = BenchSettings.from_dict({**settings, "arms": ["baseline", "eagle3"], "concurrency": coarse},
                                      where="specops tune")
    if (run_dir / "results.jsonl").exists():
        raise ConfigError(f"--out {run_dir} already holds results; give a new directory")
    pair_arms = {k: v for k, v in arms_raw.items() if k != "adaptive"}
    planned = config_hashes(inv, default_playbook("bench"), host, _phase_vars(extra_vars, pair_arms),
                            ["baseline", "eagle3"])
    run_dir.mkdir(parents=True, exist_ok=True)
    for rec in reused:
        append_result(run_dir, {**rec, REUSED_FROM: str(from_dir)})
    found: Reuse | None = None
    if from_dir is None and reuse:
        if planned is None:
            found = Reuse(note="the host has no SGLang tree yet, so no earlier run measured these servers there")
        else:
            runner = checked.runner if checked.runner != "auto" else ("builtin" if host.engine == "sim" else "sglang")
            found = find_reusable(runs_dir, host=host.name, hashes=planned[0], settings=checked, runner=runner,
                                  exclude=[run_dir])
            for rec in found.records:
                append_result(run_dir, rec)
        say(f"{found.text()} (looked in {runs_dir}; --no-reuse measures everything)")

    def run_phase(phase: Phase, arms: dict[str, Any]) -> None:
        bench = BenchSettings.from_dict({**settings, "arms": phase.arms, "concurrency": phase.levels,
                                         "repeats": phase.repeats, "keep_servers": phase.keep}, where="specops tune")
        report = run_playbook(inv, default_playbook("bench"), host.name,
                              extra_vars=_phase_vars(extra_vars, arms, asdict(bench)),
                              run_dir=run_dir, console=console, quiet=True, label="tune")
        if not report.ok:
            lines = failure_lines(report)
            raise SpecopsError(f"the {phase.name} sweep failed: " + ("; ".join(lines) or "see the journal"),
                               where=f"host {host.name}", hint=f"run directory: {run_dir}")

    ports = _free_ports(host, 1 + len(tier_steps))
    tuner = Tuner(host=host.name, arms=arms_raw, settings=settings, coarse=coarse, run_phase=run_phase,
                  records=lambda: load_results(run_dir), say=say, time_scale=time_scale, budget_s=budget_s,
                  native=None, tier_steps=tier_steps, reused=reused, reused_from=str(from_dir) if from_dir else None,
                  ports=ports, release=_release(host, run_dir.name), keep_ok=bool(planned and planned[1]))
    tuner.result.input_len, tuner.result.output_len = checked.lengths()[0]
    if found is not None:
        tuner.result.reuse = found.text()
    likely, likely_s, points, seconds = tuner.plan_text()
    tuner.result.planned_points, tuner.result.estimate_s = points, round(seconds, 1)
    if not as_json:
        budget = f", budget {budget_s / 60:g} min" if budget_s is not None else ""
        _say(f"tune {host.name}: {likely} points if the first threshold verifies (~{likely_s / 60:.1f} min), at most "
             f"{points} with neighbours and tiers (~{seconds / 60:.1f} min); estimated "
             f"{'from the simulator model' if time_scale else 'with a guess until the first points are measured'}"
             f"{budget}")
        _say(f"run directory: {run_dir}")
    tune_settings = {"coarse": coarse, "tier_steps": tier_steps, "budget_minutes": budget_s / 60 if budget_s else None,
                     "from": str(from_dir) if from_dir else None, "reuse": reuse and from_dir is None, **settings}
    try:
        tuner.run()
    finally:
        write_tune(run_dir, tuner.result, tune_settings)
        if (run_dir / "results.jsonl").exists():
            render_report(run_dir)
    return _Tuned(run_dir, tuner.result, tune_settings)


def _from_settings(from_dir: Path, host: Any, settings: dict[str, Any]) -> tuple[list[dict[str, Any]], list[int]]:
    """`--from DIR`: its baseline/EAGLE-3 points and client settings (one length only)."""
    reused, manifest = _reused_records(from_dir, host.name, ("baseline", "eagle3"))
    old = dict(manifest.get("bench") or {})
    swept = {k: v for k, v in old.items() if k in ("input_len", "output_len") and isinstance(v, list) and len(v) > 1}
    if swept:  # --from takes one run of one length; several lengths: tune them with --input-len L1,L2
        shown = ", ".join(f"--{k.replace('_', '-')} {','.join(map(str, v))}" for k, v in swept.items())
        raise ConfigError(f"--from {from_dir}: the run swept several context lengths ({shown}); tune takes "
                          f"one length", where="tune --from",
                          hint="its report gives a threshold per length; to tune them, run "
                               f"`specops tune {shown}` without --from (it reuses the "
                               "run's points that match)")
    for key in ("input_len", "output_len", "num_prompts", "prompts_per_level", "dataset", "seed", "repeats",
                "runner"):
        if old.get(key) is not None:
            settings[key] = old[key]
    return reused, sorted({int(r["concurrency"]) for r in reused})


def run_tune(inventory_path: str | None, host_spec: str, *, coarse: list[int], settings: dict[str, Any],
             from_dir: Path | None, budget_minutes: float | None, write: bool, as_json: bool,
             tier_steps: list[int], out: Path | None, runs_dir: Path | None, extra_vars: dict[str, Any],
             lengths: list[tuple[int, int]] | None = None, for_length: int | None = None, reuse: bool = True) -> int:
    inv_path = Path(inventory_path) if inventory_path else default_inventory_path()
    inv = load_inventory(inv_path)
    host = inv.select_one(host_spec, "tune works on")
    variables = {**inv.host_vars(host), **extra_vars}
    arms_raw = variables.get("arms")
    arms_from_vars(variables, where=f"host {host.name}")  # typos stop here, before anything runs
    if not isinstance(arms_raw, dict):
        raise ConfigError("tune needs the arms as a mapping in hosts.yaml vars")
    pairs = lengths or [(int(settings["input_len"]), int(settings["output_len"]))]
    if from_dir is not None and len(pairs) > 1:
        raise ConfigError("--from takes one run of one length; with several --input-len/--output-len lengths, "
                          "leave --from out (tune reuses the matching points of earlier runs itself)",
                          where="tune --from")
    chosen = _for_length(pairs, for_length)
    reused: list[dict[str, Any]] = []
    if from_dir is not None:
        reused, coarse = _from_settings(from_dir, host, settings)
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
    say = _say if not as_json else (lambda _l: None)
    done: list[_Tuned] = []
    for i, o in pairs:
        where = run_dir if len(pairs) == 1 else run_dir / length_dir(i, o)
        if len(pairs) > 1:
            say(f"-- context length: input {i}, output {o} tokens --")
        left = None if budget_s is None else max(0.0, budget_s - sum(t.result.elapsed_s for t in done))
        done.append(_tune_length(inv, host, arms_raw, coarse=coarse,
                                 settings={**settings, "input_len": i, "output_len": o}, from_dir=from_dir,
                                 reused=reused, budget_s=left, as_json=as_json, tier_steps=tier_steps, run_dir=where,
                                 runs_dir=runs_root, reuse=reuse, extra_vars=extra_vars, say=say))
    pick = next(t for t in done if (t.result.input_len, t.result.output_len) == chosen)
    written = None
    threshold = pick.result.threshold
    if write and pick.result.ok and threshold is not None:
        result = pick.result
        tiers = result.tiers if (result.tiers_verdict or {}).get("ok") else None
        written = write_adaptive(inv_path, host.name, "adaptive", threshold=threshold, tiers=tiers,
                                 groups=list(host.groups))
        result.written = written if len(pairs) == 1 else f"{written} (chosen for input {chosen[0]}, output {chosen[1]})"
        write_tune(pick.run_dir, result, pick.settings)
    if len(pairs) > 1:
        write_lengths(run_dir, [(t.run_dir, t.result) for t in done], chosen, written)
    return _finish(run_dir, done, chosen, write=write, as_json=as_json)


def _for_length(pairs: list[tuple[int, int]], for_length: int | None) -> tuple[int, int]:
    """FOR_LENGTH_RULE: the length whose threshold --write puts into hosts.yaml."""
    if for_length is None:
        return pairs[0]
    match = [p for p in pairs if p[0] == for_length]
    if not match:
        raise ConfigError(f"--for-length {for_length} is not one of the input lengths tuned "
                          f"({', '.join(str(i) for i, _ in pairs)})", where="tune --for-length")
    return match[0]


def _finish(run_dir: Path, done: list[_Tuned], chosen: tuple[int, int], *, write: bool, as_json: bool) -> int:
    ok = all(t.result.ok for t in done)
    if as_json:
        click.echo((run_dir / TUNE_JSON).read_text(), nl=False)
        return 0 if ok else 1
    measured = sum(t.result.measured_points for t in done)
    reused = sum(t.result.reused_points for t in done)
    if len(done) == 1:
        result = done[0].result
        _say(f"result: {result.status}: {result.message}")
        if write:
            _say(f"written: {result.written}" if result.written else "not written: nothing verified")
        _say(f"report: {run_dir / 'report.md'}")
    else:
        for line in lengths_table([t.result for t in done], chosen):
            _say(line)
        pick = next(t.result for t in done if (t.result.input_len, t.result.output_len) == chosen)
        if write:
            _say(f"written: {pick.written}" if pick.written else
                 f"not written: input {chosen[0]} (the length --write is for) did not verify")
        _say(f"per-length reports: {', '.join(str(t.run_dir / 'report.md') for t in done)}")
    _say(f"points: {measured} measured, {reused} reused from earlier runs")
    return 0 if ok else 1


@click.command()
@host_option
@inventory_option
@click.option("--arms", default="baseline,eagle3,adaptive", show_default=True,
              help="the baseline, EAGLE-3 and adaptive arms of the host's vars, in that order")
@click.option("--from", "from_dir", type=click.Path(file_okay=False, exists=True),
              help="a bench run directory: reuse its baseline/eagle3 points as the coarse sweep")
@click.option("--no-reuse", is_flag=True,
              help="measure every point, even those an earlier run in the runs directory measured on the same "
                   "servers and client settings")
@click.option("--budget-minutes", type=float, help="stop before a phase that would not fit; report what was measured")
@click.option("--write", is_flag=True, help="write the verified threshold (and tiers) into hosts.yaml")
@click.option("--for-length", type=int,
              help="with several --input-len lengths: the input length whose threshold --write puts in "
                   "(default: the first given)")
@click.option("--json", "as_json", is_flag=True, help="print tune.json")
@click.option("--concurrency", default="1,2,4,8,16,32,64", show_default=True, help="the coarse levels")
@click.option("--repeats", default=1, show_default=True, type=int)
@click.option("--num-prompts", type=int, help="requests per point (default: max(4 x concurrency, 16))")
@click.option("--input-len", default="256", show_default=True,
              help="prompt tokens; a comma list (256,4096) tunes each length and recommends per length")
@click.option("--output-len", default="256", show_default=True, help="output tokens; a comma list too")
@click.option("--steps", "tier_steps", default="0,1,3", show_default=True,
              help="draft-step counts the tiers choose from (0: no speculation); 0.5.14+ trees only")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default runs/<id>-tune)")
@click.option("--runs-dir", type=click.Path(file_okay=False),
              help="where runs go, and where earlier runs' points are looked for (default: runs/ beside hosts.yaml)")
@var_option
def tune(host_spec: str, inventory_path: str | None, arms: str, from_dir: str | None, no_reuse: bool,
         budget_minutes: float | None, write: bool, for_length: int | None, as_json: bool, concurrency: str,
         repeats: int, num_prompts: int | None, input_len: str, output_len: str, tier_steps: str, seed: int,
         out: str | None, runs_dir: str | None, var_items: tuple[str, ...]) -> None:
    """Find the adaptive arm's threshold from the server's running batch, verify it, and
    (--write) put it into hosts.yaml."""
    names = [a.strip() for a in arms.split(",") if a.strip()]
    if names != ["baseline", "eagle3", "adaptive"]:
        raise ConfigError("--arms: tune works on the arms named baseline, eagle3 and adaptive "
                          f"(got {','.join(names)})")
    if budget_minutes is not None and budget_minutes <= 0:
        raise ConfigError("--budget-minutes must be > 0")
    inputs, outputs = _lengths(input_len, "--input-len"), _lengths(output_len, "--output-len")
    pairs = [(i, o) for i in inputs for o in outputs]   # in the order given: the first is --write's default
    if for_length is not None and len(inputs) == 1 and for_length != inputs[0]:
        raise ConfigError(f"--for-length {for_length} is not the input length tuned ({inputs[0]})",
                          where="tune --for-length")
    settings = {"repeats": repeats, "num_prompts": num_prompts, "input_len": pairs[0][0], "output_len": pairs[0][1],
                "seed": seed}
    code = run_tune(inventory_path, host_spec, coarse=_ints(concurrency, "--concurrency"), settings=settings,
                    from_dir=Path(from_dir) if from_dir else None, budget_minutes=budget_minutes, write=write,
                    as_json=as_json, tier_steps=_ints(tier_steps, "--steps"), out=Path(out) if out else None,
                    runs_dir=Path(runs_dir) if runs_dir else None, extra_vars=parse_vars(var_items),
                    lengths=pairs, for_length=for_length, reuse=not no_reuse)
    exit_with(code == 0)
