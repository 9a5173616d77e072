"""Where a bench run starts: a new run directory (`--out`, or one made for it) or an
existing one (`--resume DIR`, with `--extend` adding levels, lengths or repeats).

The rules: `--extend` needs `--resume`; a resumed run runs with the settings of its
manifest (each option typed on the command line must match them, bench.resume's
`check_resume`); `--out` never writes over a run that has results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specops.bench.resume import check_resume
from specops.errors import ConfigError
from specops.records.store import MANIFEST_JSON, RESULTS_JSONL, load_manifest


@dataclass
class Start:
    """The settings a bench runs with, its run directory (None: a new one is made) and the
    notes to print first (what `--extend` kept that the options left out)."""

    settings: dict[str, Any]
    run_dir: Path | None
    notes: list[str] = field(default_factory=list)
    resumed: bool = False


def bench_start(settings: dict[str, Any], *, out: Path | None, resume: Path | None,
                given: dict[str, Any] | None = None, extend: bool = False) -> Start:
    """`settings`: the command line's; `given`: those typed on it (not defaults)."""
    if extend and resume is None:
        raise ConfigError("--extend adds levels or repeats to an existing run: give --resume DIR with it",
                          where="bench --extend")
    if resume is not None:
        if not (resume / MANIFEST_JSON).exists():
            raise ConfigError(f"--resume: {resume} has no manifest.json (not a bench run directory)")
        recorded = load_manifest(resume).settings().to_dict()
        recorded.pop("dataset_hash", None)
        merged, notes = check_resume(recorded, given or {}, resume, extend=extend)
        return Start(merged, resume, notes, resumed=True)
    if out is not None and (out / RESULTS_JSONL).exists():
        raise ConfigError(f"--out {out} already holds results; use --resume {out} to fill its gaps")
    return Start(settings, out)
