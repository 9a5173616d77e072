"""The one YAML loader: it remembers where each key was, and refuses duplicate keys.

Every YAML file specops reads (hosts.yaml, playbooks, patch sets, and through them arm
profiles and bench settings) is loaded here, so a duplicate key is an error naming
file:line in any of them, and `specops.config.schema` can name the line of any key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specops.config.schema import check_keys, expect, suggest, type_name, where_of
from specops.errors import ConfigError

# The checks moved to specops.config.schema; these names stay importable from here.
__all__ = ["Mapping", "Sequence", "load_file", "load_text", "read_text", "check_keys", "expect", "suggest", "type_name",
           "where_of"]


# A YAML document is untyped data: a key is any scalar, a value any node; the schema checks them.
class Mapping(dict[Any, Any]):
    """A dict that knows its file, its own line and each key's line (1-based)."""

    source: str = "<string>"
    line: int = 0
    key_lines: dict[Any, int]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.key_lines = {}  # an empty mapping made in code knows no lines, but answers `where`

    def where(self, key: str | None = None) -> str:
        line = self.key_lines.get(key, self.line) if key is not None else self.line
        return f"{self.source}:{line}"


class Sequence(list[Any]):
    """A list that knows its file and line, and each item's line."""

    source: str = "<string>"
    line: int = 0
    item_lines: list[int]

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
            if isinstance(key, (dict, list)):  # `? [a, b]: c` is YAML, but no file of ours has such keys
                raise ConfigError(f"a key must be a name, not {'a list' if isinstance(key, list) else 'a mapping'}",
                                  where=f"{source}:{key_node.start_mark.line + 1}")
            if key in result:
                raise ConfigError(f"duplicate key '{key}' (first at line {result.key_lines[key]})", where=f"{source}:{key_node.start_mark.line + 1}")
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
        return yaml.load(text, Loader=_loader_for(source))  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise ConfigError(f"YAML syntax error: {exc.problem or exc.context}", where=f"{source}:{line}") from exc
    except yaml.reader.ReaderError as exc:  # a control character: its line, not the parser's dump
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise ConfigError(f"YAML cannot hold character U+{char:04X} (control characters are not allowed)",
                          where=f"{source}:{line}") from None
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines() or [""]
        raise ConfigError(f"YAML error: {first[0]}", where=source) from exc


def read_text(path: Path | str, what: str = "file") -> str:
    """A file specops reads as text, as UTF-8: missing, unreadable (a folder, no permission)
    or not UTF-8, it is a ConfigError naming the file (and the line of the first bad byte)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path} is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                          where=f"{path}:{line}", hint="save it as UTF-8") from None


def load_file(path: Path | str, what: str = "file") -> Any:
    """Read and parse a YAML file; a missing, unreadable or non-UTF-8 file is a ConfigError naming it."""
    return load_text(read_text(path, what), str(Path(path)))
