"""The `slurm:` block of a host in hosts.yaml: how to ask the cluster behind a login node
for each arm's GPUs. `specops.servers.slurm` submits the jobs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from specops.config.schema import check_keys, expect, suggest, where_of
from specops.errors import ConfigError

#: Keys of a host's `slurm:` block.
SLURM_KEYS = ["partition", "account", "qos", "time", "constraint", "gpus_per_arm", "gpu_request",
              "cpus_per_task", "mem", "sbatch_options", "conf", "nodes"]
GPU_REQUESTS = ("gres", "gpus")


@dataclass
class SlurmSettings:
    """How to ask the cluster for an arm's GPUs (a host's `slurm:` block)."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None  # sbatch --time: "30", "2:00:00", "1-00:00:00"
    constraint: str | None = None
    gpus_per_arm: int = 1  # used where an arm names no `gpus` (else len(gpus))
    gpu_request: str = "gres"  # --gres=gpu:N or --gpus=N
    cpus_per_task: int | None = None
    mem: str | None = None
    sbatch_options: list[str] = field(default_factory=list)
    conf: str | None = None  # SLURM_CONF on the login node, where not the default
    nodes: int = 1  # bench: the same sweep on this many allocations at once, reported side by side

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SlurmSettings":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def command(self, argv: Sequence[str]) -> list[str]:
        """A cluster command (sbatch, scontrol, ...) with SLURM_CONF set where configured."""
        return (["env", f"SLURM_CONF={self.conf}"] if self.conf else []) + list(argv)

    def request(self, gpus: int) -> list[str]:
        """sbatch options for one arm's allocation."""
        out = ["--nodes=1", "--ntasks=1"]
        if gpus:
            out.append(f"--gres=gpu:{gpus}" if self.gpu_request == "gres" else f"--gpus={gpus}")
        for key, flag in (("partition", "--partition"), ("account", "--account"), ("qos", "--qos"),
                          ("time", "--time"), ("constraint", "--constraint"), ("cpus_per_task", "--cpus-per-task"),
                          ("mem", "--mem")):
            value = getattr(self, key)
            if value not in (None, ""):
                out.append(f"{flag}={value}")
        return out + list(self.sbatch_options)


def parse_slurm(node: Any, what: str) -> SlurmSettings:
    """Validate a host's `slurm:` block; errors name the file, line and key."""
    if node is None:
        return SlurmSettings()
    label = f"the slurm settings of {what}"
    check_keys(node, SLURM_KEYS, label)
    got: dict[str, Any] = {}
    for key in ("partition", "account", "qos", "constraint", "mem", "conf"):
        if key in node:
            got[key] = str(expect(node, key, str, label))
    if "time" in node:
        got["time"] = str(expect(node, "time", (str, int), label))
    for key in ("gpus_per_arm", "cpus_per_task", "nodes"):
        if key in node:
            value = expect(node, key, int, label)
            if value < (0 if key == "gpus_per_arm" else 1):
                raise ConfigError(f"'{key}' in {label} must be at least {0 if key == 'gpus_per_arm' else 1}",
                                  where=where_of(node, key))
            got[key] = value
    if "gpu_request" in node:
        value = expect(node, "gpu_request", str, label)
        if value not in GPU_REQUESTS:
            raise ConfigError(f"'gpu_request' in {label} must be gres (--gres=gpu:N) or gpus (--gpus=N), "
                              f"got '{value}'", where=where_of(node, "gpu_request"))
        got["gpu_request"] = value
    if "sbatch_options" in node:
        opts = expect(node, "sbatch_options", list, label)
        if not all(isinstance(o, str) and o.startswith("-") for o in opts):
            raise ConfigError(f"'sbatch_options' in {label} must be a list of options such as "
                              f"'--exclusive' or '--reservation=r1'", where=where_of(node, "sbatch_options"))
        got["sbatch_options"] = list(opts)
    for key, value in got.items():
        if isinstance(value, str) and ("\n" in value or "\r" in value):
            raise ConfigError(f"'{key}' in {label} must be one line", where=where_of(node, key))
    return SlurmSettings(**got)


#: What `login: HOST` takes from the named host: how to reach it, nothing else.
LOGIN_SETTINGS = ("connection", "address", "port", "user", "key", "host_key", "known_hosts", "connect_timeout",
                  "ssh_config", "proxy_jump")


def apply_login(hosts: dict[str, Any], nodes: Any) -> None:
    """`login: other` on a host (a Slurm cluster behind a login node the inventory already
    has): the host is reached with `other`'s connection settings; its own workdir, python,
    engine, vars and `slurm:` stay its own."""
    for name, node in (nodes or {}).items():
        if not isinstance(node, dict) or "login" not in node:
            continue
        what = f"host '{name}'"
        ref = expect(node, "login", str, what)
        if ref == name or ref not in hosts:
            others = [h for h in hosts if h != name]
            raise ConfigError(f"{what}: login names unknown host '{ref}'{suggest(ref, others)}; hosts: "
                              f"{', '.join(others) or 'none'}", where=where_of(node, "login"))
        if "login" in (nodes.get(ref) or {}):
            raise ConfigError(f"{what}: login host '{ref}' has a login of its own; name the host to connect to",
                              where=where_of(node, "login"))
        for attr in LOGIN_SETTINGS:
            if attr not in node:
                setattr(hosts[str(name)], attr, getattr(hosts[ref], attr))
        host = hosts[str(name)]  # what the inventory set (beats ~/.ssh/config): its own or the login's
        host.given = tuple(sorted(set(host.given) | set(hosts[ref].given)))
