"""`specops logs`, `specops status`, `specops stop`: the servers on hosts, from their state files."""

from __future__ import annotations

import posixpath
import shlex
import threading
import time
from collections.abc import Iterable
from typing import Any

import click
from rich.text import Text

from specops.cli.exits import exit_with
from specops.cli.options import console, host_option, inventory_option
from specops.cli.options import verbose as verbose_output
from specops.config.inventory import Host, load_inventory
from specops.config.schema import suggest
from specops.engines import engine_for, engine_of
from specops.errors import ConfigError
from specops.render.fit import Cell, Column, fit_table
from specops.render.logs import LogSource, collect, show, sources_for
from specops.secrets import dumps_masked, remember_sources
from specops.servers import read_states, stop_arms, supervisor_for
from specops.servers.lease import Lease, holders
from specops.servers.lifecycle import ArmStatus, launched_before_boot
from specops.transport.connect import open_transport


def _hosts(inventory_path: str | None, host_spec: str) -> list[Host]:
    return load_inventory(inventory_path).select(host_spec)


def _arms(value: str | None) -> list[str] | None:
    return [a.strip() for a in value.split(",") if a.strip()] if value else None


def check_arm_names(asked: list[str] | None, known: Iterable[str], host: str) -> None:
    """An arm the host never ran is a typo until proven otherwise: say so, with the arms
    that exist, before anything is read or stopped."""
    known = sorted(known)
    for arm in asked or []:
        if arm not in known:
            raise ConfigError(f"no arm '{arm}' on {host}{suggest(arm, known)}; arms there: "
                              f"{', '.join(known) or 'none (nothing launched yet)'}")


def _with_engines(sources: list[LogSource], host: Host) -> list[LogSource]:
    """Each arm's log read as the engine that launched it says (its state file's), the host's
    engine for an arm without one: the accept length `logs` shows is that engine's line."""
    states = read_states(sources[0].transport, host.workdir) if sources else {}
    for src in sources:
        st = states.get(src.arm)
        src.metrics = (engine_of(st.argv, st.engine) if st else engine_for(host)).metrics
    return sources


@click.command()
@host_option
@inventory_option
@click.option("--server", "-s", "server", help="arm name(s), comma separated (default: all)")
@click.option("--follow", "-f", is_flag=True, help="stream new lines until Ctrl-C")
@click.option("--lines", "-n", default=50, show_default=True, type=click.IntRange(min=0), help="last N lines")
@click.option("--errors", is_flag=True, help="only the crash blocks (tracebacks and the like)")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON document {host: {arm: {path, lines, crashes, accept_length, accept_lines}}}; "
                   "with -f, a JSON object per line")
def logs(host_spec: str, inventory_path: str | None, server: str | None, follow: bool, lines: int, errors: bool,
         as_json: bool) -> None:
    """Show and follow server logs, crashes highlighted; several servers are prefixed.

    After each arm's lines, the accept length its log shows (its engine's last spec-decode
    line's, and how many there are)."""
    hosts = _hosts(inventory_path, host_spec)
    for host in hosts:  # a server may log a token it was given: shown masked, as every output is
        remember_sources(host.secrets.values())
    transports = [open_transport(h) for h in hosts]
    try:
        sources = []
        for host, transport in zip(hosts, transports, strict=True):
            present = sources_for(transport, host.workdir, None, host_prefix=len(hosts) > 1)
            check_arm_names(_arms(server), [posixpath.basename(s.path)[:-4] for s in present], host.name)
            sources += _with_engines(sources_for(transport, host.workdir, _arms(server), host_prefix=len(hosts) > 1),
                                     host)
        if not sources:
            raise ConfigError(f"no server logs on {', '.join(h.name for h in hosts)} (nothing launched yet?)")
        if as_json and not follow:
            click.echo(dumps_masked(collect(sources, lines=lines, errors_only=errors), indent=1))
            return
        stop = threading.Event()
        failure: list[BaseException] = []

        def work() -> None:
            try:
                show(sources=sources, lines=lines, follow=follow, errors_only=errors, console=console,
                     stop_event=stop, json_lines=as_json)
            except Exception as exc:  # noqa: BLE001 - re-raised in the main thread, as one line
                failure.append(exc)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            stop.set()
            worker.join(3)
        if failure:
            raise failure[0]
    finally:
        for t in transports:
            t.close()


@click.command()
@host_option
@inventory_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--verbose", "-v", is_flag=True, help="show each server's full command (as `specops -v status`)")
def status(host_spec: str, inventory_path: str | None, as_json: bool, verbose: bool) -> None:
    """Per arm: pid, port, state (ready/starting/dead/stopped), uptime, mechanism, command."""
    rows = {}
    rebooted: dict[str, set[str]] = {}
    held: dict[str, dict[str, list[Lease]]] = {}
    for each in _hosts(inventory_path, host_spec):
        with open_transport(each) as transport:
            rows[each.name] = supervisor_for(each).status(transport, each.workdir)
            held[each.name] = holders(transport, each.workdir)
            gone = [s.arm for s in rows[each.name] if s.state == "dead" and not s.job_id]
            rebooted[each.name] = launched_before_boot(transport, each.workdir, gone)
    if as_json:
        console.print_json(dumps_masked({h: [{**vars(s), "leases": [_lease_doc(x) for x in held[h].get(s.arm, [])]}
                                             for s in st] for h, st in rows.items()}))
        return
    jobs = any(s.job_id for st in rows.values() for s in st)
    full = verbose or verbose_output()
    one = next(iter(rows)) if len(rows) == 1 else None  # one host: named in the title, not on every row
    columns = [Column("arm", shrink=True), Column("state"), Column("pid"), Column("port"), Column("uptime"),
               Column("mechanism", shrink=True), Column("args", shrink=True, head=True)]
    if one is None:
        columns.insert(0, Column("host", shrink=True))
    if jobs:  # a Slurm host: job id, its state (and why it waits), node, GPU indices, time left
        columns.append(Column("job", shrink=True))
    colors = {"ready": "green", "starting": "yellow", "dead": "bold red", "stopped": "dim"}
    cells: list[list[Cell]] = []
    for host, statuses in rows.items():
        lead: list[Cell] = [] if one is not None else [host]
        if not statuses:
            cells.append([*lead, "-", Text("no servers", style="dim"), "", "", "", "", "", *([""] if jobs else [])])
        for s in statuses:
            uptime = f"{s.uptime_s:.0f}s" if s.uptime_s is not None else ""
            cells.append([*lead, s.arm, Text(s.state, style=colors.get(s.state, "")), str(s.pid or ""),
                          str(s.port or ""), uptime, s.mechanism or "",
                          (s.command or "") if full else _short_args(s.command or ""),
                          *([job_cell(s)] if jobs else [])])
    fit_table(columns, cells, width=console.width, title="servers" if one is None else f"servers on {one}",
              key_columns=1 if one is not None else 2, key_prefix=f"{one} " if one is not None else "",
              ).print(console, full=full)
    for host, arms in held.items():  # a shared host: who is benchmarking on which server now
        for arm, leases in sorted(arms.items()):
            for lease in leases:
                console.print(f"{host}: {arm} in use by {lease.who()}", markup=False, highlight=False)
    dead = [(h, s) for h, st in rows.items() for s in st if s.state == "dead"]
    for host, s in dead:
        console.print(_gone_line(host, s, s.arm in rebooted.get(host, set())), markup=False, highlight=False)
    if dead:
        exit_with(False)


def _lease_doc(lease: Lease) -> dict[str, Any]:
    return {"run_id": lease.run_id, "user": lease.user, "cli_host": lease.cli_host, "pid": lease.pid,
            "since": lease.since, "args_hash": lease.args_hash}


def _gone_line(host: str, s: ArmStatus, rebooted: bool) -> str:
    """Why a dead arm is dead, as far as the host can tell, and what brings it back."""
    what = f"job {s.job_id}" if s.job_id else f"pid {s.pid} not running"
    if rebooted:
        return (f"{host}: {s.arm} is gone ({what}; the host rebooted since its launch): "
                f"`specops bench` or `specops deploy` launches it again")
    return (f"{host}: {s.arm} is dead ({what}: it crashed or was killed): "
            f"`specops logs --host {host} --server {s.arm} --errors` shows why")


def job_cell(s: ArmStatus) -> str:
    """`12 RUNNING on node1 gpus 0,1 left 0:59:10`, or `13 PENDING (Resources)`."""
    if not s.job_id:
        return ""
    out = f"{s.job_id} {s.job_state or '?'}"
    if s.reason and s.reason != "None":
        out += f" ({s.reason})"
    if s.node:
        out += f" on {s.node}"
    if s.gpus:
        out += f" gpus {','.join(str(g) for g in s.gpus)}"
    if s.time_left_s is not None:
        h, rem = divmod(int(s.time_left_s), 3600)
        out += f" left {h}:{rem // 60:02d}:{rem % 60:02d}"
    return out


def _short_args(command: str) -> str:
    """The flags that tell arms apart, speculative ones first (a narrow column shows its
    start), not the whole command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    keep = False
    spec: list[str] = []
    other: list[str] = []
    target = other
    for w in words:
        if w.startswith("--"):
            keep = w.startswith(("--speculative", "--max-running", "--cuda-graph"))
            target = spec if w.startswith("--speculative") else other
        if keep:
            target.append(w)
    return " ".join(spec + other) or "(no speculation)"


@click.command()
@host_option
@inventory_option
@click.option("--server", "-s", "server", help="arm name(s), comma separated (default: all)")
@click.option("--json", "as_json", is_flag=True, help="print what was stopped as JSON")
def stop(host_spec: str, inventory_path: str | None, server: str | None, as_json: bool) -> None:
    """Stop servers: TERM the process group, KILL after a grace period, wait for the port."""
    failed = False
    stopped: dict[str, list[dict[str, Any]]] = {}
    for host in _hosts(inventory_path, host_spec):
        with open_transport(host) as transport:
            t0 = time.monotonic()
            check_arm_names(_arms(server), read_states(transport, host.workdir), host.name)
            results = stop_arms(transport, host.workdir, _arms(server))
        stopped[host.name] = [vars(r) for r in results]
        failed |= any(not r.port_free or r.gpu_released is False for r in results)
        if as_json:
            continue
        if not results:
            console.print(f"{host.name}: nothing to stop", markup=False)
        for r in results:
            note = "stopped" if r.was_running else "was not running"
            port = "port free" if r.port_free else f"PORT {r.port} STILL IN USE"
            gpu = "" if r.gpu_released is None else (", GPU memory released" if r.gpu_released else ", GPU MEMORY STILL HELD")
            what = f"job {r.job_id}" if r.job_id else f"pid {r.pid}"
            console.print(f"{host.name}: {r.arm} ({what}) {note}{' with ' + r.signal if r.signal else ''}; "
                          f"{port}{gpu} [{time.monotonic() - t0:.1f}s]", markup=False)
    if as_json:
        click.echo(dumps_masked({"ok": not failed, "hosts": stopped}, indent=1))
    exit_with(not failed)
