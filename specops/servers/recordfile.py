"""The one loader of the JSON records specops keeps on a host: server state files and arm
leases (and their revoked markers).

These files sit in a folder other users of the host may write, and their values are put
into the stop, probe and status scripts (a pid into `kill`, a port into `curl`): a string
pid `"1; touch X #"` would run as code, and valid JSON that is not an object (`[]`,
`null`) would crash `status`, `stop` and every claim. So each field is checked against its
dataclass type here, and a file that does not fit is `BadRecord` (a ValueError): callers
skip it with `skipped`, a warning that names the file, and go on.

A type is not enough: a well-typed file still drives commands (`kill -- -1` for a pgid of
1, a container runtime that is any program, `rm` of a path outside the workdir). So each
record's `from_json` also checks ranges with the checks below (`pid`, `under`, `one_of`),
and nothing is run for a file one of them refuses.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import posixpath
import types
import typing
from typing import Any, TypeVar, Union

from specops.records.schema import current_names

log = logging.getLogger(__name__)

T = TypeVar("T")


class BadRecord(ValueError):
    """A record file that is not JSON, not an object, or has a field of the wrong type."""


def load_object(data: bytes | str) -> dict[str, Any]:
    """The file's JSON, which must be an object."""
    try:
        raw = json.loads(data)
    except ValueError as exc:  # UnicodeDecodeError included
        raise BadRecord(f"not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise BadRecord(f"a JSON {type(raw).__name__}, not an object")
    return raw


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's type (the types records use: str, int, float,
    bool, Any, list[X], dict[K, V] and unions with None)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    args = typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    raise TypeError(f"recordfile: no check for field type {hint!r}")


def load(cls: type[T], data: bytes | str, **extra: Any) -> T:
    """`cls` (a dataclass) from a record file's bytes; unknown keys are ignored (a newer
    specops may add some), missing required ones and mistyped values raise BadRecord; a key an
    older specops wrote reads under its current name (records.schema.current_names).
    `extra`: fields the file does not hold (a lease's age)."""
    raw = current_names(load_object(data))
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in extra:
            continue
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BadRecord(f"no {f.name!r}")
            continue
        value = raw[f.name]
        if not _fits(value, hints[f.name]):
            raise BadRecord(f"{f.name!r} is {json.dumps(value)[:40]}, not {_name(hints[f.name])}")
        kwargs[f.name] = value
    return cls(**kwargs, **extra)


def _name(hint: Any) -> str:
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "")


def pid(name: str, value: int) -> None:
    """A pid or process group that reaches `kill`: 0, 1 and negatives name the caller's own
    group, init or every process the user may signal, never one server."""
    if value <= 1:
        raise BadRecord(f"{name!r} is {value}, not a process id (> 1)")


def port(name: str, value: int) -> None:
    if not 0 < value < 65536:
        raise BadRecord(f"{name!r} is {value}, not a TCP port")


def one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    """A value that names a program or a mode: only the ones specops itself writes."""
    if value not in allowed:
        shown = json.dumps(value)
        raise BadRecord(f"{name!r} is {shown if len(shown) <= 200 else shown[:197] + '...'}, "
                        f"not one of {', '.join(allowed)}")


def under(name: str, value: str, root: str) -> None:
    """A path specops reads, writes or removes: absolute, and inside `root` (the host's work
    directory) once normalised, so `..` cannot lead out of it. Symlinks are not resolved:
    the host is remote, and specops makes none under its workdir."""
    top = posixpath.normpath(root)
    if not (posixpath.isabs(value) and posixpath.isabs(top)):
        raise BadRecord(f"{name!r} {value[:200]!r} is not an absolute path under the work directory {root}")
    if not posixpath.normpath(value).startswith(top.rstrip("/") + "/"):
        raise BadRecord(f"{name!r} {value[:200]!r} is not under the work directory {top}")


def named(b64: str) -> str:
    """A path a host script sent as base64 (any bytes survive the line framing)."""
    try:
        return base64.b64decode(b64).decode(errors="replace")
    except ValueError:
        return repr(b64[:80])


def skipped(path: str, host: str, exc: BaseException) -> None:
    """Warn that a record file was left out, naming it and why."""
    log.warning("host %s: skipping %s: %s", host, path, exc)
