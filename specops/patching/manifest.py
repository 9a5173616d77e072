"""The patch manifest (`<tree>/.specops/patches/<set>/manifest.json`) as typed records,
with one reader and one writer.

It records, per file, the backup and the hashes of the original and the patched bytes, and
per applied edit the text it inserted and removed, so `revert` can undo exactly that when
the backups are gone. The file stays what the applier wrote (json indent 1, keys in the
order written, no final newline): a manifest reads back to the same bytes. A key this
module does not know, or a known key of another type, is kept as read in the record's
`extra`; a key read as null stays null; keys keep the order they were read in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping, TypeVar

from specops.hostfiles.paths import PATCH_STATE_DIR
from specops.hostfiles.treefiles import TreeFiles

MANIFEST_JSON = "manifest.json"

R = TypeVar("R", bound="_Record")


def state_dir(name: str) -> str:
    """Where a set keeps its backups and manifest, relative to the tree."""
    return f"{PATCH_STATE_DIR}/{name}"


def manifest_path(name: str) -> str:
    return f"{state_dir(name)}/{MANIFEST_JSON}"


@dataclass(kw_only=True)
class _Record:
    """Shared reading/writing: typed keys by TYPES, everything else kept in `extra`."""

    TYPES: ClassVar[dict[str, type]] = {}

    extra: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=list, repr=False, compare=False)  # keys as read

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        return cls(**cls._kwargs(data))

    @classmethod
    def _kwargs(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            want = cls.TYPES.get(key)
            if want is not None and value is None:
                continue  # stays None; `order` has it, so it is written back as null
            if want is not None and isinstance(value, want) and (want is bool or not isinstance(value, bool)):
                kwargs[key] = value
            else:
                extra[key] = value
        return {**kwargs, "extra": extra, "order": list(data)}

    def to_dict(self) -> dict[str, Any]:
        values = {key: getattr(self, key) for key in self.TYPES}
        out: dict[str, Any] = {}
        for key in self.order:   # the order as read first (null where it was null)
            if key in values and values[key] is not None:
                out[key] = values[key]
            elif key in self.extra:
                out[key] = self.extra[key]
            elif key in values:
                out[key] = None
        for key, value in values.items():   # then what was set since, in field order
            if key not in out and value is not None:
                out[key] = value
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out


@dataclass(kw_only=True)
class FileEntry(_Record):
    """One patched file: where its original is kept, and the hashes before and after."""

    TYPES: ClassVar[dict[str, type]] = {"original_sha256": str, "backup": str, "patched_sha256": str}

    original_sha256: str | None = None   # None: the file did not exist before the set
    backup: str | None = None            # None: the default place, backups/<file> under the state dir
    patched_sha256: str | None = None


@dataclass(kw_only=True)
class EditRecord(_Record):
    """What one applied edit did: for a text edit the line and the text added and removed,
    for a diff edit the diff."""

    TYPES: ClassVar[dict[str, type]] = {"edit": str, "file": str, "op": str, "at": int, "added": str,
                                        "removed": str, "diff": str}

    edit: str | None = None
    file: str | None = None
    op: str | None = None
    at: int | None = None         # 1-based line
    added: str | None = None
    removed: str | None = None
    diff: str | None = None


@dataclass(kw_only=True)
class PatchManifest(_Record):
    """The whole manifest of one set on one tree."""

    TYPES: ClassVar[dict[str, type]] = {"set": str}

    set: str | None = None
    files: dict[str, FileEntry] = field(default_factory=dict)
    edits: list[EditRecord] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PatchManifest:
        """Raises ValueError when `files` or `edits` has another shape (not a manifest)."""
        files, edits = data.get("files", {}), data.get("edits", [])
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise ValueError("'files' is not an object of objects")
        if not isinstance(edits, list) or not all(isinstance(v, dict) for v in edits):
            raise ValueError("'edits' is not a list of objects")
        kwargs = cls._kwargs({k: v for k, v in data.items() if k not in ("files", "edits")})
        kwargs["order"] = list(data)
        return cls(**kwargs, files={str(k): FileEntry.from_dict(v) for k, v in files.items()},
                   edits=[EditRecord.from_dict(v) for v in edits])

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        parts = {"files": {k: v.to_dict() for k, v in self.files.items()},
                 "edits": [e.to_dict() for e in self.edits]}
        ordered: dict[str, Any] = {}
        for key in [*self.order, *out, "files", "edits"]:
            if key in ordered:
                continue
            if key in parts:
                ordered[key] = parts[key]
            elif key in out:
                ordered[key] = out[key]
        return ordered

    def backup_of(self, rel: str, name: str) -> str:
        """The backup of `rel` (set `name`): as recorded, else the default place."""
        entry = self.files.get(rel)
        return entry.backup if entry is not None and entry.backup else f"{state_dir(name)}/backups/{rel}"


def _check_fields() -> None:
    for cls in (FileEntry, EditRecord, PatchManifest):
        missing = set(cls.TYPES) - {f.name for f in fields(cls)}
        assert not missing, (cls.__name__, missing)


_check_fields()


def parse(data: bytes) -> PatchManifest:
    """The one reader of the bytes. Raises ValueError when they are not a manifest."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return PatchManifest.from_dict(obj)


def render(manifest: PatchManifest) -> bytes:
    """The one writer's bytes: indent 1, keys in order, as the applier always wrote it."""
    return json.dumps(manifest.to_dict(), indent=1).encode()


def read(files: TreeFiles, name: str) -> PatchManifest | None:
    """The set's manifest on this tree; None when it has none or it cannot be read (then
    the set is planned from the tree's text alone, as without one)."""
    data = files.read(manifest_path(name))
    if data is None:
        return None
    try:
        return parse(data)
    except ValueError:
        return None


def write(files: TreeFiles, manifest: PatchManifest, name: str) -> str:
    """Write the manifest of set `name`; returns its tree-relative path."""
    path = manifest_path(name)
    files.write(path, render(manifest))
    return path
