"""deploy/bench glue: load the playbook, run the engine with live progress, print the outcome."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from specops.engine import Engine, RunReport
from specops.inventory import Inventory
from specops.playbook import load_playbook
from specops.ui import failure_lines, live_progress, print_check, summary_table


def run_playbook(inventory: Inventory, playbook_path: Path, host_spec: str, *, extra_vars: dict[str, Any],
                 check: bool = False, resume: bool = False, from_step: str | None = None,
                 runs_dir: Path | None = None, forks: int | None = None, console: Console | None = None,
                 as_json: bool = False, quiet: bool = False) -> RunReport:
    """Validate everything first (nothing runs on bad input), then run and render."""
    console = console or Console()
    playbook = load_playbook(playbook_path)
    hosts = inventory.select(host_spec)
    engine = Engine(inventory, playbook, hosts, extra_vars=extra_vars, runs_dir=runs_dir, check=check,
                    resume=resume, from_step=from_step, forks=forks)
    try:
        with live_progress(engine, console, enabled=not as_json and not quiet):
            report = engine.run()
    finally:
        engine.close()
    if as_json:
        console.print_json(json.dumps(report_dict(report)))
        return report
    if quiet:
        return report
    if check:
        print_check(report, console)
    else:
        console.print(summary_table(report))
    for line in failure_lines(report):
        console.print("✗ " + line, markup=False, highlight=False)
    console.print(f"run directory: {report.run_dir}", markup=False, highlight=False)
    return report


def report_dict(report: RunReport) -> dict[str, Any]:
    return {
        "run_id": report.run_id, "run_dir": str(report.run_dir), "ok": report.ok, "check": report.check,
        "hosts": {h.host: {"ok": h.ok, "error": h.error, "failed_step": h.failed_step,
                           "steps": [{"name": report.playbook.steps[i].name, "status": s.status, "detail": s.detail,
                                      "commands": s.commands} for i, s in enumerate(h.steps)]}
                  for h in report.hosts},
    }
