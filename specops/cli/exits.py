"""The one exit-code policy: 0 ok, 1 a step or host failed, 2 bad input, 130 Ctrl-C.

Library code raises SpecopsError (ConfigError for bad input); the group below turns it
into one `error: ...` line and the exit code, so no command decides codes on its own.
"""

from __future__ import annotations

from typing import IO, Any

import click
from click.exceptions import NoArgsIsHelpError

from specops.errors import ConfigError, SpecopsError
from specops.secrets import redact

OK, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130


class SpecopsClickError(click.ClickException):
    """A SpecopsError as click reports it: `error: <where>: <message>` on stderr."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(redact(f"error: {self.format_message()}"), err=True, file=file)


class BadInput(SpecopsClickError):
    exit_code = BAD_INPUT


class Failed(SpecopsClickError):
    exit_code = FAILED


def click_error(exc: SpecopsError) -> SpecopsClickError:
    return BadInput(str(exc)) if isinstance(exc, ConfigError) else Failed(str(exc))


def usage_error(exc: click.UsageError) -> BadInput:
    """click's four-line usage error as one line naming the command (exit 2, as click's own)."""
    command = exc.ctx.command_path if exc.ctx is not None else "specops"
    return BadInput(f"{command}: {exc.format_message()} (see {command} -h)")


class SpecopsGroup(click.Group):
    """Turns SpecopsError into one clear line and its exit code; Ctrl-C into exit 130."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:  # a bare group: its help is the answer
            raise
        except click.UsageError as exc:  # a bad option or argument: one line, like every bad input
            raise usage_error(exc) from None
        except SpecopsError as exc:
            raise click_error(exc) from exc
        except KeyboardInterrupt as exc:
            # imported here: run.state brings the servers package, which `--help` need not load
            from specops.run.state import Interrupted

            if not isinstance(exc, Interrupted):  # a run that was interrupted has said so
                click.echo("interrupted", err=True)
            ctx.exit(INTERRUPTED)


def exit_with(ok: bool) -> None:
    """End a command: 0 when everything held, 1 when a host or step failed."""
    raise SystemExit(OK if ok else FAILED)
