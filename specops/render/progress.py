"""Terminal rendering for runs: live progress while hosts work, then the summary and the
one-line failures. Kept out of the engine so the engine runs without a terminal."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, get_args

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specops.records.schema import STATUS_FAILED, ResultRecord, level_text
from specops.render.fit import Cell, Column, fit_table
from specops.run import events
from specops.run.engine import CHANGED, FAILED, NOT_RUN, OK, SKIPPED, WOULD_RUN, Engine, HostReport, Phase, RunReport
from specops.secrets import mask_text

_PHASE_WORDS = tuple(f"{phase} failed" for phase in get_args(Phase))
STYLE = {OK: "green", CHANGED: "yellow", SKIPPED: "cyan", FAILED: "bold red", NOT_RUN: "dim", WOULD_RUN: "blue"}
MANY_HOSTS = 24


def progress_table(engine: Engine) -> Table:
    """A line per host (current step, elapsed); with many hosts, a line per state plus failures."""
    reports = list(engine.reports.values())
    now = time.monotonic()
    table = Table(box=None, show_header=False, pad_edge=False)
    if len(reports) > MANY_HOSTS:
        counts: dict[str, int] = {}
        for r in reports:
            state = "failed" if not r.ok else ("done" if r.current == "done" else
                                               "running" if r.started else "waiting")
            counts[state] = counts.get(state, 0) + 1
        order = ("done", "running", "waiting", "failed")
        table.add_row(Text(" · ".join(f"{counts[state]} {state}" for state in order if state in counts)))
        for r in reports:
            if not r.ok:
                table.add_row(Text.assemble((f"✗ {r.host}", "red"), f": {mask_text(_failure_brief(engine, r))}"))
        return table
    for r in reports:  # Text, not markup: a print while the view is up renders it with markup off
        elapsed = f"{now - r.started:5.1f}s" if r.started else "   -  "
        mark = Text("✗", "red") if not r.ok else (Text("✓", "green") if r.current == "done" else Text("…", "yellow"))
        # masked here: the table crops a long cell, and a cropped secret no longer matches the stream's mask
        table.add_row(mark, Text(r.host), Text(mask_text(r.current or "waiting")), Text(elapsed))
    return table


def _failure_brief(engine: Engine, r: HostReport) -> str:
    """What a failed host's line says in the many-hosts view: the step and its first detail line."""
    if r.failed_step is None:
        return (r.error or r.current).splitlines()[0] if (r.error or r.current) else "failed"
    detail = r.steps[r.failed_step].detail.strip().splitlines()
    return f"step {r.failed_step + 1} {engine.playbook.steps[r.failed_step].name}: {detail[0] if detail else 'failed'}"


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def plain(console: Console, line: str) -> None:
    """One line as it is, no markup, no wrapping, flushed at once (a pipe is block-buffered)."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.file.flush()


def warning_text(ev: events.Warn, host: bool = True) -> str:
    """`warning: HOST: STEP: message`, the one wording of a run's warning wherever it is shown."""
    where = (f"{ev.host}: " if host else "") + (f"{ev.step}: " if ev.step else "")
    return f"warning: {where}{ev.message}"


def warning_lines(report: RunReport) -> list[str]:
    """Every warning the run's hosts recorded, in order, one line each."""
    return [warning_text(w) for h in report.hosts for w in h.warnings]


def warning_count(report: RunReport) -> str:
    """', 2 warnings' (empty without any): the outcome line's tail."""
    n = sum(len(h.warnings) for h in report.hosts)
    return f", {n} warning{'s' if n != 1 else ''}" if n else ""


def outcome_line(report: RunReport) -> str:
    """`deploy: ok, 2 warnings`: under the summary table, where the eye lands."""
    failed = [h.host for h in report.hosts if not h.ok]
    outcome = f"failed on {', '.join(failed)}" if failed else "ok"
    return f"{report.playbook.name}: {outcome}{warning_count(report)}"


def step_line(engine: Engine, ev: events.Event) -> str | None:
    """The plain line for a journal event that finishes a step (or a host), or a warning, else None."""
    word: str
    if isinstance(ev, events.Warn):
        return f"{stamp()}  {ev.host}  {warning_text(ev, host=False)}"
    if isinstance(ev, events.Fail) and ev.step_index is None:
        lines = ev.error.strip().splitlines() or [""]
        first = lines[-1] if lines[0].startswith("Traceback") else lines[0]
        return f"{stamp()}  {ev.host}  {first if ev.phase else f'{FAILED}: {first}'}"
    if isinstance(ev, events.Lease):  # --wait: whom the run waits for
        return f"{stamp()}  {ev.host}  {ev.message}"
    index: int
    if isinstance(ev, (events.Done, events.Skip, events.CheckPreview)):
        index = ev.step_index
    elif isinstance(ev, events.Fail) and ev.step_index is not None:
        index = ev.step_index
    else:
        return None
    step = engine.playbook.steps[index]
    status = engine.reports[ev.host].steps[index] if ev.host in engine.reports else None
    if isinstance(ev, events.Done):
        word = "ok, failure ignored" if ev.ignored_failure else (CHANGED if ev.changed else OK)
    elif isinstance(ev, events.Skip):
        word = f"{SKIPPED}: {ev.reason}" if ev.reason != "when" else f"{SKIPPED}: when is false"
    elif isinstance(ev, events.CheckPreview):
        word = status.status if status and status.status else WOULD_RUN
        if status and status.detail and word != WOULD_RUN:
            word += f": {status.detail}"
    else:  # the error names the phase that failed ("apply failed: ..."); an internal error does not
        head = (ev.error.strip().splitlines() or [""])[0]
        word = head if ev.phase else f"{FAILED}: {head}"
    return f"{stamp()}  {ev.host}  {index + 1}/{len(engine.playbook.steps)} {step.name}: {word}"


def point_line(rec: ResultRecord) -> str:
    """The plain line for one benchmark point."""
    tput = rec.output_throughput
    what = f"{tput:.1f} tok/s" if isinstance(tput, (int, float)) and rec.status != STATUS_FAILED else (
        f"{rec.status}: {rec.error}" if rec.error else str(rec.status))
    return (f"{stamp()}  {rec.host}  point {rec.arm} {level_text(rec)} "
            f"repeat {rec.repeat}: {what}")


def command_line(ev: events.Event) -> str | None:
    """The plain line for a journal event that records a command (`specops -v`), else None."""
    if not isinstance(ev, events.Command):
        return None
    return (f"{stamp()}  {ev.host}  {ev.step or '-'}: $ {ev.command}"
            f"  (rc {ev.rc}, {ev.duration_s:.1f}s{', probe' if ev.probe else ''})")


def result_line(report: RunReport) -> str:
    """`specops -q`'s one line for a finished run."""
    return (f"{outcome_line(report)} ({len(report.hosts)} host{'s' if len(report.hosts) != 1 else ''}); "
            f"run directory: {report.run_dir}")


@contextmanager
def live_progress(engine: Engine, console: Console, enabled: bool = True, commands: bool = False) -> Iterator[None]:
    """On a terminal, the live view, with each warning printed above it as it comes; on a
    pipe, one plain timestamped line per finished step and per warning. `commands`
    (`specops -v`): also a line per command a step runs, as it ends."""
    if not enabled:
        yield
        return
    before = engine.on_event

    def listen(ev: events.Event) -> None:
        if before:
            before(ev)
        line = command_line(ev) if commands else None
        if line is None and not console.is_terminal:
            line = step_line(engine, ev)
        elif line is None and isinstance(ev, events.Warn):
            line = warning_text(ev)  # above the live view, which stays below it
        if line:
            plain(console, line)

    engine.on_event = listen
    if not console.is_terminal:
        try:
            yield
        finally:
            engine.on_event = before
        return
    stop = threading.Event()
    with Live(progress_table(engine), console=console, refresh_per_second=4, transient=True) as live:
        def refresh() -> None:
            while not stop.wait(0.25):
                live.update(progress_table(engine))

        thread = threading.Thread(target=refresh, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            engine.on_event = before


def summary_table(report: RunReport, width: int = 80) -> Table:
    """A row per step, a column per host (names shortened to fit `width`); when the hosts
    do not fit side by side, a row per step counting the hosts in each status instead (a
    host-by-step grid of 32+ rows folds into noise)."""
    if len(report.hosts) <= MANY_HOSTS:
        columns = [Column("step", shrink=True)] + [Column(h.host, shrink=True, keep_cells=True) for h in report.hosts]
        rows: list[list[Cell]] = []
        for i, step in enumerate(report.playbook.steps):
            rows.append([f"{i + 1}. {step.name}", *[Text(h.steps[i].status, style=STYLE.get(h.steps[i].status, ""))
                                                     if i < len(h.steps) else "" for h in report.hosts]])
        fitted = fit_table(columns, rows, width=width, title=f"{report.playbook.name} · run {report.run_id}")
        if fitted.fits:
            return fitted.table
    return step_counts_table(report)


def step_counts_table(report: RunReport) -> Table:
    """Per step, how many hosts ended in each status (failed hosts follow as failure lines)."""
    statuses = [st for st in (CHANGED, OK, SKIPPED, FAILED, NOT_RUN, WOULD_RUN)
                if any(h.steps[i].status == st for h in report.hosts for i in range(len(h.steps)))]
    table = Table(title=f"{report.playbook.name} · run {report.run_id}", title_justify="left")
    table.add_column(f"step ({len(report.hosts)} hosts)", overflow="fold")
    for st in statuses:
        table.add_column(st, justify="right")
    for i, step in enumerate(report.playbook.steps):
        cells = []
        for st in statuses:
            n = sum(1 for h in report.hosts if i < len(h.steps) and h.steps[i].status == st)
            cells.append(f"[{STYLE.get(st, '')}]{n}[/]" if n else "[dim]·[/]")
        table.add_row(f"{i + 1}. {escape(step.name)}", *cells)
    return table


def failure_lines(report: RunReport) -> list[str]:
    """One line per failed host: which step, the phase that failed and what it saw, where the output is."""
    lines = []
    events = report.run_dir / "events.jsonl"
    for host in report.hosts:
        if host.ok:
            continue
        if host.failed_step is None:
            lines.append(f"{host.host}: {host.error}")
            continue
        step = report.playbook.steps[host.failed_step]
        detail = host.steps[host.failed_step].detail.strip().splitlines()
        first = detail[0] if detail else "failed"
        if not first.startswith(_PHASE_WORDS):  # an internal error: no phase to name
            first = f"failed: {first}"
        lines.append(f"{host.host}: {step.label} ({step.kind}): {first} — full output: {events}")
    return lines


def print_check(report: RunReport, console: Console) -> None:
    for host in report.hosts:
        console.print(f"[bold]{escape(host.host)}[/] (check mode: nothing changed)")
        if host.error:
            console.print(f"  [red]{escape(host.error)}[/]")
        for i, st in enumerate(host.steps):
            step = report.playbook.steps[i]
            console.print(f"  {i + 1}. {escape(step.name)} {escape(f'[{step.kind}]')} — {st.status}"
                          + (f": {escape(st.detail)}" if st.detail and st.status != WOULD_RUN else ""))
            for cmd in st.commands:
                for line in str(cmd).splitlines() or [""]:
                    console.print(f"      {escape(line)}", highlight=False, soft_wrap=True)
