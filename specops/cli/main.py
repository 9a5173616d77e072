"""The `specops` command. Thin: parse options, call the library, render the result."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from specops import __version__
from specops.cli.options import host_option, inventory_option
from specops.config.inventory import load_inventory
from specops.data import default_playbook
from specops.errors import ConfigError, SpecopsError

console = Console()


def _fail(exc: SpecopsError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2 if isinstance(exc, ConfigError) else 1)


class SpecopsGroup(click.Group):
    """Turns SpecopsError into one clear line and an exit code; Ctrl-C into exit 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SpecopsError as exc:
            _fail(exc)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


def parse_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """`--var k=v`; values are YAML scalars (so 8 is an int, true a bool)."""
    import yaml

    out: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--var expects KEY=VALUE, got '{item}'")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except Exception:  # noqa: BLE001 - a non-YAML value is just a string
            out[key.strip()] = value
    return out




@click.group(cls=SpecopsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specops")
def main() -> None:
    """Speculative-decoding experiments on GPU hosts, step by verified step."""


@main.command()
@host_option
@click.option("--playbook", "-p", "playbook_path", type=click.Path(dir_okay=False), help="default playbooks/deploy.yaml")
@inventory_option
@click.option("--var", "-e", "var_items", multiple=True, help="KEY=VALUE, highest precedence")
@click.option("--check", is_flag=True, help="print the exact commands and diffs; change nothing")
@click.option("--resume", is_flag=True, help="continue the last failed run of this playbook")
@click.option("--from-step", help="start at step N (1-based) or NAME")
@click.option("--runs-dir", type=click.Path(file_okay=False), help="default: runs/ beside the inventory")
@click.option("--forks", type=int, help="hosts at once (default sized to the run)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.option("--keep-servers", is_flag=True, help="on Ctrl-C, leave servers this run launched running")
def deploy(host_spec: str, playbook_path: str | None, inventory_path: str | None, var_items: tuple[str, ...],
           check: bool, resume: bool, from_step: str | None, runs_dir: str | None, forks: int | None,
           as_json: bool, keep_servers: bool) -> None:
    """Run a playbook on hosts: steps in order, hosts in parallel, every step verified."""
    from specops.run.play import run_playbook

    report = run_playbook(
        load_inventory(inventory_path), Path(playbook_path) if playbook_path else default_playbook("deploy"),
        host_spec, extra_vars=parse_vars(var_items), check=check, resume=resume, from_step=from_step,
        runs_dir=Path(runs_dir) if runs_dir else None, forks=forks, console=console, as_json=as_json,
        keep_servers=keep_servers,
    )
    sys.exit(0 if report.ok else 1)


@main.group(invoke_without_command=True)
@inventory_option
@click.pass_context
def hosts(ctx: click.Context, inventory_path: str | None) -> None:
    """List the inventory; `hosts check` connects and reports."""
    ctx.obj = {"inventory_path": inventory_path}
    if ctx.invoked_subcommand is None:
        from specops.render.hosts import inventory_table

        console.print(inventory_table(load_inventory(inventory_path)))


@hosts.command("check")
@click.option("--host", "-H", "host_spec", default="all", help="host, group, or comma list (default all)")
@inventory_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def hosts_check(ctx: click.Context, host_spec: str, inventory_path: str | None, as_json: bool) -> None:
    """Connect to each host: reachable, host key, python, git, free disk, GPUs."""
    from specops.render.hosts import check_hosts

    inv = load_inventory(inventory_path or (ctx.obj or {}).get("inventory_path"))
    ok = check_hosts(inv, inv.select(host_spec), console, as_json=as_json)
    sys.exit(0 if ok else 1)


def _register_commands() -> None:
    """Commands that live in their own modules (servers, bench, patch)."""
    from specops.cli.bench import bench, demo, report
    from specops.cli.patch import patch
    from specops.cli.servers import logs, status, stop

    for cmd in (bench, report, demo, logs, status, stop, patch):
        main.add_command(cmd)


_register_commands()

if __name__ == "__main__":
    main()
