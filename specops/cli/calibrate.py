"""`specops calibrate --from RUN_DIR --out model.json`: the simulator's model fitted to a real run."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from specops.cli.options import console
from specops.decide.calibrate import Calibration
from specops.decide.calibrate import calibrate as fit
from specops.decide.summary import BASELINE_ARM, EAGLE_ARM, Crossover, summarize_run
from specops.errors import ConfigError
from specops.records import manifest, store
from specops.sim import model as M
from specops.sim import modelfile

#: the engine's per-step log a run may keep beside its records (bench/real_crossover.py
#: --keep-records): arm -> "requests x tokens" -> {"count", "median_ms"}
STEPS_FILE = "steps.json"


@click.command()
@click.option("--from", "run_dir", required=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="a bench run directory with the baseline and eagle3 arms over several concurrency levels")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("model.json"), show_default=True,
              help="the model file to write (a sim host reads it with `sim: {model: FILE}`)")
@click.option("--host", help="the run's host to fit (default: its only one)")
@click.option("--spec-steps", type=int, default=M.DEFAULT_SPEC_NUM_STEPS, show_default=True,
              help="draft steps EAGLE-3 ran with in that run")
@click.option("--json", "as_json", is_flag=True, help="print the calibration as JSON")
def calibrate(run_dir: Path, out: Path, host: str | None, spec_steps: int, as_json: bool) -> None:
    """Fit the simulator's model to a real run: knobs, per-level fit and crossovers; --out FILE."""
    records = store.load_results(run_dir)
    summary = summarize_run(records, manifest.read(run_dir))
    hosts = {h.host: h for h in summary.hosts}
    if not hosts:
        raise ConfigError(f"no ok points in {run_dir}")
    if host is None and len(hosts) > 1:
        raise ConfigError(f"{run_dir} measured several hosts ({', '.join(sorted(hosts))}): name one with --host")
    chosen = hosts.get(host or next(iter(hosts)))
    if chosen is None:
        raise ConfigError(f"host {host!r} is not in {run_dir} (it has {', '.join(sorted(hosts))})")
    ok = [r for r in records if r.ok and r.host == chosen.host and r.arm in (BASELINE_ARM, EAGLE_ARM)]
    cal = fit(chosen, _length(ok, "input_len"), _length(ok, "output_len"), spec_steps, _steps(run_dir / STEPS_FILE))
    doc = document(cal, run_dir)
    modelfile.write(out, cal.params, doc)
    if as_json:
        click.echo(json.dumps({"model": str(out), **doc}, indent=1))
        return
    for line in lines(cal):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(f"model: {out} (a sim host: `sim: {{model: {out}}}`)", markup=False, highlight=False, soft_wrap=True)


def _length(records: list[Any], name: str) -> int:
    values = [int(getattr(r, name)) for r in records if getattr(r, name, None)]
    if not values:
        raise ConfigError(f"the run's records carry no {name}: calibrate needs the lengths the points ran")
    return int(statistics.median(values))


def _steps(path: Path) -> dict[str, dict[str, float]] | None:
    """arm -> shape -> median ms, from the run's steps.json where it kept one."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        return {arm: {shape: float(v["median_ms"]) for shape, v in shapes.items()} for arm, shapes in doc.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a steps file (arm -> shape -> {{median_ms}}): {exc}") from None


def _cross(x: Crossover) -> dict[str, Any]:
    return {"kind": x.kind, "value": x.value, "below": x.below, "above": x.above}


def document(cal: Calibration, run_dir: Path) -> dict[str, Any]:
    """What the model file records of its fit (its `calibration` field) and --json prints."""
    return {"from": str(run_dir), "input_len": cal.input_len, "output_len": cal.output_len,
            "baseline_fit": asdict(cal.baseline), "eagle3_fit": asdict(cal.eagle),
            "measured_crossover": _cross(cal.measured_crossover), "predicted_crossover": _cross(cal.predicted_crossover),
            "crossover_within_one_level": cal.crossover_within_one_level(),
            "levels": [asdict(lv) for lv in cal.levels]}


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _crossover_text(x: Crossover) -> str:
    if x.kind == "interpolated":
        return f"c~{x.value:.1f} (between {x.below:g} and {x.above:g})"
    return {"never": "never (EAGLE-3 wins at every level)", "every": "at every level (EAGLE-3 loses everywhere)"}.get(
        x.kind, x.kind)


def lines(cal: Calibration) -> list[str]:
    """The calibration in words: knobs, then per level measured vs predicted, then crossovers. A
    level's step "seen" is the effective one its throughput implies (what the fit reads), "logged"
    the engine's own per-step log where the run kept one (b: baseline, e: EAGLE-3)."""
    p = cal.params
    out = [f"baseline step: {p.baseline_step_ms:.2f} ms + {p.baseline_step_ms_per_req:.2f} ms/request, "
           f"ceiling {p.baseline_ceiling_tok_s:.1f} tok/s (fit rms {cal.baseline.rms_rel_error:.1%})",
           f"EAGLE-3 step ({p.spec_steps} drafts, verify of {p.spec_steps + 1} tokens a request): "
           f"{p.eagle_step_ms:.2f} ms + {p.eagle_step_ms_per_req:.2f} ms/request, ceiling "
           f"{p.eagle_ceiling_tok_s:.1f} tok/s (fit rms {cal.eagle.rms_rel_error:.1%})",
           f"accept length: {p.accept_len_bs1:.2f} at batch 1, {-p.accept_decay_per_doubling:+.3f} per doubling, "
           f"floor {p.accept_len_floor:.2f}; prefill kept at the model's {p.prefill_step_ms:.1f} ms "
           f"(input {cal.input_len}, output {cal.output_len} tokens)",
           "",
           f"{'c':>4}  {'EAGLE-3/baseline':>16}  {'predicted':>9}  {'baseline tok/s':>14}  {'predicted':>9}  "
           f"{'eagle3 tok/s':>12}  {'predicted':>9}  {'accept':>6}  {'predicted':>9}  {'step ms seen/logged':>26}"]
    for lv in cal.levels:
        steps = " ".join(f"{arm[0]} {lv.effective_step_ms[arm]:.1f}/{_f(lv.logged_step_ms.get(arm), 1)}"
                         for arm in (BASELINE_ARM, EAGLE_ARM))
        out.append(f"{lv.concurrency:>4g}  {_f(lv.measured_ratio, 3):>16}  {lv.predicted_ratio:>9.3f}  "
                   f"{lv.measured_tps[BASELINE_ARM]:>14.1f}  {lv.predicted_tps[BASELINE_ARM]:>9.1f}  "
                   f"{lv.measured_tps[EAGLE_ARM]:>12.1f}  {lv.predicted_tps[EAGLE_ARM]:>9.1f}  "
                   f"{_f(lv.measured_accept):>6}  {lv.predicted_accept:>9.2f}  {steps:>26}")
    verdict = "within one level" if cal.crossover_within_one_level() else "MORE than one level apart"
    out += ["", f"crossover: measured {_crossover_text(cal.measured_crossover)}, predicted "
                f"{_crossover_text(cal.predicted_crossover)}: {verdict}"]
    return out
