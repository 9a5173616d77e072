"""`specops patch check|apply|revert|detect` on a local SGLang tree."""

from __future__ import annotations

import json
from pathlib import Path

import click

from specops.cli.exits import click_error, exit_with
from specops.errors import ConfigError, SpecopsError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching.applier import BLOCKED, apply, plan, revert
from specops.patching.model import load_patchset
from specops.sglang.layout import detect_layout, layout_summary
from specops.transport.connect import this_machine

_TREE = click.option("--tree", "tree", required=True, type=click.Path(file_okay=False, path_type=Path),
                     help="A local SGLang checkout (the folder holding python/sglang).")


def _files(tree: Path) -> LocalTreeFiles:
    if not (tree / "python" / "sglang").is_dir():
        raise ConfigError(f"{tree}: not an SGLang checkout (no python/sglang folder)", where="--tree")
    return LocalTreeFiles(tree)


def _fail(exc: SpecopsError) -> click.ClickException:
    """The exit policy's error (2 for a bad set or tree, 1 for a set that did not apply),
    also when this group is invoked on its own."""
    return click_error(exc)


@click.group("patch")
def patch() -> None:
    """Syntax-tree anchored patch sets for SGLang trees."""


@patch.command("check")
@click.argument("patchset")
@_TREE
def check_cmd(patchset: str, tree: Path) -> None:
    """Show the diff PATCHSET would make and each edit's status; exit 1 if any is blocked."""
    try:
        ps = load_patchset(patchset)
        p = plan(ps, _files(tree))
    except SpecopsError as exc:
        raise _fail(exc) from exc
    if p.diff:
        click.echo(p.diff, nl=False)
    for r in p.results:
        line = f"{r.edit:<28} {r.status}" + (f": {r.reason}" if r.reason else "")
        click.echo(line, err=False)
    if p.blocked:
        click.echo(f"{len(p.blocked)} edit(s) of {ps.name} blocked; nothing would be changed", err=True)
        exit_with(False)


@patch.command("apply")
@click.argument("patchset")
@_TREE
@click.option("--python", "python", default="python3", show_default=True,
              help="Interpreter for the set's verify commands.")
def apply_cmd(patchset: str, tree: Path, python: str) -> None:
    """Apply PATCHSET to the tree, all or nothing, then run its verify commands."""
    try:
        ps = load_patchset(patchset)
        files = _files(tree)
        with this_machine() as here:  # the tree is on this machine: its verify runs here
            report = apply(ps, files, here, python=python)
    except SpecopsError as exc:
        raise _fail(exc) from exc
    click.echo(report.summary())


@patch.command("revert")
@click.argument("patchset")
@_TREE
def revert_cmd(patchset: str, tree: Path) -> None:
    """Restore every file PATCHSET touched, byte for byte."""
    try:
        ps = load_patchset(patchset)
        report = revert(ps, _files(tree))
    except SpecopsError as exc:
        raise _fail(exc) from exc
    click.echo(report.summary())


@patch.command("detect")
@_TREE
@click.option("--json", "as_json", is_flag=True, help="Print the layout as JSON.")
def detect_cmd(tree: Path, as_json: bool) -> None:
    """Say what the tree contains: version, args layout, EAGLE workers, adaptive support."""
    try:
        layout = detect_layout(_files(tree))
    except SpecopsError as exc:
        raise _fail(exc) from exc
    if as_json:
        click.echo(json.dumps(layout.to_dict(), indent=1))
    else:
        click.echo(layout_summary(layout))


__all__ = ["patch", "BLOCKED"]
