"""Options every host-facing command shares, defined once."""

from __future__ import annotations

import click

inventory_option = click.option("--inventory", "-i", "inventory_path", type=click.Path(dir_okay=False),
                                help="hosts.yaml (default ./hosts.yaml or $SPECOPS_INVENTORY)")
host_option = click.option("--host", "-H", "host_spec", required=True, help="host, group, or comma list")
