"""A simulator model's file: the knobs of sim/model.py's ModelParams as JSON.

`specops calibrate` writes one fitted to a real engine's run; a sim host reads it through
`sim: {model: FILE}` (the `--sim-model` knob), so its servers follow that engine instead of
the demo's simulated GPU. Knobs the file leaves out keep their defaults; a knob it names
that the model has not, or a value out of its range, refuses the file with its name and the
field, before any server starts.

    {"format": "specops-sim-model/1",
     "knobs": {"baseline_step_ms": 35.1, ..., "spec_steps": 3},
     "calibration": {...}}          # what it was fitted from and how well (shown, never read)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Mapping

from specops.errors import ConfigError
from specops.fsutil import atomic_write
from specops.sim.model import ModelParams

FORMAT = "specops-sim-model/1"
TOP_KEYS = ("format", "knobs", "calibration")
#: knob -> (smallest value, whether the smallest is allowed, integer): what a knob may be
RANGES: dict[str, tuple[float, bool, bool]] = {
    "baseline_step_ms": (0.0, True, False), "baseline_step_ms_per_req": (0.0, True, False),
    "baseline_ceiling_tok_s": (0.0, False, False),
    "eagle_step_ms": (0.0, True, False), "eagle_step_ms_per_req": (0.0, True, False),
    "eagle_ceiling_tok_s": (0.0, False, False),
    "accept_len_bs1": (1.0, True, False), "accept_decay_per_doubling": (-math.inf, False, False),
    "accept_len_floor": (1.0, True, False), "spec_steps": (1, True, True),
    "adaptive_tax": (0.0, True, False), "prefill_step_ms": (0.0, True, False),
    "prefill_ms_per_token": (0.0, True, False), "kv_ms_per_token": (0.0, True, False),
    "context_free_tokens": (0, True, True),
}


class ModelFileError(ConfigError):
    """A model file specops cannot use: which file, which field, why."""


def document(params: ModelParams, calibration: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The file's content for these knobs (and, from a calibration, what they were fitted from)."""
    doc: dict[str, Any] = {"format": FORMAT, "knobs": asdict(params)}
    if calibration is not None:
        doc["calibration"] = dict(calibration)
    return doc


def write(path: Path, params: ModelParams, calibration: Mapping[str, Any] | None = None) -> Path:
    """Write the file atomically, after checking its knobs as `load` will: a file specops
    writes is one a sim host accepts, and a bad knob leaves no file (ModelFileError)."""
    doc = document(params, calibration)
    parse(doc, str(path))
    atomic_write(path, json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return path


def load(path: str | Path) -> ModelParams:
    """The knobs a model file sets (the defaults for the rest); ModelFileError names the file
    and the field when it is unreadable, of another format, or a knob is unknown or out of range."""
    where = str(path)
    try:
        doc = json.loads(Path(path).expanduser().read_text())
    except OSError as exc:
        raise ModelFileError(f"simulator model file {where}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ModelFileError(f"simulator model file {where}: not JSON ({exc})") from None
    return parse(doc, where)


def parse(doc: Any, where: str) -> ModelParams:
    """ModelParams from a file's parsed JSON (`where` names it in errors)."""
    if not isinstance(doc, dict):
        raise ModelFileError(f"simulator model file {where}: expected a JSON object with 'knobs', "
                             f"got {type(doc).__name__}")
    extra = sorted(set(doc) - set(TOP_KEYS))
    if extra:
        raise ModelFileError(f"simulator model file {where}: unknown field {extra[0]!r} (expected {', '.join(TOP_KEYS)})")
    if doc.get("format") != FORMAT:
        raise ModelFileError(f"simulator model file {where}: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    knobs = doc.get("knobs")
    if not isinstance(knobs, dict):
        raise ModelFileError(f"simulator model file {where}: field 'knobs' must be an object of knob: number")
    known = {f.name for f in fields(ModelParams)}
    values: dict[str, Any] = {}
    for name, value in knobs.items():
        if name not in known:
            raise ModelFileError(f"simulator model file {where}: unknown knob 'knobs.{name}' "
                                 f"(the model's knobs: {', '.join(sorted(known))})")
        values[name] = _checked(where, name, value)
    params = ModelParams(**values)
    if params.accept_len_floor > params.accept_len_bs1:
        raise ModelFileError(f"simulator model file {where}: field 'knobs.accept_len_floor' "
                             f"({params.accept_len_floor}) exceeds 'knobs.accept_len_bs1' ({params.accept_len_bs1})")
    return params


def _checked(where: str, name: str, value: Any) -> float | int:
    low, inclusive, integer = RANGES[name]
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)) \
            or not math.isfinite(value):
        raise ModelFileError(f"simulator model file {where}: field 'knobs.{name}' must be {kind}, got {value!r}")
    if value < low or (value == low and not inclusive):
        bound = f">= {low}" if inclusive else f"> {low}"
        raise ModelFileError(f"simulator model file {where}: field 'knobs.{name}' must be {bound}, got {value!r}")
    return int(value) if integer else float(value)
