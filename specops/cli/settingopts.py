"""Click options made from a settings dataclass's field metadata (config/optionspec.py): the
option's flag, type, default and help are the schema's, written once (bench/settings.py's
`BenchSettings`, servers/arms.py's `ArmOverrides`). Each click parameter is named after its
field, so `typed_values` hands the schema back the values by field name."""

from __future__ import annotations

from typing import Any, Callable

import click
from click.core import ParameterSource

from specops.config.optionspec import CHOICE, FLAG, FLOAT, INT, PATH, SWITCH, Option, options_of

Decorator = Callable[[Any], Any]


def _click_type(opt: Option) -> Any:
    if opt.kind == INT:
        return click.IntRange(min=opt.minimum) if opt.minimum is not None else click.INT
    if opt.kind == FLOAT:
        return click.FLOAT
    if opt.kind == CHOICE:
        return click.Choice(list(opt.choices))
    if opt.kind == PATH:
        return click.Path(dir_okay=False)
    return None


def click_option(name: str, opt: Option, **changes: Any) -> Decorator:
    """The click option of field `name`; `changes`: another command's default or help."""
    default, help_text = changes.get("default", opt.default), changes.get("help", opt.help)
    decls = [f"{opt.flag}/{opt.off}" if opt.kind == SWITCH else opt.flag, *([opt.short] if opt.short else []), name]
    kwargs: dict[str, Any] = {"help": help_text or None}
    if opt.kind == FLAG:
        kwargs["is_flag"] = True
    elif opt.kind == SWITCH:
        kwargs["default"] = None
    else:
        kwargs["type"] = _click_type(opt)
        if default is not None:
            kwargs.update(default=default, show_default=True)
    return click.option(*decls, **kwargs)


def schema_options(cls: type, only: tuple[str, ...] | None = None,
                   changes: dict[str, dict[str, Any]] | None = None) -> Decorator:
    """The click options of `cls`'s fields that have one (`only`: those fields, in that
    order), in field order; `changes`: field -> its default or help in this command."""
    opts = dict((f.name, opt) for f, opt in options_of(cls))
    names = list(only) if only is not None else list(opts)

    def apply(fn: Any) -> Any:
        for name in reversed(names):
            fn = click_option(name, opts[name], **(changes or {}).get(name, {}))(fn)
        return fn
    return apply


def typed_values(ctx: click.Context, cls: type) -> tuple[dict[str, Any], set[str]]:
    """The values of `cls`'s options on this command line, by field name, and the fields
    whose option was typed (not its default)."""
    values: dict[str, Any] = {}
    given: set[str] = set()
    for f, _opt in options_of(cls):
        if f.name in ctx.params:
            values[f.name] = ctx.params[f.name]
            if ctx.get_parameter_source(f.name) not in (ParameterSource.DEFAULT, None):
                given.add(f.name)
    return values, given
