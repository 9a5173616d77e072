"""A draft head narrower (or wider) than its target, on an SGLang release that assumes it is not.

SGLang up to 0.5.10.x sizes the empty draft input that a verify leaves when it finishes
every running request by the TARGET's hidden size (`eagle_info.py`, `create_idle_input(
hidden_size=model_config.hidden_size)`). A request prefilled in that step is then merged into
it (`EagleDraftInput.merge_batch`: `torch.cat` of rows of two widths) and the scheduler aborts.
0.5.11 sizes it by the draft's (`spec_hidden_size`). Measured on real 0.5.10.post1 (CPU, plain
EAGLE-3, a 32-wide head on a 64-wide target): a request sent during the last decode step of
the only running one aborted the server every time. Most EAGLE-3 heads are as wide as their
target; those that are not serve until that moment, so the launch says so at once.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from specops.sglang import version as versions
from specops.transport.base import Transport

#: the first release whose empty draft input has the draft's width
FIXED_IN = "0.5.11"
_TIMEOUT = 15.0


def hidden_size(transport: Transport, model_dir: str) -> int | None:
    """`hidden_size` from a local model directory's config.json on the host; None when it is
    not a local directory (a Hub id), has no such file, or the field is missing."""
    if not model_dir.startswith(("/", "~", ".")):
        return None
    res = transport.run(["cat", posixpath.join(model_dir, "config.json")], timeout=_TIMEOUT)
    if not res.ok:
        return None
    try:
        value = json.loads(res.stdout).get("hidden_size")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def affected(version: str) -> bool:
    """Whether this release sizes the empty draft input by the target's width (before FIXED_IN)."""
    return versions.try_parse(version) is not None and versions.compare(version, FIXED_IN) < 0


def width_problem(version: str, target: int | None, draft: int | None) -> bool:
    """Whether this release with these widths has the abort described above."""
    return target is not None and draft is not None and target != draft and affected(version)


def head_width_warning(transport: Transport, arm: str, info: dict[str, Any]) -> str | None:
    """One line for an EAGLE arm (its `/server_info`) whose head and target widths differ on a
    release before FIXED_IN; None otherwise (also when either width cannot be read). The
    models' config.json are read only for an affected release."""
    draft_path = info.get("speculative_draft_model_path")
    model_path = info.get("model_path")
    version = str(info.get("version") or "")
    if not draft_path or not model_path or not affected(version):
        return None
    target, draft = hidden_size(transport, str(model_path)), hidden_size(transport, str(draft_path))
    if not width_problem(version, target, draft):
        return None
    return (f"arm {arm}: the draft head's hidden_size {draft} differs from the target's {target}; SGLang {version} "
            f"aborts the scheduler when a request arrives in the step that finishes every running request "
            f"(EagleDraftInput.merge_batch: hidden states of two widths). Use SGLang >= {FIXED_IN} or a head as "
            f"wide as the target")
