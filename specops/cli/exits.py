"""The one exit-code policy: 0 ok, 1 a step or host failed, 2 bad input, 130 Ctrl-C.

Library code raises SpecopsError (ConfigError for bad input); the group below turns it
into one `error: ...` line and the exit code, so no command decides codes on its own. Any
other exception is a bug: one masked line and exit 1, its traceback in a 0600 file.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import IO, Any

import click
from click.exceptions import Abort, Exit, NoArgsIsHelpError

from specops import __version__
from specops.errors import ConfigError, SpecopsError
from specops.hostfiles.cache import cache_root
from specops.secrets import redact

OK, FAILED, BAD_INPUT, INTERRUPTED = 0, 1, 2, 130
#: characters of an unexpected error's message on its one line: the rest is in the saved traceback
CRASH_MESSAGE_MAX = 300


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


def crash_dir() -> Path:
    """Where unexpected errors' tracebacks are kept: beside the cached trees, this user's alone."""
    return cache_root() / "errors"


def _save_traceback(exc: BaseException, command: str) -> Path:
    """The masked traceback in a new 0600 file (mkstemp's mode) under a 0700 folder."""
    folder = crash_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    header = (f"specops {__version__}, python {platform.python_version()}, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n"
              f"command: {command}\nargv: {shlex.join(sys.argv)}\n\n")
    text = redact(header + "".join(traceback.format_exception(exc)))
    fd, name = tempfile.mkstemp(prefix=time.strftime("%Y%m%dT%H%M%S-"), suffix=".txt", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(name)


def crashed(exc: Exception, command: str) -> Failed:
    """An exception nobody expected as one masked line naming where its traceback went."""
    message = " ".join(redact(str(exc)).split())
    if len(message) > CRASH_MESSAGE_MAX:
        message = message[:CRASH_MESSAGE_MAX] + "..."
    try:
        where = f"a bug in specops; full traceback in {_save_traceback(exc, command)}"
    except OSError as err:
        where = f"traceback not saved: {err.strerror or err}; set SPECOPS_CACHE to a writable folder"
    return Failed(f"unexpected {type(exc).__name__}: {message} ({where})")


class SpecopsGroup(click.Group):
    """Turns SpecopsError into one clear line and its exit code; Ctrl-C into exit 130; any
    other exception into one masked line, exit 1 and a saved traceback."""

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
        except (Exit, Abort, click.ClickException):  # click's own endings: --help, exit codes, its errors
            raise
        except Exception as exc:
            command = " ".join(filter(None, ["specops", ctx.invoked_subcommand]))
            raise crashed(exc, command) from exc


def exit_with(ok: bool) -> None:
    """End a command: 0 when everything held, 1 when a host or step failed."""
    raise SystemExit(OK if ok else FAILED)
