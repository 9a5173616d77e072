"""`specops tune`: sweep, choose the adaptive threshold (and tiers), verify, optionally write it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from specops.bench.artifacts import render_report
from specops.bench.store import append_result, load_manifest, load_results
from specops.bench.sweep import BenchSettings
from specops.bench.tune import Phase, Tuner, write_tune
from specops.cli.exits import exit_with
from specops.cli.options import console, host_option, inventory_option, parse_vars, var_option
from specops.config.inventory import default_inventory_path, load_inventory
from specops.config.writeback import write_adaptive
from specops.data import default_playbook
from specops.errors import ConfigError, SpecopsError
from specops.render.progress import failure_lines
from specops.run.engine import default_runs_dir
from specops.run.journal import new_run_id
from specops.run.play import run_playbook
from specops.servers.arms import arms_from_vars
from specops.transport.connect import open_transport


def _ints(value: str, option: str) -> list[int]:
    try:
        levels = sorted({int(v) for v in value.split(",") if v.strip()})
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated integers, got '{value}'") from None
    if not levels or min(levels) < 0:
        raise ConfigError(f"{option} expects non-negative integers, got '{value}'")
    return levels


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
    transport = open_transport(host)
    try:
        res = transport.run([host.python, "-c", _FREE_PORTS.format(n=n)], timeout=60)
    finally:
        transport.close()
    try:
        ports = [int(p) for p in res.stdout.split()] if res.ok else []
    except ValueError:
        ports = []
    return ports if len(ports) == n else []


def run_tune(inventory_path: str | None, host_spec: str, *, coarse: list[int], settings: dict[str, Any],
             from_dir: Path | None, budget_minutes: float | None, write: bool, as_json: bool,
             tier_steps: list[int], out: Path | None, runs_dir: Path | None, extra_vars: dict[str, Any]) -> int:

    inv_path = Path(inventory_path) if inventory_path else default_inventory_path()
    inv = load_inventory(inv_path)
    host = inv.select_one(host_spec, "tune works on")
    variables = {**inv.host_vars(host), **extra_vars}
    arms_raw = variables.get("arms")
    arms_from_vars(variables, where=f"host {host.name}")  # typos stop here, before anything runs
    if not isinstance(arms_raw, dict):
        raise ConfigError("tune needs the arms as a mapping in hosts.yaml vars")
    reused: list[dict[str, Any]] = []
    if from_dir is not None:
        reused, manifest = _reused_records(from_dir, host.name, ("baseline", "eagle3"))
        old = dict(manifest.get("bench") or {})
        swept = {k: v for k, v in old.items() if k in ("input_len", "output_len") and isinstance(v, list) and len(v) > 1}
        if swept:  # one threshold per context length is not what tune makes yet
            shown = ", ".join(f"--{k.replace('_', '-')} {','.join(map(str, v))}" for k, v in swept.items())
            raise ConfigError(f"--from {from_dir}: the run swept several context lengths ({shown}); tune takes "
                              f"one length", where="tune --from",
                              hint="its report gives a threshold per length; to tune one, run "
                                   "`specops tune --input-len N --output-len M` without --from")
        for key in ("input_len", "output_len", "num_prompts", "prompts_per_level", "dataset", "seed", "repeats",
                    "runner"):
            if old.get(key) is not None:
                settings[key] = old[key]
        coarse = sorted({int(r["concurrency"]) for r in reused})
    sim: dict[str, Any] = variables["sim"] if isinstance(variables.get("sim"), dict) else {}
    time_scale = float(sim.get("time_scale") or 1.0) if host.engine == "sim" else None
    BenchSettings.from_dict({**settings, "arms": ["baseline", "eagle3"], "concurrency": coarse},
                            where="specops tune")
    run_dir = out or (runs_dir or default_runs_dir(inv.path)) / new_run_id("tune")
    if (run_dir / "results.jsonl").exists():
        raise ConfigError(f"--out {run_dir} already holds results; give a new directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    for rec in reused:
        append_result(run_dir, {**rec, "reused_from": str(from_dir)})

    def run_phase(phase: Phase, arms: dict[str, Any]) -> None:
        checked = BenchSettings.from_dict({**settings, "arms": phase.arms, "concurrency": phase.levels,
                                           "repeats": phase.repeats}, where="specops tune")
        report = run_playbook(inv, default_playbook("bench"), host.name,
                              extra_vars={**extra_vars, "arms": arms, "bench": asdict(checked)},
                              run_dir=run_dir, console=console, quiet=True, label="tune")
        if not report.ok:
            lines = failure_lines(report)
            raise SpecopsError(f"the {phase.name} sweep failed: " + ("; ".join(lines) or "see the journal"),
                               where=f"host {host.name}", hint=f"run directory: {run_dir}")

    budget_s = budget_minutes * 60.0 if budget_minutes is not None else None
    ports = _free_ports(host, 1 + len(tier_steps))
    tuner = Tuner(host=host.name, arms=arms_raw, settings=settings, coarse=coarse, run_phase=run_phase,
                  records=lambda: load_results(run_dir), say=_say if not as_json else (lambda _l: None),
                  time_scale=time_scale, budget_s=budget_s, native=None, tier_steps=tier_steps,
                  reused=reused, reused_from=str(from_dir) if from_dir else None, ports=ports)
    likely, likely_s, points, seconds = tuner.plan_text()
    tuner.result.planned_points, tuner.result.estimate_s = points, round(seconds, 1)
    if not as_json:
        budget = f", budget {budget_minutes:g} min" if budget_minutes is not None else ""
        _say(f"tune {host.name}: {likely} points if the first threshold verifies (~{likely_s / 60:.1f} min), at most "
             f"{points} with neighbours and tiers (~{seconds / 60:.1f} min); estimated "
             f"{'from the simulator model' if time_scale else 'with a guess until the first points are measured'}"
             f"{budget}")
        _say(f"run directory: {run_dir}")
    tune_settings = {"coarse": coarse, "tier_steps": tier_steps, "budget_minutes": budget_minutes,
                     "from": str(from_dir) if from_dir else None, **settings}
    try:
        result = tuner.run()
    finally:
        write_tune(run_dir, tuner.result, tune_settings)
    if write and result.ok and result.threshold is not None:
        tiers = result.tiers if (result.tiers_verdict or {}).get("ok") else None
        result.written = write_adaptive(inv_path, host.name, "adaptive", threshold=result.threshold, tiers=tiers,
                                        groups=list(host.groups))
        write_tune(run_dir, result, tune_settings)
    return _finish(run_dir, result, write=write, as_json=as_json)


def _finish(run_dir: Path, result: Any, *, write: bool, as_json: bool) -> int:
    if (run_dir / "results.jsonl").exists():
        render_report(run_dir)
    if as_json:
        click.echo((run_dir / "tune.json").read_text(), nl=False)
        return 0 if result.ok else 1
    _say(f"result: {result.status}: {result.message}")
    if write:
        _say(f"written: {result.written}" if result.written else "not written: nothing verified")
    _say(f"report: {run_dir / 'report.md'}")
    return 0 if result.ok else 1


@click.command()
@host_option
@inventory_option
@click.option("--arms", default="baseline,eagle3,adaptive", show_default=True,
              help="the baseline, EAGLE-3 and adaptive arms of the host's vars, in that order")
@click.option("--from", "from_dir", type=click.Path(file_okay=False, exists=True),
              help="a bench run directory: reuse its baseline/eagle3 points as the coarse sweep")
@click.option("--budget-minutes", type=float, help="stop before a phase that would not fit; report what was measured")
@click.option("--write", is_flag=True, help="write the verified threshold (and tiers) into hosts.yaml")
@click.option("--json", "as_json", is_flag=True, help="print tune.json")
@click.option("--concurrency", default="1,2,4,8,16,32,64", show_default=True, help="the coarse levels")
@click.option("--repeats", default=1, show_default=True, type=int)
@click.option("--num-prompts", type=int, help="requests per point (default: max(4 x concurrency, 16))")
@click.option("--input-len", default=256, show_default=True, type=int)
@click.option("--output-len", default=256, show_default=True, type=int)
@click.option("--steps", "tier_steps", default="0,1,3", show_default=True,
              help="draft-step counts the tiers choose from (0: no speculation); 0.5.14+ trees only")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default runs/<id>-tune)")
@click.option("--runs-dir", type=click.Path(file_okay=False))
@var_option
def tune(host_spec: str, inventory_path: str | None, arms: str, from_dir: str | None, budget_minutes: float | None,
         write: bool, as_json: bool, concurrency: str, repeats: int, num_prompts: int | None, input_len: int,
         output_len: int, tier_steps: str, seed: int, out: str | None, runs_dir: str | None,
         var_items: tuple[str, ...]) -> None:
    """Find the adaptive arm's threshold from the server's running batch, verify it, and
    (--write) put it into hosts.yaml."""
    names = [a.strip() for a in arms.split(",") if a.strip()]
    if names != ["baseline", "eagle3", "adaptive"]:
        raise ConfigError("--arms: tune works on the arms named baseline, eagle3 and adaptive "
                          f"(got {','.join(names)})")
    if budget_minutes is not None and budget_minutes <= 0:
        raise ConfigError("--budget-minutes must be > 0")
    settings = {"repeats": repeats, "num_prompts": num_prompts, "input_len": input_len, "output_len": output_len,
                "seed": seed}
    code = run_tune(inventory_path, host_spec, coarse=_ints(concurrency, "--concurrency"), settings=settings,
                    from_dir=Path(from_dir) if from_dir else None, budget_minutes=budget_minutes, write=write,
                    as_json=as_json, tier_steps=_ints(tier_steps, "--steps"), out=Path(out) if out else None,
                    runs_dir=Path(runs_dir) if runs_dir else None, extra_vars=parse_vars(var_items))
    exit_with(code == 0)
