"""deploy/bench glue: load the playbook, run the engine with live progress, print the outcome."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from specops.config.inventory import Inventory
from specops.render.progress import (
    failure_lines,
    live_progress,
    outcome_line,
    print_check,
    result_line,
    summary_table,
    warning_lines,
)
from specops.run.engine import Engine, RunReport
from specops.run.state import Interrupted, PointCallback
from specops.secrets import dumps_masked
from specops.servers.lease import LeasePolicy
from specops.steps import load


def run_playbook(inventory: Inventory, playbook_path: Path, host_spec: str, *, extra_vars: dict[str, Any],
                 check: bool = False, resume: bool = False, from_step: str | None = None,
                 runs_dir: Path | None = None, forks: int | None = None, console: Console | None = None,
                 as_json: bool = False, quiet: bool = False, run_dir: Path | None = None,
                 keep_servers: bool = False, label: str | None = None,
                 on_point: PointCallback | None = None,
                 resume_command: Callable[[Path], str] | None = None, verbosity: int = 0,
                 lease_policy: LeasePolicy | None = None) -> RunReport:
    """Validate everything first (nothing runs on bad input), then run and render.
    Ctrl-C stops the servers this run launched (unless keep_servers), closes the
    connections and raises `Interrupted` (the CLI exits 130); the process lives on.
    `resume_command(run_dir)`: the exact command that continues this run, printed after
    Ctrl-C or a failure. `verbosity` (`specops -q`/`-v`): -1 prints no progress and no
    table, only failures and one result line; 1 adds every command a step runs. `quiet`
    prints nothing at all (the caller reports). `lease_policy`: what to do with an arm
    another run holds with other arguments (servers.lease: refuse, wait, take over)."""
    console = console or Console()
    hosts = inventory.select(host_spec)
    playbook = load(playbook_path, hosts)
    engine = Engine(inventory, playbook, hosts, extra_vars=extra_vars, runs_dir=runs_dir, check=check,
                    resume=resume, from_step=from_step, forks=forks, run_dir=run_dir, run_label=label,
                    on_point=on_point, lease_policy=lease_policy)
    engine.prevalidate()
    try:
        with live_progress(engine, console, enabled=not as_json and not quiet and verbosity >= 0,
                           commands=verbosity > 0):
            report = engine.run()
    except KeyboardInterrupt:
        _interrupted(engine, console, keep_servers, resume_command)
        engine.close()
        raise Interrupted() from None
    finally:
        engine.close()
    if as_json:
        console.print_json(dumps_masked(report_dict(report)))
        return report
    if quiet:
        return report
    if check:  # what --check was asked for, even with -q
        print_check(report, console)
    elif verbosity >= 0:
        console.print(summary_table(report, console.width))
        console.print(outcome_line(report), markup=False, highlight=False, soft_wrap=True)
    for line in warning_lines(report):  # shown as they came too; here (and with -q) where the eye lands
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in failure_lines(report):
        console.print("✗ " + line, markup=False, highlight=False)
    journal = engine.state.journal
    problem = journal.write_problem() if journal is not None else None
    if problem:  # a full disk: the run went on, its journal has a gap (said even with -q)
        console.print(f"warning: {problem}", markup=False, highlight=False)
    if verbosity < 0:
        console.print(result_line(report), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(f"run directory: {report.run_dir}", markup=False, highlight=False, soft_wrap=True)
    if not report.ok and not check and resume_command is not None:
        print_resume(console, resume_command(report.run_dir))
    return report


def print_resume(console: Console, command: str) -> None:
    console.print(f"to resume: {command}", markup=False, highlight=False, soft_wrap=True)


def report_dict(report: RunReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id, "run_dir": str(report.run_dir), "ok": report.ok, "check": report.check,
        "hosts": {h.host: {"ok": h.ok, "error": h.error, "failed_step": h.failed_step,
                           "warnings": [{"step": w.step, "message": w.message} for w in h.warnings],
                           "steps": [{"name": report.playbook.steps[i].name, "status": s.status, "detail": s.detail,
                                      "commands": s.commands} for i, s in enumerate(h.steps)]}
                  for h in report.hosts},
    }


def _interrupted(engine: Engine, console: Console, keep_servers: bool,
                 resume_command: Callable[[Path], str] | None) -> None:
    """Ctrl-C: stop what this run launched and say so."""
    console.print("interrupted", markup=False)
    for cleanup in engine.interrupt(keep_servers):
        console.print(cleanup.line(), markup=False, highlight=False)
    console.print(f"run directory: {engine.run_dir}", markup=False, highlight=False, soft_wrap=True)
    if resume_command is not None and not engine.check:
        print_resume(console, resume_command(engine.run_dir))
    console.file.flush()
