"""The bench progress bar (render.bar.PointBar) away from a terminal: on a pipe a plain line
per point, and nothing at all when it is not enabled."""

from __future__ import annotations

import io

from rich.console import Console

from specops.records.schema import ResultRecord
from specops.render.bar import PointBar


def test_the_bar_on_a_pipe_prints_a_plain_line_per_point() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    rec = ResultRecord.from_dict({"host": "a", "arm": "baseline", "concurrency": 4, "repeat": 0, "status": "ok",
                                  "output_throughput": 123.4})
    with PointBar(1, console) as on_point:
        on_point(rec)
    assert "a  point baseline c=4 repeat 0: 123.4 tok/s" in out.getvalue()
    quiet = io.StringIO()
    with PointBar(1, Console(file=quiet, force_terminal=False), enabled=False) as on_point:
        on_point(rec)
    assert quiet.getvalue() == ""
