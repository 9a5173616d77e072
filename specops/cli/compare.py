"""`specops compare RUN_DIR RUN_DIR [...]`: runs side by side."""

from __future__ import annotations

import json
from pathlib import Path

import click

from specops.cli.options import console, verbose
from specops.render.fit import Cell, Column, fit_table
from specops.report.compare import compare_runs, to_document, write_comparison


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="write compare.md, compare.json and compare.png here (default: beside the first run)")
@click.option("--allow-different", is_flag=True, help="compare runs whose client settings differ")
@click.option("--json", "as_json", is_flag=True, help="print the comparison as JSON")
def compare(run_dirs: tuple[Path, ...], out: Path | None, allow_different: bool, as_json: bool) -> None:
    """Compare bench runs point by point; * marks differences beyond the run-to-run spread."""
    comp = compare_runs(list(run_dirs), allow_different=allow_different)
    out_dir = out or run_dirs[0].parent / ("compare-" + "-vs-".join(p.name for p in run_dirs))
    written = write_comparison(comp, out_dir)
    if as_json:
        click.echo(json.dumps(to_document(comp), indent=1, sort_keys=True))
        return
    for s in comp.series:
        console.print(f"{s.label}: " + " | ".join(s.headline[:2]), markup=False, highlight=False)
    columns = [Column("c", "right"), Column("arm", shrink=True)] + [Column(label, "right", shrink=True, keep_cells=True)
                                                                    for label in comp.labels]
    rows: list[list[Cell]] = []
    for row in comp.rows:
        cols: list[Cell] = [str(row.concurrency), row.arm]
        for i, (cell, ratio, sig) in enumerate(zip(row.cells, row.ratios, row.significant, strict=True)):
            if cell is None:
                cols.append("-")
            elif i == 0 or ratio is None:
                cols.append(f"{cell.median_tps:.1f}")
            else:
                cols.append(f"{cell.median_tps:.1f} {ratio:.3f}x{' *' if sig else ''}")
        rows.append(cols)
    fit_table(columns, rows, width=console.width, key_columns=2,
              title="output tok/s (ratio to the first run; * beyond the run-to-run spread)").print(console, full=verbose())
    for d in comp.setting_differences:
        console.print(f"warning: settings differ: {d}", markup=False, highlight=False)
    console.print(f"comparison: {written[0]}", markup=False, highlight=False, soft_wrap=True)
