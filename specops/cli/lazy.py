"""click's lazy group: a command's module is imported when that command runs.

Importing every command at start cost each invocation 1.2 s (matplotlib for `report`'s
plots, aiohttp for `bench`'s client, the step engine for `deploy`), even `specops status`
and `specops --help`. The group holds a table name -> (`module:attr`, short help) instead;
`--help` lists the table's short help without importing anything, and a command's module
loads only when that command is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import click

from specops.cli.exits import SpecopsGroup


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (`specops.cli.servers:status`) and its one-line help, kept
    here so that the group's help needs no import; tests/unit/test_cli_imports.py checks
    it against the command's own docstring."""

    target: str
    short_help: str


class LazyGroup(SpecopsGroup):
    """A SpecopsGroup whose commands are the `lazy` table's, each imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, LazyCommand] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, LazyCommand] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def _load(self, name: str) -> click.Command:
        module, _, attr = self.lazy[name].target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy[name].target} (command {name!r}) is not a click command")
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """click (8.4 on) suggests close names for a mistyped command from the commands it
        holds, the loaded ones only here: its error is raised again with every listed name."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            name = getattr(exc, "command_name", None)  # NoSuchCommand's
            if name is None:
                raise
            raise type(exc)(name, possibilities=self.list_commands(ctx), ctx=ctx) from None  # type: ignore[call-arg]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with a stand-in carrying the table's short help for every
        command not loaded yet (shortened to the width as click shortens a docstring)."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name) or click.Command(name, help=self.lazy[name].short_help)
            if not command.hidden:
                rows.append((name, command))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in rows])
