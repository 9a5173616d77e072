"""YAML loading that remembers where each key was, and schema checks that say so.

Every error about hosts.yaml, a playbook or a patch set names the file, the line and the
key, with a "did you mean" when a known key is close: the hour lost to a typo is what
this tool exists to save.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable

import yaml

from specops.errors import ConfigError


class Mapping(dict):
    """A dict that knows its file, its own line and each key's line (1-based)."""

    source: str = "<string>"
    line: int = 0
    key_lines: dict

    def where(self, key: str | None = None) -> str:
        line = self.key_lines.get(key, self.line) if key is not None else self.line
        return f"{self.source}:{line}"


class Sequence(list):
    """A list that knows its file and line, and each item's line."""

    source: str = "<string>"
    line: int = 0
    item_lines: list

    def where(self, index: int | None = None) -> str:
        line = self.item_lines[index] if index is not None and index < len(self.item_lines) else self.line
        return f"{self.source}:{line}"


def _loader_for(source: str) -> type:
    class Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Mapping:
        loader.flatten_mapping(node)
        result = Mapping()
        result.source, result.line, result.key_lines = source, node.start_mark.line + 1, {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in result:
                raise ConfigError(f"duplicate key '{key}'", where=f"{source}:{key_node.start_mark.line + 1}")
            result[key] = loader.construct_object(value_node, deep=True)
            result.key_lines[key] = key_node.start_mark.line + 1
        return result

    def construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> Sequence:
        result = Sequence(loader.construct_object(child, deep=True) for child in node.value)
        result.source, result.line = source, node.start_mark.line + 1
        result.item_lines = [child.start_mark.line + 1 for child in node.value]
        return result

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, construct_sequence)
    return Loader


def load_text(text: str, source: str) -> Any:
    """Parse YAML text; a syntax error becomes a ConfigError with the file and line."""
    try:
        return yaml.load(text, Loader=_loader_for(source))  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise ConfigError(f"YAML syntax error: {exc.problem or exc.context}", where=f"{source}:{line}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"YAML error: {exc}", where=source) from exc


def load_file(path: Path | str, what: str = "file") -> Any:
    """Read and parse a YAML file; a missing file is a ConfigError naming it."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    return load_text(text, str(path))


def suggest(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a choice is close, else ''."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def where_of(node: Any, key: str | None = None) -> str:
    return node.where(key) if isinstance(node, (Mapping, Sequence)) else "<unknown>"


def check_keys(node: Any, allowed: Iterable[str], what: str, required: Iterable[str] = ()) -> None:
    """Reject unknown keys (with a suggestion) and missing required ones."""
    allowed = list(allowed)
    if not isinstance(node, dict):
        raise ConfigError(f"{what} must be a mapping, got {type_name(node)}", where=where_of(node))
    for key in node:
        if key not in allowed:
            raise ConfigError(
                f"unknown key '{key}' in {what}{suggest(key, allowed)}; allowed: {', '.join(allowed)}",
                where=where_of(node, key),
            )
    for key in required:
        if key not in node:
            raise ConfigError(f"{what} is missing required key '{key}'", where=where_of(node))


def type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {dict: "a mapping", Mapping: "a mapping", list: "a list", Sequence: "a list", str: "a string",
            bool: "a boolean", int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def expect(node: Any, key: str, types: type | tuple[type, ...], what: str) -> Any:
    """Return node[key] after checking its type; the error names file, line, key and types."""
    value = node[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        ok = False
    else:
        ok = isinstance(value, types)
    if not ok:
        wanted = " or ".join(type_name(t()) if t is not type(None) else "null" for t in (types if isinstance(types, tuple) else (types,)))
        raise ConfigError(f"'{key}' in {what} must be {wanted}, got {type_name(value)}", where=where_of(node, key))
    return value
