"""What an arm's state file records (`ServerState`) and what launching, stopping and
status report about it; both backends (servers.lifecycle: local processes, servers.slurm:
batch jobs) read and return these, so they live below both of them."""

from __future__ import annotations

import base64
import json
import posixpath
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import specops.servers.recordfile as recordfile
from specops.errors import StepError
from specops.hostfiles import paths
from specops.servers.container import RUNTIMES, container_name
from specops.servers.remote import q
from specops.transport.base import Transport

_RUN_TIMEOUT = 60.0


@dataclass
class ServerState:
    """What the host's state file records about one launched arm."""

    arm: str
    kind: str
    pid: int
    pgid: int
    proc_start: str  # /proc/<pid>/stat starttime: tells our process from a reused pid
    port: int
    command: str
    argv: list[str]
    env: dict[str, str]
    args_hash: str
    log_path: str
    state_path: str
    mechanism: str
    started_at: float
    workdir: str
    model: str = ""
    config_path: str | None = None
    effective_threshold: int | None = None
    notes: list[str] = field(default_factory=list)
    ready_path: str = "/health"
    engine_version: str | None = None  # the tree's release (older state files: sglang_version)
    #: the registered engine that launched it (hosts.yaml's `engine:`); '' in older state files,
    #: which `engines.engine_of` recognises by argv instead
    engine: str = ""
    #: on a Slurm host: job_id, node, gpus (IDX), conf (servers.slurm's supervisor wrote it)
    slurm: dict[str, Any] | None = None
    #: the run that started this server, and whether it is stopped once the last run leasing it
    #: is done (a sweep's own servers) or stays up (deploy, --keep-servers)
    launched_by: str | None = None
    ephemeral: bool = False
    #: an arm run as a container (servers.container): runtime, image, image id, digest, name
    container: dict[str, Any] | None = None

    @property
    def address(self) -> str:
        """Where the host reaches the server: a Slurm job's node, else loopback."""
        return str((self.slurm or {}).get("node") or "127.0.0.1")

    def to_json(self) -> bytes:
        # One key per line: the status script reads pid/port/proc_start with sed.
        return (json.dumps(asdict(self), indent=1) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes | str, path: str | None = None) -> "ServerState":
        """Raises recordfile.BadRecord (a ValueError) for a file that does not fit. `path`:
        the file it was read from, which its `state_path` must name (`stop` removes that
        file: a state file naming another one would have specops delete it); the work
        directory it lies in bounds every path the record names (its own `workdir` without
        `path`). Every value that reaches a command is checked here, before anything runs."""
        st = recordfile.load(cls, data)
        if not st.arm.replace("-", "_").replace("_", "a").isalnum():
            raise recordfile.BadRecord(f"arm {st.arm[:40]!r} is not an arm name")
        if path is not None and posixpath.normpath(st.state_path) != posixpath.normpath(path):
            raise recordfile.BadRecord(f"its state_path {st.state_path[:200]!r} names another file")
        st._check_process()
        st._check_paths(_workdir_of(path) if path is not None else st.workdir)
        st._check_container()
        st._check_slurm()
        return st

    def _check_process(self) -> None:
        """pid and pgid reach `kill -- -PGID`: a local server's are one process group it
        leads (launch records pgid = pid); a Slurm job's are -1, never signalled."""
        recordfile.port("port", self.port)
        if not _READY_PATH.fullmatch(self.ready_path):
            raise recordfile.BadRecord(f"'ready_path' {self.ready_path[:40]!r} is not an endpoint path")
        if self.slurm:
            if (self.pid, self.pgid) != (-1, -1):
                raise recordfile.BadRecord(f"a Slurm job's 'pid'/'pgid' are {self.pid}/{self.pgid}, not -1/-1")
            return
        recordfile.pid("pid", self.pid)
        recordfile.pid("pgid", self.pgid)
        if self.pgid != self.pid:
            raise recordfile.BadRecord(f"'pgid' {self.pgid} is not its 'pid' {self.pid}: specops starts each "
                                       "server as the leader of its own process group")

    def _check_paths(self, root: str) -> None:
        """`status` and `logs` read the log, `stop` removes the state and config files: all
        inside the work directory the file was found in."""
        if posixpath.normpath(self.workdir) != posixpath.normpath(root):
            raise recordfile.BadRecord(f"'workdir' {self.workdir[:200]!r} is not the work directory {root}")
        for name in ("state_path", "log_path", "config_path"):
            value = getattr(self, name)
            if value is not None:
                recordfile.under(name, value, root)

    def _check_container(self) -> None:
        """`stop` runs `<runtime> stop NAME` and `rm -f NAME`: the runtime is podman or
        docker, the name the one specops gives this arm's container in this workdir."""
        if self.container is None:
            return
        recordfile.one_of("container.runtime", self.container.get("runtime"), RUNTIMES)
        want = container_name(self.workdir, self.arm)
        if self.container.get("name") != want:
            raise recordfile.BadRecord(f"'container.name' {str(self.container.get('name'))[:80]!r} is not "
                                       f"this arm's container {want}")

    def _check_slurm(self) -> None:
        """The job id reaches scancel's argv, the node a URL, the conf SLURM_CONF (where it
        names a file, the state is trusted: binding it to the host's `slurm:` block is the
        supervisor's choice, servers.supervisor)."""
        if self.slurm is None:
            return
        job = self.slurm.get("job_id")
        if job is not None and not (isinstance(job, str) and job.isdigit()):
            raise recordfile.BadRecord(f"its Slurm job_id {str(job)[:40]!r} is not a job number")
        node = self.slurm.get("node") or ""
        if not (isinstance(node, str) and _NODE.fullmatch(node)):
            raise recordfile.BadRecord(f"'slurm.node' {str(node)[:80]!r} is not a host name")
        conf = self.slurm.get("conf")  # the host's `slurm: conf`, any path it names: only its type is checked
        if conf is not None and not isinstance(conf, str):
            raise recordfile.BadRecord(f"'slurm.conf' {str(conf)[:200]!r} is not a path")


def _workdir_of(path: str) -> str:
    """The work directory a state file lies in: `<workdir>/.specops/servers/<arm>.json`."""
    return posixpath.dirname(posixpath.dirname(posixpath.dirname(posixpath.normpath(path))))


#: what a readiness endpoint (`/health`, `/ready`) and a Slurm node name may be
_READY_PATH = re.compile(r"/[A-Za-z0-9_/.-]*")
_NODE = re.compile(r"[A-Za-z0-9._-]*")


@dataclass
class LaunchOutcome:
    state: ServerState
    action: str  # "launched" | "reused" | "restarted"


@dataclass
class StopResult:
    arm: str
    pid: int
    port: int
    was_running: bool
    signal: str | None  # "TERM", "KILL" or None when nothing ran
    port_free: bool
    gpu_released: bool | None  # None where nvidia-smi does not exist
    job_id: str | None = None  # Slurm arms: the cancelled job


@dataclass
class ArmStatus:
    arm: str
    state: str  # ready | starting | dead | stopped
    pid: int | None = None
    port: int | None = None
    uptime_s: float | None = None
    mechanism: str | None = None
    command: str | None = None
    health: str | None = None
    log_path: str | None = None
    effective_threshold: int | None = None
    job_id: str | None = None  # Slurm arms: the job, its node, state, reason, time left and GPU indices
    node: str | None = None
    job_state: str | None = None
    reason: str | None = None
    time_left_s: int | None = None
    gpus: list[int] | None = None


def where(transport: Transport, arm: str) -> str:
    return f"host {transport.name}, server '{arm}'"


def read_state(transport: Transport, workdir: str, arm: str) -> ServerState | None:
    path = paths.server_state(transport.expand(workdir), arm)
    if transport.stat_size(path) is None:
        return None
    try:
        return ServerState.from_json(transport.get(path), path)
    except ValueError as exc:
        recordfile.skipped(path, transport.name, exc)
        return None  # a damaged state file is treated as no server


def read_states(transport: Transport, workdir: str) -> dict[str, ServerState]:
    """All state files under the workdir, in one round trip."""
    d = paths.servers_dir(transport.expand(workdir))
    script = (f"for f in {q(d)}/*.json; do [ -e \"$f\" ] || continue; "
              f"case \"$f\" in *.adaptive.json) continue;; esac; "
              f"printf '@@STATE %s %s\\n' \"$(base64 -w0 < \"$f\")\" \"$(printf %s \"$f\" | base64 -w0)\"; done")
    res = transport.run(script, timeout=_RUN_TIMEOUT)
    out: dict[str, ServerState] = {}
    for line in res.stdout.splitlines():
        if line.startswith("@@STATE "):
            blob, _, name = line[8:].partition(" ")
            try:
                st = ServerState.from_json(base64.b64decode(blob), recordfile.named(name))
            except ValueError as exc:
                recordfile.skipped(recordfile.named(name), transport.name, exc)
                continue
            out[st.arm] = st
    return out


def refuse_foreign(transport: Transport, states: Sequence[ServerState], *, slurm: bool) -> None:
    """One host, one supervisor (servers.supervisor): a state file the other one wrote (the
    host's `slurm:` block was added or removed while its servers ran) is refused by name
    before anything changes, with how to end that server."""
    for st in states:
        if bool(st.slurm) == slurm:
            continue
        if st.slurm:
            job = (st.slurm or {}).get("job_id")
            raise StepError(f"server '{st.arm}' runs as Slurm job {job} (state file {st.state_path}), but the host "
                            "has no slurm: block now", where=where(transport, st.arm),
                            hint="put the host's slurm: block back and run `specops stop`, or scancel the job "
                                 "and remove the state file")
        raise StepError(f"server '{st.arm}' runs as a local process (pid {st.pid}, state file {st.state_path}), "
                        "but the host has a slurm: block now", where=where(transport, st.arm),
                        hint=f"remove the host's slurm: block and run `specops stop`, or kill process group "
                             f"{st.pgid} and remove the state file")
