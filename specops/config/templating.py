"""Jinja2 templating with StrictUndefined, and shell-safe substitution for scripts.

In a shell script every `{{ value }}` is shell-quoted on the way out, so a variable such as
`x; touch PWNED; echo $(id)` is written literally and never runs. A deliberate raw
substitution says so: `{{ value | raw }}`. That quoting holds where a quoted word is a word
(bare, or inside `$( )`); a `{{ }}` anywhere else in a script (inside quotes, a heredoc,
backticks) is refused when the playbook loads (`config.shellscan`).
"""

from __future__ import annotations

import functools
import re
import shlex
from typing import TYPE_CHECKING, Any, Callable

from specops.errors import ConfigError

if TYPE_CHECKING:
    import jinja2

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>(?:(?!\}\}).)*)\}\}\s*$", re.S)


class Raw(str):
    """A value the author asked to paste into a shell script unquoted."""


def _shell_finalize(value: Any) -> Any:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return shlex.quote("" if value is None else str(value))


def _filters(env: jinja2.Environment) -> None:
    env.filters["raw"] = lambda v: Raw("" if v is None else v)
    env.filters["quote"] = lambda v: shlex.quote(str(v))


@functools.cache
def _envs() -> dict[str, jinja2.Environment]:
    """The three environments, made at the first template: jinja2 is imported here, not at
    the top, so a playbook without `{{ }}` never loads it (0.1 s of every command's start)."""
    import jinja2
    from jinja2.nativetypes import NativeEnvironment

    envs = {"plain": jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True),
            "shell": jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                        finalize=_shell_finalize),
            "native": NativeEnvironment(undefined=jinja2.StrictUndefined)}
    for env in envs.values():
        _filters(env)
    return envs


@functools.lru_cache(maxsize=4096)
def _template(env: str, text: str) -> jinja2.Template:
    """Compiled once per text: a playbook's steps render the same strings for every host
    (2000 hosts x 20 steps compiled each one anew: 27 s before a run could start)."""
    return _envs()[env].from_string(text)


@functools.lru_cache(maxsize=4096)
def _expression(text: str) -> Callable[..., Any]:
    """Compiled once per text, as _template: a cache keyed by the expression's own text, so
    the same entry is right for every host and every run in the process."""
    return _envs()["plain"].compile_expression(text, undefined_to_none=False)


def _undefined_name(exc: jinja2.UndefinedError) -> str:
    match = re.search(r"'([^']+)' is undefined", str(exc))
    return match.group(1) if match else str(exc)


def render(text: str, variables: dict[str, Any], *, shell: bool = False, where: str = "") -> Any:
    """Render one string. A string that is a single `{{ expr }}` keeps its native type
    (a list stays a list), except in shell mode where everything becomes quoted text."""
    if "{{" not in text and "{%" not in text:
        return text
    import jinja2

    try:
        if shell:
            return _template("shell", text).render(variables)
        if _SINGLE_EXPR.match(text):
            value = _template("native", text).render(variables)
            if isinstance(value, jinja2.Undefined):
                str(value)  # raises UndefinedError with the variable's name
            return value
        return _template("plain", text).render(variables)
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"undefined variable '{_undefined_name(exc)}'", where=where) from None
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template error: {exc}", where=where) from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:  # a value of the wrong kind
        raise ConfigError(f"cannot render {text.strip()!r}: {exc}", where=where) from None


def render_tree(value: Any, variables: dict[str, Any], *, where: str = "", shell_keys: frozenset[str] = frozenset()) -> Any:
    """Render every string inside dicts/lists; keys in `shell_keys` are rendered in shell mode."""
    if isinstance(value, str):
        return render(value, variables, where=where)
    if isinstance(value, list):
        return [render_tree(v, variables, where=where) for v in value]
    if isinstance(value, dict):
        return {
            k: (render(v, variables, shell=True, where=where) if k in shell_keys and isinstance(v, str)
                else render_tree(v, variables, where=where))
            for k, v in value.items()
        }
    return value


def evaluate(expression: str, variables: dict[str, Any], *, where: str = "") -> Any:
    """Evaluate a bare expression (for `when:`)."""
    import jinja2

    try:
        return _expression(expression)(**variables)
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"undefined variable '{_undefined_name(exc)}' in when: {expression}", where=where) from None
    except jinja2.TemplateError as exc:
        raise ConfigError(f"bad when: expression '{expression}': {exc}", where=where) from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:  # e.g. `'x' in arms` with arms=3
        raise ConfigError(f"cannot evaluate when: {expression}: {exc}", where=where) from None


@functools.lru_cache(maxsize=1024)
def names_in(expression: str) -> frozenset[str]:
    """The variables a bare expression (a `when:`) reads; empty when it does not parse (the
    evaluation then says why). Cached by the expression's text, which alone decides it."""
    import jinja2
    from jinja2 import meta

    try:
        return frozenset(meta.find_undeclared_variables(_envs()["plain"].parse("{{ (" + expression + ") }}")))
    except jinja2.TemplateError:
        return frozenset()


def is_false(value: Any) -> bool:
    """A `when:` result that skips its step: falsy, or a string that says false."""
    return not value or (isinstance(value, str) and value.strip().lower() in ("false", "0", "no", ""))
