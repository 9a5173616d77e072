"""Tables that fit the console (80 columns on a pipe): long values (paths, commands, run
names) are shortened in the middle, where they differ least, instead of being folded
into ribbons; `specops -v` lists each shortened value in full below the table.

Cells are plain strings (never parsed as markup, so a `[` in a path is shown as written)
or rich `Text` for short styled values, which are never shortened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from specops.secrets import mask_text

ELLIPSIS = "…"
#: No column is shortened below this (or its natural width, when that is less).
MIN_WIDTH = 10

Cell = str | Text


def middle(text: str, width: int) -> str:
    """`/home/me/wor…/sglang/hosts.yaml`: both ends kept, an ellipsis between."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


@dataclass
class Column:
    """`shrink`: the column may be shortened to fit (paths, names: in the middle);
    `keep_cells`: only its header may (numbers under a long run name); `head`: keep the
    start instead (a command line's first flags say the most)."""

    header: str
    justify: JustifyMethod = "left"
    shrink: bool = False
    keep_cells: bool = False
    head: bool = False


@dataclass
class Fitted:
    """The table, and `key column: value` for each value it shows shortened."""

    table: Table
    shortened: list[str] = field(default_factory=list)
    fits: bool = True

    def print(self, console: Console, *, full: bool = False) -> None:
        """The table; with `full`, then each shortened value in full (one line, unwrapped)."""
        console.print(self.table)
        if full:
            for line in self.shortened:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        elif self.shortened:
            console.print(f"{ELLIPSIS} shortened to fit; `specops -v` shows full values", markup=False,
                          highlight=False)


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], *, width: int, title: str | None = None,
              key_columns: int = 1, key_prefix: str = "") -> Fitted:
    """A rich Table (default box, one space of padding) no wider than `width`: the widest
    shrinkable column loses a character at a time until the table fits; its cells and
    header are then shortened in the middle. The first `key_columns` cells name a row in
    the `shortened` lines, after `key_prefix` (what the title says, e.g. the one host).
    Text cells are masked first: a secret cut in the middle no longer matches the mask."""
    rows = [[mask_text(c) if isinstance(c, str) else c for c in row] for row in rows]
    natural = [max([cell_len(c.header)] + [cell_len(_plain(r[i])) for r in rows]) for i, c in enumerate(columns)]
    widths = list(natural)
    overhead = 3 * len(columns) + 1  # a space each side of every cell, a rule between and around
    widest_cell = [max([0] + [cell_len(_plain(r[i])) for r in rows]) for i in range(len(columns))]
    floor = [(max(min(n, MIN_WIDTH), widest_cell[i]) if c.keep_cells else min(n, MIN_WIDTH)) if c.shrink else n
             for i, (n, c) in enumerate(zip(natural, columns, strict=True))]
    while sum(widths) + overhead > width:
        candidates = [i for i in range(len(columns)) if widths[i] > floor[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
    # at least as wide as its title (a narrow table wraps a run id over three lines)
    table = Table(title=title, title_justify="left", min_width=min(cell_len(title), width) if title else None)
    for col, w in zip(columns, widths, strict=True):
        table.add_column(middle(col.header, w), justify=col.justify, no_wrap=col.shrink,
                         overflow="ellipsis")
    shortened: list[str] = []
    for row in rows:
        cells: list[Cell] = []
        for i, (cell, w) in enumerate(zip(row, widths, strict=True)):
            if isinstance(cell, str) and cell_len(cell) > w and columns[i].shrink and not columns[i].keep_cells:
                key = key_prefix + " ".join(_plain(c) for c in row[:key_columns])
                shortened.append(f"{key} {columns[i].header}: {cell}")
                cell = cell[:w - 1] + ELLIPSIS if columns[i].head else middle(cell, w)
            cells.append(Text(cell) if isinstance(cell, str) else cell)
        table.add_row(*cells)
    return Fitted(table, shortened, fits=sum(widths) + overhead <= width)
