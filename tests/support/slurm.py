"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd from
Debian's packages, run as root in a temporary directory of their own (config, state,
spool, pid and log files, a munge key and socket) and stopped by pid at the end.

The node has this machine's real CPU count and `Gres=gpu:4` backed by plain files in
`gres.conf`: Slurm hands out GPU indices (visible in `scontrol show job -d` as IDX) but,
the files not being NVIDIA devices, does not export CUDA_VISIBLE_DEVICES. Client commands
find the cluster through `SLURM_CONF` (the `conf:` key of a host's `slurm:` block).

`python -m tests.support.slurm DIR` starts one by hand and waits for Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from specops.sim.testing import free_port

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "srun")
GPUS = 4
PARTITION = "debug"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    partition: str = PARTITION
    gpus: int = GPUS
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def slurm_block(self, **extra) -> dict:
        """The `slurm:` block of an inventory host on this cluster."""
        return {"partition": self.partition, "conf": str(self.conf), **extra}

    def jobs(self) -> list[str]:
        """Ids of the jobs the cluster still runs or queues."""
        out = self.run("squeue", "-h", "-o", "%i").stdout
        return [ln.strip() for ln in out.splitlines() if ln.strip()]

    def cancel_all(self) -> None:
        ids = self.jobs()
        if ids:
            self.run("scancel", *ids, check=False)
        deadline = time.monotonic() + 30
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    absent = [p for p in DAEMONS if not os.access(p, os.X_OK)] + [c for c in CLIENTS if shutil.which(c) is None]
    if absent:
        return (f"Slurm tests need Debian's slurmctld, slurmd, munge and slurm-client ({', '.join(absent)} "
                f"missing); .ci/run installs them")
    if os.geteuid() != 0:
        return "Slurm tests start slurmd, which must run as root"
    return None


def _conf_text(root: Path, node: str, cpus: int, ctld_port: int, d_port: int, socket_path: Path) -> str:
    return f"""\
ClusterName=specops-test
SlurmctldHost={node}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket_path}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
LaunchParameters=use_interactive_step
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=2
MinJobAge=300
MessageTimeout=10
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


def _wait(what: str, ok, proc: subprocess.Popen | None, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise RuntimeError(f"{what} did not come up; {log}:\n{tail}")


def start_cluster(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under `root`; raises RuntimeError with the
    daemon's log when one does not come up."""
    for d in ("state", "spool", "run", "log", "munge", "gpu"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    node = socket.gethostname().split(".")[0]
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = root / "munge" / "munge.socket"
    for i in range(GPUS):
        (root / "gpu" / f"gpu{i}").write_bytes(b"")
    conf = root / "slurm.conf"
    conf.write_text(_conf_text(root, node, os.cpu_count() or 1, free_port(), free_port(), sock))
    (root / "gres.conf").write_text(f"NodeName={node} Name=gpu File={root}/gpu/gpu[0-{GPUS - 1}]\n")
    cluster = SlurmCluster(root=root, conf=conf, node=node)
    env = cluster.env
    try:
        mlog = root / "log" / "munged.log"
        cluster.procs["munged"] = subprocess.Popen(
            ["/usr/sbin/munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
             f"--pid-file={root}/run/munged.pid", f"--log-file={mlog}", f"--seed-file={root}/munge/seed"],
            stdout=subprocess.DEVNULL, stderr=open(mlog, "ab"), start_new_session=True)
        _wait("munged", sock.exists, cluster.procs["munged"], mlog)
        clog = root / "log" / "slurmctld.log"
        cluster.procs["slurmctld"] = subprocess.Popen(
            ["/usr/sbin/slurmctld", "-D", "-i", "-f", str(conf)], env=env,
            stdout=subprocess.DEVNULL, stderr=open(clog, "ab"), start_new_session=True)
        _wait("slurmctld", lambda: subprocess.run(["scontrol", "ping"], env=env, capture_output=True,
                                                   text=True, timeout=10).stdout.count("UP") >= 1,
              cluster.procs["slurmctld"], clog)
        dlog = root / "log" / "slurmd.log"
        cluster.procs["slurmd"] = subprocess.Popen(
            ["/usr/sbin/slurmd", "-D", "-f", str(conf), "-N", node], env=env,
            stdout=subprocess.DEVNULL, stderr=open(dlog, "ab"), start_new_session=True)

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-n", node, "-o", "%t"], env=env, capture_output=True,
                                 text=True, timeout=10).stdout.strip()
            return out in ("idle", "mix", "alloc")

        _wait("slurmd (node idle)", idle, cluster.procs["slurmd"], dlog)
    except BaseException:
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: SlurmCluster) -> None:
    """Cancel what still runs, then stop the daemons by pid (slurmd first)."""
    if "slurmctld" in cluster.procs and cluster.procs["slurmctld"].poll() is None:
        try:
            cluster.cancel_all()
        except (OSError, subprocess.SubprocessError):
            pass
    for name in ("slurmd", "slurmctld", "munged"):
        proc = cluster.procs.get(name)
        if proc is None or proc.poll() is not None:
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A running single-node cluster for the whole session; skips with the reason where
    the packages (or root) are missing."""
    why = missing()
    if why:
        pytest.skip(why)
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@pytest.fixture
def slurm_clean(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster, with every job cancelled after the test."""
    try:
        yield slurm
    finally:
        slurm.cancel_all()


if __name__ == "__main__":  # pragma: no cover - manual use
    import sys

    c = start_cluster(Path(sys.argv[1]))
    print(f"export SLURM_CONF={c.conf}", flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        stop_cluster(c)
