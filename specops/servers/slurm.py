"""The Slurm supervisor (servers.supervisor): arms as batch jobs. The `slurm:` block of a
host, the job script, `sbatch`, job states from `scontrol show job -d`, readiness,
`scancel`, status.

A Slurm host is an SSH (or local) host whose `slurm:` block says how to ask the cluster
for GPUs. Everything specops runs on it runs on the login node, in a workdir on the
cluster's shared filesystem; only the servers (and the benchmark client, as a step of
the server's job: `srun --jobid J --overlap`) run on compute nodes. An arm's state file
records its job id, node and GPU indices under `slurm`. This module knows nothing of local
processes (servers.lifecycle, the other supervisor, and this one import nothing of each
other): a state file a local process wrote is refused by name.

Every cluster command is an argv list (shell-quoted), each poll one round trip for all
arms: `scontrol show job -d` for each job, `/health` on node:port from the login node,
and the new part of the job's output file.
"""

from __future__ import annotations

import base64
import dataclasses
import posixpath
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from specops.config.slurm import SlurmSettings
from specops.errors import StepError, TransportError
from specops.hostfiles import paths
from specops.secrets import clip, env_file_text, loader_argv, redact
from specops.servers.launch import LaunchPlan
from specops.servers.logwatch import (
    READY_GREP,
    chunk_script,
    crash_blocks,
    crash_excerpt,
    parse_chunk_line,
)
from specops.servers.records import (
    ArmStatus,
    LaunchOutcome,
    ServerState,
    StopResult,
    read_state,
    read_states,
    refuse_foreign,
)
from specops.servers.records import where as _where
from specops.servers.remote import FUNCS, HEALTH_PATIENCE_S, POLL_HEALTH_S, q
from specops.servers.watch import ArmWatch, not_ready_error, wait
from specops.transport.base import Transport, command_line

#: A job in one of these states has ended; the server is gone.
ENDED = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE", "GONE")
#: Still queued (or about to run): the readiness wait keeps waiting and shows the reason.
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")
#: The server binds every interface on its node: the login node probes it there.
BIND = "0.0.0.0"
_RUN_TIMEOUT = 60.0


# --- plans and the job script -----------------------------------------------------------

def adapt_plan(plan: LaunchPlan, settings: SlurmSettings) -> LaunchPlan:
    """The arm's plan as a batch job: it binds every interface of its node (probed from the
    login node), asks the scheduler for as many GPUs as the arm names (CUDA_VISIBLE_DEVICES
    then comes from the allocation, not from the arm's indices)."""
    argv = list(plan.argv)
    for i, a in enumerate(argv[:-1]):
        if a == "--host":
            argv[i + 1] = BIND
    env = dict(plan.env)
    devices = [d for d in env.pop("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    gpus = len(devices) if devices else settings.gpus_per_arm
    return dataclasses.replace(plan, argv=argv, env=env, slurm={**settings.to_dict(), "gpus_per_arm": gpus})


#: Allocation k (k >= 2) of a `nodes: N` sweep serves each arm on its port + (k - 1) * this,
#: so that two allocations landing on one node do not collide.
REPLICA_PORT_STRIDE = 100


def replicas(plan: LaunchPlan) -> int:
    """How many allocations a bench runs this arm on (`nodes:`), 1 outside Slurm."""
    return max(1, int((plan.slurm or {}).get("nodes") or 1))


def replica_plan(plan: LaunchPlan, k: int) -> LaunchPlan:
    """The arm's plan on allocation k (1-based; 1 is the plan itself): its own name
    (`baseline#2`: state file, log, job name), its own port."""
    if k == 1:
        return plan
    name = f"{plan.arm}#{k}"
    port = plan.port + REPLICA_PORT_STRIDE * (k - 1)
    argv = list(plan.argv)
    for i, a in enumerate(argv[:-1]):
        if a == "--port":
            argv[i + 1] = str(port)
    return dataclasses.replace(plan, arm=name, port=port, argv=argv, log_path=paths.server_log(plan.workdir, name),
                               state_path=paths.server_state(plan.workdir, name))


def script_path(plan: LaunchPlan) -> str:
    return posixpath.join(posixpath.dirname(plan.state_path), f"{plan.arm}.sbatch")


#: Turn Slurm's IDX list ("0-1,3") into CUDA_VISIBLE_DEVICES ("0,1,3").
_IDX_TO_LIST = r"""
_idx_list() { local out= p a b; for p in ${1//,/ }; do
  case "$p" in *-*) a=${p%-*}; b=${p#*-}; while [ "$a" -le "$b" ]; do out="$out${out:+,}$a"; a=$((a+1)); done;;
  *) out="$out${out:+,}$p";; esac; done; echo "$out"; }
"""


def job_script(plan: LaunchPlan) -> str:
    """The batch script: GPUs from the allocation where the cluster does not export them,
    its port checked on the node, then the server in the job's place, its environment (and
    the host's secrets) sourced from the 0600 files on the shared filesystem: no value is in
    the script or on a command line."""
    env_files = [paths.server_env(plan.workdir, plan.arm)] + ([plan.secrets_file] if plan.secrets_file else [])
    loader = " ".join(q(a) for a in loader_argv(*env_files))
    return "\n".join([
        "#!/bin/bash",
        f"# specops arm '{plan.arm}' ({plan.mechanism}); submitted by specops with sbatch",
        _IDX_TO_LIST.strip(),
        'if [ -z "${CUDA_VISIBLE_DEVICES:-}" ] && [ -n "${SLURM_JOB_ID:-}" ]; then',
        '  idx=$(scontrol show job -d "$SLURM_JOB_ID" 2>/dev/null | sed -n "s/.*IDX:\\([0-9,-]*\\)).*/\\1/p" | head -1)',
        '  [ -n "$idx" ] && export CUDA_VISIBLE_DEVICES=$(_idx_list "$idx")',
        "fi",
        'echo "specops: job ${SLURM_JOB_ID:-?} on $(hostname), CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"',
        f"mkdir -p {q(plan.cwd or plan.workdir)} && cd {q(plan.cwd or plan.workdir)} || exit 12",
        f"if (exec 3<>/dev/tcp/127.0.0.1/{plan.port}) 2>/dev/null; then "
        f"echo 'specops: port {plan.port} is already in use on this node' >&2; exit 10; fi",
        f"exec {loader} {' '.join(q(a) for a in plan.argv)} < /dev/null",
        "",
    ])


def sbatch_argv(plan: LaunchPlan) -> list[str]:
    settings = SlurmSettings.from_dict(plan.slurm or {})
    argv = ["sbatch", "--parsable", f"--job-name=specops-{plan.arm}", f"--output={plan.log_path}",
            f"--chdir={plan.workdir}", *settings.request(settings.gpus_per_arm), script_path(plan)]
    return settings.command(argv)


def describe_plan(plan: LaunchPlan) -> list[str]:
    """What `--check` shows for a Slurm arm: the sbatch command and the script it submits."""
    return [f"[{plan.arm}] ({plan.mechanism}) {command_line(sbatch_argv(plan))}",
            f"[{plan.arm}] job script {script_path(plan)}: {plan.command}"]


# --- job state ---------------------------------------------------------------------------

@dataclass
class JobInfo:
    """What `scontrol show job -d` says about one job."""

    job_id: str
    state: str  # JobState, or GONE when the controller no longer knows the job
    reason: str = ""
    node: str = ""
    gpus: list[int] = field(default_factory=list)
    exit_code: str = ""
    run_time_s: int | None = None
    time_limit_s: int | None = None  # None = UNLIMITED

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def time_left_s(self) -> int | None:
        if self.time_limit_s is None or self.run_time_s is None:
            return None
        return max(0, self.time_limit_s - self.run_time_s)

    def describe(self) -> str:
        """"job 12 FAILED (NonZeroExitCode, exit 1:0)" for messages."""
        bits = [b for b in (self.reason if self.reason not in ("None", "") else "",
                            f"exit {self.exit_code}" if self.exit_code not in ("", "0:0") else "") if b]
        return f"job {self.job_id} {self.state}" + (f" ({', '.join(bits)})" if bits else "")


_TOKEN = re.compile(r"(?:^|\s)([A-Za-z_/:]+)=(\S*)")


def parse_duration(text: str) -> int | None:
    """Slurm's [D-]HH:MM:SS (or MM:SS) in seconds; None for UNLIMITED / unknown."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "N/A", "NONE"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts[-3:]
    return ((days * 24 + h) * 60 + m) * 60 + s


def expand_idx(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out += list(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def parse_job(job_id: str, text: str) -> JobInfo:
    """Parse `scontrol show job -d ID` (its lines joined or not)."""
    if "Invalid job id" in text or "JobState=" not in text:
        return JobInfo(job_id, "GONE", reason=clip(text.strip().splitlines()[-1], 160, keep="start") if text.strip() else "")
    tokens: dict[str, str] = {}
    for m in _TOKEN.finditer(text):
        tokens.setdefault(m.group(1), m.group(2))
    node = tokens.get("BatchHost", "")
    if node in ("(null)", "None"):
        node = ""
    if not node:
        nodes = tokens.get("NodeList", "")
        node = "" if nodes in ("(null)", "") else nodes.split(",")[0]
    idx = re.search(r"IDX:([0-9,\-]+)", text)
    state = tokens.get("JobState", "UNKNOWN")
    return JobInfo(job_id, state, reason=tokens.get("Reason", ""), node=node,
                   gpus=expand_idx(idx.group(1)) if idx else [], exit_code=tokens.get("ExitCode", ""),
                   run_time_s=parse_duration(tokens.get("RunTime", "")),
                   time_limit_s=parse_duration(tokens.get("TimeLimit", "")))


def _conf(state: ServerState) -> SlurmSettings:
    return SlurmSettings(conf=(state.slurm or {}).get("conf"))


def _job_script(state: ServerState, health_s: float = POLL_HEALTH_S) -> str:
    """Prints `@@J <base64 of scontrol show job -d>`, then `@@H <code>` from node:port/health
    (waiting at most `health_s` for it)."""
    job = (state.slurm or {}).get("job_id", "")
    show = " ".join(q(a) for a in _conf(state).command(["scontrol", "show", "job", "-d", str(job)]))
    return (f"j=$({show} 2>&1); printf '@@J %s\\n' \"$(printf '%s' \"$j\" | base64 -w0)\"; h=000; "
            f"case \"$j\" in *JobState=RUNNING*) "
            f"n=$(printf '%s' \"$j\" | sed -n 's/.*BatchHost=\\([^ ]*\\).*/\\1/p' | head -1); "
            f"[ -n \"$n\" ] && h=$(_health_at \"$n\" {int(state.port)} {q(state.ready_path or '/health')} {int(health_s)});; esac; echo \"@@H $h\"")


@dataclass
class JobProbe:
    job: JobInfo
    health: str


def _parse_probes(states: Sequence[ServerState], stdout: str, host: str) -> list[JobProbe]:
    jobs = [ln[4:] for ln in stdout.splitlines() if ln.startswith("@@J ")]
    healths = [ln.split() for ln in stdout.splitlines() if ln.startswith("@@H ")]
    if len(jobs) != len(states) or len(healths) != len(states):
        raise TransportError(f"reading Slurm jobs failed: {clip(stdout, 500)}", where=f"host {host}")
    out = []
    for st, blob, h in zip(states, jobs, healths, strict=True):
        text = base64.b64decode(blob).decode(errors="replace") if blob else ""
        out.append(JobProbe(parse_job(str((st.slurm or {}).get("job_id", "")), text), h[1] if len(h) > 1 else "000"))
    return out


def probe_jobs(transport: Transport, states: Sequence[ServerState],
               health_s: float = POLL_HEALTH_S) -> list[JobProbe]:
    """Job state and /health for each arm, one round trip."""
    if not states:
        return []
    res = transport.run(FUNCS + "\n".join(_job_script(st, health_s) for st in states),
                        timeout=_RUN_TIMEOUT + len(states) * health_s)
    return _parse_probes(states, res.stdout, transport.name)


# --- submit ------------------------------------------------------------------------------

def submit(transport: Transport, plan: LaunchPlan) -> ServerState:
    """Write the job script beside the state file and sbatch it; the state records the job."""
    where = _where(transport, plan.arm)
    transport.run(["mkdir", "-p", posixpath.dirname(plan.log_path), posixpath.dirname(plan.state_path)],
                  timeout=_RUN_TIMEOUT)
    if plan.config_path and plan.config_json is not None:
        transport.put(plan.config_json.encode(), plan.config_path)
    transport.put(env_file_text(plan.env).encode(), paths.server_env(plan.workdir, plan.arm), mode=0o600)
    # 0700: it names the arm's argv; sbatch copies the script at submission, so it needs no more
    transport.put(job_script(plan).encode(), script_path(plan), mode=0o700)
    transport.run(["bash", "-c", 'if [ -e "$1" ]; then mv -f "$1" "$1.1"; fi', "rotate", plan.log_path],
                  timeout=_RUN_TIMEOUT)
    res = transport.run(sbatch_argv(plan), timeout=_RUN_TIMEOUT)
    job_id = res.stdout.strip().splitlines()[-1].split(";")[0].strip() if res.ok and res.stdout.strip() else ""
    if not res.ok or not job_id.isdigit():
        raise StepError(f"sbatch refused the job for arm '{plan.arm}' (rc {res.rc}): {res.tail(6)}", where=where,
                        hint="check the host's slurm: settings (partition, account, qos, gpus)")
    settings = dict(plan.slurm or {})
    state = ServerState(
        arm=plan.arm, kind=plan.kind, pid=-1, pgid=-1, proc_start="", port=plan.port, command=redact(plan.command),
        argv=redact(plan.argv), env=redact(plan.env), args_hash=plan.args_hash, log_path=plan.log_path,
        state_path=plan.state_path, mechanism=plan.mechanism, started_at=time.time(), workdir=plan.workdir,
        model=plan.model, config_path=plan.config_path, effective_threshold=plan.effective_threshold,
        notes=plan.notes, engine_version=plan.engine_version, engine=plan.engine,
        slurm={"job_id": job_id, "node": "", "gpus": [], "conf": settings.get("conf"),
               "gpus_asked": settings.get("gpus_per_arm"), "state": "PENDING"})
    # masked as the local supervisor's, and 0600: the workdir is on the cluster's shared filesystem
    transport.put(state.to_json(), plan.state_path, mode=0o600)
    return state


def launch_arm(transport: Transport, plan: LaunchPlan, existing: ServerState | None, *,
               reuse: bool = True) -> LaunchOutcome:
    """Reuse the arm's running job (`existing`, its state file) when it serves the same args
    hash; else cancel that job and submit a new one. A local process recorded under the
    arm's name is refused (records.refuse_foreign)."""
    action = "launched"
    if existing is not None:
        refuse_foreign(transport, [existing], slurm=True)
        (p,) = probe_jobs(transport, [existing])
        alive = p.job.state == "RUNNING"
        if reuse and alive and p.health == "200" and existing.args_hash == plan.args_hash:
            return LaunchOutcome(existing, "reused")
        stop_states(transport, [existing])
        action = "restarted" if alive else action
    return LaunchOutcome(submit(transport, plan), action)


# --- readiness ---------------------------------------------------------------------------

@dataclass
class _Watch(ArmWatch):
    job: JobInfo | None = None
    seen: str = ""  # last state+reason reported
    running_at: float | None = None


class _Jobs:
    """servers.watch's Source for batch jobs: `scontrol show job -d`, /health on node:port
    from the login node and the output file's new bytes, one round trip for all arms. Each
    change of a job's state or reason goes to `report`; a job that starts running has its
    node and GPUs written into its state file."""

    def __init__(self, transport: Transport, report: Callable[[str, dict[str, Any]], None]) -> None:
        self.transport, self.report = transport, report

    def poll(self, watches: Sequence[_Watch], max_bytes: int) -> None:
        script = FUNCS + "\n".join(_job_script(w.state, w.health_s()) + "\n"
                                    + chunk_script(w.state.log_path, w.offset, max_bytes) for w in watches)
        res = self.transport.run(script, timeout=_RUN_TIMEOUT + sum(w.health_s() for w in watches))
        probes = _parse_probes([w.state for w in watches], res.stdout, self.transport.name)
        logs = [ln for ln in res.stdout.splitlines() if ln.startswith("@@LOG ")]
        if len(logs) != len(watches):
            raise TransportError(f"readiness poll failed: {res.tail(5)}", where=f"host {self.transport.name}")
        for w, p, lg in zip(watches, probes, logs, strict=True):
            w.job, w.health = p.job, p.health
            w.feed(parse_chunk_line(w.state.log_path, lg).data)
            self._seen(w, p.job)

    def _seen(self, w: _Watch, job: JobInfo) -> None:
        key = f"{job.state}/{job.reason}"
        if key != w.seen:
            w.seen = key
            self.report("slurm_job", {"arm": w.state.arm, "job_id": job.job_id, "job_state": job.state,
                                      "reason": job.reason, "node": job.node, "gpus": job.gpus})
        if job.state == "RUNNING" and w.running_at is None:
            w.running_at = time.monotonic()
            _record_running(self.transport, w)

    def gone(self, w: _Watch) -> bool:
        return w.job is not None and w.job.ended

    def serving(self, w: _Watch) -> bool:
        return w.job is not None and w.job.state == "RUNNING"

    def fail(self, w: _Watch, elapsed: float) -> StepError:
        job = w.job.describe() if w.job is not None else "job ?"
        if self.gone(w):
            return _fail(self.transport, w, f"{job} {elapsed:.1f}s after submission")
        return _fail(self.transport, w, f"logged a crash ({job})")

    def not_ready(self, w: _Watch, timeout_s: float) -> StepError:
        last_job = w.job
        if last_job is not None and last_job.state in WAITING:
            return StepError(f"server '{w.state.arm}': job {last_job.job_id} still {last_job.state} after {timeout_s:.0f}s "
                             f"(reason: {last_job.reason})", where=_where(self.transport, w.state.arm),
                             hint="the cluster has no free allocation of that size: ask for fewer GPUs, another "
                                  "partition, or raise the step's timeout")
        return not_ready_error(self.transport, w, timeout_s,
                               f"/health on {(last_job.node if last_job else '') or '?'}:{w.state.port}")


def _record_running(transport: Transport, w: _Watch) -> None:
    """Node and GPU indices into the state file, once the job runs."""
    assert w.job is not None
    slurm = dict(w.state.slurm or {})
    slurm.update(node=w.job.node, gpus=w.job.gpus, state=w.job.state)
    w.state.slurm = slurm
    transport.put(w.state.to_json(), w.state.state_path, mode=0o600)


def _fail(transport: Transport, w: _Watch, what: str) -> StepError:
    st = w.state
    excerpt = crash_excerpt(w.text) if w.text.strip() else "(the job wrote nothing)"
    blocks = crash_blocks(w.text)
    if blocks:
        what += f" ({clip(blocks[-1].splitlines()[-1].strip(), 160, keep='start')})"
    return StepError(f"server '{st.arm}' {what}; log {st.log_path}:\n{excerpt}", where=_where(transport, st.arm),
                     hint=f"specops logs --server {st.arm} --errors; job script {posixpath.dirname(st.state_path)}"
                          f"/{st.arm}.sbatch")


def wait_ready_many(transport: Transport, states: Sequence[ServerState], timeout_s: float, poll_s: float = 0.5,
                    *, max_bytes: int = 256 * 1024, on_progress: Callable[[str], None] | None = None,
                    on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, float]:
    """Wait (servers.watch) until every arm's job runs, its /health on node:port answers 200
    and the ready line is in its output file. While a job is queued, each change of its
    state or reason is reported through `on_event("slurm_job", {...})`. A job that ends, or
    a crash line in the log, fails with the job's state and reason and the log excerpt; the
    timeout fails with what was missing (a queued job's reason among it)."""
    source = _Jobs(transport, on_event or (lambda _k, _d: None))
    return wait(transport, source, [_Watch(st) for st in states], timeout_s, poll_s, max_bytes=max_bytes,
                on_progress=on_progress)


# --- stop and status ---------------------------------------------------------------------

def stop_states(transport: Transport, states: Sequence[ServerState], *, wait_s: float = 60.0) -> list[StopResult]:
    """scancel each arm's job and wait (bounded) until the controller says it has ended;
    then remove the state files."""
    if not states:
        return []
    refuse_foreign(transport, states, slurm=True)
    before = probe_jobs(transport, states)
    live = [st for st, p in zip(states, before, strict=True) if not p.job.ended]
    by_conf: dict[str | None, list[str]] = {}
    for st in live:
        by_conf.setdefault((st.slurm or {}).get("conf"), []).append(str((st.slurm or {}).get("job_id")))
    for conf, ids in by_conf.items():
        transport.run(SlurmSettings(conf=conf).command(["scancel", *ids]), timeout=_RUN_TIMEOUT)
    deadline = time.monotonic() + wait_s
    after = before
    while live:
        after = probe_jobs(transport, states)
        if all(p.job.ended for p in after) or time.monotonic() >= deadline:
            break
        time.sleep(0.3)
    results, problems = [], []
    for st, b, a in zip(states, before, after, strict=True):
        job_id = str((st.slurm or {}).get("job_id"))
        results.append(StopResult(st.arm, st.pid, st.port, not b.job.ended, None if b.job.ended else "scancel",
                                  a.job.ended, None, job_id=job_id))
        if not a.job.ended:
            problems.append(f"server '{st.arm}': job {job_id} still {a.job.state} {wait_s:.0f}s after scancel")
    # paths checked when the file was read: inside the workdir; `--`: none is ever an option
    files = [st.state_path for st, a in zip(states, after, strict=True) if a.job.ended]
    files += [st.config_path for st in states if st.config_path]
    if files:
        transport.run(["rm", "-f", "--", *files], timeout=_RUN_TIMEOUT)
    if problems:
        raise StepError("; ".join(problems), where=f"host {transport.name}")
    return results


def statuses(transport: Transport, states: Sequence[ServerState]) -> dict[str, ArmStatus]:
    """ArmStatus per arm from its job: ready / starting (queued or loading) / dead (ended)."""
    probes = probe_jobs(transport, states, HEALTH_PATIENCE_S)
    script = "\n".join(f"grep -m1 -qF {READY_GREP} {q(st.log_path)} 2>/dev/null && echo '@@R 1' || echo '@@R 0'"
                       for st in states)
    ready = [ln.split()[1] == "1" for ln in transport.run(script, timeout=_RUN_TIMEOUT).stdout.splitlines()
             if ln.startswith("@@R ")] if states else []
    out = {}
    for i, (st, p) in enumerate(zip(states, probes, strict=True)):
        job = p.job
        if job.ended:
            state = "dead"
        elif job.state == "RUNNING" and p.health == "200" and i < len(ready) and ready[i]:
            state = "ready"
        else:
            state = "starting"
        out[st.arm] = ArmStatus(st.arm, state, None, st.port,
                                float(job.run_time_s) if job.state == "RUNNING" and job.run_time_s is not None
                                else None, st.mechanism, st.command, p.health, st.log_path,
                                st.effective_threshold, job_id=job.job_id, node=job.node or None,
                                job_state=job.state, reason=job.reason, time_left_s=job.time_left_s,
                                gpus=job.gpus or list((st.slurm or {}).get("gpus") or []))
    return out


def stop_arms(transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[StopResult]:
    """Cancel the named arms' jobs (all recorded ones when None) under `workdir`."""
    states = read_states(transport, workdir)
    return stop_states(transport, [states[a] for a in (arms if arms is not None else sorted(states)) if a in states])


def server_status(transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[ArmStatus]:
    """`statuses` of every recorded arm; arms named in `arms` without a state file are "stopped"."""
    wd = transport.expand(workdir)
    states = read_states(transport, wd)
    found = statuses(transport, [states[a] for a in sorted(states)])
    names = list(arms) if arms is not None else sorted(found)
    return [found.get(a) or ArmStatus(a, "stopped", log_path=paths.server_log(wd, a)) for a in names]


def job_end(transport: Transport, state: ServerState) -> str | None:
    """"job 12 CANCELLED (...)" when the arm's job has ended, else None."""
    if not state.slurm:
        return None
    (p,) = probe_jobs(transport, [state])
    return p.job.describe() if p.job.ended else None


def client_prefix(state: ServerState) -> list[str]:
    """Run a command as a step of the arm's job, on its node, beside the server."""
    if not state.slurm:
        return []
    job = str(state.slurm.get("job_id"))
    return _conf(state).command(["srun", f"--jobid={job}", "--overlap", "--nodes=1", "--ntasks=1", "--quiet"])


def cluster_gpus(transport: Transport, settings: SlurmSettings) -> list[str]:
    """`hosts check` on a Slurm host: the partitions' state, nodes and GPUs as the login node's
    `sinfo` sees them (the login node itself has none)."""
    argv = ["sinfo", "-h", "-o", "%P|%a|%D|%G"] + ([f"--partition={settings.partition}"] if settings.partition else [])
    res = transport.run(settings.command(argv), timeout=_RUN_TIMEOUT)
    if not res.ok:
        return [f"slurm: sinfo failed (rc {res.rc}): {res.tail(2)}"]
    out = []
    for line in res.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            part, avail, nodes, gres = parts
            out.append(f"slurm {part} ({avail}): {nodes} node(s), {gres if gres != '(null)' else 'no GRES'}")
    return out or [f"slurm: no partition {settings.partition or ''} in sinfo".replace("  ", " ")]


def job_event_line(data: dict[str, Any]) -> str:
    """One line for a `slurm_job` event: `eagle3: job 13 PENDING (Resources)`, `... RUNNING on n1`."""
    reason = data.get("reason")
    return (f"{data.get('arm')}: job {data.get('job_id')} {data.get('job_state')}"
            + (f" ({reason})" if reason not in (None, "", "None") else "")
            + (f" on {data['node']}" if data.get("node") else ""))



class SlurmSupervisor:
    """servers.supervisor's Supervisor for a host with a `slurm:` block: each arm a batch
    job of its own, placed by the cluster's scheduler, reached on its node from the login node."""

    kind = "slurm"
    #: each arm in an allocation of its own that the scheduler places: no GPU placement or
    #: start waves here, and a sweep runs the arms side by side (one thread per job)
    scheduled = True
    containers = False  # pyxis/enroot containers are not built yet

    def __init__(self, settings: SlurmSettings) -> None:
        self.settings = settings

    def adapt(self, plan: LaunchPlan) -> LaunchPlan:
        return adapt_plan(plan, self.settings)

    def describe(self, plan: LaunchPlan) -> list[str]:
        return describe_plan(plan)

    def launch(self, transport: Transport, plan: LaunchPlan, *, reuse: bool = True, launched_by: str | None = None,
               ephemeral: bool = False) -> LaunchOutcome:
        """`launched_by`/`ephemeral` are the lease's (servers.lease); a job's state file does not record them."""
        return launch_arm(transport, plan, read_state(transport, plan.workdir, plan.arm), reuse=reuse)

    def wait_ready(self, transport: Transport, states: Sequence[ServerState], timeout_s: float, poll_s: float = 0.5,
                   *, max_bytes: int = 256 * 1024, on_progress: Callable[[str], None] | None = None,
                   on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, float]:
        return wait_ready_many(transport, states, timeout_s, poll_s, max_bytes=max_bytes, on_progress=on_progress,
                               on_event=on_event)

    def stop(self, transport: Transport, states: Sequence[ServerState], *, grace_s: float = 10.0,
             port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
        """scancel; the grace between the job's TERM and KILL is the cluster's (KillWait)."""
        return stop_states(transport, states)

    def stop_arms(self, transport: Transport, workdir: str, arms: Sequence[str] | None = None, *,
                  grace_s: float = 10.0, port_wait_s: float = 30.0, gpu_wait_s: float = 60.0) -> list[StopResult]:
        return stop_arms(transport, workdir, arms)

    def status(self, transport: Transport, workdir: str, arms: Sequence[str] | None = None) -> list[ArmStatus]:
        return server_status(transport, workdir, arms)

    def address(self, state: ServerState) -> str:
        return state.address  # the job's node, once it runs

    def client_prefix(self, state: ServerState) -> list[str]:
        return client_prefix(state)

    def end_reason(self, transport: Transport, state: ServerState) -> str | None:
        return job_end(transport, state)

    def event_line(self, kind: str, data: dict[str, Any]) -> str | None:
        return job_event_line(data) if kind == "slurm_job" else None
