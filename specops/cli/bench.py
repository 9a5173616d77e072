"""`specops bench`, `specops report`, `specops demo`: sweeps, their reports, the offline demo."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from specops.bench.arrivals import DEFAULT_ARRIVAL, TRACE, parse_arrival, parse_rates
from specops.bench.phases import parse_phases
from specops.bench.repeats import parse_repeats
from specops.bench.store import load_manifest, write_csv
from specops.cli.exits import exit_with
from specops.cli.options import (
    command_line,
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
from specops.config.slo import OBJECTIVES, check_objective, parse_slo
from specops.decide.summary import objective_of
from specops.errors import ConfigError
from specops.flows.bench_run import print_report, run_bench
from specops.flows.demo import run_demo
from specops.report.artifacts import render_report
from specops.report.summary_doc import SUMMARY_JSON


def _ints(value: str, option: str) -> list[int]:
    try:
        levels = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option} expects comma-separated integers, got '{value}'") from None
    return levels


def _lengths(value: str, option: str) -> int | list[int]:
    """--input-len / --output-len: one length (an int, as before lengths were an axis) or a
    comma-separated list of positive lengths swept beside concurrency."""
    lengths = _ints(value, option)
    if not lengths:
        raise ConfigError(f"{option} expects a length or comma-separated lengths, got '{value}'")
    bad = [v for v in lengths if v < 1]
    if bad:
        raise ConfigError(f"{option} lengths must be at least 1, got {','.join(map(str, bad))} in '{value}'")
    return lengths[0] if len(lengths) == 1 else lengths


def _load_settings(ctx: click.Context, concurrency: str, rate: str | None, arrival: str,
                   trace: str | None, phases: str | None = None) -> dict[str, object]:
    """The run's load axis: `concurrency` levels, `rate` levels and their `arrival` process,
    `phases` of rates one after another, or a `trace` replayed; two of them given is a usage
    error, as is --arrival without --rate or --phases."""
    concurrency_given = ctx.get_parameter_source("concurrency") not in (ParameterSource.DEFAULT, None)
    arrival_given = ctx.get_parameter_source("arrival") not in (ParameterSource.DEFAULT, None)
    if phases is not None:
        if rate is not None or concurrency_given or trace is not None:
            raise ConfigError("--phases is the run's whole load: give it without --rate, --concurrency or --trace",
                              where="bench --phases", hint="one load per run: --phases '2/s:120s,16/s:120s,2/s:120s'")
        parse_phases(phases)
        return {"phases": phases, "arrival": parse_arrival(arrival).text()}
    if trace is not None:
        if rate is not None or concurrency_given or arrival_given:
            raise ConfigError("--trace replays the file's own arrivals: give it without --rate, --arrival or "
                              "--concurrency", where="bench --trace")
        return {"trace": trace}
    if parse_arrival(arrival).kind == TRACE:
        raise ConfigError("--arrival trace is what --trace FILE replays; give the file", where="bench --arrival")
    if rate is not None and concurrency_given:
        raise ConfigError("give --rate (open loops) or --concurrency (closed loops), not both", where="bench --rate",
                          hint="one load axis per run: --rate 1,2,4,8 or --concurrency 1,2,4,8")
    if rate is None:
        if arrival_given:
            raise ConfigError("--arrival shapes the arrivals of --rate; give --rate too", where="bench --arrival")
        return {"concurrency": _ints(concurrency, "--concurrency")}
    return {"rate": parse_rates(rate), "arrival": parse_arrival(arrival).text()}


def _load_args(concurrency: str, rate: str | None, arrival: str, trace: str | None,
               phases: str | None = None) -> tuple[tuple[str, str], ...]:
    """The load options of a command line that runs the same sweep again."""
    if phases:
        return (("--phases", phases), ("--arrival", arrival))
    if trace:
        return (("--trace", trace),)
    return (("--rate", rate), ("--arrival", arrival)) if rate is not None else (("--concurrency", concurrency),)


@click.command()
@host_option
@inventory_option
@click.option("--playbook", "-p", type=click.Path(dir_okay=False), help="default playbooks/bench.yaml")
@click.option("--arms", default="baseline,eagle3,adaptive", show_default=True)
@click.option("--concurrency", default="1,2,4,8,16,32,64", show_default=True,
              help="closed loops: requests kept in flight per level")
@click.option("--rate", help="open loops instead of --concurrency: request rates per level, requests/s "
                             "(e.g. 1,2,4,8 or 0.5/s); arrivals come whatever the server's speed")
@click.option("--arrival", default=DEFAULT_ARRIVAL, show_default=True,
              help="with --rate: the arrival process, poisson | constant | gamma:CV (CV > 1 bursty); "
                   "offsets are drawn from --seed, the same for every arm and repeat")
@click.option("--trace", type=click.Path(dir_okay=False),
              help="replay a trace file against every arm instead of levels: JSON lines of timestamp (ms), "
                   "input_length, output_length (the Mooncake format bench_serving replays); the builtin runner")
@click.option("--phases", help="load that changes: request rates one after another, RATE[/s]:DUR[s|m],... e.g. "
                               "'2/s:120s,16/s:120s,2/s:120s', one timeline for every arm; the builtin runner")
@click.option("--repeats", default="3", show_default=True,
              help="a count per point, or auto[:MAX]: at least 2, until the point is settled, at most MAX (5)")
@click.option("--arms-at-once/--one-arm-at-a-time", "arms_at_once", default=None,
              help="measure each point on every arm at once (arms on distinct GPUs), or one arm at a time "
                   "(default: at once where the arms have their own GPUs and the host 2 CPU cores per arm)")
@click.option("--num-prompts", type=int, help="requests per point (default: max(4 x level, 16))")
@click.option("--prompts-per-level", type=int, help="same as --num-prompts, by another name")
@click.option("--input-len", default="256", show_default=True,
              help="input tokens per prompt; a list (256,2048,8192) sweeps context length beside concurrency")
@click.option("--output-len", default="256", show_default=True, help="output tokens per request; a list sweeps too")
@click.option("--dataset", default="random", show_default=True, help="random | sharegpt | PATH")
@click.option("--runner", default="auto", show_default=True, type=click.Choice(["auto", "sglang", "builtin"]),
              help="auto: sglang's bench_serving on SGLang hosts, the builtin client on simulated ones")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--slo", help="latency limits, e.g. ttft_ms=200,tpot_ms=50: goodput and attainment per point "
                            "(default: the hosts' `slo` var)")
@click.option("--objective", default="throughput", show_default=True, type=click.Choice(list(OBJECTIVES)),
              help="what the crossover and threshold compare (goodput needs an SLO)")
@click.option("--gpu-hour-cost", type=float, help="$ per GPU-hour: $ per 1M output tokens per arm and level "
                                                   "(default: the hosts' `gpu_hour_cost` var)")
@click.option("--threshold", type=click.IntRange(min=1),
              help="the adaptive arm's threshold (same as --var arms.adaptive.threshold=N)")
@click.option("--out", type=click.Path(file_okay=False), help="run directory (default runs/<id>)")
@click.option("--resume", type=click.Path(file_okay=False, exists=True), help="a run directory: run only its missing points")
@click.option("--extend", is_flag=True, help="with --resume: --concurrency, --input-len/--output-len and --repeats "
                                              "add levels, lengths or repeats to the run")
@click.option("--json", "as_json", is_flag=True, help="print summary.json (nothing else on stdout)")
@click.option("--keep-servers", is_flag=True, help="leave servers this run launched running")
@click.option("--runs-dir", type=click.Path(file_okay=False))
@var_option
@lease_options
@runtime_option
def bench(host_spec: str, inventory_path: str | None, playbook: str | None, arms: str, concurrency: str,
          rate: str | None, arrival: str, trace: str | None, phases: str | None, repeats: str, arms_at_once: bool | None, num_prompts: int | None, prompts_per_level: int | None, input_len: str, output_len: str,
          dataset: str, runner: str, seed: int, slo: str | None, objective: str, gpu_hour_cost: float | None,
          threshold: int | None, out: str | None, resume: str | None,
          extend: bool, as_json: bool, keep_servers: bool, runs_dir: str | None, var_items: tuple[str, ...],
          wait: bool, wait_timeout: float, take_over: bool, allow_runtime_mismatch: bool) -> None:
    """Sweep arms x load levels (concurrency or request rate) x repeats; report the crossover."""
    ctx = click.get_current_context()
    policy = lease_policy(wait, wait_timeout, take_over)
    rule = parse_repeats(repeats)
    scheduling = "auto" if arms_at_once is None else ("arms-at-once" if arms_at_once else "one-arm-at-a-time")
    settings = {"arms": [a.strip() for a in arms.split(",") if a.strip()],
                **_load_settings(ctx, concurrency, rate, arrival, trace, phases), "repeats": rule.most, "repeats_auto": rule.auto, "scheduling": scheduling, "num_prompts": num_prompts,
                "prompts_per_level": prompts_per_level, "input_len": _lengths(input_len, "--input-len"),
                "output_len": _lengths(output_len, "--output-len"),
                "dataset": dataset, "runner": runner, "seed": seed, "keep_servers": keep_servers,
                "slo": slo, "objective": objective, "gpu_hour_cost": gpu_hour_cost}
    extra_vars = runtime_vars(parse_vars(var_items), allow_runtime_mismatch)
    extra_vars.update({"arms.adaptive.threshold": threshold} if threshold is not None else {})  # --threshold N
    sources = {"repeats_auto": "repeats", "scheduling": "arms_at_once"}  # settings of another option's name
    given = {key: value for key, value in settings.items() if key != "keep_servers"
             and ctx.get_parameter_source(sources.get(key, key)) not in (ParameterSource.DEFAULT, None)}
    common = (("--host", host_spec), ("-i", inventory_path), ("--playbook", playbook),
              ("--allow-runtime-mismatch", allow_runtime_mismatch),
              *(("--var", v) for v in var_items), ("--threshold", threshold), ("--runs-dir", runs_dir))

    def again(run_dir: Path) -> str:
        """`--resume DIR` once the sweep has a manifest; before that, the same sweep into DIR."""
        if (run_dir / "manifest.json").exists():
            added = (("--concurrency", concurrency if "concurrency" in given else None),
                     ("--rate", rate if "rate" in given else None),
                     ("--input-len", input_len if "input_len" in given else None),
                     ("--output-len", output_len if "output_len" in given else None),
                     ("--repeats", repeats if "repeats" in given else None), ("--extend", True)) if extend else ()
            return command_line("bench", *common, ("--resume", str(run_dir)), *added)
        return command_line("bench", *common, ("--arms", arms), *_load_args(concurrency, rate, arrival, trace, phases),
                            ("--repeats", repeats), ("--num-prompts", num_prompts),
                            *((("--arms-at-once" if arms_at_once else "--one-arm-at-a-time", True),)
                              if arms_at_once is not None else ()),
                            ("--prompts-per-level", prompts_per_level), ("--input-len", input_len),
                            ("--output-len", output_len), ("--dataset", dataset), ("--runner", runner),
                            ("--seed", seed), ("--slo", slo), ("--objective", objective if "objective" in given else None),
                            ("--gpu-hour-cost", gpu_hour_cost),
                            ("--keep-servers", keep_servers), ("--out", str(run_dir)))
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
