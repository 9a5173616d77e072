"""Host-key policy for SSH hosts: OpenSSH's `accept-new` and `strict`, never accept-anything.

known_hosts files are loaded from the system locations plus the inventory's file. A key
that differs from a known one is always refused (paramiko raises BadHostKeyException,
which SSHTransport turns into a TransportError that says the key CHANGED). An unknown key
is recorded in the inventory's known_hosts file (atomically) under `accept-new`, and
refused under `strict`. Hosts on a port other than 22 are named `[address]:port`, as
OpenSSH writes them.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import threading
from pathlib import Path

import paramiko

# the modes are an inventory setting, defined once there; the transport implements them
from specops.config.inventory import DEFAULT_HOST_KEY_MODE as DEFAULT_HOST_KEY_MODE
from specops.config.inventory import HOST_KEY_MODES as HOST_KEY_MODES
from specops.config.inventory import HostKeyMode as HostKeyMode
from specops.fsutil import atomic_write

#: Default file an accepted key is recorded in (as OpenSSH's UserKnownHostsFile).
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
#: Files always loaded for lookups (as OpenSSH's user and global known_hosts).
SYSTEM_KNOWN_HOSTS: tuple[str, ...] = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")

_write_lock = threading.Lock()


def host_key_name(address: str, port: int) -> str:
    """The name OpenSSH uses for a host in known_hosts: bare for port 22, else `[addr]:port`."""
    return address if int(port) == 22 else f"[{address}]:{int(port)}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style fingerprint, e.g. `SHA256:abc...` (unpadded base64 of the key's sha256)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def describe(key: paramiko.PKey) -> str:
    """`ssh-ed25519 SHA256:...`, what a user compares against `ssh-keygen -lf`."""
    return f"{key.get_name()} {fingerprint(key)}"


class HostKeyRefused(paramiko.SSHException):
    """Raised inside paramiko's connect when the policy refuses an unknown key."""

    def __init__(self, hostname: str, key: paramiko.PKey, reason: str):
        super().__init__(reason)
        self.hostname = hostname
        self.key = key
        self.reason = reason


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Decides about keys that are in none of the loaded known_hosts files.

    After a connect, `status` says what happened: "known" (the key was already trusted),
    "recorded" (accept-new wrote it to `record_file`); `key` holds the server's key.
    """

    def __init__(self, mode: HostKeyMode, record_file: str):
        if mode not in HOST_KEY_MODES:
            raise ValueError(f"host_key must be one of {', '.join(HOST_KEY_MODES)}, not {mode!r}")
        self.mode = mode
        self.record_file = os.path.expanduser(record_file)
        self.status = "known"
        self.key: paramiko.PKey | None = None

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.key = key
        if self.mode == "strict":
            raise HostKeyRefused(
                hostname, key,
                f"unknown host key for {hostname} ({describe(key)}) and host_key is strict: "
                f"it is in no known_hosts file ({', '.join(self.searched())})")
        record_host_key(self.record_file, hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.status = "recorded"

    def searched(self) -> list[str]:
        """Every known_hosts file consulted, for messages."""
        files = [os.path.expanduser(f) for f in SYSTEM_KNOWN_HOSTS]
        return files + ([self.record_file] if self.record_file not in files else [])


def load_known_hosts(client: paramiko.SSHClient, record_file: str) -> None:
    """Load the system known_hosts files and the inventory's file into `client`.

    Raises OSError/ValueError (from paramiko) on an unreadable or malformed file; the
    caller names the file."""
    for path in SYSTEM_KNOWN_HOSTS:
        full = os.path.expanduser(path)
        if os.path.isfile(full):
            client.load_system_host_keys(full)
    full = os.path.expanduser(record_file)
    if os.path.isfile(full):
        client.load_host_keys(full)


def files_with_host(hostname: str, files: list[str]) -> list[str]:
    """Which of `files` hold a key for `hostname` (to point at the stale entry)."""
    found = []
    for path in files:
        if not os.path.isfile(path):
            continue
        try:
            keys = paramiko.HostKeys(path)
        except Exception:  # noqa: BLE001 - a malformed file is reported elsewhere
            continue
        if keys.lookup(hostname) is not None:
            found.append(path)
    return found


def record_host_key(path: str, hostname: str, key: paramiko.PKey) -> None:
    """Append `hostname keytype base64` to known_hosts atomically (temp + rename).

    A thread lock and an flock on the file's directory serialise concurrent writers (hosts
    connect in parallel, maybe from several processes), so no accepted key is lost to a
    read-modify-write race; no lock file is left behind."""
    target = Path(os.path.expanduser(path))
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
    with _write_lock:
        lock = os.open(target.parent, os.O_RDONLY)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            old = target.read_bytes() if target.exists() else b""
            if line.rstrip("\n").encode() in old.splitlines():
                return
            if old and not old.endswith(b"\n"):
                old += b"\n"
            atomic_write(target, old + line.encode(), default_mode=0o600)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)
