"""The `specops` group: every command registered here, the exit-code policy in cli/exits."""

from __future__ import annotations

import click

from specops import __version__
from specops.cli.bench import bench, demo, report
from specops.cli.compare import compare
from specops.cli.deploy import deploy
from specops.cli.exits import SpecopsGroup
from specops.cli.hosts import hosts
from specops.cli.options import NORMAL, QUIET, VERBOSE, VERBOSITY
from specops.cli.patch import patch
from specops.cli.servers import logs, status, stop
from specops.cli.tune import tune


@click.group(cls=SpecopsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specops")
@click.option("--quiet", "-q", is_flag=True, help="only errors and the final result lines")
@click.option("--verbose", "-v", is_flag=True, help="full values in tables; every command a step runs")
@click.pass_context
def main(ctx: click.Context, quiet: bool, verbose: bool) -> None:
    """Speculative-decoding experiments on GPU hosts, step by verified step."""
    if quiet and verbose:
        raise click.UsageError("-q and -v contradict each other; give one")
    ctx.meta[VERBOSITY] = QUIET if quiet else VERBOSE if verbose else NORMAL


for _command in (deploy, hosts, bench, report, compare, demo, logs, status, stop, patch, tune):
    main.add_command(_command)
