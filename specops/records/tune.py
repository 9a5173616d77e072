"""tune.json, beside a tune's results.jsonl: one length's search and outcome (decide/tune.py's
`tune_document`), or for a several-length tune the table of its lengths (report/tune.py's
`lengths_document`). The one reader and the one writer of the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from specops.fsutil import atomic_write

TUNE_JSON = "tune.json"


def load_tune(run_dir: Path) -> dict[str, Any] | None:
    """The run's tune.json as written; None when it has none, or none that reads as a JSON object."""
    path = Path(run_dir) / TUNE_JSON
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def write_tune(run_dir: Path, doc: Mapping[str, Any]) -> Path:
    """tune.json, atomically (keys sorted, so a rewrite diffs cleanly)."""
    path = Path(run_dir) / TUNE_JSON
    atomic_write(path, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
    return path
