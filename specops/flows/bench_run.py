"""`specops bench` on its hosts: where the run starts (`--resume`, `--extend`, `--out`), the
settings parsed once into the `BenchSettings` every host's bench step receives, the bench
playbook run with the point bar, then the report printed. The CLI parses the options and
builds the resume command; everything else is here, so `specops demo` runs the same flow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import click
from rich.console import Console

from specops.bench.prechecks import check_for_hosts
from specops.bench.settings import BenchSettings
from specops.config.inventory import load_inventory
from specops.config.settings import cost_var, slo_var
from specops.data import default_playbook
from specops.flows.play import print_resume, report_dict, run_playbook
from specops.records.schema import level_text
from specops.render.bar import PointBar
from specops.report.artifacts import render_report
from specops.report.markdown import terminal_table
from specops.report.summary_doc import SUMMARY_JSON
from specops.run.engine import RunReport, resolve_vars
from specops.run.resume import bench_start
from specops.secrets import redact
from specops.servers.lease import LeasePolicy
from specops.steps import load


def print_report(console: Console, run_dir: Path, objective: str | None = None,
                 slo: dict[str, float] | None = None, *, verbosity: int = 0) -> int:
    """Render report.md and plots from the run directory; print the table (not with
    `specops -q`, verbosity -1; full values with `-v`, 1) and the headline (`objective`,
    `slo`: `report`'s own)."""
    summary = render_report(run_dir, objective=objective, slo=slo)
    if verbosity >= 0:
        terminal_table(summary, console.width).print(console, full=verbosity > 0)
    for line in summary.headline:
        console.print(line, markup=False, highlight=False)
    for line in summary.warnings:
        console.print(f"warning: {line}", markup=False, highlight=False)
    for line in summary.servers:
        console.print(f"note: {line}", markup=False, highlight=False)
    for rec in summary.failed:
        console.print(f"failed point: {rec.host} {rec.arm} {level_text(rec)} "
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
              console: Console, verbosity: int = 0, resume_command: Callable[[Path], str] | None = None,
              given: dict[str, Any] | None = None, extend: bool = False, as_json: bool = False,
              policy: LeasePolicy | None = None) -> int:
    """`given`: the settings options typed on the command line (with --resume, each must match
    the run; with `extend`, --concurrency and --repeats may add to it). `as_json`: summary.json
    on stdout (click.echo), nothing else there: `console` is then the one on stderr, for the
    failures and the resume command; no progress. `verbosity`: `specops -q` (-1) or `-v` (1),
    as `run_playbook` takes it. `policy`: --wait / --take-over (servers.lease)."""
    inv = load_inventory(inventory_path)
    start = bench_start(settings, out=out, resume=resume, given=given, extend=extend)
    settings, run_dir, notes = start.settings, start.run_dir, start.notes
    if settings.get("slo") is None and not start.resumed:
        settings = {**settings, "slo": slo_var(inv, host_spec, extra_vars)}
    if settings.get("gpu_hour_cost") is None and not start.resumed:
        settings = {**settings, "gpu_hour_cost": cost_var(inv, host_spec, extra_vars)}
    checked = BenchSettings.from_dict(settings, where="specops bench")
    book_path = playbook or default_playbook("bench")
    book = load(book_path, inv.select(host_spec))
    bench_vars = {**extra_vars, "bench": checked}   # the one parse: each host's bench step takes it as it is
    check_for_hosts(checked, {h.name: (h.engine, resolve_vars(inv, book, h, bench_vars, h.workdir).get("arms"))
                              for h in inv.select(host_spec)})

    level = -1 if as_json else verbosity
    for note in notes:
        console.print(note, markup=False, highlight=False)
    total = (len(inv.select(host_spec)) * len(checked.arms) * len(checked.levels()) * checked.repeats
             * len(checked.lengths()))
    with PointBar(total, console, enabled=level >= 0) as on_point:
        report = run_playbook(inv, book_path, host_spec, extra_vars=bench_vars,
                              runs_dir=runs_dir, run_dir=run_dir, console=console,
                              keep_servers=checked.keep_servers, label="bench", on_point=on_point,
                              resume_command=resume_command, verbosity=level, lease_policy=policy)
    if as_json:
        code = _print_json(report)
    else:
        code = print_report(console, report.run_dir, verbosity=level) \
            if (report.run_dir / "results.jsonl").exists() else 1
    if report.ok and code != 0 and resume_command is not None:  # failed points: a resume runs them again
        print_resume(console, resume_command(report.run_dir))
    return 0 if report.ok and code == 0 else 1
