"""A real OpenSSH server for the test session, reachable as several loopback "hosts".

`sshd` (session scope) starts `/usr/sbin/sshd -D -e -f <tmp config>` on a free port with
a generated ed25519 host key and a generated user key authorized for the current user.
It listens on 127.0.0.1 and 127.0.0.2..127.0.0.{hosts+1} (Linux routes all of 127/8 to
lo; `hosts` is HOSTS for the fixture, benchmarks pass more), so tests can treat
`address(0)`, `address(1)`, ... as separate machines, each with its own workdir. The server is stopped by pid at the end of the session.
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

from specops.sim.testing import free_port

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
    hosts: int = HOSTS  # how many 127.0.0.x host addresses the server listens on

    def address(self, i: int) -> str:
        """The address of test host `i`: 127.0.0.{i+2}."""
        if not 0 <= i < self.hosts:
            raise ValueError(f"test host index must be in 0..{self.hosts - 1}")
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


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specops-test",
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


def _wait_banner(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60.0,
                 address: str = f"127.0.0.{HOSTS + 1}") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection((address, port), timeout=1) as sock:
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not accept connections within {timeout} s: {log.read_text()[-2000:]}")


#: OpenSSH's compile-time cap on listen sockets per sshd (MAX_LISTEN_SOCKS).
MAX_LISTEN_SOCKS = 16
#: Extra listener processes of a server started with more addresses than one sshd can
#: bind, by the pid of its first listener; stop_sshd stops them with it.
_EXTRA_LISTENERS: dict[int, list[subprocess.Popen]] = {}


#: The environment every session gets. A login over ssh runs the user's ~/.bashrc, where
#: `pyenv init` rehashes under a lock file; a login killed mid-rehash (a fault test, a timeout)
#: leaves that lock, and every later login then waits PYENV_REHASH_TIMEOUT (60 s) for it: CI's
#: sshd tests crawled and tune runs passed 300 s. At 0 a stale lock costs a login at most 1 s.
SESSION_ENV = {"PYENV_REHASH_TIMEOUT": "0"}


def _config_text(port: int, addresses: list[str], host_key: Path, pidfile: Path, authorized: Path,
                 extra: str = "", sftp: bool = True) -> str:
    listen = "\n".join(f"ListenAddress {a}" for a in addresses)
    # one SetEnv line: SESSION_ENV, then the variables `extra` sets
    setenv = [f"{k}={v}" for k, v in SESSION_ENV.items()]
    if os.environ.get("PYTHONPATH"):  # a checkout tested beside the installed one: its code on the host too
        setenv.append(f"PYTHONPATH={os.environ['PYTHONPATH']}")
    setenv += [w for ln in extra.splitlines() if ln.split()[:1] == ["SetEnv"] for w in ln.split()[1:]]
    extra = "".join(ln + "\n" for ln in extra.splitlines() if ln.split()[:1] != ["SetEnv"])
    extra = f"SetEnv {' '.join(setenv)}\n" + extra
    return f"""\
Port {port}
{listen}
HostKey {host_key}
PidFile {pidfile}
AuthorizedKeysFile {authorized}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
MaxSessions 64
MaxStartups 64:30:128
{"Subsystem sftp internal-sftp" if sftp else "# no SFTP subsystem (a hardened image)"}
LogLevel INFO
{extra}"""


def _listen(config: Path, log: Path, port: int, probe: str) -> subprocess.Popen:
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log_fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_banner(port, proc, log, address=probe)
    except BaseException:
        stop_sshd(proc)
        raise
    return proc


def start_sshd(root: Path, hosts: int = HOSTS, extra_config: str = "",
               sftp: bool = True) -> tuple[SSHServer, subprocess.Popen]:
    """Write keys and config under `root`, start sshd listening on 127.0.0.1 plus `hosts`
    host addresses (127.0.0.2 ...), wait for its banner. `extra_config`: more sshd_config
    lines (e.g. `SetEnv HOME=...` to give the login user a home the test controls).
    `sftp=False` leaves out the SFTP subsystem, as hardened images do.

    One sshd binds at most MAX_LISTEN_SOCKS addresses, so above that the same config
    (same port, keys and limits) is started again for each further block of addresses;
    the returned process is the first listener and stop_sshd(proc) stops them all."""
    if not 1 <= hosts <= 253:
        raise ValueError(f"hosts must be in 1..253, got {hosts}")
    root.mkdir(parents=True, exist_ok=True)
    host_key = root / "ssh_host_ed25519_key"
    user_key = root / "id_ed25519"
    _keygen(host_key)
    _keygen(user_key)
    authorized = root / "authorized_keys"
    authorized.write_text(Path(f"{user_key}.pub").read_text())
    known_hosts = root / "known_hosts"
    known_hosts.write_text("")
    port = free_port()
    try:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError:
        pass  # not root: sshd runs unprivileged and needs no privsep dir
    addresses = [f"127.0.0.{i}" for i in range(1, hosts + 2)]
    blocks = [addresses[i:i + MAX_LISTEN_SOCKS] for i in range(0, len(addresses), MAX_LISTEN_SOCKS)]
    procs: list[subprocess.Popen] = []
    try:
        for n, block in enumerate(blocks):
            sfx = "" if n == 0 else f".{n}"
            config = root / f"sshd_config{sfx}"
            config.write_text(_config_text(port, block, host_key, root / f"sshd{sfx}.pid", authorized,
                                           extra_config, sftp))
            procs.append(_listen(config, root / f"sshd{sfx}.log", port, block[-1]))
    except BaseException:
        for p in procs:
            stop_sshd(p)
        raise
    proc = procs[0]
    if len(procs) > 1:
        _EXTRA_LISTENERS[proc.pid] = procs[1:]
    host_pub = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
    server = SSHServer(port=port, user=getpass.getuser(), key_path=str(user_key),
                       host_pubkey=host_pub, known_hosts=str(known_hosts), root=root,
                       pid=proc.pid, log_path=str(root / "sshd.log"), hosts=hosts)
    return server, proc


def stop_sshd(proc: subprocess.Popen) -> None:
    """Stop the listener we started (by its pid), then its per-connection children, then
    any further listeners started with it."""
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
    for extra in _EXTRA_LISTENERS.pop(proc.pid, []):
        stop_sshd(extra)


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


@pytest.fixture(scope="session")
def sshd_nosftp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A second OpenSSH server whose config has no `Subsystem sftp`: files must move by exec."""
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} not found: install Debian's openssh-server (CI does) to run the SSH tests")
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not found: install openssh-client to run the SSH tests")
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd-nosftp"), hosts=2, sftp=False)
    try:
        yield server
    finally:
        stop_sshd(proc)
