"""The checks a record's reader puts a stored value through before it reads it as typed
(records/manifest.py's `PLAIN`; bench/settings.py checks a settings dict's lists with `of`)."""

from __future__ import annotations

from typing import Any, Callable

#: A stored value's check: True when it has the type the record reads it as.
Check = Callable[[Any], bool]


def of(*types: type) -> Check:
    """A value of one of `types` (a bool is not an int here unless bool is named)."""
    return lambda v: isinstance(v, types) and (bool in types or not isinstance(v, bool))


def list_of(*types: type) -> Check:
    one = of(*types)
    return lambda v: isinstance(v, list) and all(one(x) for x in v)


def is_length(v: Any) -> bool:
    """One length or a non-empty list of them."""
    return of(int)(v) or (list_of(int)(v) and bool(v))


def number_or_dict(v: Any) -> bool:
    """A number, or a dict of them by host (--gpu-hour-cost)."""
    return of(int, float)(v) or of(dict)(v)
