"""`specops hosts` and `specops hosts check`: the inventory, and what each host has."""

from __future__ import annotations

import click

from specops.cli.exits import exit_with
from specops.cli.options import console, inventory_option, verbose
from specops.config.inventory import load_inventory
from specops.render.hosts import check_hosts, inventory_table


@click.group(invoke_without_command=True)
@inventory_option
@click.pass_context
def hosts(ctx: click.Context, inventory_path: str | None) -> None:
    """List the inventory; `hosts check` connects and reports."""
    ctx.obj = {"inventory_path": inventory_path}
    if ctx.invoked_subcommand is None:
        inventory_table(load_inventory(inventory_path), console.width).print(console, full=verbose())


@hosts.command("check")
@click.option("--host", "-H", "host_spec", default="all", help="host, group, or comma list (default all)")
@inventory_option
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def hosts_check(ctx: click.Context, host_spec: str, inventory_path: str | None, as_json: bool) -> None:
    """Connect to each host: reachable, host key, python, git, free disk, GPUs (a CPU host: its CPU)."""
    inv = load_inventory(inventory_path or (ctx.obj or {}).get("inventory_path"))
    exit_with(check_hosts(inv, inv.select(host_spec), console, as_json=as_json, full=verbose()))
