"""The local supervisor (servers.supervisor): launch, reuse, readiness, stop and status of
arm servers as detached processes on a host, over a Transport.

Servers are detached (setsid nohup, stdin from /dev/null, output to a log) so they
outlive the SSH session; their pid, process group, command and args hash are kept in
`<workdir>/.specops/servers/<arm>.json` on the host, which is all later commands
(`status`, `stop`, `logs`, a re-run) need. Each check is one remote round trip.

It knows nothing of Slurm (servers.slurm is the other supervisor; a boundary test keeps
this module from importing it): a state file a Slurm job wrote is refused by name.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, cast

import specops.servers.container as container
from specops.engines import engine_of
from specops.errors import StepError, TransportError
from specops.hostfiles import paths
from specops.launchargs import args_from_argv
from specops.secrets import env_file_text, loader_argv, redact
from specops.servers.launch import LaunchPlan
from specops.servers.logwatch import (
    READY_GREP,
    chunk_script,
    crash_excerpt,
    failure_reason,
    parse_chunk_line,
    sigkill_note,
)
from specops.servers.records import ArmStatus as ArmStatus
from specops.servers.records import LaunchOutcome as LaunchOutcome
from specops.servers.records import ServerState as ServerState
from specops.servers.records import StopResult as StopResult
from specops.servers.records import read_state, refuse_foreign
from specops.servers.records import read_states as read_states
from specops.servers.records import where as _where
from specops.servers.remote import FUNCS, HEALTH_PATIENCE_S, q
from specops.servers.watch import ArmWatch, loading_line, not_ready_error, wait
from specops.transport.base import CommandResult, Transport

_RUN_TIMEOUT = 60.0


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "~", "./", "../"))


def _run(transport: Transport, script: str, timeout: float = _RUN_TIMEOUT, **kw: Any) -> CommandResult:
    return transport.run(FUNCS + script, timeout=timeout, **kw)


# --- probing ---------------------------------------------------------------------------

@dataclass
class Probe:
    alive: bool
    health: str  # HTTP code as text, "000" when nothing answered


def _probe_script(checks: Sequence[tuple[ServerState, int]]) -> str:
    """Bash printing `@@P <i> <alive 0|1> <code>` per (state, seconds its endpoint gets): the
    endpoints asked side by side, so a poll waits for the slowest, not for their sum; only
    these short lines are written meanwhile (a pipe keeps small writes whole)."""
    parts = [f"( if _alive {st.pid} {q(st.proc_start)}; then echo \"@@P {i} 1 $(_health {st.port} {q(st.ready_path)} "
             f"{int(secs)})\"; else echo '@@P {i} 0 000'; fi ) &" for i, (st, secs) in enumerate(checks)]
    return "\n".join([*parts, "wait"])


def _parse_probes(transport: Transport, res: CommandResult, n: int) -> list[Probe]:
    found = {int(ln.split()[1]): ln.split() for ln in res.stdout.splitlines()
             if ln.startswith("@@P ") and len(ln.split()) > 2 and ln.split()[1].isdigit()}
    if sorted(found) != list(range(n)):
        raise TransportError(f"probing servers failed: {res.tail(5)}", where=f"host {transport.name}")
    return [Probe(found[i][2] == "1", found[i][3] if len(found[i]) > 3 else "000") for i in range(n)]


def probe(transport: Transport, states: Sequence[ServerState], health_s: int = HEALTH_PATIENCE_S) -> list[Probe]:
    """Process liveness and readiness-endpoint code for each state, one round trip, each
    endpoint given `health_s` to answer (remote.HEALTH_PATIENCE_S)."""
    res = _run(transport, _probe_script([(st, health_s) for st in states]), timeout=_RUN_TIMEOUT + health_s)
    return _parse_probes(transport, res, len(states))


# --- launch ----------------------------------------------------------------------------

def _launch_script(transport: Transport, plan: LaunchPlan) -> str:
    logdir = posixpath.dirname(plan.log_path)
    statedir = posixpath.dirname(plan.state_path)
    cwd = plan.cwd or plan.workdir
    # a neutral folder: started beside a `sglang/` folder, `sglang` would be a namespace package
    lines = [f"mkdir -p {q(logdir)} {q(statedir)} {q(cwd)} || exit 12",
             f"cd {q(cwd)} || exit 12",
             f"if _port_busy {plan.port}; then echo '@@PORTBUSY'; "
             f"ss -ltnp 'sport = :{plan.port}' 2>/dev/null | tail -n +2 | head -3; exit 10; fi"]
    model_flags = engine_of(plan.argv, plan.engine).model_flags
    for i, a in enumerate(plan.argv[:-1]):
        if a in model_flags and _looks_local(plan.argv[i + 1]):
            p = plan.argv[i + 1]
            p = transport.expand(p) if p.startswith("~") else p
            lines.append(f"if [ ! -e {q(p)} ]; then echo '@@NOMODEL '{q(p)}; exit 11; fi")
    lp = q(plan.log_path)
    # the environment comes from 0600 files the starting process sources: no value in argv
    env_files = [paths.server_env(plan.workdir, plan.arm)] + ([plan.secrets_file] if plan.secrets_file else [])
    if plan.container is not None:  # the container's client is the arm's process; the env files are read inside
        lines += container.launch_lines(plan)
        argv = container.run_argv(plan)
    else:
        argv = loader_argv(*env_files) + plan.argv
    lines += [
        f"if [ -e {lp} ]; then mv -f {lp} {q(plan.log_path + '.1')}; fi",
        f"setsid nohup {' '.join(q(a) for a in argv)} > {lp} 2>&1 < /dev/null &",
        "pid=$!",
        "echo \"@@PID $pid $(_start $pid)\"",
    ]
    return "\n".join(lines)


def launch_arm(transport: Transport, plan: LaunchPlan, *, reuse: bool = True, launched_by: str | None = None,
               ephemeral: bool = False) -> LaunchOutcome:
    """Start the arm detached, or reuse a healthy server launched with the same args hash.

    A server recorded with different args, or a dead one, is stopped and replaced. A port
    held by something else, or a local model path that does not exist, raises StepError
    naming it, before anything starts. `launched_by`/`ephemeral` go into the state file
    (servers.lease: who started it, and whether the last run leasing it stops it)."""
    where = _where(transport, plan.arm)
    existing = read_state(transport, plan.workdir, plan.arm)
    action = "launched"
    if existing is not None:
        refuse_foreign(transport, [existing], slurm=False)
        (p,) = probe(transport, [existing])
        if reuse and p.alive and p.health == "200" and existing.args_hash == plan.args_hash:
            return LaunchOutcome(existing, "reused")
        stop_states(transport, [existing])
        if p.alive:
            action = "restarted"
    if plan.config_path and plan.config_json is not None:
        transport.put(plan.config_json.encode(), plan.config_path)
    transport.put(env_file_text(plan.env).encode(), paths.server_env(plan.workdir, plan.arm), mode=0o600)
    res = _run(transport, _launch_script(transport, plan))
    out = res.stdout
    if res.rc == 10 or "@@PORTBUSY" in out:
        holder = out.split("@@PORTBUSY", 1)[1].strip()
        raise StepError(f"port {plan.port} is already in use by another process"
                        + (f":\n{holder}" if holder else ""), where=where,
                        hint=f"stop whatever listens on port {plan.port} or give arm '{plan.arm}' another port")
    if res.rc == 11 or "@@NOMODEL" in out:
        path = out.split("@@NOMODEL", 1)[1].strip()
        raise StepError(f"model path {path} does not exist on the host", where=where,
                        hint="download the model there first or fix the model path")
    pid_line = next((ln for ln in out.splitlines() if ln.startswith("@@PID ")), None)
    if not res.ok or pid_line is None:
        raise StepError(f"launch failed (rc {res.rc}): {res.tail(10)}", where=where)
    parts = pid_line.split()
    pid = int(parts[1])
    state = ServerState(
        arm=plan.arm, kind=plan.kind, pid=pid, pgid=pid, proc_start=parts[2] if len(parts) > 2 else "",
        port=plan.port, command=redact(plan.command), argv=redact(plan.argv), env=redact(plan.env),
        args_hash=plan.args_hash,
        log_path=plan.log_path, state_path=plan.state_path, mechanism=plan.mechanism,
        started_at=time.time(), workdir=plan.workdir, model=plan.model, config_path=plan.config_path,
        effective_threshold=plan.effective_threshold, notes=plan.notes, ready_path=plan.ready_path,
        engine_version=plan.engine_version, engine=plan.engine, launched_by=launched_by, ephemeral=ephemeral,
        container=plan.container)
    transport.put(state.to_json(), plan.state_path, mode=0o600)  # masked, and private all the same
    return LaunchOutcome(state, action)


def launch_arms(transport: Transport, plans: Sequence[LaunchPlan], *, reuse: bool = True) -> list[LaunchOutcome]:
    return [launch_arm(transport, p, reuse=reuse) for p in plans]


# --- readiness -------------------------------------------------------------------------

@dataclass
class _Watch(ArmWatch):
    alive: bool = True


class _Processes:
    """servers.watch's Source for detached local processes: `_alive` by pid and start time,
    `_health` on loopback, and the log's new bytes, one round trip for all arms."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def poll(self, watches: Sequence[_Watch], max_bytes: int) -> None:
        logs = [chunk_script(w.state.log_path, w.offset, max_bytes) for w in watches]
        res = _run(self.transport, "\n".join([_probe_script([(w.state, w.health_s()) for w in watches]), *logs]),
                   timeout=_RUN_TIMEOUT + max((w.health_s() for w in watches), default=0))
        probes = _parse_probes(self.transport, res, len(watches))
        chunks = [ln for ln in res.stdout.splitlines() if ln.startswith("@@LOG ")]
        if len(chunks) != len(watches):
            raise TransportError(f"readiness poll failed: {res.tail(5)}", where=f"host {self.transport.name}")
        for w, p, lg in zip(watches, probes, chunks, strict=True):
            w.alive, w.health = p.alive, p.health
            w.feed(parse_chunk_line(w.state.log_path, lg).data)

    def gone(self, w: _Watch) -> bool:
        return not w.alive

    def serving(self, w: _Watch) -> bool:
        return True

    def fail(self, w: _Watch, elapsed: float) -> StepError:
        return _fail(self.transport, w, elapsed)

    def not_ready(self, w: _Watch, timeout_s: float) -> StepError:
        return not_ready_error(self.transport, w, timeout_s, w.state.ready_path)


def _fail(transport: Transport, w: _Watch, elapsed: float) -> StepError:
    st = w.state
    excerpt = crash_excerpt(w.text)
    reason = failure_reason(w.text)
    if not w.alive:
        what = f"exited {elapsed:.1f}s after the readiness wait began"
    else:
        what = "logged a crash"
    if reason:
        what += f" ({reason})"
    else:
        what += ", with an empty log"
    note = sigkill_note(w.text)
    return StepError(f"server '{st.arm}' {what}; log {st.log_path}:\n{excerpt}",
                     where=_where(transport, st.arm),
                     hint=(f"{note}; " if note else "") + f"specops logs --server {st.arm} --errors; command: {st.command}")


def wait_ready_many(transport: Transport, states: Sequence[ServerState], timeout_s: float,
                    poll_s: float = 0.5, *, max_bytes: int = 256 * 1024,
                    on_progress: Callable[[str], None] | None = None,
                    on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, float]:
    """Wait until every server is ready (alive, /health 200, ready line logged), polling
    all of them in one round trip at most `poll_s` (<= 1 s) apart. Returns seconds to
    ready per arm. A dead process or a crash signature raises StepError at once with the
    log's crash block; a timeout raises it with the last log lines. `on_progress` gets,
    each poll, the arms still loading with the last line of each one's log (weight
    loading, CUDA graph capture), for the live view. `on_event` is the supervisor protocol's
    (a Slurm job's queue state); a local process has none to report."""
    return wait(transport, _Processes(transport), [_Watch(st) for st in states], timeout_s, poll_s,
                max_bytes=max_bytes, on_progress=on_progress)


#: the live line (servers.watch), under the name the tests know
_loading_line = loading_line


def wait_ready(transport: Transport, state: ServerState, timeout_s: float, poll_s: float = 0.5) -> float:
    """wait_ready_many for one server; returns seconds to ready."""
    return wait_ready_many(transport, [state], timeout_s, poll_s)[state.arm]


# --- stop ------------------------------------------------------------------------------

#: exits 1 when a process of group $1 belongs to another user than the one stopping it: a
#: state file is not proof of ownership, and as root `kill` would reach anyone's processes
_GRP_MINE = ("_grp_mine() { ps -e -o pgid=,uid= 2>/dev/null | "
             "awk -v g=\"$1\" -v u=\"$(id -u)\" '$1==g && $2!=u {o=1} END {exit o}'; }")


def _stop_script(states: Sequence[ServerState], grace_s: float, port_wait_s: float, gpu_wait_s: float) -> str:
    """TERM, then KILL, each state's process group (pgid > 1, checked when the file was
    read) that is still its server's and the user's own; SIG `foreign` marks one that
    is not, left alone."""
    lines = ["declare -A SIG PIDS", "now() { date +%s%N | cut -c1-13; }", _GRP_MINE]
    for i, st in enumerate(states):
        lines.append(
            f"SIG[{i}]=none; PIDS[{i}]=''; "
            f"if _ours {st.pid} {q(st.proc_start)} && _grp_alive {st.pgid}; then "
            f"if _grp_mine {st.pgid}; then "
            f"PIDS[{i}]=$(_grp_pids {st.pgid} | tr '\\n' ' '); kill -TERM -- -{st.pgid} 2>/dev/null; SIG[{i}]=TERM; "
            f"else SIG[{i}]=foreign; fi; fi")
    n = len(states)
    idx = " ".join(str(i) for i in range(n))
    pg = {i: st.pgid for i, st in enumerate(states)}
    pgids = " ".join(f"[{i}]={pg[i]}" for i in range(n))
    ports = " ".join(f"[{i}]={st.port}" for i, st in enumerate(states))
    lines += [
        f"declare -A PG=({pgids}) PORT=({ports})",
        f"end=$(( $(now) + {int(grace_s * 1000)} ))",
        f"while [ $(now) -lt $end ]; do left=0; for i in {idx}; do "
        f"case ${{SIG[$i]}} in none|foreign) ;; *) _grp_alive ${{PG[$i]}} && left=1;; esac; done; "
        f"[ $left = 0 ] && break; sleep 0.1; done",
        f"for i in {idx}; do case ${{SIG[$i]}} in none|foreign) ;; *) if _grp_alive ${{PG[$i]}}; then "
        f"kill -KILL -- -${{PG[$i]}} 2>/dev/null; SIG[$i]=KILL; fi;; esac; done",
        f"end=$(( $(now) + {int(port_wait_s * 1000)} ))",
        f"while [ $(now) -lt $end ]; do busy=0; for i in {idx}; do [ ${{SIG[$i]}} = foreign ] && continue; "
        f"_grp_alive ${{PG[$i]}} && busy=1; _port_busy ${{PORT[$i]}} && busy=1; done; "
        f"[ $busy = 0 ] && break; sleep 0.1; done",
        _gpu_wait(states, idx, gpu_wait_s),
        f"for i in {idx}; do pf=1; _port_busy ${{PORT[$i]}} && pf=0; ga=0; _grp_alive ${{PG[$i]}} && ga=1; "
        f"echo \"@@S $i ${{SIG[$i]}} $pf $ga $GPU\"; done",
    ]
    return "\n".join(lines)


def _gpu_wait(states: Sequence[ServerState], idx: str, gpu_wait_s: float) -> str:
    """Wait (bounded) until no pid of the stopped groups holds GPU memory; GPU=none where
    nvidia-smi is absent or every arm ran with --device cpu (no GPU to speak of)."""
    if all(on_cpu(st) for st in states):
        return "GPU=none"
    return ("GPU=none; if command -v nvidia-smi >/dev/null 2>&1; then GPU=yes; "
            f"end=$(( $(now) + {int(gpu_wait_s * 1000)} )); "
            f"while [ $(now) -lt $end ]; do held=0; g=\" $(_gpu_pids | tr '\\n' ' ') \"; for i in {idx}; do "
            f"for p in ${{PIDS[$i]}}; do case \"$g\" in *\" $p \"*) held=1;; esac; done; done; "
            f"[ $held = 0 ] && break; sleep 0.5; done; [ $held = 0 ] || GPU=held; fi")


def on_cpu(state: ServerState) -> bool:
    """The arm was launched with `--device cpu` (SGLang's CPU serving): it holds no GPU."""
    return str(args_from_argv(state.argv).get("device", "")).lower() == "cpu"


def stop_states(transport: Transport, states: Sequence[ServerState], *, grace_s: float = 10.0,
                port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
    """TERM each server's process group, KILL after grace_s, wait (bounded) until its port
    is free and, where nvidia-smi exists, its GPU memory released; remove its state file."""
    if not states:
        return []
    refuse_foreign(transport, states, slurm=False)
    # a container is stopped by its runtime (stop -t GRACE, then rm): its client, the recorded
    # process, then ends, and the process-group stop below finds it gone
    boxed = container.stop_containers(transport, [st for st in states if st.container], grace_s)
    script = _stop_script(states, grace_s, port_wait_s, gpu_wait_s)
    res = _run(transport, script, timeout=grace_s + port_wait_s + gpu_wait_s + 30)
    rows = {int(p[1]): p for p in (ln.split() for ln in res.stdout.splitlines() if ln.startswith("@@S "))}
    if len(rows) != len(states):
        raise StepError(f"stop failed: {res.tail(10)}", where=f"host {transport.name}")
    results = []
    problems = []
    for i, st in enumerate(states):
        _, _, sig, pf, ga, gpu = rows[i]
        if sig == "foreign":
            problems.append(f"server '{st.arm}': process group {st.pgid} has processes of another user; "
                            f"not signalled (state file {st.state_path})")
            results.append(StopResult(st.arm, st.pid, st.port, False, None, pf == "1", None))
            continue
        if st.arm in boxed and sig == "none":
            sig = "TERM"  # the runtime's stop signal reached it
        r = StopResult(st.arm, st.pid, st.port, sig != "none", None if sig == "none" else sig,
                       pf == "1", None if gpu == "none" or on_cpu(st) else gpu == "yes")
        results.append(r)
        if ga == "1":
            problems.append(f"server '{st.arm}': processes of group {st.pgid} survived SIGKILL")
        elif not r.port_free:
            problems.append(f"server '{st.arm}': port {st.port} still in use after stop")
        if r.gpu_released is False:
            problems.append(f"server '{st.arm}': GPU memory not released after {gpu_wait_s:.0f}s")
    # paths checked when the file was read: inside the workdir; `--`: none is ever an option
    files = [st.state_path for st in states if rows[states.index(st)][4] == "0"]  # a foreign group's stays
    files += [st.config_path for st in states if st.config_path]
    if files:
        transport.run(["rm", "-f", "--", *files], timeout=_RUN_TIMEOUT)
    if problems:
        raise StepError("; ".join(problems), where=f"host {transport.name}")
    return results


def stop_arms(transport: Transport, workdir: str, arms: Sequence[str] | None = None,
              grace_s: float = 10.0, *, port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
    """Stop the named arms (all recorded ones when None) under `workdir` on the host."""
    states = read_states(transport, workdir)
    chosen = [states[a] for a in (arms if arms is not None else sorted(states)) if a in states]
    return stop_states(transport, chosen, grace_s=grace_s, port_wait_s=port_wait_s, gpu_wait_s=gpu_wait_s)


# --- status ----------------------------------------------------------------------------

def _host_time(text: str) -> float | None:
    """`date +%s.%N` as the host printed it (a `date` without %N prints its seconds and a
    literal N: the seconds are kept)."""
    try:
        return float(text)
    except ValueError:
        head = text.split(".")[0]
        return float(head) if head.isdigit() else None


def _status_script(states: Sequence[ServerState]) -> str:
    """Per state, side by side: `@@ST <i> <alive> <ready line logged> <code>`. Only states
    read_states accepted are here: a refused file's pid, port and log reach no command."""
    lines = ['echo "@@NOW $(date +%s.%N)"']
    for i, st in enumerate(states):
        # a Slurm job's state (pid -1) is no process here
        alive = f"_alive {st.pid} {q(st.proc_start)}" if st.pid > 1 else "false"
        lines.append(f"( a=0; r=0; h=000; if {alive}; then a=1; h=$(_health {st.port} {q(st.ready_path)} "
                     f"{int(HEALTH_PATIENCE_S)}); fi; grep -m1 -qF {READY_GREP} {q(st.log_path)} 2>/dev/null && r=1; "
                     f"echo \"@@ST {i} $a $r $h\" ) &")
    return "\n".join([*lines, "wait"])


def server_status(transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[ArmStatus]:
    """Per arm: pid, port, ready/starting/dead/stopped, uptime, mechanism, command; two
    round trips for all arms (the state files, checked first, then their processes). Arms
    named in `arms` without a state file are "stopped"."""
    wd = transport.expand(workdir)
    states = read_states(transport, wd)
    ordered = [states[a] for a in sorted(states)]
    res = _run(transport, _status_script(ordered), timeout=_RUN_TIMEOUT + HEALTH_PATIENCE_S)
    now = None
    rows: dict[int, list[str]] = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["@@NOW"] and len(parts) == 2:
            now = _host_time(parts[1])
        elif parts[:1] == ["@@ST"] and len(parts) == 5 and parts[1].isdigit():
            rows[int(parts[1])] = parts[2:]
    found: dict[str, ArmStatus] = {}
    for i, st in enumerate(ordered):
        a, r, h = rows.get(i, ["0", "0", "000"])
        if a != "1":
            state = "dead"
        elif h == "200" and r == "1":
            state = "ready"
        else:
            state = "starting"
        found[st.arm] = ArmStatus(
            st.arm, state, st.pid, st.port,
            # the host's clock against the launch's; never negative (a clock of whole
            # seconds read within the launch's second would make it so)
            max(0.0, now - st.started_at) if (now and a == "1") else None,
            st.mechanism, st.command, h, st.log_path, st.effective_threshold)
    names = list(arms) if arms is not None else sorted(found)
    return [found.get(a) or ArmStatus(a, "stopped", log_path=paths.server_log(wd, a)) for a in names]


def server_info(transport: Transport, state: ServerState, timeout: float = 10.0) -> dict[str, Any]:
    """The server's resolved args (`/server_info`, or `/get_server_info` on older SGLang); a
    server that shows neither (vLLM) answers `/version`: its version alone."""
    for path in ("/server_info", "/get_server_info", "/version"):
        res = transport.run(["curl", "-s", "-f", "-m", str(int(timeout)), f"http://{state.address}:{state.port}{path}"],
                            timeout=timeout + 5)
        if res.ok and res.stdout.strip():
            try:
                return cast(dict[str, Any], json.loads(res.stdout))  # the server's JSON
            except ValueError:
                continue
    raise StepError(f"no /server_info from port {state.port}", where=_where(transport, state.arm))


def check_version(transport: Transport, state: ServerState, info: dict[str, Any]) -> None:
    """The server that answered must be the tree's engine: `/server_info`'s version equals
    the tree's. A server launched with another python (or from a folder that shadows the
    package) answers with another version, and results would be credited to the wrong code."""
    want = state.engine_version
    got = info.get("version")
    if want is None or got == want:
        return
    title = engine_of(state.argv, state.engine).title
    raise StepError(f"server '{state.arm}' answers as {title} {got or '(no version in /server_info)'}, "
                    f"but the tree is {want}: the server does not run the checked-out tree",
                    where=_where(transport, state.arm),
                    hint=f"the server ran: {state.command}; install the tree into that python "
                         "(the sglang_install step) or fix `sglang_venv`")


def launched_before_boot(transport: Transport, workdir: str, arms: Sequence[str]) -> set[str]:
    """Which of `arms` (state files left, processes gone) were launched before the host's
    last boot: their state file is older than the boot, by the host's own clock. Lets
    `status` say "the host rebooted" instead of a bare "dead". One round trip."""
    if not arms:
        return set()
    d = paths.servers_dir(transport.expand(workdir))
    files = " ".join(q(posixpath.join(d, f"{a}.json")) for a in arms)
    script = (f"echo \"@@BOOT $(awk '/^btime /{{print $2}}' /proc/stat 2>/dev/null)\"; "
              f"for f in {files}; do [ -e \"$f\" ] && echo \"@@M $(stat -c %Y \"$f\") $(basename \"$f\" .json)\"; done; true")
    res = _run(transport, script)
    boot: float | None = None
    older: set[str] = set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["@@BOOT"] and len(parts) == 2 and parts[1].isdigit():
            boot = float(parts[1])
        elif parts[:1] == ["@@M"] and len(parts) == 3 and parts[1].isdigit() and boot is not None:
            if float(parts[1]) < boot:
                older.add(parts[2])
    return older


# --- the supervisor -----------------------------------------------------------------------

def describe_plan(plan: LaunchPlan) -> list[str]:
    """What `--check` shows for a local arm: the detached command, its config file, its notes."""
    lines = [f"[{plan.arm}] ({plan.mechanism}) setsid nohup {plan.command} > {plan.log_path} 2>&1 < /dev/null &"]
    if plan.config_json:
        lines.append(f"[{plan.arm}] write {plan.config_path}: {plan.config_json}")
    return lines + [f"[{plan.arm}] note: {n}" for n in plan.notes]


class LocalSupervisor:
    """servers.supervisor's Supervisor for a host without a `slurm:` block: the arms are
    detached processes on the host itself, reached on loopback (the functions above)."""

    kind = "local"
    #: specops places the arms on the host's GPUs and starts arms that share one in waves
    scheduled = False
    containers = True

    def adapt(self, plan: LaunchPlan) -> LaunchPlan:
        return plan

    def describe(self, plan: LaunchPlan) -> list[str]:
        return describe_plan(plan)

    def launch(self, transport: Transport, plan: LaunchPlan, *, reuse: bool = True, launched_by: str | None = None,
               ephemeral: bool = False) -> LaunchOutcome:
        return launch_arm(transport, plan, reuse=reuse, launched_by=launched_by, ephemeral=ephemeral)

    def wait_ready(self, transport: Transport, states: Sequence[ServerState], timeout_s: float, poll_s: float = 0.5,
                   *, max_bytes: int = 256 * 1024, on_progress: Callable[[str], None] | None = None,
                   on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, float]:
        return wait_ready_many(transport, states, timeout_s, poll_s, max_bytes=max_bytes, on_progress=on_progress,
                               on_event=on_event)

    def stop(self, transport: Transport, states: Sequence[ServerState], *, grace_s: float = 10.0,
             port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
        return stop_states(transport, states, grace_s=grace_s, port_wait_s=port_wait_s, gpu_wait_s=gpu_wait_s)

    def stop_arms(self, transport: Transport, workdir: str, arms: Sequence[str] | None = None, *,
                  grace_s: float = 10.0, port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
        return stop_arms(transport, workdir, arms, grace_s, port_wait_s=port_wait_s, gpu_wait_s=gpu_wait_s)

    def status(self, transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[ArmStatus]:
        return server_status(transport, workdir, arms)

    def address(self, state: ServerState) -> str:
        return "127.0.0.1"

    def client_prefix(self, state: ServerState) -> list[str]:
        return []  # the client runs on the host, beside the server

    def end_reason(self, transport: Transport, state: ServerState) -> str | None:
        return None  # a process has no end state beyond its log (servers.logwatch reads that)

    def event_line(self, kind: str, data: dict[str, Any]) -> str | None:
        return None
