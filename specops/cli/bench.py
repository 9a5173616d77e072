"""`specops bench`, `specops report`, `specops demo`: sweeps, their reports, the offline demo."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import click
from click.core import ParameterSource

from specops.bench.repeats import parse_repeats
from specops.bench.store import load_manifest, write_csv
from specops.bench.sweep import BenchSettings, check_for_hosts
from specops.cli.exits import exit_with
from specops.cli.options import (
    QUIET,
    command_line,
    console,
    err_console,
    host_option,
    inventory_option,
    lease_options,
    lease_policy,
    parse_vars,
    quiet,
    runtime_option,
    runtime_vars,
    var_option,
    verbose,
    verbosity,
)
from specops.config.inventory import default_inventory_path, load_inventory
from specops.config.playbook import load_playbook
from specops.config.settings import cost_var, slo_var
from specops.config.slo import OBJECTIVES, check_objective, parse_slo
from specops.data import default_playbook, shipped_inventory
from specops.decide.summary import objective_of
from specops.errors import ConfigError
from specops.flows.hostops import stop_all
from specops.flows.play import print_resume, report_dict, run_playbook
from specops.render.bar import PointBar
from specops.report.artifacts import render_report
from specops.report.markdown import terminal_table
from specops.report.summary_doc import SUMMARY_JSON
from specops.run.engine import RunReport, resolve_vars
from specops.run.resume import bench_start
from specops.secrets import redact
from specops.servers.lease import LeasePolicy
from specops.steps import KINDS


def _ints(value: str, option: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated integers, got '{value}'") from None
    return levels


def _lengths(value: str, option: str) -> int | list[int]:
    """--input-len / --output-len: one length (an int, as before lengths were an axis) or a
    comma-separated list of positive lengths swept beside concurrency."""
    lengths = _ints(value, option)
    if not lengths:
        raise ConfigError(f"{option} expects a length or comma-separated lengths, got '{value}'")
    bad = [v for v in lengths if v < 1]
    if bad:
        raise ConfigError(f"{option} lengths must be at least 1, got {','.join(map(str, bad))} in '{value}'")
    return lengths[0] if len(lengths) == 1 else lengths


def _print_report(run_dir: Path, objective: str | None = None, slo: dict[str, float] | None = None) -> int:
    """Render report.md and plots from the run directory; print the table (not with
    `specops -q`; full values with `-v`) and the headline (`objective`, `slo`: `report`'s own)."""
    summary = render_report(run_dir, objective=objective, slo=slo)
    if not quiet():
        terminal_table(summary, console.width).print(console, full=verbose())
    for line in summary.headline:
        console.print(line, markup=False, highlight=False)
    for line in summary.warnings:
        console.print(f"warning: {line}", markup=False, highlight=False)
    for line in summary.servers:
        console.print(f"note: {line}", markup=False, highlight=False)
    for rec in summary.failed:
        console.print(f"failed point: {rec.host} {rec.arm} c={rec.concurrency} "
                      f"repeat {rec.repeat}: {rec.error or 'unknown error'}", markup=False, highlight=False)
    console.print(f"report: {summary.report_path}", markup=False, highlight=False, soft_wrap=True)
    return 1 if summary.failed else 0


def _print_json(report: RunReport) -> int:
    """`bench --json`: the run's summary.json on stdout (the step report, as `deploy --json`
    prints it, when the sweep never started); the exit code as without --json."""
    if not (report.run_dir / "results.jsonl").exists():
        click.echo(json.dumps(redact(report_dict(report)), indent=1))
        return 1
    summary = render_report(report.run_dir)
    click.echo(redact((report.run_dir / SUMMARY_JSON).read_text()), nl=False)
    return 1 if summary.failed else 0


def run_bench(inventory_path: str | None, host_spec: str, settings: dict[str, Any], *, playbook: Path | None,
              out: Path | None, resume: Path | None, runs_dir: Path | None, extra_vars: dict[str, Any],
              resume_command: Callable[[Path], str] | None = None, given: dict[str, Any] | None = None,
              extend: bool = False, as_json: bool = False, policy: LeasePolicy | None = None) -> int:
    """`given`: the settings options typed on the command line (with --resume, each must match
    the run; with `extend`, --concurrency and --repeats may add to it). `as_json`: summary.json
    on stdout, failures and the resume command on stderr, no progress. `policy`: --wait /
    --take-over (servers.lease)."""
    inv = load_inventory(inventory_path)
    start = bench_start(settings, out=out, resume=resume, given=given, extend=extend)
    settings, run_dir, notes = start.settings, start.run_dir, start.notes
    if settings.get("slo") is None and not start.resumed:
        settings = {**settings, "slo": slo_var(inv, host_spec, extra_vars)}
    if settings.get("gpu_hour_cost") is None and not start.resumed:
        settings = {**settings, "gpu_hour_cost": cost_var(inv, host_spec, extra_vars)}
    checked = BenchSettings.from_dict(settings, where="specops bench")
    book_path = playbook or default_playbook("bench")
    book = load_playbook(book_path, KINDS)
    bench_vars = {**extra_vars, "bench": asdict(checked)}
    check_for_hosts(checked, {h.name: (h.engine, resolve_vars(inv, book, h, bench_vars, h.workdir).get("arms"))
                              for h in inv.select(host_spec)})

    out_console = err_console if as_json else console
    level = QUIET if as_json else verbosity()
    for note in notes:
        out_console.print(note, markup=False, highlight=False)
    total = (len(inv.select(host_spec)) * len(checked.arms) * len(checked.concurrency) * checked.repeats
             * len(checked.lengths()))
    with PointBar(total, out_console, enabled=level > QUIET) as on_point:
        report = run_playbook(inv, book_path, host_spec, extra_vars=bench_vars,
                              runs_dir=runs_dir, run_dir=run_dir, console=out_console,
                              keep_servers=checked.keep_servers, label="bench", on_point=on_point,
                              resume_command=resume_command, verbosity=level, lease_policy=policy)
    if as_json:
        code = _print_json(report)
    else:
        code = _print_report(report.run_dir) if (report.run_dir / "results.jsonl").exists() else 1
    if report.ok and code != 0 and resume_command is not None:  # failed points: a resume runs them again
        print_resume(out_console, resume_command(report.run_dir))
    return 0 if report.ok and code == 0 else 1


@click.command()
@host_option
@inventory_option
@click.option("--playbook", "-p", type=click.Path(dir_okay=False), help="default playbooks/bench.yaml")
@click.option("--arms", default="baseline,eagle3,adaptive", show_default=True)
@click.option("--concurrency", default="1,2,4,8,16,32,64", show_default=True)
@click.option("--repeats", default="3", show_default=True,
              help="a count per point, or auto[:MAX]: at least 2, until the point is settled, at most MAX (5)")
@click.option("--arms-at-once/--one-arm-at-a-time", "arms_at_once", default=None,
              help="measure each point on every arm at once (arms on distinct GPUs), or one arm at a time "
                   "(default: at once where the arms have their own GPUs and the host 2 CPU cores per arm)")
@click.option("--num-prompts", type=int, help="requests per point (default: max(4 x concurrency, 16))")
@click.option("--prompts-per-level", type=int, help="same as --num-prompts, by another name")
@click.option("--input-len", default="256", show_default=True,
              help="input tokens per prompt; a list (256,2048,8192) sweeps context length beside concurrency")
@click.option("--output-len", default="256", show_default=True, help="output tokens per request; a list sweeps too")
@click.option("--dataset", default="random", show_default=True, help="random | sharegpt | PATH")
@click.option("--runner", default="auto", show_default=True, type=click.Choice(["auto", "sglang", "builtin"]),
              help="auto: sglang's bench_serving on SGLang hosts, the builtin client on simulated ones")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--slo", help="latency limits, e.g. ttft_ms=200,tpot_ms=50: goodput and attainment per point "
                            "(default: the hosts' `slo` var)")
@click.option("--objective", default="throughput", show_default=True, type=click.Choice(list(OBJECTIVES)),
              help="what the crossover and threshold compare (goodput needs an SLO)")
@click.option("--gpu-hour-cost", type=float, help="$ per GPU-hour: $ per 1M output tokens per arm and level "
                                                   "(default: the hosts' `gpu_hour_cost` var)")
@click.option("--threshold", type=click.IntRange(min=1),
              help="the adaptive arm's threshold (same as --var arms.adaptive.threshold=N)")
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default runs/<id>)")
@click.option("--resume", type=click.Path(file_okay=False, exists=True), help="a run directory: run only its missing points")
@click.option("--extend", is_flag=True, help="with --resume: --concurrency, --input-len/--output-len and --repeats "
                                              "add levels, lengths or repeats to the run")
@click.option("--json", "as_json", is_flag=True, help="print summary.json (nothing else on stdout)")
@click.option("--keep-servers", is_flag=True, help="leave servers this run launched running")
@click.option("--runs-dir", type=click.Path(file_okay=False))
@var_option
@lease_options
@runtime_option
def bench(host_spec: str, inventory_path: str | None, playbook: str | None, arms: str, concurrency: str,
          repeats: str, arms_at_once: bool | None, num_prompts: int | None, prompts_per_level: int | None, input_len: str, output_len: str,
          dataset: str, runner: str, seed: int, slo: str | None, objective: str, gpu_hour_cost: float | None,
          threshold: int | None,
          out: str | None, resume: str | None,
          extend: bool, as_json: bool, keep_servers: bool, runs_dir: str | None, var_items: tuple[str, ...],
          wait: bool, wait_timeout: float, take_over: bool, allow_runtime_mismatch: bool) -> None:
    """Sweep arms x concurrency x repeats; write results as they come; report the crossover."""
    policy = lease_policy(wait, wait_timeout, take_over)
    rule = parse_repeats(repeats)
    scheduling = "auto" if arms_at_once is None else ("arms-at-once" if arms_at_once else "one-arm-at-a-time")
    settings = {"arms": [a.strip() for a in arms.split(",") if a.strip()],
                "concurrency": _ints(concurrency, "--concurrency"), "repeats": rule.most,
                "repeats_auto": rule.auto, "scheduling": scheduling, "num_prompts": num_prompts,
                "prompts_per_level": prompts_per_level, "input_len": _lengths(input_len, "--input-len"),
                "output_len": _lengths(output_len, "--output-len"),
                "dataset": dataset, "runner": runner, "seed": seed, "keep_servers": keep_servers,
                "slo": slo, "objective": objective, "gpu_hour_cost": gpu_hour_cost}
    extra_vars = runtime_vars(parse_vars(var_items), allow_runtime_mismatch)
    ctx = click.get_current_context()
    sources = {"repeats_auto": "repeats", "scheduling": "arms_at_once"}  # settings of another option's name
    given = {key: value for key, value in settings.items() if key != "keep_servers"
             and ctx.get_parameter_source(sources.get(key, key)) not in (ParameterSource.DEFAULT, None)}
    common = (("--host", host_spec), ("-i", inventory_path), ("--playbook", playbook),
              ("--allow-runtime-mismatch", allow_runtime_mismatch),
              *(("--var", v) for v in var_items), ("--threshold", threshold), ("--runs-dir", runs_dir))

    def again(run_dir: Path) -> str:
        """`--resume DIR` once the sweep has a manifest; before that, the same sweep into DIR."""
        if (run_dir / "manifest.json").exists():
            added = (("--concurrency", concurrency if "concurrency" in given else None),
                     ("--input-len", input_len if "input_len" in given else None),
                     ("--output-len", output_len if "output_len" in given else None),
                     ("--repeats", repeats if "repeats" in given else None), ("--extend", True)) if extend else ()
            return command_line("bench", *common, ("--resume", str(run_dir)), *added)
        return command_line("bench", *common, ("--arms", arms), ("--concurrency", concurrency),
                            ("--repeats", repeats), ("--num-prompts", num_prompts),
                            *((("--arms-at-once" if arms_at_once else "--one-arm-at-a-time", True),)
                              if arms_at_once is not None else ()),
                            ("--prompts-per-level", prompts_per_level), ("--input-len", input_len),
                            ("--output-len", output_len), ("--dataset", dataset), ("--runner", runner),
                            ("--seed", seed), ("--slo", slo), ("--objective", objective if "objective" in given else None),
                            ("--gpu-hour-cost", gpu_hour_cost),
                            ("--keep-servers", keep_servers), ("--out", str(run_dir)))
    if threshold is not None:
        extra_vars["arms.adaptive.threshold"] = threshold
    raise SystemExit(run_bench(inventory_path, host_spec, settings, playbook=Path(playbook) if playbook else None,
                       out=Path(out) if out else None, resume=Path(resume) if resume else None,
                       runs_dir=Path(runs_dir) if runs_dir else None, extra_vars=extra_vars,
                       resume_command=again, given=given, extend=extend, as_json=as_json, policy=policy))


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="print summary.json (the report for machines)")
@click.option("--objective", type=click.Choice(list(OBJECTIVES)),
              help="what the crossover and threshold compare (default: the bench's own; goodput needs an SLO)")
@click.option("--slo", help="latency limits, e.g. ttft_ms=200,tpot_ms=50, in place of the bench's own")
def report(run_dirs: tuple[str, ...], as_json: bool, objective: str | None, slo: str | None) -> None:
    """Re-render report.md, report.html, summary.json, results.csv and plots/ from a run
    directory's files alone (under another objective or SLO with --objective / --slo)."""
    if len(run_dirs) > 1:
        raise ConfigError(f"report takes one run directory; to put runs side by side: "
                          f"specops compare {' '.join(run_dirs)}")
    path = Path(run_dirs[0])
    if not (path / "results.jsonl").exists():
        raise ConfigError(f"{path} has no results.jsonl (not a bench run directory)")
    limits = parse_slo(slo, where="report --slo")
    recorded, recorded_slo = objective_of(load_manifest(path))
    check_objective(objective or recorded, limits or recorded_slo, where="report --objective")
    write_csv(path)
    if as_json:
        summary = render_report(path, objective=objective, slo=limits)
        click.echo((path / SUMMARY_JSON).read_text(), nl=False)
        exit_with(not summary.failed)
    raise SystemExit(_print_report(path, objective, limits))


@click.command()
@inventory_option
@click.option("--quick", is_flag=True, help="fewer levels and one repeat (under a minute)")
def demo(inventory_path: str | None, quick: bool) -> None:
    """Deploy and bench on the simulated `local` host: the whole loop, no GPU needed."""

    inv_path = Path(inventory_path) if inventory_path else default_inventory_path()
    if not inv_path.exists():
        inv_path = shipped_inventory()
    inv = load_inventory(inv_path)
    console.print("[bold]1/2 deploy[/] on local (simulated SGLang servers)")
    deployed = run_playbook(inv, default_playbook("deploy"), "local", extra_vars={}, console=console)
    if not deployed.ok:
        exit_with(False)
    console.print("[bold]2/2 bench[/] on local")
    settings = {"arms": ["baseline", "eagle3", "adaptive"], "repeats": 1 if quick else 2,
                "concurrency": [1, 4, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64],
                "input_len": 128, "output_len": 64 if quick else 128}
    code = run_bench(str(inv_path), "local", settings, playbook=None, out=None, resume=None, runs_dir=None,
                     extra_vars={})

    stopped = stop_all(inv.hosts["local"])
    console.print(f"demo done; stopped the simulated servers ({', '.join(stopped) or 'none'})",
                  markup=False, highlight=False)
    raise SystemExit(code)
