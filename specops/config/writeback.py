"""Write a tuned value back into hosts.yaml, keeping its comments, order and layout.

ruamel.yaml's round-trip loader finds where the value stands, and only those characters of
the text are replaced (tiers go beside the threshold): every other byte of the file
(comments, flow mappings, alignment, blank lines, quoting) is what the user wrote. A layout
that edit does not handle goes through a full ruamel round trip instead; either way the
result is re-read and checked before it replaces the file. The value goes where
the arm is defined for that host: the host's own `vars.arms`, else a group's, else the
top-level `vars.arms` (the same precedence `Inventory.host_vars` reads them with).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from specops.errors import ConfigError
from specops.fsutil import atomic_write


def _yaml() -> Any:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    return y


def _arms_at(node: Any) -> Any:
    if not hasattr(node, "get"):
        return None
    variables = node.get("vars")
    if hasattr(variables, "get") and hasattr(variables.get("arms"), "get"):
        return variables["arms"]
    return None


def write_adaptive(path: Path, host: str, arm: str, *, threshold: int, tiers: dict[int, int] | None = None,
                   groups: list[str] | None = None) -> str:
    """Set `threshold` (and `tiers`, or drop stale ones) of `arm` where it is defined for `host`.
    Returns where it was written, e.g. "hosts.yaml: hosts.local.vars.arms.adaptive.threshold"."""
    y = _yaml()
    text = Path(path).read_text()
    data = y.load(text)
    candidates = []
    hosts: Any = data.get("hosts") if hasattr(data, "get") else None
    if hasattr(hosts, "get") and host in hosts:
        candidates.append((f"hosts.{host}", hosts[host]))
    groups_node: Any = data.get("groups") if hasattr(data, "get") else None
    for g in groups or []:
        if hasattr(groups_node, "get") and hasattr(groups_node.get(g), "get"):
            candidates.append((f"groups.{g}", groups_node[g]))
    candidates.append(("", data))
    found: list[tuple[str, Any]] = []
    for lbl, node in candidates:
        arms_node = _arms_at(node)
        if arms_node is not None and arm in arms_node:
            found.append((lbl, arms_node))
    if not found:
        raise ConfigError(f"no arm '{arm}' under vars.arms for host '{host}' in {path}; nothing written",
                          hint="add the adaptive arm to hosts.yaml first")
    label, arms = found[0]
    spec = arms[arm]
    if not hasattr(spec, "get"):
        raise ConfigError(f"arm '{arm}' in {path} is not a mapping; nothing written")
    where = ".".join(p for p in (label, "vars.arms", arm) if p)
    new_text = _edit_in_place(text, spec, threshold, tiers)
    if new_text is None:  # a layout the text edit does not handle: a round trip through ruamel
        spec["threshold"] = int(threshold)
        if tiers:
            flow = CommentedMap((int(k), int(v)) for k, v in sorted(tiers.items()))
            flow.fa.set_flow_style()
            spec["tiers"] = flow
        elif "tiers" in spec:
            del spec["tiers"]
        out = io.StringIO()
        y.dump(data, out)
        new_text = out.getvalue()
    check = _yaml().load(new_text)
    arms_check = _arms_at(check if not label else _node(check, label))
    if arms_check is None or int(arms_check[arm]["threshold"]) != int(threshold):
        raise ConfigError(f"writing the threshold into {path} did not round-trip; nothing written")
    atomic_write(_real_file(path), new_text)
    return f"{path}: {where}.threshold = {threshold}" + (f", tiers = {dict(sorted(tiers.items()))}" if tiers else "")


def _real_file(path: Path) -> Path:
    """The file a (chain of) symbolic link(s) points to: a rename onto the link itself would
    replace the link with a copy and leave the file it names unchanged (the repository's own
    hosts.yaml is a link into specops/data/)."""
    return Path(path).resolve()


def _node(data: Any, label: str) -> Any:
    node = data
    for part in label.split("."):
        node = node[part]
    return node


_SCALAR = re.compile(r"[^\s,}\]#]+")


def _tiers_text(tiers: dict[int, int]) -> str:
    return "{" + ", ".join(f"{int(k)}: {int(v)}" for k, v in sorted(tiers.items())) + "}"


def _edit_in_place(text: str, spec: Any, threshold: int, tiers: dict[int, int] | None) -> str | None:
    """Replace the threshold's scalar where it stands (and set tiers beside it), byte for byte
    elsewhere; None when the layout is not one this handles (no threshold key yet, block tiers)."""
    if "threshold" not in spec or ("tiers" in spec and not hasattr(spec["tiers"], "fa")):
        return None
    lines = text.splitlines(keepends=True)
    line, col = spec.lc.value("threshold")
    m = _SCALAR.match(lines[line], col)
    if m is None:
        return None
    edits: list[tuple[int, int, int, str]] = [(line, m.start(), m.end(), str(int(threshold)))]
    if "tiers" in spec:
        tl, tc = spec.lc.value("tiers")
        if not spec["tiers"].fa.flow_style() or lines[tl][tc:tc + 1] != "{" or "}" not in lines[tl][tc:]:
            return None
        end = lines[tl].index("}", tc) + 1
        if tiers:
            edits.append((tl, tc, end, _tiers_text(tiers)))
        else:
            return None  # removing a key cleanly is the round trip's job
    elif tiers:
        flow = spec.fa.flow_style()
        if flow:
            edits.append((line, m.end(), m.end(), f", tiers: {_tiers_text(tiers)}"))
        else:
            key_col = spec.lc.key("threshold")[1]
            newline = "\n" if lines[line].endswith("\n") else ""
            edits.append((line, len(lines[line]), len(lines[line]),
                          ("" if newline else "\n") + " " * key_col + f"tiers: {_tiers_text(tiers)}" + newline))
    for ln, a, b, rep in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[ln] = lines[ln][:a] + rep + lines[ln][b:]
    return "".join(lines)
