"""The bench's progress bar: it fills as points are written (one callback per point)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from specops.records.schema import ResultRecord, level_text
from specops.render.progress import plain, point_line
from specops.run.state import PointCallback


class PointBar:
    """A rich progress bar that fills as points are written (one callback per point); on a
    pipe, a plain line per point; nothing when not `enabled`. Entering gives the callback."""

    def __init__(self, total: int, console: Console, enabled: bool = True):
        self.total, self.console, self.enabled = total, console, enabled

    def __enter__(self) -> PointCallback:
        console = self.console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn(), console=console, transient=True,
                                 disable=not console.is_terminal or not self.enabled)
        self.progress.__enter__()
        self.task = self.progress.add_task("sweep", total=self.total)

        def on_point(rec: ResultRecord) -> None:
            if not self.enabled:
                return
            if not console.is_terminal:  # a pipe: one plain line per point, as it is written
                plain(console, point_line(rec))
                return
            tput = rec.output_throughput
            desc = (f"{rec.host} {rec.arm} {level_text(rec)} r={rec.repeat}: "
                    + (f"{tput:.0f} tok/s" if isinstance(tput, (int, float)) else str(rec.status)))
            self.progress.update(self.task, advance=1, description=desc)

        return on_point

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)
