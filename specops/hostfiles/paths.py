"""Names on disk that every layer agrees on: specops's own state under a host's work directory
(servers, leases, logs, secrets, bench output, wheels) and inside a tree (patch backups),
whatever the engine.

They live here, below every layer that uses them (patching, servers, bench, steps, render),
and import nothing, so `specops status` on one machine finds the state files `specops deploy`
wrote from another. Every path is POSIX: the host may not be this machine.
"""

from __future__ import annotations

import posixpath

# ---------------------------------------------------------------- inside a tree

#: specops's own files inside a tree (patch backups); excluded from git in trees specops made.
TREE_STATE_DIR = ".specops"
#: Per patch set: backups and the manifest of what was applied (`<tree>/.specops/patches/<set>/`).
PATCH_STATE_DIR = f"{TREE_STATE_DIR}/patches"


# ---------------------------------------------------------------- under a host's work directory

def state_dir(workdir: str) -> str:
    """`<workdir>/.specops`: everything specops keeps on a host."""
    return posixpath.join(workdir, ".specops")


def secrets_env(workdir: str) -> str:
    """`<workdir>/.specops/secrets.env` (mode 0600): the host's secrets, sourced by the
    process that starts a server, the benchmark or a download; never on a command line."""
    return posixpath.join(state_dir(workdir), "secrets.env")


def servers_dir(workdir: str) -> str:
    return posixpath.join(state_dir(workdir), "servers")


def server_state(workdir: str, arm: str) -> str:
    """The state file of a launched arm: pid, process group, command, log, args hash."""
    return posixpath.join(servers_dir(workdir), f"{arm}.json")


def leases_dir(workdir: str, arm: str) -> str:
    """`<workdir>/.specops/leases/<arm>/`: one small file per run using the arm
    (`<key>.json`) and, for a run whose arm was taken over, `<key>.revoked`."""
    return posixpath.join(state_dir(workdir), "leases", arm)


def lease_file(workdir: str, arm: str, key: str) -> str:
    return posixpath.join(leases_dir(workdir, arm), f"{key}.json")


def lease_revoked(workdir: str, arm: str, key: str) -> str:
    """Written by the run that took the arm over (or found the lease dead): the holder reads it."""
    return posixpath.join(leases_dir(workdir, arm), f"{key}.revoked")


def server_env(workdir: str, arm: str) -> str:
    """The arm's environment (mode 0600), sourced by the process that starts it, so no
    value is ever on a command line that `ps` shows."""
    return posixpath.join(servers_dir(workdir), f"{arm}.env")


def adaptive_config(workdir: str, arm: str) -> str:
    """The `--speculative-adaptive-config` file generated for an adaptive arm."""
    return posixpath.join(servers_dir(workdir), f"{arm}.adaptive.json")


def logs_dir(workdir: str) -> str:
    return posixpath.join(state_dir(workdir), "logs")


def server_log(workdir: str, arm: str) -> str:
    return posixpath.join(logs_dir(workdir), f"{arm}.log")


def bench_dir(workdir: str) -> str:
    """Where bench_serving writes its per-point output on the host before it is gathered."""
    return posixpath.join(state_dir(workdir), "bench")


def bench_output(workdir: str, arm: str, concurrency: int, repeat: int, rate: float | None = None) -> str:
    """One point's bench_serving output file: `<arm>-c<C>-r<R>.jsonl`, or `<arm>-rate<X>-r<R>.jsonl`."""
    level = f"c{concurrency}" if rate is None else f"rate{rate:g}"
    return posixpath.join(bench_dir(workdir), f"{arm}-{level}-r{repeat}.jsonl")


def wheels_dir(workdir: str) -> str:
    """Wheels uploaded to the host by the `sglang_wheel` step."""
    return posixpath.join(state_dir(workdir), "wheels")


#: an empty folder in the host's specops state that servers and bench_serving start in
NEUTRAL_CWD = "cwd"


def neutral_cwd(workdir: str) -> str:
    return posixpath.join(state_dir(workdir), NEUTRAL_CWD)
