"""`--resume DIR` (and `--extend`): the options given must match the run's recorded settings;
`--extend` may add levels, lengths or repeats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specops.bench.repeats import RepeatRule
from specops.bench.settings import EXTENDABLE, OVERRIDES, as_list, one_or_list, shown
from specops.errors import ConfigError

#: settings that are lists of levels: compared as sets, extended by union (what --extend may add
#: to, and what a resumed run takes from the command line: the schema's, bench/settings.py)
LISTS = ("concurrency", "rate", "input_len", "output_len")


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def check_resume(manifest_settings: dict[str, Any], given: dict[str, Any], run_dir: Path, *,
                 extend: bool = False) -> tuple[dict[str, Any], list[str]]:
    """`--resume DIR` with options: each one given must match what the run was started with.
    With `extend`, `--concurrency` and `--repeats` may add to the run (new levels, more
    repeats); the settings returned are the union, and the notes say what was kept that
    the options left out (the run's points are never dropped)."""
    settings, notes = dict(manifest_settings), []
    for key, value in given.items():
        had = manifest_settings.get(key)
        if key in OVERRIDES:  # how the run is scheduled, not what it measures: the option wins
            settings[key] = value
            continue
        if key == "repeats_auto":
            if bool(had) != bool(value):
                run_rule = RepeatRule(bool(had), int(manifest_settings.get("repeats") or 1)).text()
                raise ConfigError(f"--resume {run_dir}: --repeats {'auto' if value else 'N'} differs from the run's "
                                  f"--repeats {run_rule} (manifest.json)", where="bench --resume",
                                  hint="drop --repeats to fill the run's gaps, or start a new run with --out")
            continue
        if key in LISTS and had is not None:
            same = sorted(map(float, _listed(had))) == sorted(map(float, _listed(value)))
        else:
            same = had == value
        if same:
            continue
        flag = "--" + key.replace("_", "-")
        differs = f"{flag} {shown(value)} differs from the run's {flag} {shown(had)} (manifest.json)"
        if not extend:
            what = "lengths" if key in ("input_len", "output_len") else "levels or repeats"
            extra = f"add --extend to add {what} to it, " if key in EXTENDABLE else ""
            raise ConfigError(f"--resume {run_dir}: {differs}", where="bench --resume",
                              hint=f"{extra}drop {flag} to fill the run's gaps, or start a new run with --out")
        if key not in EXTENDABLE:
            raise ConfigError(f"--resume {run_dir} --extend: {differs}; --extend adds only --concurrency levels "
                              f"and --repeats (and --input-len/--output-len lengths)", where="bench --extend",
                              hint=f"drop {flag}, or start a new run with --out")
        if key in ("concurrency", "rate") and isinstance(had, list):
            settings[key] = sorted(set(had) | set(value))
            kept = sorted(set(had) - set(value))
            if kept:
                notes.append(f"--extend keeps the run's points at {key} {shown(kept)} "
                             f"(not in {flag} {shown(value)})")
        elif key in ("input_len", "output_len") and had is not None:
            old, new = as_list(had), as_list(value)
            settings[key] = one_or_list(old + [v for v in new if v not in old])
            kept = [v for v in old if v not in new]
            if kept:
                notes.append(f"--extend keeps the run's points at {flag} {shown(kept)} "
                             f"(not in {flag} {shown(value)})")
        elif key == "repeats" and isinstance(had, int) and isinstance(value, int):
            settings[key] = max(had, value)
            if value < had:
                notes.append(f"--extend keeps the run's {had} repeats (--repeats {value} is fewer)")
        else:  # a manifest without the setting: nothing to add to
            raise ConfigError(f"--resume {run_dir} --extend: the run records no {flag} to extend (manifest.json)",
                              where="bench --extend")
    return settings, notes

