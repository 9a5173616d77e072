"""Runs a playbook's steps across hosts: hosts in parallel (bounded), steps in order per host.

Each step: describe (--check) -> already verified? skip -> apply -> verify (retries) ->
on failure: rollback, stop that host. Everything that happens goes to the journal.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, TypedDict

from specops.config.inventory import Host, Inventory
from specops.config.playbook import Playbook, Step
from specops.config.schema import suggest
from specops.config.templating import evaluate, is_false, names_in, render, render_tree
from specops.data import is_shipped
from specops.errors import ConfigError, SpecopsError
from specops.hostfiles import paths
from specops.run import events
from specops.run.journal import Journal, new_run_id, typed_events
from specops.run.state import Cleanup, PointCallback, Run
from specops.secrets import env_file_text
from specops.servers.arms import ArmOverrides
from specops.servers.lease import LeaseBook, LeasePolicy
from specops.steps import KINDS
from specops.steps.base import PROBE, Outcome, StepContext, check_user_verify, has_state_checks
from specops.transport.base import Transport
from specops.transport.connect import open_transport

#: how often the main thread, waiting for the hosts, looks for a Ctrl-C (Python runs signal
#: handlers in the main thread only, and a process's SIGINT may be handed to any thread)
SIGNAL_CHECK_S = 0.2

#: What happened to a step on a host (the words the summary table and --json show).
StepState = Literal["ok", "changed", "skipped", "failed", "not run", "would run"]
OK: StepState = "ok"
CHANGED: StepState = "changed"
SKIPPED: StepState = "skipped"
FAILED: StepState = "failed"
NOT_RUN: StepState = "not run"
#: why a host's steps did not run when the run stopped scheduling them
FATAL_REASON = "not run: another host failed (any_errors_fatal)"
INTERRUPTED_REASON = "not run: interrupted"
WOULD_RUN: StepState = "would run"

#: Where a host or step failed, named first on its failure line and as the `phase` of its
#: `fail` event: reaching the host (connect), getting it ready for the steps (prepare: the
#: workdir, the secrets file), a step's read-only probes (check: is_done), its apply, its
#: verification, and the undo after a failure (rollback).
Phase = Literal["connect", "prepare", "check", "apply", "verify", "rollback"]


def failure_text(phase: Phase, seen: str, tries: int = 1) -> str:
    """`apply failed: ...`, `verify failed (3 tries): ...`: the phase, then what was seen."""
    return f"{phase} failed{f' ({tries} tries)' if tries > 1 else ''}: {seen}"


def _seen(exc: SpecopsError) -> str:
    return exc.message if exc.where is None else str(exc)


@dataclass
class StepStatus:
    status: StepState = NOT_RUN
    detail: str = ""
    duration_s: float = 0.0
    commands: list[str] = field(default_factory=list)


@dataclass
class HostReport:
    host: str
    steps: list[StepStatus]
    failed_step: int | None = None
    error: str = ""
    current: str = ""
    started: float = 0.0
    #: the host's warnings as the journal recorded them: the summary, -q and --json show them
    warnings: list[events.Warn] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed_step is None and not self.error


@dataclass
class RunReport:
    run_id: str
    run_dir: Path
    playbook: Playbook
    hosts: list[HostReport]
    check: bool = False

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)


def default_runs_dir(inventory_path: Path) -> Path:
    """runs/ beside the inventory; ./runs when the inventory is the one shipped in the package."""
    if is_shipped(inventory_path):
        return Path.cwd() / "runs"
    return inventory_path.absolute().parent / "runs"


def default_forks(n_hosts: int) -> int:
    """Like Ansible's forks, sized to the work: threads mostly wait on the network."""
    return max(1, min(n_hosts, 32, 8 * (os.cpu_count() or 2)))


def resolve_vars(inventory: Inventory, playbook: Playbook, host: Host, extra: dict[str, Any],
                 workdir: str) -> dict[str, Any]:
    """Playbook vars < inventory < group < host < --var: a playbook's `vars` are defaults, so a
    key the user set in hosts.yaml (`vllm_version`, `sglang_ref`, `sglang_dir`, ...) is used,
    never silently replaced by the playbook's value, and --var wins everywhere.

    A playbook var the user or --var set is not rendered at all (a mapping merges key by key,
    theirs winning); the others are rendered after --var applied, so a playbook var derived
    from another (`sglang_version` from `sglang_ref`) sees the value the user asked for."""
    variables = inventory.host_vars(host)
    variables["workdir"] = workdir
    user = user_keys(inventory, host)
    plain = {k: v for k, v in extra.items() if "." not in k}
    dotted = {k: v for k, v in extra.items() if "." in k}
    for key, value in plain.items():
        if is_dataclass(value) and key in variables:  # `bench`: the command's settings, from its options
            raise ConfigError(f"host {host.name}: vars.{key} is set here, but '{key}' holds the command's own "
                              f"settings, which its options set (a mapping here would be ignored)",
                              where=str(inventory.path), hint="use the options instead (specops bench --help)")
        variables[key] = merge_var(variables.get(key), value)
    for key in list(variables):
        _set_dotted(variables, key, dotted)
    for key, value in playbook.vars.items():
        chosen = key in plain or key in user
        if chosen and not isinstance(variables[key], dict):
            continue  # the user's (or --var's) value wins outright: the playbook's is never rendered
        rendered = render_tree(value, variables, where=f"{playbook.path}: vars.{key}")
        variables[key] = merge_var(rendered, variables[key]) if chosen else rendered
        _set_dotted(variables, key, dotted)
    roots = {k.split(".", 1)[0] for k in dotted}
    for root in sorted(roots - set(variables)):
        raise ConfigError(f"--var {next(k for k in dotted if k.startswith(root + '.'))}: no variable named "
                          f"'{root}'{suggest(root, variables)}", hint="a dotted --var sets a key inside an existing mapping")
    overrides = extra.get(ArmOverrides.VAR)
    if isinstance(overrides, ArmOverrides):  # `bench --threshold`: typed, over hosts.yaml and --var
        variables["arms"] = overrides.applied(variables.get("arms"))
    variables["playbook_dir"] = str(playbook.path.parent.resolve())
    return variables


def user_keys(inventory: Inventory, host: Host) -> set[str]:
    """The variables hosts.yaml sets for `host` (its `vars` sections: inventory, groups, host),
    not the facts specops derives from the host's own settings (`engine_face`, `simulated`)."""
    facts = host.facts_vars()
    merged = inventory.host_vars(host)
    return {k for k, v in merged.items() if k not in facts or v != facts[k]}


def merge_var(base: Any, value: Any) -> Any:
    """`value` over `base`: mappings merge key by key (the rest of the dict stays), anything else replaces."""
    if isinstance(base, dict) and isinstance(value, dict):
        out = dict(base)
        for key, item in value.items():
            out[key] = merge_var(base.get(key), item)
        return out
    return value


def _set_dotted(variables: dict[str, Any], root: str, dotted: dict[str, Any]) -> None:
    """Apply each `--var root.a.b=V` to `variables[root]`, copying every mapping on the way (inventory
    and playbook dicts are never changed in place)."""
    for name, value in dotted.items():
        parts = name.split(".")
        if parts[0] != root:
            continue
        if any(not p for p in parts):
            raise ConfigError(f"--var {name}: empty key between dots")
        node: Any = variables
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None and depth > 0:
                child = {}
            if is_dataclass(child):  # `bench`: the command's settings, parsed once from its options
                raise ConfigError(f"--var {name}: '{'.'.join(parts[:depth + 1])}' holds the command's own "
                                  f"settings, which its options set", hint="use the option instead (specops bench --help)")
            if not isinstance(child, dict):
                raise ConfigError(f"--var {name}: '{'.'.join(parts[:depth + 1])}' is "
                                  f"{type(child).__name__} {child!r}, not a mapping",
                                  hint=f"set it whole: --var {'.'.join(parts[:depth + 1])}=VALUE")
            node[part] = child = dict(child)
            node = child
        node[parts[-1]] = merge_var(node.get(parts[-1]), value)


def find_resumable_run(runs_dir: Path, playbook: Playbook) -> Path | None:
    """The newest failed (or interrupted) run of this playbook (by its path) in `runs_dir`."""
    best: tuple[float, Path] | None = None
    if not runs_dir.is_dir():
        return None
    for meta in runs_dir.glob("*/run.json"):
        try:
            info = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        if info.get("playbook_path") != str(playbook.path.resolve()) or info.get("status") not in ("failed", "interrupted"):
            continue
        if info.get("check"):
            continue
        stamp = float(info.get("started", 0))
        if best is None or stamp > best[0]:
            best = (stamp, meta.parent)
    return best[1] if best else None


def done_steps(run_dir: Path) -> dict[str, set[int]]:
    """Per host, the indices of steps the journal shows finished (done or skipped as verified)."""
    done: dict[str, set[int]] = {}
    for ev in typed_events(run_dir):
        if isinstance(ev, events.Done) or (isinstance(ev, events.Skip) and ev.reason != "when"):
            done.setdefault(ev.host, set()).add(ev.step_index)
    return done


class _StepIds(TypedDict):
    """The envelope of the engine's events about one step on one host."""

    host: str
    step: str
    step_index: int


class Engine:
    """One run of one playbook on a set of hosts."""

    def __init__(self, inventory: Inventory, playbook: Playbook, hosts: list[Host], *,
                 extra_vars: dict[str, Any] | None = None, runs_dir: Path | None = None,
                 check: bool = False, resume: bool = False, from_step: str | None = None,
                 forks: int | None = None,
                 run_label: str | None = None, run_dir: Path | None = None,
                 on_point: PointCallback | None = None, lease_policy: LeasePolicy | None = None):
        self.inventory = inventory
        self.playbook = playbook
        self.hosts = hosts
        self.extra_vars = extra_vars or {}
        self.runs_dir = Path(runs_dir) if runs_dir else default_runs_dir(inventory.path)
        self.check = check
        self.forks = forks or default_forks(len(hosts))
        self.from_index = playbook.find_step(from_step) if from_step else 0
        #: called with each journal event as it is written (render.progress's plain lines)
        self.on_event: Callable[[events.Event], None] | None = None
        self.previous: dict[str, set[int]] = {}
        self.resumed_from: Path | None = None
        if resume:
            found = find_resumable_run(self.runs_dir, playbook)
            if found is None:
                raise ConfigError(f"--resume: no failed run of playbook '{playbook.name}' in {self.runs_dir}")
            self.resumed_from = found
            self.previous = done_steps(found)
        self.run_dir = Path(run_dir) if run_dir else (
            self.resumed_from or self.runs_dir / new_run_id(run_label or playbook.name))
        self.run_id = self.run_dir.name
        #: this run's live state (journal, launched arms, progress); steps reach it as ctx.run_state
        self.state = Run(self.run_dir, on_point=on_point,
                         leases=LeaseBook(self.run_id, playbook.name, lease_policy or LeasePolicy()))
        self._abort = threading.Event()
        self._abort_reason = FATAL_REASON
        self.reports = {h.name: HostReport(h.name, [StepStatus() for _ in playbook.steps]) for h in hosts}
        self.transports: dict[str, Transport] = {}

    # ----- run ------------------------------------------------------------------------

    def prevalidate(self) -> None:
        """Render every step for every host before anything runs, so an undefined variable
        is an error naming the step and the variable, with nothing changed anywhere.
        Values registered by earlier steps are stood in for by a permissive placeholder."""
        for host in self.hosts:
            for source in host.secrets.values():  # a missing variable or file: said before anything runs
                source.read()
            variables = resolve_vars(self.inventory, self.playbook, host, self.extra_vars, host.workdir)
            for step in self.playbook.steps:
                where = f"{step.where}: {step.label}"
                try:
                    if step.when is not None and "{{" not in step.when:
                        held = evaluate(step.when, variables, where=where)
                        if is_false(held) and _decided(step.when, variables):
                            # skipped at run time too: what only it uses need not be defined
                            if step.register:
                                variables[step.register] = _Registered()
                            continue
                    KINDS[step.kind].render(step, variables)
                    render_tree(step.verify, variables, where=where)
                except ConfigError as exc:
                    raise ConfigError(f"{exc.message} (host {host.name})", where=exc.where, hint=exc.hint) from None
                if step.register:
                    variables[step.register] = _Registered()

    def run(self) -> RunReport:
        """Run every host; on Ctrl-C (KeyboardInterrupt here) stop scheduling, mark the run
        interrupted and re-raise, leaving the journal open for the cleanup (see `interrupt`)."""
        journal = Journal(self.run_dir, self._observe)
        self.state.journal = journal
        meta = {
            "run_id": self.run_id, "playbook": self.playbook.name,
            "playbook_path": str(self.playbook.path.resolve()), "inventory": str(self.inventory.path),
            "hosts": [h.name for h in self.hosts], "check": self.check, "started": time.time(),
            "status": "running", "steps": [s.name for s in self.playbook.steps],
        }
        journal.write_meta(meta)
        journal.emit((events.Resume if self.resumed_from else events.RunStart)(
            run_id=self.run_id, playbook=self.playbook.name, hosts=[h.name for h in self.hosts], check=self.check))
        interrupted = False
        try:
            self._run_hosts(journal)
        except BaseException:
            interrupted = True
            self._stop_scheduling(INTERRUPTED_REASON)
            raise
        finally:
            ok = not interrupted and all(r.ok for r in self.reports.values())
            meta.update(status="interrupted" if interrupted else "ok" if ok else "failed", finished=time.time())
            journal.write_meta(meta)
            journal.emit(events.RunDone(ok=ok, interrupted=interrupted,
                                        failed=[h for h, r in self.reports.items() if not r.ok]))
            if not interrupted:
                journal.close()
        return RunReport(self.run_id, self.run_dir, self.playbook, list(self.reports.values()), self.check)

    def _observe(self, ev: events.Event) -> None:
        """Each event as written: a warning is kept on its host's report, then `on_event` hears it."""
        if isinstance(ev, events.Warn) and ev.host in self.reports:
            self.reports[ev.host].warnings.append(ev)
        if self.on_event is not None:
            self.on_event(ev)

    def _run_hosts(self, journal: Journal) -> None:
        """Hosts on `forks` worker threads. The workers are daemon threads: after Ctrl-C the
        main thread cleans up and exits without waiting for a host stuck inside a step."""
        todo: queue.SimpleQueue[Host] = queue.SimpleQueue()
        for host in self.hosts:
            todo.put(host)
        left = threading.Semaphore(0)

        def worker() -> None:
            while True:
                try:
                    host = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    if self._abort.is_set():
                        self._not_started(host)
                    else:
                        self._run_host(host, journal)
                except BaseException:  # noqa: BLE001 - after Ctrl-C a host may fail any way
                    if not self._abort.is_set():
                        traceback.print_exc()
                finally:
                    left.release()

        for i in range(min(self.forks, len(self.hosts))):
            threading.Thread(target=worker, name=f"host-{i}", daemon=True).start()
        for _ in self.hosts:
            # with a timeout, so the main thread comes back to the interpreter now and then:
            # a Ctrl-C the kernel handed to a worker thread is only run here, and a wait
            # without one would hold it until the step running ended
            while not left.acquire(timeout=SIGNAL_CHECK_S):
                pass

    def interrupt(self, keep_servers: bool = False) -> list[Cleanup]:
        """After Ctrl-C: stop what this run launched (unless `keep_servers`); hosts not yet
        started stay so. Call `close` after."""
        self._stop_scheduling(INTERRUPTED_REASON)
        transports = dict(self.transports)
        return self.state.stop_launched(transports, {h.name: h.workdir for h in self.hosts if h.name in transports},
                                        keep=keep_servers)

    def close(self) -> None:
        """Release this run's arm leases, then close every connection (ending commands still
        running on them) and the journal."""
        self.state.leases.release_all()
        for transport in list(self.transports.values()):
            try:
                transport.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        if self.state.journal is not None:
            self.state.journal.close()

    def _send_secrets(self, host: Host, transport: Transport, workdir: str, journal: Journal) -> None:
        """The host's secrets into its 0600 env file (read here, at run time, never written
        on this machine); without secrets, a file left by an earlier run is removed."""
        path = paths.secrets_env(workdir)
        if not host.secrets:
            transport.run(["rm", "-f", "--", path], timeout=30)
            return
        values = {name: source.read() for name, source in host.secrets.items()}
        transport.put(env_file_text(values).encode(), path, mode=0o600)
        journal.emit(events.Secrets(host=host.name, names=sorted(values), path=path, mode="0600"))

    def _stop_scheduling(self, reason: str) -> None:
        """No host starts a step from now on; the first reason given is the one reported."""
        if not self._abort.is_set():
            self._abort_reason = reason
        self._abort.set()

    def _not_started(self, host: Host) -> None:
        """A host the run stopped before it began: not ok (nothing it was asked to do was done),
        and its report says why, never a bare success."""
        report = self.reports[host.name]
        report.error = report.current = self._abort_reason
        for status in report.steps:
            status.detail = self._abort_reason

    def _run_host(self, host: Host, journal: Journal) -> None:
        report = self.reports[host.name]
        report.started = time.monotonic()
        phase: Phase = "connect"
        try:
            report.current = "connecting"
            transport = open_transport(host)
            self.transports[host.name] = transport
            # reach the host now (its home, asked once), so a host that cannot be reached is a
            # failed connect, never a failed first command
            journal.emit(events.Connected(host=host.name, home=transport.home))
            host.expand_on_host(transport.expand)  # `~` in python/workdir is the host's home
            workdir = transport.expand(host.workdir)
            phase = "prepare"
            if not self.check:
                made = transport.run(["mkdir", "-p", workdir], timeout=30)
                if not made.ok:
                    raise SpecopsError(f"cannot create workdir {workdir}: {made.tail(2)}", where=f"host {host.name}")
                for note in transport.notes():  # e.g. slower, still correct: say why
                    journal.emit(events.Warn(host=host.name, message=note))
                self._send_secrets(host, transport, workdir, journal)
            variables = resolve_vars(self.inventory, self.playbook, host, self.extra_vars, workdir)
        except SpecopsError as exc:
            report.error = failure_text(phase, str(exc))
            report.current = "unreachable" if phase == "connect" else "error"
            journal.emit(events.Fail(host=host.name, step=None, phase=phase, error=report.error))
            return
        except Exception as exc:  # noqa: BLE001 - a bug must not take other hosts down
            report.error = f"internal error: {exc!r}"
            journal.emit(events.Fail(host=host.name, step=None, error=traceback.format_exc()))
            return
        for step in self.playbook.steps:
            status = report.steps[step.index]
            if self._abort.is_set():  # this host's later steps never ran: not ok, and why
                status.detail = report.error = self._abort_reason
                continue
            if step.index < self.from_index:
                status.detail = "before --from-step"
                continue
            report.current = step.name
            started = time.monotonic()
            try:
                self._run_step(host, transport, step, variables, journal, status)
            except SpecopsError as exc:
                status.status, status.detail = FAILED, str(exc)
                journal.emit(events.Fail(host=host.name, step=step.name, step_index=step.index, error=str(exc)))
            except Exception as exc:  # noqa: BLE001
                status.status, status.detail = FAILED, f"internal error in {step.kind} step: {exc!r}"
                journal.emit(events.Fail(host=host.name, step=step.name, step_index=step.index,
                                         error=traceback.format_exc()))
            status.duration_s = time.monotonic() - started
            if status.status == FAILED:
                report.failed_step = step.index
                if self.playbook.any_errors_fatal:
                    self._stop_scheduling(FATAL_REASON)
                break
        report.current = "failed" if report.failed_step is not None else (report.error or "done")

    def _run_step(self, host: Host, transport: Transport, step: Step, variables: dict[str, Any],
                  journal: Journal, status: StepStatus) -> None:
        kind = KINDS[step.kind]
        where = f"{step.where}: {step.label}"
        ev = _StepIds(host=host.name, step=step.name, step_index=step.index)
        if _when_is_false(step, variables, where):
            status.status, status.detail = SKIPPED, f"when: {step.when} is false"
            journal.emit(events.Skip(reason="when", **ev))
            return
        args = kind.render(step, variables)
        verify_spec = render_tree(step.verify, variables, where=where)
        ctx = StepContext(host=host, transport=transport, step=step, args=args, vars=variables,
                          journal=journal, run_dir=self.run_dir, playbook_dir=self.playbook.path.parent.resolve(),
                          check=self.check, run_state=self.state,
                          emit=lambda msg: setattr(self.reports[host.name], "current", f"{step.name}: {msg}"))
        if self.check:  # is_done is read-only by contract: --check says what a real run would skip
            if _already_done_check(ctx, verify_spec):
                status.status, status.detail = SKIPPED, "already verified"
                status.commands = [PROBE + c for c in ctx.ran]
            else:
                status.status, status.commands = WOULD_RUN, _preview(ctx)
                if step.changed is False:
                    status.commands.append("# read-only (changed: false): reports ok, never changed")
            journal.emit(events.CheckPreview(commands=status.commands, status=status.status, **ev))
            return
        journal.emit(events.StepStart(kind=step.kind, **ev))
        resumed = step.index in self.previous.get(host.name, set())
        try:
            done = _already_done(ctx, verify_spec, resumed)
        except SpecopsError as exc:  # a probe refused or lost its connection: nothing was applied
            status.status, status.detail = FAILED, failure_text("check", _seen(exc))
            journal.emit(events.Fail(error=status.detail, phase="check", **ev))
            return
        if done:
            reason = "verified (resumed run)" if resumed else "already verified"
            status.status, status.detail = SKIPPED, reason
            if step.register:
                variables[step.register] = dict(ctx.facts, skipped=True)
            journal.emit(events.Skip(reason=reason, facts=_jsonable(ctx.facts), **ev))
            return
        if kind.changes_sglang:  # another run's servers came from what this step would change
            try:
                ctx.guard_sglang()
            except SpecopsError as exc:
                status.status, status.detail = FAILED, failure_text("check", _seen(exc))
                journal.emit(events.Fail(error=status.detail, phase="check", **ev))
                return
        outcome, ok, seen, phase = _apply_with_retries(ctx, verify_spec, ev)
        if ok:
            assert outcome is not None
            if step.register:
                registered = dict(outcome.data)
                if outcome.result is not None:
                    registered.update(rc=outcome.result.rc, stdout=outcome.result.stdout, stderr=outcome.result.stderr)
                variables[step.register] = registered
            changed = outcome.changed if step.changed is None else step.changed
            status.status = CHANGED if changed else OK
            status.detail = outcome.message
            journal.emit(events.Done(changed=changed, **ev))
            return
        if step.ignore_errors:
            status.status, status.detail = OK, f"ignored: {failure_text(phase, seen, ctx.step.retries + 1)}"
            journal.emit(events.Done(ignored_failure=seen, **ev))
            return
        notes, broken = _roll_back(ctx, outcome, where)
        if notes or broken:
            journal.emit(events.Rollback(notes=notes, failed=broken, **ev))
        status.status = FAILED
        status.detail = (failure_text(phase, seen, step.retries + 1) + (f" (rolled back: {'; '.join(notes)})" if notes else "")
                         + (f" ({failure_text('rollback', '; '.join(broken))})" if broken else ""))
        journal.emit(events.Fail(error=status.detail, phase=phase, rollback_failed=bool(broken), **ev))


def _when_is_false(step: Step, variables: dict[str, Any], where: str) -> bool:
    if step.when is None:
        return False
    cond = render(step.when, variables, where=where) if "{{" in step.when else evaluate(step.when, variables, where=where)
    return is_false(cond)


def _decided(expression: str, variables: dict[str, Any]) -> bool:
    """Whether a `when:` evaluated before the run is what the run will see: not when it reads
    what an earlier step registers, or a value still to be expanded on the host (`~/...`)."""
    for name in names_in(expression):
        value = variables.get(name)
        if isinstance(value, _Registered) or (isinstance(value, str) and "~" in value):
            return False
    return True


def _preview(ctx: StepContext) -> list[str]:
    """--check: the probes describe ran to decide (read-only by contract), then the commands
    apply would run."""
    try:
        planned = KINDS[ctx.step.kind].describe(ctx)
    except SpecopsError as exc:  # e.g. the tree an earlier step would create is not there yet
        planned = [f"# cannot preview until earlier steps have run: {exc.message}"]
    return [PROBE + c for c in ctx.ran] + planned


def _already_done_check(ctx: StepContext, verify_spec: dict[str, Any]) -> bool:
    """--check: would a real run skip this step as already verified? Anything that cannot be
    probed yet (a tree an earlier step creates) means it would run."""
    try:
        return _already_done(ctx, verify_spec, resumed=False)
    except (SpecopsError, OSError):
        return False


def _already_done(ctx: StepContext, verify_spec: dict[str, Any], resumed: bool) -> bool:
    """The kind's is_done, narrowed by the step's state checks; a resumed run's finished
    step counts as done when the kind cannot tell."""
    done = KINDS[ctx.step.kind].is_done(ctx)
    state_only = has_state_checks(verify_spec) and not any(
        k in verify_spec for k in ("stdout_contains", "stdout_matches", "rc"))
    if (done is None and state_only) or (done and has_state_checks(verify_spec)):
        done = check_user_verify(ctx, verify_spec, None, only_state=True)[0]
    if done is None and resumed:
        done = True
    return bool(done)


def _apply_with_retries(ctx: StepContext, verify_spec: dict[str, Any],
                        ev: _StepIds) -> tuple[Outcome | None, bool, str, Phase]:
    """apply then verify, up to retries + 1 times; (last outcome, ok, what was seen, the
    phase the last attempt failed in: `apply` when apply raised, else `verify`)."""
    kind, step, journal = KINDS[ctx.step.kind], ctx.step, ctx.journal
    outcome: Outcome | None = None
    ok, seen = False, ""
    phase: Phase = "apply"
    for attempt in range(step.retries + 1):
        t0 = time.monotonic()
        phase = "apply"
        try:
            outcome = kind.apply(ctx)
            journal.emit(events.Apply(attempt=attempt + 1, changed=outcome.changed,
                                      duration_s=round(time.monotonic() - t0, 4), data=_jsonable(outcome.data), **ev))
            phase = "verify"
            ok, seen = kind.verify(ctx, outcome)
            if ok and verify_spec:
                ok, seen = check_user_verify(ctx, verify_spec, outcome.result)
        except SpecopsError as exc:
            ok, seen = False, _seen(exc)
        journal.emit(events.Verify(attempt=attempt + 1, ok=ok, seen=seen, phase=None if ok else phase, **ev))
        if ok:
            break
        if attempt < step.retries:
            journal.emit(events.Retry(attempt=attempt + 1, delay_s=step.delay, **ev))
            time.sleep(step.delay)
    return outcome, ok, seen, phase


def _roll_back(ctx: StepContext, outcome: Outcome | None, where: str) -> tuple[list[str], list[str]]:
    """The kind's rollback, then the step's own `rollback:` command; (notes of what ran,
    what failed). A rollback that fails is said as such, after the failure it followed,
    never in place of it."""
    notes: list[str] = []
    broken: list[str] = []
    try:
        note = KINDS[ctx.step.kind].rollback(ctx, outcome)
        if note:
            notes.append(note)
    except SpecopsError as exc:
        broken.append(_seen(exc))
    rollback = ctx.step.rollback
    if rollback is not None:
        try:
            rb = ctx.run(rollback if isinstance(rollback, list) else render(rollback, ctx.vars, shell=True, where=where))
        except SpecopsError as exc:
            broken.append(f"rollback command: {_seen(exc)}")
        else:
            if rb.ok:
                notes.append(f"rollback command exited {rb.rc}")
            else:
                broken.append(f"rollback command exited {rb.rc}: {rb.tail(2) or '(no output)'}")
    return notes, broken


class _Registered:
    """Stands in for a value a step registers, during prevalidation: any attribute or item
    of it is fine, and it renders as an empty string."""

    def __getattr__(self, name: str) -> "_Registered":
        return self

    def __getitem__(self, key: Any) -> "_Registered":
        return self

    def __str__(self) -> str:
        return ""

    def __iter__(self) -> Iterator[object]:
        return iter(())


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    reserved = {"host", "step", "step_index", "attempt", "changed", "duration_s", "event", "ts"}
    return {k: v for k, v in data.items() if k not in reserved}
