"""The SGLang version of a source tree, read one way for every caller.

Detection, patch gating, the install check, the simulator's `/server_info` and the
manifest all need "which SGLang is this tree". Releases up to 0.5.9 carry a literal
`__version__` in `python/sglang/version.py`; from 0.5.10 `version.py` is a try/except
and `_version.py` is generated at build time, so a fresh git checkout has no literal
version: there the tag git describes (`v0.5.10.post1` -> `0.5.10.post1`) is the version.
A tree unpacked from a wheel by specops names its version in a marker file.
"""

from __future__ import annotations

import json
import re

from specops.hostfiles.treefiles import TreeFiles
from specops.sglang.paths import VERSION_FILES, WHEEL_MARKER
from specops.sglang.version import declared_version

#: `v0.5.10.post1`, `v0.5.10rc0`, `0.4.10.post2`; a describe suffix (`-3-gabc123`) is not a release
_TAG = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.?(?:post|rc|a|b|dev)\d+)*)$")


def version_from_tag(described: str | None) -> str | None:
    """`git describe --tags` output -> a version, only when HEAD is exactly a release tag."""
    if not described:
        return None
    m = _TAG.match(described.strip())
    return m.group(1) if m else None


def tree_version(files: TreeFiles) -> tuple[str | None, str]:
    """(version, where it came from): a literal version file, else the git tag of the
    checkout, else the wheel marker; (None, why not) when none of them says."""
    version = declared_version(files.read)
    if version:
        return version, " or ".join(VERSION_FILES)
    described = files.git_describe()
    version = version_from_tag(described)
    if version:
        return version, f"git describe --tags ({described})"
    marker = files.read(WHEEL_MARKER)
    if marker:
        try:
            version = str(json.loads(marker).get("version") or "") or None
        except ValueError:
            version = None
        if version:
            return version, WHEEL_MARKER
    why = "no literal version in python/sglang/version.py or _version.py"
    why += f", HEAD is not a release tag ({described})" if described else ", no git tag at HEAD"
    return None, why
