"""What every command shares, defined once: options, `--var` parsing, the console."""

from __future__ import annotations

import io
import shlex
import sys
from typing import IO, TYPE_CHECKING, Any, cast

import click
import yaml
from rich.console import Console, ConsoleDimensions
from rich.file_proxy import FileProxy
from rich.text import Text

from specops.errors import ConfigError
from specops.secrets import redact

if TYPE_CHECKING:
    from specops.servers.lease import LeasePolicy


def _unproxied(stream: IO[str]) -> IO[str]:
    """The stream under Rich's FileProxy: a live view (Live, Progress) swaps sys.stdout for
    a proxy that prints through the console, and a console writing to that proxy prints
    to itself forever (the live view spun at 100% CPU on every terminal)."""
    while isinstance(stream, FileProxy):
        stream = stream.rich_proxied_file
    return stream


class _MaskedStdout(io.TextIOBase):
    """sys.stdout as it is at each write (click's test runner swaps it), with every known
    secret masked: whatever a command prints, a token never reaches the terminal."""

    def stream(self) -> IO[str]:
        return _unproxied(sys.stdout)

    def write(self, text: str) -> int:
        self.stream().write(redact(text))
        return len(text)

    def flush(self) -> None:
        self.stream().flush()

    def isatty(self) -> bool:
        return self.stream().isatty()

    def fileno(self) -> int:
        return self.stream().fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream(), "encoding", None) or "utf-8"


class _MaskedStderr(_MaskedStdout):
    """sys.stderr, masked likewise: progress and errors while stdout carries a JSON document."""

    def stream(self) -> IO[str]:
        return _unproxied(sys.stderr)


#: The width of everything printed to a pipe or file (unless $COLUMNS says otherwise).
PIPE_WIDTH = 80


class _Console(Console):
    """A console 80 columns wide when it does not write to a terminal: Rich would take the
    width of whatever terminal stdin or stderr is, so `specops status | cat` got tables as
    wide as the window (and folded them when the window was narrow). $COLUMNS is read at
    each print, not once at import."""

    def __init__(self, file: IO[str]) -> None:
        super().__init__(file=file)
        self._width = None  # Rich fixes $COLUMNS at construction; `size` reads it when asked

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(PIPE_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self.width, self.height = new_size

    def render_str(self, text: str, **kwargs: Any) -> Text:
        """Masked before Rich wraps it: a secret longer than a line was folded over two, and
        the stream's mask (after rendering) matched neither half."""
        return super().render_str(redact(text), **kwargs)


#: One console for every command, so tests and pipes see one stream.
console: Console = _Console(file=cast(IO[str], _MaskedStdout()))
#: Its twin on stderr: what a command says beside a `--json` document on stdout.
err_console: Console = _Console(file=cast(IO[str], _MaskedStderr()))

#: Where the group keeps `-q`/`-v` (click's context meta: per invocation, nothing global).
VERBOSITY = "specops.verbosity"
QUIET, NORMAL, VERBOSE = -1, 0, 1


def verbosity() -> int:
    """QUIET with `specops -q`, VERBOSE with `specops -v`, else NORMAL."""
    ctx = click.get_current_context(silent=True)
    return int(ctx.find_root().meta.get(VERBOSITY, NORMAL)) if ctx is not None else NORMAL


def verbose() -> bool:
    return verbosity() >= VERBOSE


def quiet() -> bool:
    return verbosity() <= QUIET

inventory_option = click.option("--inventory", "-i", "inventory_path", type=click.Path(dir_okay=False),
                                help="hosts.yaml (default ./hosts.yaml or $SPECOPS_INVENTORY)")
host_option = click.option("--host", "-H", "host_spec", required=True, help="host, group, or comma list")
var_option = click.option("--var", "-e", "var_items", multiple=True, help="KEY=VALUE, highest precedence")


#: The runtime check's opt-out (steps/sglang_install.check_runtime), for deploy and bench.
runtime_option = click.option(
    "--allow-runtime-mismatch", "allow_runtime_mismatch", is_flag=True,
    help="launch over a prepared runtime (or a venv made by hand) that does not hold the release's pins: "
         "skips the refusal only; each unmet pin is still printed as a warning")


def runtime_vars(extra_vars: dict[str, Any], allow: bool) -> dict[str, Any]:
    """`--allow-runtime-mismatch` as the variable the install step reads."""
    return {**extra_vars, "sglang_allow_runtime_mismatch": True} if allow else extra_vars


def lease_options(fn: Any) -> Any:
    """`--wait [--wait-timeout S]` and `--take-over`: what to do when another run uses an arm
    with other launch arguments (by default the run is refused at once, naming that run)."""
    fn = click.option("--take-over", is_flag=True,
                      help="restart an arm another run uses with other arguments (that run's next point fails)")(fn)
    fn = click.option("--wait-timeout", type=click.FloatRange(min=0), default=1800.0, show_default=True,
                      help="seconds --wait waits")(fn)
    return click.option("--wait", is_flag=True,
                        help="wait until another run using an arm with other arguments is done")(fn)


def lease_policy(wait: bool, wait_timeout: float, take_over: bool) -> LeasePolicy:
    from specops.servers.lease import LeasePolicy  # the servers package: not for every command's start

    if wait and take_over:
        raise ConfigError("give --wait or --take-over, not both")
    return LeasePolicy("wait" if wait else "take_over" if take_over else "refuse", wait_timeout)


def parse_vars(values: tuple[str, ...]) -> dict[str, Any]:
    """`--var k=v`; values are YAML (so 8 is an int, true a bool). A dotted key (`arms.adaptive.threshold=16`)
    sets one value inside a mapping and a mapping value merges into the variable's own: the rest of the
    dict stays (`run.engine.resolve_vars`)."""
    out: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # (NAME, not KEY: error lines are redacted, and KEY=... reads as a secret assignment)
            raise ConfigError(f"--var expects NAME=VALUE, got '{item}'")
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
