"""render/fit: tables within a width, long values shortened in the middle and listed in full."""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from specops.render.fit import Column, fit_table, middle


def test_middle_keeps_both_ends() -> None:
    assert middle("/home/me/work/sglang/hosts.yaml", 16) == "/home/me…ts.yaml"
    assert cell_len(middle("x" * 100, 16)) == 16 and middle("short", 16) == "short"


def test_a_table_of_long_values_fits_and_says_what_it_shortened() -> None:
    path, args = "/srv/" + "deep/" * 30 + "hosts.yaml", "--speculative-num-steps 3 " * 10
    columns = [Column("host"), Column("state"), Column("path", shrink=True), Column("args", shrink=True)]
    fitted = fit_table(columns, [["gpu-a", Text("ready", style="green"), path, args], ["gpu-b", "dead", "/w", "-"]],
                       width=80, key_columns=1)
    console = Console(width=80, record=True, file=io.StringIO())
    fitted.print(console, full=True)
    text = console.export_text()
    table = [line for line in text.splitlines() if not line.startswith("gpu-a ")]
    assert fitted.fits and len(table) == 6 and all(cell_len(line) <= 80 for line in table), text
    assert fitted.shortened == [f"gpu-a path: {path}", f"gpu-a args: {args}"]
    assert f"gpu-a path: {path}" in text.splitlines() and "/w" in text
