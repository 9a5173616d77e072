"""What every command shares, defined once: options, `--var` parsing, the console."""

from __future__ import annotations

import io
import shlex
import sys
from typing import IO, Any, cast

import click
import yaml
from rich.console import Console

from specops.errors import ConfigError
from specops.secrets import redact


class _MaskedStdout(io.TextIOBase):
    """sys.stdout as it is at each write (click's test runner swaps it), with every known
    secret masked: whatever a command prints, a token never reaches the terminal."""

    def write(self, text: str) -> int:
        sys.stdout.write(redact(text))
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def fileno(self) -> int:
        return sys.stdout.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(sys.stdout, "encoding", None) or "utf-8"


#: One console for every command, so tests and pipes see one stream.
console = Console(file=cast(IO[str], _MaskedStdout()))

inventory_option = click.option("--inventory", "-i", "inventory_path", type=click.Path(dir_okay=False),
                                help="hosts.yaml (default ./hosts.yaml or $SPECOPS_INVENTORY)")
host_option = click.option("--host", "-H", "host_spec", required=True, help="host, group, or comma list")
var_option = click.option("--var", "-e", "var_items", multiple=True, help="KEY=VALUE, highest precedence")


def parse_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """`--var k=v`; values are YAML (so 8 is an int, true a bool). A dotted key (`arms.adaptive.threshold=16`)
    sets one value inside a mapping and a mapping value merges into the variable's own: the rest of the
    dict stays (`run.engine.resolve_vars`)."""
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


def command_line(name: str, *options: tuple[str, Any]) -> str:
    """`specops NAME` with each (flag, value) given: a value of None or False is left out,
    True is a bare flag; quoted for a POSIX shell (the resume command users paste)."""
    argv = ["specops", name]
    for flag, value in options:
        if value is None or value is False:
            continue
        argv += [flag] if value is True else [flag, str(value)]
    return shlex.join(argv)
