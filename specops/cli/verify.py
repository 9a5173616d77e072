"""`specops verify`: the acceptance check on a deployed host; bench/acceptance measures,
decide/verify judges, report/verify words the report, flows/verify_run opens the connection
and writes the files; this module parses, calls and prints the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.text import Text

from specops.bench.acceptance import DEFAULT_RESUME_STEPS
from specops.cli.exits import exit_with
from specops.cli.options import console, host_option, inventory_option
from specops.flows.verify_run import verify_host


@click.command()
@host_option
@inventory_option
@click.option("--prompts", default=3, show_default=True, type=click.IntRange(min=1),
              help="prompts sent alone (concurrency 1); threshold+2 more go at once")
@click.option("--max-new-tokens", default=8, show_default=True, type=click.IntRange(min=1),
              help="greedy tokens per prompt")
@click.option("--resume-steps", default=DEFAULT_RESUME_STEPS, show_default=True, type=click.IntRange(min=1),
              help="the adaptive arm's decode steps read right after drafting resumes")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="the report file (default runs/<id>/verify.md beside the inventory)")
@click.option("--json", "as_json", is_flag=True, help="print the verdicts as one JSON document")
def verify(host_spec: str, inventory_path: str | None, prompts: int, max_new_tokens: int, resume_steps: int,
           out: Path | None, as_json: bool) -> None:
    """Check a deployed host: greedy token identity across the arms, drafting off above the threshold."""
    done = verify_host(inventory_path, host_spec, prompts=prompts, max_new_tokens=max_new_tokens,
                       resume_steps=resume_steps, out=out)
    result, doc = done.result, done.doc
    if as_json:
        click.echo(json.dumps(doc, indent=1))
    else:
        for c in result.checks:
            style = {"PASS": "green", "FAIL": "bold red"}.get(c.verdict, "yellow")
            console.print(Text.assemble((c.verdict, style), f" {c.name}: {c.detail}"), highlight=False)
            if c.ok is False:
                for line in c.evidence[:6]:
                    console.print(f"  {line}", markup=False, highlight=False)
        console.print(f"{done.host}: {'all checks passed' if result.ok else 'FAILED: ' + ', '.join(result.failed)}"
                      f"; report: {done.report}", markup=False, highlight=False)
    exit_with(result.ok)
