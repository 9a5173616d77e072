"""What every command shares, defined once: options, `--var` parsing, the console."""

from __future__ import annotations

from typing import Any

import click
import yaml
from rich.console import Console

from specops.errors import ConfigError

#: One console for every command, so tests and pipes see one stream.
console = Console()

inventory_option = click.option("--inventory", "-i", "inventory_path", type=click.Path(dir_okay=False),
                                help="hosts.yaml (default ./hosts.yaml or $SPECOPS_INVENTORY)")
host_option = click.option("--host", "-H", "host_spec", required=True, help="host, group, or comma list")
var_option = click.option("--var", "-e", "var_items", multiple=True, help="KEY=VALUE, highest precedence")


def parse_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """`--var k=v`; values are YAML scalars (so 8 is an int, true a bool)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--var expects KEY=VALUE, got '{item}'")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:  # a non-YAML value is just a string
            out[key.strip()] = value
    return out
