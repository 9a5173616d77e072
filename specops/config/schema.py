"""One schema checker for every YAML file specops reads, so one mistake reads one way.

hosts.yaml, playbooks, patch sets, arm profiles and bench settings all check their keys,
types and choices here. The same mistake gives the same error in any of them::

    hosts.yaml:7: unknown key 'adress' in host 'gpu-a' (did you mean 'address'?); allowed: ...
    dynamic-spec-disable.yaml:31: unknown key 'anchr' in edit 'flag' (did you mean 'anchor'?); allowed: ...

Nodes loaded by `specops.config.yamlfile` know their file and lines (`node.where(key)`);
a plain dict (settings from the command line, templated vars) is located by the `where`
the caller passes instead.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable

from specops.errors import ConfigError

UNKNOWN = "<unknown>"


def suggest(word: Any, choices: Iterable[Any]) -> str:
    """' (did you mean 'x'?)' when a choice is close, else ''."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def where_of(node: Any, key: Any = None, where: str | None = None) -> str:
    """`file:line` of `key` in `node` (or of the node itself) when the loader recorded it,
    else the caller's `where`."""
    locate = getattr(node, "where", None)
    if callable(locate):
        return str(locate(key))
    return where or UNKNOWN


def type_name(value: Any) -> str:
    """'a mapping', 'an integer', ... for messages."""
    if value is None:
        return "nothing (null)"
    for kind, name in ((bool, "a boolean"), (dict, "a mapping"), (list, "a list"), (str, "a string"),
                       (int, "an integer"), (float, "a number")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _wanted(types: tuple[type, ...]) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def invalid(node: Any, key: Any, message: str, *, where: str | None = None, hint: str | None = None) -> ConfigError:
    """A ConfigError located at `key` of `node` (file:line when known)."""
    return ConfigError(message, where=where_of(node, key, where), hint=hint)


def check_mapping(node: Any, what: str, *, where: str | None = None) -> None:
    if not isinstance(node, dict):
        raise invalid(node, None, f"{what} must be a mapping, got {type_name(node)}", where=where)


def check_keys(node: Any, allowed: Iterable[str], what: str, required: Iterable[str] = (), *,
               where: str | None = None) -> None:
    """Reject a non-mapping, unknown keys (with a suggestion) and missing required keys."""
    allowed = list(allowed)
    check_mapping(node, what, where=where)
    for key in node:
        if key not in allowed:
            raise invalid(node, key, f"unknown key '{key}' in {what}{suggest(key, allowed)}; "
                                     f"allowed: {', '.join(allowed)}", where=where)
    for key in required:
        if key not in node:
            raise invalid(node, None, f"{what} is missing required key '{key}'", where=where)


def expect(node: Any, key: str, types: type | tuple[type, ...], what: str, *, where: str | None = None) -> Any:
    """node[key] after checking its type (a bool is not an integer here)."""
    kinds = types if isinstance(types, tuple) else (types,)
    value = node[key]
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        raise invalid(node, key, f"'{key}' in {what} must be {_wanted(kinds)}, got {type_name(value)}", where=where)
    return value


def optional(node: Any, key: str, types: type | tuple[type, ...], what: str, default: Any = None, *,
             where: str | None = None) -> Any:
    """expect() for a key that may be absent (or null): then `default`."""
    if node.get(key) is None:
        return default
    return expect(node, key, types, what, where=where)


def choice(node: Any, key: str, choices: Iterable[str], what: str, *, where: str | None = None) -> str:
    """node[key] after checking it is one of `choices` (with a suggestion)."""
    choices = list(choices)
    value = node[key]
    if value not in choices:
        raise invalid(node, key, f"'{key}' in {what} must be one of {', '.join(choices)}, got {value!r}"
                                 f"{suggest(value, choices)}", where=where)
    return str(value)
