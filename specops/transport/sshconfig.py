"""What `~/.ssh/config` (or the inventory's `ssh_config: PATH`) says about an SSH host:
HostName, User, Port, IdentityFile and ProxyJump, read with paramiko's parser. Keys the
inventory sets win; a host may leave `address` out when the config has a `Host` entry for it."""

from __future__ import annotations

import os
from dataclasses import dataclass

import paramiko

from specops.config.inventory import Host
from specops.errors import ConfigError


@dataclass(frozen=True)
class SSHTarget:
    address: str
    port: int
    user: str | None
    key: str | None
    proxy_jump: str | None


def _lookup(path: str | None, name: str) -> dict[str, object] | None:
    """The config's options for `name`, or None when no `Host` entry matches it (or no file)."""
    if not path or not os.path.isfile(path):
        return None
    try:
        config = paramiko.SSHConfig.from_path(path)
    except (OSError, paramiko.SSHException, ValueError) as exc:
        raise ConfigError(f"cannot read SSH config {path}: {exc}", hint="fix it, or set ssh_config: false") from exc
    found: dict[str, object] = dict(config.lookup(name))
    return found if set(found) - {"hostname"} or found.get("hostname") != name else None


def resolve(host: Host) -> SSHTarget:
    """The address, port, user, key and jump to connect with: the inventory's, filled from the config."""
    looked_up = host.address or host.name
    found = _lookup(host.ssh_config, looked_up) or {}
    if not host.address and not found:
        raise ConfigError(f"host '{host.name}' has no 'address' and {host.ssh_config} has no Host entry for it",
                          hint="set address: in hosts.yaml, or add a Host entry to the SSH config")
    given = set(host.given)
    address = host.address or str(found.get("hostname") or looked_up)
    if host.address and "hostname" in found:
        address = str(found["hostname"])  # address names a config alias
    port = host.port if "port" in given or "port" not in found else int(str(found["port"]))
    user = host.user if "user" in given else (str(found["user"]) if "user" in found else None)
    key = host.key
    files = found.get("identityfile")
    if "key" not in given and isinstance(files, list) and files:
        key = os.path.expanduser(str(files[0]))
    jump = host.proxy_jump
    if jump is None and found.get("proxyjump") and str(found["proxyjump"]).lower() != "none":
        jump = str(found["proxyjump"])
    return SSHTarget(address=address, port=port, user=user, key=key, proxy_jump=jump)
