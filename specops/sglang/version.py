"""SGLang version strings: one parser and one ordering for patch gating and everything else.

Two parsers once read the same string differently: '0.5.14rc1' was (0, 5, 14) to the
patch gate and (0, 5) to the flag reader, '0.5rc1' was (0, 5, 1) to one of them. Here a
version is parsed once, the PEP 440 way (release, pre, post, dev, +local; a leading 'v'
and a `git describe` suffix are accepted), and `in_range` says how a patch set's
min_version/max_version bounds are read.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Callable

from specops import pysource
from specops.sglang.paths import VERSION_FILES

_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}
_PATTERN = re.compile(
    r"""^\s*v?
    (?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>alpha|beta|preview|pre|rc|a|b|c)[-_.]?(?P<pre_n>\d*))?
    (?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n>\d*))?
    (?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?
    (?:-(?P<distance>\d+)-g(?P<sha>[0-9a-f]+))?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.IGNORECASE | re.VERBOSE,
)


# release, pre-release, post, dev, local segments: what `Version` compares by
_Key = tuple[tuple[int, ...], tuple[str, int], int, float, tuple[tuple[int, int, str], ...]]


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    """A parsed version; compares in PEP 440 order (0.5.14rc1 < 0.5.14 < 0.5.14.post1)."""

    text: str
    release: tuple[int, ...]
    pre: tuple[str, int] | None = None
    post: int | None = None
    dev: int | None = None
    local: str | None = None

    def _key(self) -> _Key:
        release = _padded(self.release)
        # a dev release sorts before its pre-releases, which sort before the release itself
        pre = self.pre if self.pre is not None else (("", -1) if self.dev is not None and self.post is None
                                                     else ("z", 0))
        post = -1 if self.post is None else self.post
        dev = float("inf") if self.dev is None else self.dev
        local = tuple((0, int(p), "") if p.isdigit() else (-1, 0, p) for p in re.split(r"[-_.]", self.local or "")
                      if p)
        return release, pre, post, dev, local

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return self.text


def _padded(release: tuple[int, ...], width: int = 4) -> tuple[int, ...]:
    """0.5 == 0.5.0: releases compare after trailing zeros are dropped."""
    trimmed = list(release)
    while len(trimmed) > 1 and trimmed[-1] == 0:
        trimmed.pop()
    return tuple(trimmed) + (0,) * max(0, width - len(trimmed))


def parse(text: str) -> Version:
    """'0.5.10.post1', '0.5.14rc1', '0.5.10+cu124', 'v0.5.10', 'v0.5.10-3-gabc123' -> Version.

    Raises ValueError naming the string when it is not a version."""
    match = _PATTERN.match(str(text))
    if not match:
        raise ValueError(f"not a version: {text!r}")
    g = match.groupdict()
    pre = (_PRE[g["pre_l"].lower()], int(g["pre_n"] or 0)) if g["pre_l"] else None
    post = int(g["post_n"] or 0) if g["post_l"] else None
    dev = int(g["dev_n"] or 0) if g["dev_n"] is not None else None
    local = g["local"]
    if g["distance"]:
        local = f"{g['distance']}.g{g['sha']}" + (f".{local}" if local else "")
    return Version(str(text).strip(), tuple(int(p) for p in g["release"].split(".")), pre, post, dev, local)


def try_parse(text: str | None) -> Version | None:
    """parse(), or None for a missing or unreadable version."""
    if not text:
        return None
    try:
        return parse(text)
    except ValueError:
        return None


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as a is older than, the same as, or newer than b."""
    va, vb = parse(a), parse(b)
    return (va > vb) - (va < vb)


def in_range(version: str, minimum: str | None = None, maximum: str | None = None) -> bool:
    """Whether `version` falls within [minimum, maximum], both inclusive.

    A bound names a release, and the pre-, post- and local releases of that release fall
    inside it: max_version 0.5.13 includes 0.5.13.post1, min_version 0.5.14 includes
    0.5.14rc1 (a patch set is written against a release's code, not its packaging)."""
    release = _padded(parse(version).release)
    if minimum is not None and release < _padded(parse(minimum).release):
        return False
    return not (maximum is not None and release > _padded(parse(maximum).release))


def at_least(version: str, minimum: str) -> bool:
    """in_range(version, minimum): true for minimum's own pre-releases too."""
    return in_range(version, minimum, None)


def declared_version(read: Callable[[str], bytes | None]) -> str | None:
    """The version an SGLang tree declares as a literal `__version__` in its version files
    (`paths.VERSION_FILES`, in that order), read through `read(relpath)`; None when none does
    (a git checkout of 0.5+ has no generated `_version.py`)."""
    for rel in VERSION_FILES:
        data = read(rel)
        if data is None:
            continue
        try:
            module = pysource.parse(data.decode("utf-8", errors="replace"))
        except SyntaxError:
            continue
        for stmt in module.body:
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and \
                    any(isinstance(t, ast.Name) and t.id in ("__version__", "version") for t in targets):
                return value.value
    return None
