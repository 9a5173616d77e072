"""`specops deploy`: run a playbook on hosts, every step verified."""

from __future__ import annotations

from pathlib import Path

import click

from specops.cli.exits import exit_with
from specops.cli.options import (
    command_line,
    console,
    host_option,
    inventory_option,
    lease_options,
    lease_policy,
    parse_vars,
    runtime_option,
    runtime_vars,
    var_option,
    verbosity,
)
from specops.config.inventory import load_inventory
from specops.data import default_playbook
from specops.flows.play import run_playbook


@click.command()
@host_option
@click.option("--playbook", "-p", "playbook_path", type=click.Path(dir_okay=False), help="default playbooks/deploy.yaml")
@inventory_option
@var_option
@click.option("--check", is_flag=True, help="print the exact commands and diffs; change nothing")
@click.option("--resume", is_flag=True, help="continue the last failed run of this playbook")
@click.option("--from-step", help="start at step N (1-based) or NAME")
@click.option("--runs-dir", type=click.Path(file_okay=False), help="default: runs/ beside the inventory")
@click.option("--forks", type=click.IntRange(min=1), help="hosts at once (default sized to the run)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.option("--keep-servers", is_flag=True, help="on Ctrl-C, leave servers this run launched running")
@lease_options
@runtime_option
def deploy(host_spec: str, playbook_path: str | None, inventory_path: str | None, var_items: tuple[str, ...],
           check: bool, resume: bool, from_step: str | None, runs_dir: str | None, forks: int | None,
           as_json: bool, keep_servers: bool, wait: bool, wait_timeout: float, take_over: bool,
           allow_runtime_mismatch: bool) -> None:
    """Run a playbook on hosts: steps in order, hosts in parallel, every step verified."""
    policy = lease_policy(wait, wait_timeout, take_over)
    again = command_line("deploy", ("--host", host_spec), ("-i", inventory_path), ("-p", playbook_path),
                         *(("--var", v) for v in var_items), ("--runs-dir", runs_dir),
                         ("--forks", forks), ("--keep-servers", keep_servers),
                         ("--allow-runtime-mismatch", allow_runtime_mismatch), ("--resume", True))
    report = run_playbook(
        load_inventory(inventory_path), Path(playbook_path) if playbook_path else default_playbook("deploy"),
        host_spec, extra_vars=runtime_vars(parse_vars(var_items), allow_runtime_mismatch), check=check, resume=resume, from_step=from_step,
        runs_dir=Path(runs_dir) if runs_dir else None, forks=forks, console=console, as_json=as_json,
        keep_servers=keep_servers, resume_command=lambda _run_dir: again, verbosity=verbosity(),
        lease_policy=policy,
    )
    exit_with(report.ok)
