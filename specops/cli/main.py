"""The `specops` group: every command named here, imported when it runs (cli/lazy); the
exit-code policy in cli/exits."""

from __future__ import annotations

import click

from specops import __version__
from specops.cli.lazy import LazyCommand, LazyGroup
from specops.cli.options import NORMAL, QUIET, VERBOSE, VERBOSITY

#: name -> where the command lives and its short help (the first sentence of its docstring).
COMMANDS: dict[str, LazyCommand] = {
    "bench": LazyCommand("specops.cli.bench:bench",
                         "Sweep arms x load levels (concurrency or request rate) x repeats; report the crossover."),
    "calibrate": LazyCommand("specops.cli.calibrate:calibrate",
                             "Fit the simulator's model to a real run: knobs, per-level fit and crossovers; --out FILE."),
    "compare": LazyCommand("specops.cli.compare:compare",
                           "Compare bench runs point by point; * marks differences beyond the run-to-run spread."),
    "demo": LazyCommand("specops.cli.bench:demo",
                        "Deploy and bench on the simulated `local` host: the whole loop, no GPU needed."),
    "deploy": LazyCommand("specops.cli.deploy:deploy",
                          "Run a playbook on hosts: steps in order, hosts in parallel, every step verified."),
    "hosts": LazyCommand("specops.cli.hosts:hosts", "List the inventory; `hosts check` connects and reports."),
    "logs": LazyCommand("specops.cli.servers:logs",
                        "Show and follow server logs, crashes highlighted; several servers are prefixed."),
    "patch": LazyCommand("specops.cli.patch:patch", "Syntax-tree anchored patch sets for SGLang trees."),
    "report": LazyCommand("specops.cli.bench:report",
                          "Re-render report.md, report.html, summary.json, results.csv and plots/ from a run "
                          "directory's files alone (under another objective or SLO with --objective / --slo)."),
    "status": LazyCommand("specops.cli.servers:status",
                          "Per arm: pid, port, state (ready/starting/dead/stopped), uptime, mechanism, command."),
    "stop": LazyCommand("specops.cli.servers:stop",
                        "Stop servers: TERM the process group, KILL after a grace period, wait for the port."),
    "tune": LazyCommand("specops.cli.tune:tune",
                        "Find the adaptive arm's threshold from the server's running batch, verify it, and "
                        "(--write) put it into hosts.yaml."),
    "verify": LazyCommand("specops.cli.verify:verify",
                          "Check a deployed host: greedy token identity across the arms, drafting off above the "
                          "threshold."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specops")
@click.option("--quiet", "-q", is_flag=True, help="only errors and the final result lines")
@click.option("--verbose", "-v", is_flag=True, help="full values in tables; every command a step runs")
@click.pass_context
def main(ctx: click.Context, quiet: bool, verbose: bool) -> None:
    """Speculative-decoding experiments on GPU hosts, step by verified step."""
    if quiet and verbose:
        raise click.UsageError("-q and -v contradict each other; give one")
    ctx.meta[VERBOSITY] = QUIET if quiet else VERBOSE if verbose else NORMAL
