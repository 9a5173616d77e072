"""A real OpenSSH server for the test session, reachable as several loopback "hosts".

`sshd` (session scope) starts `/usr/sbin/sshd -D -e -f <tmp config>` on a free port with
a generated ed25519 host key and a generated user key authorized for the current user.
It listens on 127.0.0.1 and 127.0.0.2..127.0.0.{HOSTS+1} (Linux routes all of 127/8 to
lo), so tests can treat `address(0)`, `address(1)`, ... as separate machines, each with
its own workdir. The server is stopped by pid at the end of the session.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

SSHD = "/usr/sbin/sshd"
#: How many 127.0.0.x hosts the server listens on (127.0.0.2 ...).
HOSTS = 8


@dataclass
class SSHServer:
    """What tests need to reach the server."""

    port: int
    user: str
    key_path: str
    host_pubkey: str  # "ssh-ed25519 AAAA..." (the host key's public line, no comment)
    known_hosts: str  # a tmp file, initially empty
    root: Path        # the server's tmp directory
    pid: int
    log_path: str

    def address(self, i: int) -> str:
        """The address of test host `i`: 127.0.0.{i+2}."""
        if not 0 <= i < HOSTS:
            raise ValueError(f"test host index must be in 0..{HOSTS - 1}")
        return f"127.0.0.{i + 2}"

    def known_hosts_line(self, i: int) -> str:
        """The known_hosts line OpenSSH would write for host `i` (non-22 port form)."""
        return f"[{self.address(i)}]:{self.port} {self.host_pubkey}\n"

    def workdir(self, i: int) -> str:
        """A workdir of its own for host `i`, so hosts behave like separate machines."""
        path = self.root / "hosts" / f"host{i}"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def host_entry(self, i: int, workdir: str | None = None) -> dict:
        """An inventory dict for hosts.yaml describing test host `i`."""
        return {
            "address": self.address(i),
            "port": self.port,
            "user": self.user,
            "key": self.key_path,
            "known_hosts": self.known_hosts,
            "host_key": "accept-new",
            "workdir": workdir or self.workdir(i),
            "python": sys.executable,
        }

    def session_pids(self) -> set[int]:
        """Pids of the per-connection sshd processes (children of the listener)."""
        try:
            text = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text()
        except OSError:
            return set()
        return {int(p) for p in text.split()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specops-test",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


def _wait_banner(port: int, proc: subprocess.Popen, log: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection((f"127.0.0.{HOSTS + 1}", port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not accept connections within {timeout} s: {log.read_text()[-2000:]}")


def start_sshd(root: Path) -> tuple[SSHServer, subprocess.Popen]:
    """Write keys and config under `root`, start sshd, wait for its banner."""
    root.mkdir(parents=True, exist_ok=True)
    host_key = root / "ssh_host_ed25519_key"
    user_key = root / "id_ed25519"
    _keygen(host_key)
    _keygen(user_key)
    authorized = root / "authorized_keys"
    authorized.write_text(Path(f"{user_key}.pub").read_text())
    known_hosts = root / "known_hosts"
    known_hosts.write_text("")
    port = _free_port()
    listen = "\n".join(f"ListenAddress 127.0.0.{i}" for i in range(1, HOSTS + 2))
    config = root / "sshd_config"
    config.write_text(f"""\
Port {port}
{listen}
HostKey {host_key}
PidFile {root}/sshd.pid
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp internal-sftp
LogLevel INFO
""")
    try:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError:
        pass  # not root: sshd runs unprivileged and needs no privsep dir
    log = root / "sshd.log"
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log_fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_banner(port, proc, log)
    except BaseException:
        stop_sshd(proc)
        raise
    host_pub = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
    server = SSHServer(port=port, user=getpass.getuser(), key_path=str(user_key),
                       host_pubkey=host_pub, known_hosts=str(known_hosts), root=root,
                       pid=proc.pid, log_path=str(log))
    return server, proc


def stop_sshd(proc: subprocess.Popen) -> None:
    """Stop the listener we started (by its pid), then its per-connection children."""
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    except OSError:
        children = []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for pid in children:
        try:
            os.kill(int(pid), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A running OpenSSH server; skips the test when /usr/sbin/sshd is not installed."""
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} not found: install Debian's openssh-server (CI does) to run the SSH tests")
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not found: install openssh-client to run the SSH tests")
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        yield server
    finally:
        stop_sshd(proc)
