"""hosts.yaml -> validated Host objects, groups and variables.

Variable precedence (lowest first): inventory `vars` < `defaults` host settings exposed as
vars < group vars < host vars < playbook vars < --var. Connection settings live on the
Host; everything else a host or group says is a variable for templates.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, cast, get_args

from specops.config import engine_registry
from specops.config.engine_registry import Feature
from specops.config.schema import check_keys, choice, expect, suggest, where_of
from specops.config.slurm import SlurmSettings, apply_login, parse_slurm
from specops.config.yamlfile import Mapping, load_file
from specops.data import shipped_inventory
from specops.errors import ConfigError
from specops.secrets import SecretSource, parse_sources

TOP_KEYS = ["defaults", "hosts", "groups", "vars", "secrets"]
#: Keys a host (or `defaults`) may set. Anything else is a typo, not a variable: use `vars:`.
HOST_KEYS = [
    "connection", "address", "port", "user", "key", "host_key", "known_hosts",
    "workdir", "python", "engine", "gpus", "connect_timeout", "vars", "secrets", "slurm", "login",
    "ssh_config", "proxy_jump", "device",
]
#: the OpenSSH client config read for SSH hosts unless `ssh_config: false`
DEFAULT_SSH_CONFIG = "~/.ssh/config"
GROUP_KEYS = ["hosts", "vars", "secrets"]
CONNECTIONS = ("ssh", "local")
#: How an SSH host's key is checked (specops.transport.hostkeys implements them): `accept-new`
#: records an unknown key on first use, `strict` refuses it; a changed key is always refused.
HostKeyMode = Literal["accept-new", "strict"]
HOST_KEY_MODES: tuple[HostKeyMode, ...] = get_args(HostKeyMode)
DEFAULT_HOST_KEY_MODE: HostKeyMode = "accept-new"
#: What a host's servers compute on. `cpu`: SGLang's own CPU serving (`--device cpu`): no GPU
#: preflight, no GPU placement; the simulator takes the same flags, so it rehearses that path.
DEVICES = ("gpu", "cpu")
DEFAULT_DEVICE = "gpu"


#: the container route's variables (servers.container): an image reference, and the runtime
CONTAINER_RUNTIMES = ("podman", "docker")
_IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")


def container_var_problem(key: str, value: Any) -> str:
    """'' when `sglang_image` / `container_runtime` (or any other key) is usable, else why not."""
    if key == "sglang_image" and value not in (None, "") and not (isinstance(value, str) and _IMAGE_REF.match(value)):
        return f"sglang_image must be an image reference such as lmsysorg/sglang:v0.5.10.post1-cu126, got {value!r}"
    if key == "container_runtime" and value not in (None, "", *CONTAINER_RUNTIMES):
        return (f"container_runtime must be one of {', '.join(CONTAINER_RUNTIMES)} (or unset: found on the host), "
                f"got {value!r}{suggest(value, CONTAINER_RUNTIMES)}")
    return ""


def _check_container_vars(node: Any, what: str) -> None:
    """A bad `sglang_image` or `container_runtime` in a vars mapping, at its file:line."""
    for key in ("sglang_image", "container_runtime"):
        if isinstance(node, dict) and key in node:
            problem = container_var_problem(key, node[key])
            if problem:
                raise ConfigError(f"{what}: {problem}", where=where_of(node, key))


def engine_vars(engine: str) -> dict[str, Any]:
    """The variables a host's engine gives its playbooks, from its declaration: `simulated`,
    `engine_face` (the server it is or stands in for) and `engine_features` (its feature values),
    so a step chooses by what the engine is and can do, never by its name."""
    spec = engine_registry.spec(engine)
    return {"simulated": spec.simulated, "engine_face": spec.face,
            "engine_features": sorted(f.value for f in spec.features)}


@dataclass
class Host:
    """One machine specops drives, as the inventory describes it."""

    name: str
    connection: str = "ssh"
    address: str | None = None
    port: int = 22
    user: str | None = None
    key: str | None = None
    host_key: HostKeyMode = DEFAULT_HOST_KEY_MODE
    known_hosts: str | None = None
    workdir: str = "~/specops"
    python: str = "python3"
    engine: str = "sglang"
    gpus: list[int] = field(default_factory=list)
    #: `gpu` (the default) or `cpu` (DEVICES); an arm's own `device` wins over it
    device: str = DEFAULT_DEVICE
    connect_timeout: float = 10.0
    groups: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    #: environment variables for the host's servers, benchmark and downloads, by where their
    #: values live on this machine (top level < group < host); never the values themselves
    secrets: dict[str, SecretSource] = field(default_factory=dict)
    #: a Slurm cluster behind this (login) host: arms run as batch jobs (specops.servers.slurm)
    slurm: SlurmSettings | None = None
    #: the OpenSSH client config to read (HostName, User, Port, IdentityFile, ProxyJump); None: off
    ssh_config: str | None = None
    #: `[user@]host[:port]` (a comma list hops in order): the jump host(s) to reach this one through
    proxy_jump: str | None = None
    #: which of address, port, user, key the inventory set (those win over the SSH config)
    given: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.connection == "local":
            return "local"
        return f"{self.user + '@' if self.user else ''}{self.address or self.name}:{self.port}"

    def expand_on_host(self, expand: Callable[[str], str]) -> None:
        """`~` in `python` and `workdir` means the host's home, known only once connected:
        resolve them with the host's own `expand` (a quoted `~/venv/bin/python` is never
        expanded by a shell). A bare command name (`python3`) stays a PATH lookup."""
        if self.python == "~" or self.python.startswith("~/"):
            self.python = expand(self.python)
        if self.workdir == "~" or self.workdir.startswith("~/"):
            self.workdir = expand(self.workdir)

    def facts_vars(self) -> dict[str, Any]:
        """The host's own settings as template variables (`workdir`, `python`, ...)."""
        return {
            "inventory_hostname": self.name, "host": self.name, "workdir": self.workdir,
            "python": self.python, "engine": self.engine, "gpus": list(self.gpus),
            "device": self.device, **engine_vars(self.engine),
            "address": self.address or "127.0.0.1", "connection": self.connection,
            "scheduler": "slurm" if self.slurm is not None else "none",
        }


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, list[str]]
    vars: dict[str, Any]

    def select_one(self, spec: str, command: str) -> Host:
        """`--host` for a command that works on one host (`command`: "tune works on"); more is bad input."""
        hosts = self.select(spec)
        if len(hosts) != 1:
            raise ConfigError(f"{command} one host at a time; --host {spec} selects {', '.join(h.name for h in hosts)}")
        return hosts[0]

    def select(self, spec: str) -> list[Host]:
        """`--host` value: names, groups, or a comma list of either; order kept, no repeats."""
        chosen: list[Host] = []
        for word in [w.strip() for w in spec.split(",") if w.strip()]:
            if word in ("all", "*"):
                names = list(self.hosts)
            elif word in self.hosts:
                names = [word]
            elif word in self.groups:
                names = self.groups[word]
            else:
                known = list(self.hosts) + list(self.groups)
                raise ConfigError(
                    f"unknown host or group '{word}'{suggest(word, known)}; the inventory has: "
                    f"{', '.join(known) or 'nothing'}",
                    where=str(self.path),
                )
            for name in names:
                if self.hosts[name] not in chosen:
                    chosen.append(self.hosts[name])
        if not chosen:
            raise ConfigError("--host selected no hosts", where=str(self.path))
        return chosen

    def host_vars(self, host: Host) -> dict[str, Any]:
        """Variables for templates on `host`, by precedence (playbook and --var come later)."""
        merged: dict[str, Any] = dict(self.vars)
        merged.update(host.facts_vars())
        for group in host.groups:
            merged.update(self._group_vars.get(group, {}))
        merged.update(host.vars)
        return merged

    _group_vars: dict[str, dict[str, Any]] = field(default_factory=dict)


def default_inventory_path() -> Path:
    """$SPECOPS_INVENTORY, else ./hosts.yaml, else the starter inventory shipped with specops
    (the simulated `local` host), so a fresh install runs anywhere."""
    if os.environ.get("SPECOPS_INVENTORY"):
        return Path(os.environ["SPECOPS_INVENTORY"])
    local = Path("hosts.yaml")
    return local if local.exists() else shipped_inventory()


#: a host's name is a path component (runs/<id>/fetched/<host>/) and a word on every line
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]*")
#: settings that name a path or program: an empty string is a mistake, not a default
NON_EMPTY = ("address", "user", "key", "known_hosts", "workdir", "python", "proxy_jump")


def _host_from(name: str, node: Any, defaults: dict[str, Any], source: str, hosts_node: Any) -> Host:
    if node is None:
        node = Mapping()
    what = f"host '{name}'"
    if not HOST_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(f"host name {name!r} must be letters, digits and . _ @ : - (it names files and lines)",
                          where=where_of(hosts_node, name))
    check_keys(node, HOST_KEYS, what)
    merged = dict(defaults)
    merged.update(node)

    def get(key: str, types: Any, default: Any) -> Any:
        if key not in merged:
            return default
        holder = node if key in node else defaults
        return expect(holder, key, types, what if key in node else "defaults")

    def one_of(key: str, choices: tuple[str, ...], default: str) -> str:
        if key not in merged:
            return default
        holder = node if key in node else defaults
        expect(holder, key, str, what if key in node else "defaults")
        return choice(holder, key, choices, what if key in node else "defaults")

    connection = one_of("connection", CONNECTIONS, "local" if name == "local" and "address" not in merged else "ssh")
    address = get("address", str, None)
    ssh_config = get("ssh_config", (str, bool), True)
    ssh_config_path = (_local_path(DEFAULT_SSH_CONFIG, Path(source).parent) if ssh_config is True
                       else None if ssh_config is False else _local_path(ssh_config, Path(source).parent))
    # login: another host's SSH settings; with an SSH config the name itself may be its Host entry
    if connection == "ssh" and not address and "login" not in node and ssh_config_path is None:
        raise ConfigError(f"{what} uses ssh but has no 'address' (and ssh_config is off)", where=where_of(node))
    host_key = cast(HostKeyMode, one_of("host_key", HOST_KEY_MODES, DEFAULT_HOST_KEY_MODE))
    engine = one_of("engine", engine_registry.names(), "sglang")
    gpus = get("gpus", list, [])
    if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus):
        raise ConfigError(f"{what}: gpus must be a list of GPU indices (integers from 0)", where=where_of(node, "gpus"))
    device = one_of("device", DEVICES, DEFAULT_DEVICE)
    if device == "cpu":
        _check_cpu_host(what, engine, gpus, node, defaults)
    port = get("port", int, 22)
    if not 0 < port < 65536:
        raise ConfigError(f"{what}: port {port} is out of range", where=where_of(node, "port"))
    for key in NON_EMPTY:
        value = merged.get(key)
        if isinstance(value, str) and not value.strip():
            holder = node if key in node else defaults
            raise ConfigError(f"{what}: '{key}' is empty", where=where_of(holder, key),
                              hint="leave the key out for its default")
    if float(get("connect_timeout", (int, float), 10.0)) <= 0:
        raise ConfigError(f"{what}: connect_timeout must be positive", where=where_of(node, "connect_timeout"))
    host_vars = get("vars", dict, {})
    _check_container_vars(host_vars, f"{what} vars")
    key = get("key", str, None)
    known_hosts = get("known_hosts", str, None)
    base = Path(source).parent
    python_default = sys.executable if connection == "local" else "python3"
    return Host(
        name=name, connection=connection, address=address, port=port,
        user=get("user", str, None), key=_local_path(key, base), host_key=host_key,
        known_hosts=_local_path(known_hosts, base), workdir=get("workdir", str, "~/specops"),
        python=get("python", str, python_default), engine=engine, gpus=list(gpus), device=device,
        connect_timeout=float(get("connect_timeout", (int, float), 10.0)), vars=dict(host_vars),
        secrets=parse_sources(merged.get("secrets"), where_of(node if "secrets" in node else defaults, "secrets"),
                              base=base),
        slurm=parse_slurm(node["slurm"], what) if "slurm" in node else None,
        ssh_config=ssh_config_path, proxy_jump=get("proxy_jump", str, None),
        given=tuple(k for k in ("address", "port", "user", "key") if k in merged),
    )


def _check_cpu_host(what: str, engine: str, gpus: list[int], node: Any, defaults: Any) -> None:
    """`device: cpu` says the host has no GPUs to give: a `gpus:` list, a GPU request per Slurm
    job, or an engine that cannot serve on a CPU contradicts it (named at the line that does)."""
    def at(key: str) -> str:
        return where_of(node if key in node else defaults, key)

    if Feature.CPU not in engine_registry.spec(engine, where=at("engine")).features:
        raise ConfigError(f"{what}: device cpu needs engine {' or '.join(engine_registry.with_feature(Feature.CPU))}, "
                          f"got {engine!r}", where=at("engine"))
    if gpus:
        raise ConfigError(f"{what}: device cpu with gpus {gpus}: a CPU host has no GPUs to place arms on",
                          where=at("gpus"), hint="drop 'gpus', or set device: gpu")
    slurm = node.get("slurm") if isinstance(node, dict) else None
    if isinstance(slurm, dict) and slurm.get("gpus_per_arm", 1):
        raise ConfigError(f"{what}: device cpu on a Slurm host would still ask the scheduler for GPUs",
                          where=where_of(slurm, "gpus_per_arm" if "gpus_per_arm" in slurm else None, at("slurm")),
                          hint="set gpus_per_arm: 0 in its slurm block")


def _local_path(value: str | None, base: Path) -> str | None:
    """Key and known_hosts paths live on this machine: expand ~ and resolve against the inventory."""
    if value is None:
        return None
    path = Path(os.path.expanduser(value))
    return str(path if path.is_absolute() else (base / path).resolve())


def load_inventory(path: Path | str | None = None) -> Inventory:
    """Load and validate hosts.yaml; every problem names the file, line and key."""
    path = Path(path) if path else default_inventory_path()
    data = load_file(path, "inventory")
    if data is None:
        data = Mapping()
    check_keys(data, TOP_KEYS, "the inventory")
    source = str(path)
    defaults = data.get("defaults") or Mapping()
    check_keys(defaults, HOST_KEYS, "defaults")
    hosts_node = data.get("hosts")
    if not hosts_node:
        raise ConfigError("the inventory defines no hosts (add a 'hosts:' mapping)", where=where_of(data))
    expect(data, "hosts", dict, "the inventory")
    hosts = {str(name): _host_from(str(name), node, defaults, source, hosts_node) for name, node in hosts_node.items()}
    apply_login(hosts, hosts_node)

    groups: dict[str, list[str]] = {}
    group_vars: dict[str, dict[str, Any]] = {}
    groups_node = data.get("groups") or Mapping()
    expect(data, "groups", dict, "the inventory") if "groups" in data and data["groups"] is not None else None
    for gname, gnode in groups_node.items():
        gvars: dict[str, Any]
        if isinstance(gnode, list):
            members, gvars = gnode, {}
        else:
            check_keys(gnode, GROUP_KEYS, f"group '{gname}'", required=["hosts"])
            members = expect(gnode, "hosts", list, f"group '{gname}'")
            gvars = expect(gnode, "vars", dict, f"group '{gname}'") if "vars" in gnode else {}
            _check_container_vars(gvars, f"group '{gname}' vars")
        if gname in hosts:
            raise ConfigError(f"group '{gname}' has the same name as a host", where=where_of(groups_node, gname))
        for i, member in enumerate(members):
            if not isinstance(member, str):
                raise ConfigError(f"group '{gname}': members are host names, got {member!r}",
                                  where=members.where(i) if hasattr(members, "where") else where_of(groups_node, gname))
            if member not in hosts:
                raise ConfigError(f"group '{gname}' names unknown host '{member}'{suggest(member, hosts)}",
                                  where=members.where(i) if hasattr(members, "where") else where_of(groups_node, gname))
            hosts[member].groups.append(str(gname))
        groups[str(gname)] = [str(m) for m in members]
        group_vars[str(gname)] = dict(gvars)
        if not isinstance(gnode, list) and gnode.get("secrets") is not None:
            group_secrets = parse_sources(gnode["secrets"], where_of(gnode, "secrets"), base=path.parent)
            for member in members:  # a host's own secrets win over its group's
                hosts[member].secrets = {**group_secrets, **hosts[member].secrets}

    inv_vars = data.get("vars") or {}
    if "vars" in data and data["vars"] is not None:
        expect(data, "vars", dict, "the inventory")
        _check_container_vars(inv_vars, "vars")
    top_secrets = parse_sources(data.get("secrets"), where_of(data, "secrets"), base=path.parent)
    for host in hosts.values():  # the top level is the weakest
        host.secrets = {**top_secrets, **host.secrets}
    inventory = Inventory(path=path, hosts=hosts, groups=groups, vars=dict(inv_vars))
    inventory._group_vars = group_vars
    return inventory
