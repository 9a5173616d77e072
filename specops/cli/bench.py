"""`specops bench`, `specops report`, `specops demo`: sweeps, their reports, the offline demo."""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path

import click

from specops.bench.settings import EXTENDABLE, BenchSettings, settings_from_options, settings_words
from specops.cli.exits import exit_with
from specops.cli.options import (
    console,
    err_console,
    host_option,
    inventory_option,
    lease_options,
    lease_policy,
    parse_vars,
    runtime_option,
    runtime_vars,
    var_option,
    verbosity,
)
from specops.cli.settingopts import schema_options, typed_values
from specops.config.optionspec import flag_words, option_words
from specops.config.slo import OBJECTIVES, check_objective, parse_slo
from specops.decide.summary import objective_of
from specops.errors import ConfigError
from specops.flows.bench_run import print_report, run_bench
from specops.flows.demo import run_demo
from specops.records.store import load_manifest, write_csv
from specops.report.artifacts import render_report
from specops.report.summary_doc import SUMMARY_JSON
from specops.servers.arms import ArmOverrides

#: `specops bench`'s settings options, in --help's order (the schema's: bench/settings.py)
SETTINGS = ("arms", "concurrency", "rate", "arrival", "trace", "phases", "repeats", "scheduling", "num_prompts",
            "prompts_per_level", "input_len", "output_len", "dataset", "runner", "seed", "slo", "objective",
            "gpu_hour_cost")


@click.command()
@host_option
@inventory_option
@click.option("--playbook", "-p", type=click.Path(dir_okay=False), help="default playbooks/bench.yaml")
@schema_options(BenchSettings, SETTINGS)
@schema_options(ArmOverrides)
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default runs/<id>)")
@click.option("--resume", type=click.Path(file_okay=False, exists=True), help="a run directory: run only its missing points")
@click.option("--extend", is_flag=True, help="with --resume: --concurrency, --input-len/--output-len and --repeats "
                                              "add levels, lengths or repeats to the run")
@click.option("--json", "as_json", is_flag=True, help="print summary.json (nothing else on stdout)")
@schema_options(BenchSettings, ("keep_servers",))
@click.option("--runs-dir", type=click.Path(file_okay=False))
@var_option
@lease_options
@runtime_option
def bench(host_spec: str, inventory_path: str | None, playbook: str | None, out: str | None, resume: str | None,
          extend: bool, as_json: bool, runs_dir: str | None, var_items: tuple[str, ...], wait: bool,
          wait_timeout: float, take_over: bool, allow_runtime_mismatch: bool, **_settings: object) -> None:
    """Sweep arms x load levels (concurrency or request rate) x repeats; report the crossover."""
    ctx = click.get_current_context()
    policy = lease_policy(wait, wait_timeout, take_over)
    settings, given = settings_from_options(*typed_values(ctx, BenchSettings))
    overrides = ArmOverrides(**typed_values(ctx, ArmOverrides)[0])
    extra_vars = {**runtime_vars(parse_vars(var_items), allow_runtime_mismatch), ArmOverrides.VAR: overrides}
    common = ["--host", host_spec, *flag_words("-i", inventory_path), *flag_words("--playbook", playbook),
              *flag_words("--allow-runtime-mismatch", allow_runtime_mismatch),
              *(w for v in var_items for w in ("--var", v)), *option_words(ArmOverrides, asdict(overrides)),
              *flag_words("--runs-dir", runs_dir)]

    def again(run_dir: Path) -> str:
        """`--resume DIR` once the sweep has a manifest (with --extend, what it adds); before
        that, the same sweep into DIR."""
        if (run_dir / "manifest.json").exists():
            added = [*settings_words(given, lambda name: name in EXTENDABLE), "--extend"] if extend else []
            return shlex.join(["specops", "bench", *common, "--resume", str(run_dir), *added])
        return shlex.join(["specops", "bench", *common, *settings_words(settings), "--out", str(run_dir)])
    raise SystemExit(run_bench(inventory_path, host_spec, settings, playbook=Path(playbook) if playbook else None,
                       out=Path(out) if out else None, resume=Path(resume) if resume else None,
                       runs_dir=Path(runs_dir) if runs_dir else None, extra_vars=extra_vars,
                       console=err_console if as_json else console, verbosity=verbosity(),
                       resume_command=again, given=given, extend=extend, as_json=as_json, policy=policy))


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="print summary.json (the report for machines)")
@click.option("--objective", type=click.Choice(list(OBJECTIVES)),
              help="what the crossover and threshold compare (default: the bench's own; goodput needs an SLO)")
@click.option("--slo", help="latency limits, e.g. ttft_ms=200,tpot_ms=50, in place of the bench's own")
def report(run_dirs: tuple[str, ...], as_json: bool, objective: str | None, slo: str | None) -> None:
    """Re-render report.md, report.html, summary.json, results.csv and plots/ from a run
    directory's files alone (under another objective or SLO with --objective / --slo)."""
    if len(run_dirs) > 1:
        raise ConfigError(f"report takes one run directory; to put runs side by side: "
                          f"specops compare {' '.join(run_dirs)}")
    path = Path(run_dirs[0])
    if not (path / "results.jsonl").exists():
        raise ConfigError(f"{path} has no results.jsonl (not a bench run directory)")
    limits = parse_slo(slo, where="report --slo")
    recorded, recorded_slo = objective_of(load_manifest(path))
    check_objective(objective or recorded, limits or recorded_slo, where="report --objective")
    write_csv(path)
    if as_json:
        summary = render_report(path, objective=objective, slo=limits)
        click.echo((path / SUMMARY_JSON).read_text(), nl=False)
        exit_with(not summary.failed)
    raise SystemExit(print_report(console, path, objective, limits, verbosity=verbosity()))


@click.command()
@inventory_option
@click.option("--quick", is_flag=True, help="fewer levels and one repeat (under a minute)")
def demo(inventory_path: str | None, quick: bool) -> None:
    """Deploy and bench on the simulated `local` host: the whole loop, no GPU needed."""
    raise SystemExit(run_demo(inventory_path, quick, console))
