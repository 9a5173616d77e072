"""A setting's command-line option, described once as data beside the setting itself.

A settings dataclass (bench/settings.py's `BenchSettings`, servers/arms.py's `ArmOverrides`)
puts an `Option` in each field's metadata (`option(...)`); from those the CLI makes its
click options (cli/settingopts.py), the typed values become settings (`Option.read`), and
settings become the command line that asks for them again (`Option.words`, the resume
command). No click here: the layers below the CLI describe, the CLI builds.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, fields
from typing import Any, Callable, Mapping

#: How the command line reads an option's value.
TEXT, INT, FLOAT, FLAG, CHOICE, PATH, SWITCH = "text", "int", "float", "flag", "choice", "path", "switch"

#: The metadata key of a field's Option.
OPTION = "option"
#: What `--resume DIR` does with an option typed beside it: the run's recorded value must match
#: it; `--extend` may add to it (levels, lengths, repeats); the option wins (how the run behaves,
#: not what it measures); or it is not compared at all.
MATCH, EXTEND, OVERRIDE, IGNORE = "match", "extend", "override", "ignore"


@dataclass(frozen=True)
class Option:
    """How one setting is typed on a command line.

    `default`: the default as typed (None: none). `kind`: how the text is read (INT with
    `minimum` is a range). SWITCH: a `--flag/--off` pair, unset (None) unless one is given.
    `parse`: the typed value -> the settings it sets (errors name the flag); by default the
    field's own name, the value as read, nothing for None. `show`: settings -> the words that
    ask for them again ([] leaves the flag out). `resume`: what `--resume` does with it typed
    (MATCH, EXTEND, OVERRIDE or IGNORE).
    """

    flag: str
    help: str = ""
    default: str | int | float | None = None
    kind: str = TEXT
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    off: str | None = None
    short: str | None = None
    parse: Callable[[Any], dict[str, Any]] | None = None
    show: Callable[[Mapping[str, Any]], list[str]] | None = None
    resume: str = MATCH

    def read(self, name: str, value: Any) -> dict[str, Any]:
        """The settings the typed `value` of field `name` sets."""
        if self.parse is not None:
            return self.parse(value)
        return {} if value is None else {name: value}

    def words(self, name: str, settings: Mapping[str, Any]) -> list[str]:
        """The command-line words that ask for `settings[name]` again."""
        if self.show is not None:
            return self.show(settings)
        return flag_words(self.flag, settings.get(name))


def flag_words(flag: str, value: Any) -> list[str]:
    """None or False: nothing; True: the bare flag; a list: comma-joined; else its text."""
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    return [flag, ",".join(map(str, value)) if isinstance(value, list) else str(value)]


def option(flag: str, help: str = "", **kwargs: Any) -> dict[str, Any]:
    """A field's metadata entry for its option: `field(metadata={**option(...), ...})`."""
    return {OPTION: Option(flag, help, **kwargs)}


def options_of(cls: type) -> list[tuple[Field[Any], Option]]:
    """(field, its Option) for each field of the dataclass `cls` that has one, in field order."""
    return [(f, f.metadata[OPTION]) for f in fields(cls) if f.metadata.get(OPTION) is not None]


def read_options(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the typed `values` (field name -> value as the option read it) set."""
    out: dict[str, Any] = {}
    for f, opt in options_of(cls):
        if f.name in values:
            out.update(opt.read(f.name, values[f.name]))
    return out


def option_words(cls: type, settings: Mapping[str, Any], names: Callable[[str], bool] = lambda _n: True) -> list[str]:
    """The command-line words that ask for `settings` (each option whose field `names` accepts)."""
    words: list[str] = []
    for f, opt in options_of(cls):
        if names(f.name):
            words += opt.words(f.name, settings)
    return words
