"""`specops tune`: sweep, choose the adaptive threshold (and tiers), verify, optionally write it."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import click

from specops.bench.repeats import normalized
from specops.bench.settings import BenchSettings, as_list
from specops.bench.settingtext import ints
from specops.cli.exits import exit_with
from specops.cli.options import console, host_option, inventory_option, parse_vars, var_option
from specops.cli.settingopts import schema_options, typed_values
from specops.config.optionspec import read_options
from specops.decide.tune import MAX_CANDIDATES, TuneResult
from specops.engines.schedule import ScheduleForm
from specops.errors import ConfigError
from specops.flows.tune_run import Tuned, tune_host
from specops.records.tune import TUNE_JSON
from specops.report.tune import lengths_table

#: the bench options tune shares (bench/settings.py's schema), with tune's defaults and words
TUNE_OPTIONS: dict[str, dict[str, Any]] = {
    "concurrency": {"help": "the coarse levels"},
    "repeats": {"default": "1", "help": "times each point is measured: a count, or auto[:MAX] (at least 2, stopping "
                                        "a point once its spread or the decision at its level is settled; MAX "
                                        "default 5)"},
    "num_prompts": {"help": "requests per point (default: max(4 x concurrency, 16))"},
    "input_len": {"help": "prompt tokens; a comma list (256,4096) tunes each length and recommends per length"},
    "output_len": {"help": "output tokens; a comma list too"},
}


def _steps(value: str) -> list[int]:
    """--steps: the draft-step counts the tiers choose from, 0 (no speculation) included."""
    steps = sorted(set(ints(value, "--steps")))
    if not steps or min(steps) < 0:
        raise ConfigError(f"--steps expects non-negative integers, got '{value}'")
    return steps


def _shared(typed: dict[str, Any]) -> BenchSettings:
    """The bench options tune shares, read and checked by the settings schema as bench's are
    (bench/settings.py: each field's reader, then `BenchSettings.from_dict`)."""
    return BenchSettings.from_dict(read_options(BenchSettings, typed), where="tune", command="tune")


def _say(line: str) -> None:
    console.print(line, markup=False, highlight=False)


def run_tune(inventory_path: str | None, host_spec: str, *, coarse: list[int], settings: dict[str, Any],
             from_dir: Path | None, budget_minutes: float | None, write: bool, as_json: bool,
             tier_steps: list[int], out: Path | None, runs_dir: Path | None, extra_vars: dict[str, Any],
             lengths: list[tuple[int, int]] | None = None, for_length: int | None = None, reuse: bool = True,
             emit: bool = False, candidates: int = MAX_CANDIDATES, typed: Collection[str] = ()) -> int:
    """Tune the host (flows.tune_run) and print the outcome; the exit code. `typed`: the
    settings typed on the command line (which `--from` may not replace)."""
    say = _say if not as_json else (lambda _l: None)
    outcome = tune_host(inventory_path, host_spec, coarse=coarse, settings=settings, from_dir=from_dir,
                        budget_minutes=budget_minutes, write=write, tier_steps=tier_steps, out=out,
                        runs_dir=runs_dir, extra_vars=extra_vars, say=say, console=console, lengths=lengths,
                        for_length=for_length, reuse=reuse, candidates=candidates, typed=typed)
    return _finish(outcome.run_dir, outcome.done, outcome.chosen, write=write, as_json=as_json, emit=emit)


def _emit(result: TuneResult) -> None:
    """The verified schedule in every engine route's form (`--emit`)."""
    if result.schedule is None:
        _say("schedule: none to emit (nothing verified)")
        return
    _say(f"schedule (running batch: draft steps): {result.schedule['text']}")
    for form in result.forms:
        for line in ScheduleForm(**form).lines():   # never wrapped: the flags are copied as they are
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _unwritten(result: TuneResult, input_len: int | None = None) -> str:
    """Why --write wrote nothing: unfair arms (flows.tune_run.unfair_arms), or nothing verified."""
    if result.ok and result.unfair:
        return "; ".join(w.removeprefix("WARNING: ") for w in result.unfair) + " (tune writes no schedule from such arms)"
    if input_len is None:
        return "nothing verified"
    return f"input {input_len} (the length --write is for) did not verify"


def _finish(run_dir: Path, done: list[Tuned], chosen: tuple[int, int], *, write: bool, as_json: bool,
            emit: bool = False) -> int:
    ok = all(t.result.ok for t in done)
    if as_json:
        click.echo((run_dir / TUNE_JSON).read_text(), nl=False)
        return 0 if ok else 1
    measured = sum(t.result.measured_points for t in done)
    reused = sum(t.result.reused_points for t in done)
    if len(done) == 1:
        result = done[0].result
        _say(f"result: {result.status}: {result.message}")
        if write:
            _say(f"written: {result.written}" if result.written else f"not written: {_unwritten(result)}")
        _say(f"report: {run_dir / 'report.md'}")
    else:
        for line in lengths_table([t.result for t in done], chosen):
            _say(line)
        pick = next(t.result for t in done if (t.result.input_len, t.result.output_len) == chosen)
        if write:
            _say(f"written: {pick.written}" if pick.written else f"not written: {_unwritten(pick, chosen[0])}")
        _say(f"per-length reports: {', '.join(str(t.run_dir / 'report.md') for t in done)}")
    if emit:
        _emit(next(t.result for t in done if (t.result.input_len, t.result.output_len) == chosen))
    _say(f"points: {measured} measured, {reused} reused from earlier runs")
    return 0 if ok else 1


@click.command()
@host_option
@inventory_option
@schema_options(BenchSettings, ("arms",), {"arms": {
    "help": "the baseline, EAGLE-3 and adaptive arms of the host's vars, in that order"}})
@click.option("--from", "from_dir", type=click.Path(file_okay=False, exists=True),
              help="a bench run directory: reuse its baseline/eagle3 points as the coarse sweep")
@click.option("--no-reuse", is_flag=True,
              help="measure every point, even those an earlier run in the runs directory measured on the same "
                   "servers and client settings")
@click.option("--budget-minutes", type=float, help="stop before a phase that would not fit; report what was measured")
@click.option("--candidates", default=MAX_CANDIDATES, show_default=True, type=int,
              help="thresholds verified at most: the chosen one, then its neighbours while none passes (each "
                   "launches a server)")
@click.option("--write", is_flag=True, help="write the verified threshold (and tiers) into hosts.yaml")
@click.option("--for-length", type=int,
              help="with several --input-len lengths: the input length whose threshold --write puts in "
                   "(default: the first given)")
@click.option("--json", "as_json", is_flag=True, help="print tune.json")
@click.option("--emit", is_flag=True,
              help="print the verified schedule in every engine's form: SGLang's patch threshold (<= 0.5.13), its "
                   "native tiers (>= 0.5.14), vLLM's dynamic speculative schedule (also in tune.json)")
@schema_options(BenchSettings, ("concurrency", "repeats", "num_prompts", "input_len", "output_len"), TUNE_OPTIONS)
@click.option("--steps", "tier_steps", default="0,1,3", show_default=True,
              help="draft-step counts the tiers choose from (0: no speculation); 0.5.14+ trees only")
@schema_options(BenchSettings, ("seed",))
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default runs/<id>-tune)")
@click.option("--runs-dir", type=click.Path(file_okay=False),
              help="where runs go, and where earlier runs' points are looked for (default: runs/ beside hosts.yaml)")
@var_option
def tune(host_spec: str, inventory_path: str | None, arms: str, from_dir: str | None, no_reuse: bool,
         budget_minutes: float | None, candidates: int, write: bool, for_length: int | None, as_json: bool,
         emit: bool, concurrency: str, repeats: str, num_prompts: int | None, input_len: str, output_len: str, tier_steps: str, seed: int,
         out: str | None, runs_dir: str | None, var_items: tuple[str, ...]) -> None:
    """Find the adaptive arm's threshold from the server's running batch, verify it, and
    (--write) put it into hosts.yaml."""
    names = [a.strip() for a in arms.split(",") if a.strip()]
    if names != ["baseline", "eagle3", "adaptive"]:
        raise ConfigError("--arms: tune works on the arms named baseline, eagle3 and adaptive "
                          f"(got {','.join(names)})")
    if budget_minutes is not None and budget_minutes <= 0:
        raise ConfigError("--budget-minutes must be > 0")
    if candidates < 1:
        raise ConfigError(f"--candidates must be >= 1 (got {candidates})")
    shared = _shared({"concurrency": concurrency, "repeats": repeats, "num_prompts": num_prompts,
                      "input_len": input_len, "output_len": output_len, "seed": seed})
    inputs, outputs = as_list(shared.input_len), as_list(shared.output_len)
    pairs = [(i, o) for i in inputs for o in outputs]   # in the order given: the first is --write's default
    if for_length is not None and len(inputs) == 1 and for_length != inputs[0]:
        raise ConfigError(f"--for-length {for_length} is not the input length tuned ({inputs[0]})",
                          where="tune --for-length")
    settings = {"repeats": normalized(repeats, "tune --repeats"), "num_prompts": shared.num_prompts,
                "input_len": pairs[0][0], "output_len": pairs[0][1], "seed": shared.seed}
    code = run_tune(inventory_path, host_spec, coarse=sorted(shared.concurrency), settings=settings,
                    from_dir=Path(from_dir) if from_dir else None, budget_minutes=budget_minutes,
                    write=write, as_json=as_json, tier_steps=_steps(tier_steps), out=Path(out) if out else None,
                    runs_dir=Path(runs_dir) if runs_dir else None, extra_vars=parse_vars(var_items),
                    lengths=pairs, for_length=for_length, reuse=not no_reuse, emit=emit, candidates=candidates,
                    typed=typed_values(click.get_current_context(), BenchSettings)[1])
    exit_with(code == 0)
