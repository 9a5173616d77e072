"""SSH hosts: the Transport interface over one fabric/paramiko connection per host.

The connection is opened lazily on first use and reused by every call (commands run on
their own channels, so several threads may share it). Every command runs on the host
under `base.group_wrapped` (its own session, a host-side `timeout` that kills the whole
process group) with a client-side backstop a little longer. A connection found dropped
is reopened once per call before the call fails. Files move over SFTP; `put` writes a
temp file beside the target and renames it into place (posix-rename), so a reader never
sees half a file.

Commands are read straight from paramiko channels (64 KiB reads, select on the channel)
rather than through fabric's `Connection.run`, whose runner threads, 1000-byte reads
and input polling cost time on every command.
"""

from __future__ import annotations

import base64
import os
import posixpath
import re
import select
import shlex
import socket
import stat
import threading
import time
import uuid
from contextlib import AbstractContextManager
from typing import Callable, TypeVar

import fabric
import paramiko
from paramiko.ssh_exception import NoValidConnectionsError

from specops.errors import TransportError
from specops.secrets import env_file_text
from specops.transport import hostkeys
from specops.transport.base import (
    TIMEOUT_RC,
    Command,
    CommandResult,
    OutputBuffer,
    command_line,
    group_wrapped,
    host_line,
    prefixed,
)
from specops.transport.forward import ssh_forward
from specops.transport.session import SessionBroken, ShellSession

T = TypeVar("T")

#: Seconds between keepalive packets on an idle connection.
KEEPALIVE_S = 15
#: Extra seconds the client waits past a command's timeout before abandoning it: the
#: host-side `timeout` sends TERM at the deadline and KILL 5 s later.
BACKSTOP_S = 10.0
#: Bytes per channel read.
READ_SIZE = 1 << 16
#: Timeout of a file operation done by exec where the host has no SFTP subsystem.
_FILE_TIMEOUT_S = 60.0

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Marks every process of one command (inherited through its environment), so the client
#: can kill what is left when a command is abandoned by the backstop.
_MARKER = "SPECOPS_CMD_ID"
#: where a command's environment waits, 0600, for the few milliseconds until its bash reads it
ENV_DIR = "~/.specops-env"

# Our inventory is the source of truth: ~/.ssh/config is not read (hostname/port/user/key
# come from hosts.yaml).
_FABRIC_CONFIG = fabric.Config(overrides={"load_ssh_configs": False})


class _NoSftp(Exception):
    """The host has no SFTP subsystem (internal; the file op goes by exec instead)."""


class _ConnectionLost(Exception):
    """The connection died under a call (internal; becomes a retry or a TransportError)."""


class SSHTransport:
    """One SSH host. Thread-safe: calls from several threads share one connection."""

    def __init__(
        self,
        name: str,
        address: str,
        port: int = 22,
        user: str | None = None,
        key_filename: str | None = None,
        host_key: hostkeys.HostKeyMode = hostkeys.DEFAULT_HOST_KEY_MODE,
        known_hosts: str | None = None,
        connect_timeout: float = 10.0,
        home_hint: str | None = None,
        use_session: bool | None = None,
        python: str = "python3",
        proxy_jump: str | None = None,
    ):
        if host_key not in hostkeys.HOST_KEY_MODES:
            raise ValueError(f"host_key must be one of {hostkeys.HOST_KEY_MODES}, not {host_key!r}")
        self.name = name
        self.address = address
        self.port = int(port)
        self.user = user
        self.key_filename = os.path.expanduser(key_filename) if key_filename else None
        self.host_key = host_key
        self.known_hosts = os.path.expanduser(known_hosts or hostkeys.DEFAULT_KNOWN_HOSTS)
        self.connect_timeout = float(connect_timeout)
        #: `[user@]host[:port]`, a comma list hopping in order: reached through these (ProxyJump)
        self.proxy_jump = proxy_jump or None
        self._jump: SSHTransport | None = None
        #: "known", "recorded in <file>" (after accept-new) or "" before the first connect.
        self.host_key_status = ""
        #: The server's key, `ssh-ed25519 SHA256:...`, once connected.
        self.host_key_fingerprint = ""
        #: How many times a connection was opened (1 in a healthy run).
        self.connects = 0
        self._home = home_hint.rstrip("/") or "/" if home_hint else None
        self._lock = threading.RLock()
        self._sftp_lock = threading.Lock()
        self._conn: fabric.Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_transport: paramiko.Transport | None = None
        #: why files move by exec instead of SFTP ("" while SFTP works): hardened sshd
        #: configs leave the subsystem out
        self.sftp_off = ""
        #: one long-lived shell for commands (see session.py); SPECOPS_NO_SESSION=1 turns it off
        self.use_session = (os.environ.get("SPECOPS_NO_SESSION", "") in ("", "0")) if use_session is None else use_session
        self._session: ShellSession | None = None
        #: the interpreter that runs the session helper (the inventory's `python`: no shims)
        self.python = python
        self._session_transport: paramiko.Transport | None = None
        self._session_lock = threading.Lock()
        #: why the session could not start ("" while it works); commands then use a channel each
        self.session_error = ""
        #: commands that went through the session / through a channel of their own
        self.session_commands = 0
        self.channel_commands = 0

    # ------------------------------------------------------------------ connection

    @property
    def where(self) -> str:
        return f"host {self.name}"

    @property
    def target(self) -> str:
        """`gpu-a (10.0.0.5:22)`: how messages name this host."""
        return f"{self.name} ({self.address}:{self.port})"

    def _error(self, message: str, hint: str | None = None) -> TransportError:
        return TransportError(message, where=self.where, hint=hint)

    def connect(self) -> paramiko.Transport:
        """Open the connection now if it is not open (normally it opens on first use)."""
        return self._transport()

    @property
    def connection(self) -> fabric.Connection:
        """The fabric Connection (opened), for callers that need fabric itself."""
        self._transport()
        assert self._conn is not None
        return self._conn

    def _transport(self, failed: paramiko.Transport | None = None) -> paramiko.Transport:
        """The live paramiko transport, opening it if needed. With `failed`, reopen the
        connection unless another thread already replaced that transport."""
        with self._lock:
            # fabric ships no type information: name what its `transport` attribute holds
            live: paramiko.Transport | None = self._conn.transport if self._conn is not None else None
            if live is not None:
                if failed is not None and live is failed:
                    self._drop()
                elif live.is_active():
                    return live
                else:
                    self._drop()
            self._conn = self._open()
            opened: paramiko.Transport | None = self._conn.transport
            assert opened is not None
            return opened

    def _drop(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None
            conn, self._conn = self._conn, None
            self._sftp = self._sftp_transport = None
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - closing a connection being torn down is best effort
                    pass
            jump, self._jump = self._jump, None
            if jump is not None:
                jump.close()

    def _open(self) -> fabric.Connection:
        timeout = self.connect_timeout
        if self.key_filename and not os.path.isfile(self.key_filename):
            raise self._error(f"cannot connect to {self.target}: key file {self.key_filename} not found",
                              hint="check `key:` in hosts.yaml")
        kwargs: dict[str, object] = {"timeout": timeout, "banner_timeout": timeout, "auth_timeout": timeout,
                                     "channel_timeout": timeout}
        if self.key_filename:
            # the key first, then the agent (a passphrase-protected key is often only usable there)
            kwargs.update(key_filename=[self.key_filename], look_for_keys=False, allow_agent=True)
        gateway = self._gateway() if self.proxy_jump else None
        conn = fabric.Connection(self.address, user=self.user, port=self.port,
                                 config=_FABRIC_CONFIG, connect_kwargs=kwargs, gateway=gateway)
        policy = hostkeys.KnownHostsPolicy(self.host_key, self.known_hosts)
        conn.client.set_missing_host_key_policy(policy)
        try:
            hostkeys.load_known_hosts(conn.client, self.known_hosts)
        except Exception as exc:
            raise self._error(f"cannot read known_hosts files ({', '.join(policy.searched())}): {exc}") from exc
        try:
            conn.open()
        except BaseException as exc:
            try:
                conn.client.close()
            except Exception:  # noqa: BLE001 - closing a half-open connection is best effort; the connect error is raised
                pass
            raise self._connect_error(exc, conn, policy) from exc
        assert conn.transport is not None
        conn.transport.set_keepalive(KEEPALIVE_S)
        server_key = conn.transport.get_remote_server_key()
        self.host_key_fingerprint = hostkeys.describe(server_key)
        self.host_key_status = (f"recorded in {policy.record_file}" if policy.status == "recorded"
                                else "known")
        self.connects += 1
        return conn

    def _gateway(self) -> fabric.Connection:
        """The last jump host's connection (opened; earlier hops are its own jumps). The jump
        is checked against the same known_hosts and uses the same key and user unless its
        `user@` says otherwise."""
        assert self.proxy_jump
        *before, last = [hop.strip() for hop in self.proxy_jump.split(",") if hop.strip()]
        user, _, hostport = last.rpartition("@")
        address, port = hostport, 22
        if hostport.startswith("["):  # [v6]:port
            address, _, rest = hostport[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else 22
        elif hostport.count(":") == 1:
            address, _, text = hostport.partition(":")
            try:
                port = int(text)
            except ValueError:
                raise self._error(f"proxy_jump '{self.proxy_jump}': port '{text}' is not a number") from None
        self._jump = SSHTransport(f"{self.name} jump {address}", address, port=port, user=user or self.user,
                                  key_filename=self.key_filename, host_key=self.host_key,
                                  known_hosts=self.known_hosts, connect_timeout=self.connect_timeout,
                                  use_session=False, python=self.python, proxy_jump=",".join(before) or None)
        try:
            return self._jump.connection
        except TransportError as exc:
            raise self._error(f"cannot reach {self.target} through jump host {last}: {exc.message}",
                              hint=exc.hint) from exc

    def _connect_error(self, exc: BaseException, conn: fabric.Connection,
                       policy: hostkeys.KnownHostsPolicy) -> BaseException:
        """Turn what paramiko raised into one message a user can act on."""
        keyname = hostkeys.host_key_name(self.address, self.port)
        secs = f"{self.connect_timeout:g} s"
        if isinstance(exc, paramiko.BadHostKeyException):
            files = hostkeys.files_with_host(keyname, policy.searched()) or policy.searched()
            return self._error(
                f"host key for {self.target} has CHANGED: the server offers "
                f"{hostkeys.describe(exc.key)}, but known_hosts ({', '.join(files)}) has "
                f"{hostkeys.describe(exc.expected_key)} for {keyname}. Refusing to connect: "
                "this may be a man-in-the-middle attack, or the host was reinstalled",
                hint=f"if the change is expected, remove the old key: "
                     f"ssh-keygen -R {shlex.quote(keyname)} -f {shlex.quote(files[0])}")
        if isinstance(exc, hostkeys.HostKeyRefused):
            return self._error(
                f"refusing to connect to {self.target}: {exc.reason}",
                hint=f"add the host's key to {policy.record_file} (after checking its fingerprint), "
                     "or set host_key: accept-new")
        if isinstance(exc, paramiko.AuthenticationException):
            who = self.user or conn.user
            key = f"key {self.key_filename} and the ssh agent" if self.key_filename else "the ssh agent and default keys"
            return self._error(
                f"authentication failed for user {who} on {self.target} with {key}: {exc}",
                hint="check `user:` and `key:` in hosts.yaml, and the host's authorized_keys")
        if isinstance(exc, NoValidConnectionsError):
            return self._error(f"cannot connect to {self.target} within {secs}: connection refused",
                               hint="is sshd running there, and is the port right?")
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return self._error(f"cannot connect to {self.target} within {secs}: timed out",
                               hint="check the address, the network and firewalls")
        if isinstance(exc, socket.gaierror):
            return self._error(f"cannot connect to {self.target}: cannot resolve {self.address}: "
                               f"{exc.strerror}")
        if isinstance(exc, paramiko.SSHException) and "banner" in str(exc).lower():
            return self._error(f"cannot connect to {self.target} within {secs}: "
                               f"no SSH greeting from the server ({exc})")
        if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
            detail = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            return self._error(f"cannot connect to {self.target} within {secs}: {detail}")
        return exc

    def close(self) -> None:
        self._drop()

    def __enter__(self) -> "SSHTransport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands

    def _remote_line(self, cmd: Command, cwd: str | None, env_file: str | None, marker: str) -> str:
        """The line the host's bash runs: the command's environment loaded (and its file
        removed), exports, cd, then the command itself, a script inline (the caller adds the
        group-killing timeout: the session helper itself, or `group_wrapped`)."""
        line = prefixed(host_line(cmd), [f"{_MARKER}={marker}"], self.expand(cwd) if cwd else None)
        if env_file is None:
            return line
        f = shlex.quote(env_file)
        return f"set -a; . {f} || {{ rm -f -- {f}; exit 111; }}; set +a; rm -f -- {f}; {line}"

    def _send_env(self, env: dict[str, str], marker: str) -> str:
        """A command's environment as the server launch sends secrets: a 0600 file (put,
        SFTP or stdin: never a command's argument), sourced and removed by the command's own
        bash. Values in the `bash -c` line were in the host's process list (issue 35)."""
        for key in env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"invalid environment variable name {key!r}")
        path = f"{self.expand(ENV_DIR)}/{marker}.env"
        self.put(env_file_text(env).encode(), path, mode=0o600)
        return path

    def _drop_env(self, path: str) -> None:
        """Best effort: a command that never started leaves its env file behind."""
        try:
            self._sftp_call(lambda sftp: sftp.remove(path))
        except Exception:  # noqa: BLE001 - the file is 0600 and named by a random marker
            pass

    def run(self, cmd: Command, *, timeout: float, cwd: str | None = None,
            env: dict[str, str] | None = None, stdin: bytes | None = None) -> CommandResult:
        marker = uuid.uuid4().hex
        env_file = self._send_env(env, marker) if env else None
        try:
            return self._run(cmd, timeout, cwd, env_file, stdin, marker)
        except BaseException:
            if env_file is not None:
                self._drop_env(env_file)
            raise

    def _run(self, cmd: Command, timeout: float, cwd: str | None, env_file: str | None, stdin: bytes | None,
             marker: str) -> CommandResult:
        line = command_line(cmd)
        remote = self._remote_line(cmd, cwd, env_file, marker)
        if stdin is None and self.use_session and self._session_lock.acquire(blocking=False):
            try:
                result = self._run_in_session(remote, line, timeout, marker)
            finally:
                self._session_lock.release()
            if result is not None:
                return result
        self.channel_commands += 1
        started = time.monotonic()
        chan = self._start(group_wrapped(remote, timeout), line)
        try:
            return self._collect(chan, line, timeout, stdin, started, time.monotonic(), marker)
        finally:
            chan.close()

    def _live_session(self) -> ShellSession | None:
        """The host's shell session, started (or replaced) as needed; None where it cannot start."""
        if self.session_error:
            return None
        transport = self._transport()
        if self._session is not None and self._session.alive and self._session_transport is transport:
            return self._session
        if self._session is not None:
            self._session.close()
        try:
            python = self.expand(self.python) if self.python.startswith("~/") else self.python
            self._session = ShellSession(lambda: transport.open_session(timeout=self.connect_timeout),
                                         start_timeout=max(15.0, self.connect_timeout), python=python)
        except (SessionBroken, paramiko.SSHException, OSError, EOFError) as exc:
            self._session = None
            self.session_error = f"session helper unavailable ({self.python} on the host? {exc}); using a channel per command"
            return None
        self._session_transport = transport
        return self._session

    def _run_in_session(self, remote: str, line: str, timeout: float, marker: str) -> CommandResult | None:
        """Run through the session; None means "use a channel instead" (nothing was sent)."""
        started = time.monotonic()
        session = self._live_session()
        if session is None:
            return None
        self.session_commands += 1
        try:
            reply = session.run(remote, timeout, started + timeout + BACKSTOP_S)
        except SessionBroken as exc:
            session.close()
            self._session = None
            duration = time.monotonic() - started
            if not (self._session_transport and self._session_transport.is_active()):
                raise self._error(f"connection to {self.target} lost while running a command; "
                                  "it may have run partly", hint=f"command: {line}") from exc
            self._kill_marked(marker)
            return CommandResult(line, TIMEOUT_RC, "", f"specops: {exc}; killed its processes", duration, True)
        duration = time.monotonic() - started
        timed_out = reply.rc in (TIMEOUT_RC, 128 + 9) and duration >= timeout
        return CommandResult(line, TIMEOUT_RC if timed_out else reply.rc, reply.stdout.decode(errors="replace"),
                             reply.stderr.decode(errors="replace"), duration, timed_out)

    def _start(self, remote: str, line: str) -> paramiko.Channel:
        """Open a channel and exec `remote`; reopen a dropped connection once."""
        failed: paramiko.Transport | None = None
        for attempt in (0, 1):
            transport = self._transport(failed)
            try:
                chan = transport.open_session(timeout=self.connect_timeout)
                chan.exec_command(remote)
                return chan
            except (paramiko.ChannelException, paramiko.SSHException, EOFError, OSError) as exc:
                dead = not transport.is_active()
                if not dead and "timeout" in str(exc).lower():
                    dead = True  # a half-dead connection: no answer at all
                if attempt == 0 and dead:
                    failed = transport
                    continue
                raise self._error(f"cannot start a command on {self.target}: {exc or type(exc).__name__}"
                                  f"{' (the connection dropped and reopening did not help)' if dead else ''}",
                                  hint=f"command: {line}") from exc
        raise AssertionError("unreachable")

    def _collect(self, chan: paramiko.Channel, line: str, timeout: float, stdin: bytes | None,
                 started: float, begun: float, marker: str) -> CommandResult:
        """Feed stdin, read stdout/stderr until EOF and the exit status, or the backstop.
        `started`: when the call began (for the duration, connecting included); `begun`:
        when the command started on the host (for its deadlines)."""
        self._feed(chan, stdin)
        out, err = OutputBuffer(), OutputBuffer()
        # The host-side timeout normally ends the command at `begun + timeout`; past
        # `deadline` the host is not answering. A command that exited while processes it
        # started still hold its output open is given up at `begun + timeout`, as
        # LocalTransport does.
        deadline = begun + timeout + BACKSTOP_S
        transport = chan.get_transport()
        abandoned = ""
        while True:
            while chan.recv_ready():
                out.add(chan.recv(READ_SIZE))
            while chan.recv_stderr_ready():
                err.add(chan.recv_stderr(READ_SIZE))
            now = time.monotonic()
            if chan.eof_received or chan.closed:
                if not chan.status_event.wait(max(0.0, deadline - now)):
                    abandoned = f"no exit status from {self.target} within {timeout + BACKSTOP_S:g} s"
                break
            if now >= deadline:
                abandoned = f"no answer from {self.target} within {timeout + BACKSTOP_S:g} s"
                break
            if chan.exit_status_ready() and now >= begun + timeout:
                abandoned = (f"the command exited but processes it started still held its output "
                             f"open after {timeout:g} s")
                break
            if not transport.is_active():
                break
            limit = begun + timeout if chan.exit_status_ready() else deadline
            select.select([chan], [], [], min(max(limit - now, 0.01), 1.0))
        while chan.recv_ready():
            out.add(chan.recv(READ_SIZE))
        while chan.recv_stderr_ready():
            err.add(chan.recv_stderr(READ_SIZE))
        duration = time.monotonic() - started
        stdout = out.value().decode(errors="replace")
        stderr = err.value().decode(errors="replace")
        if abandoned:
            chan.close()
            self._kill_marked(marker)
            stderr += f"\nspecops: {abandoned}; killed its processes"
            return CommandResult(line, TIMEOUT_RC, stdout, stderr, duration, True)
        status = chan.exit_status if chan.exit_status_ready() else -1
        if status == -1 and not transport.is_active():
            raise self._error(f"connection to {self.target} lost while running a command; "
                              "it may have run partly", hint=f"command: {line}")
        timed_out = status in (TIMEOUT_RC, 128 + 9) and time.monotonic() - begun >= timeout
        return CommandResult(line, TIMEOUT_RC if timed_out else status, stdout, stderr, duration,
                             timed_out)

    def _feed(self, chan: paramiko.Channel, stdin: bytes | None) -> None:
        """Send `stdin` (from a thread: the command may read it slowly, or not at all), then EOF."""
        if not stdin:
            chan.shutdown_write()
            return

        def feed() -> None:
            try:
                chan.sendall(stdin)
                chan.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                pass  # the command exited without reading it all
        threading.Thread(target=feed, name=f"stdin-{self.name}", daemon=True).start()

    def _kill_marked(self, marker: str) -> None:
        """Kill every process of an abandoned command (found by the marker in its
        environment); best effort, never raises."""
        script = (f"for p in /proc/[0-9]*; do grep -qsxz {_MARKER}={marker} \"$p/environ\" && "
                  "kill -KILL \"${p#/proc/}\" 2>/dev/null; done; true")
        try:
            chan = self._transport().open_session(timeout=self.connect_timeout)
            try:
                chan.exec_command(group_wrapped(shlex.join(["bash", "-c", script]), 10))
                chan.shutdown_write()
                chan.status_event.wait(15)
            finally:
                chan.close()
        except Exception:  # noqa: BLE001 - killing an abandoned command is best effort (its docstring: never raises)
            pass

    # ------------------------------------------------------------------ files

    def _sftp_client(self, transport: paramiko.Transport) -> paramiko.SFTPClient:
        """The SFTP session on `transport`, opened once; _NoSftp where the host refuses the
        subsystem while the connection itself is fine (the file ops then go by exec)."""
        with self._sftp_lock:
            if self._sftp is None or self._sftp_transport is not transport or self._sftp.sock.closed:
                try:
                    client = paramiko.SFTPClient.from_transport(transport)
                except (EOFError, paramiko.SSHException, OSError) as exc:
                    # a dropped connection is the caller's to reopen; only a live one that
                    # refuses the subsystem means "no SFTP here"
                    if not transport.is_active() or isinstance(exc, (EOFError, OSError)) or not _answers(transport):
                        raise
                    self.sftp_off = f"no SFTP subsystem on {self.target} ({exc or type(exc).__name__}); files move by exec"
                    raise _NoSftp(self.sftp_off) from exc
                if client is None:
                    self.sftp_off = f"no SFTP subsystem on {self.target}; files move by exec"
                    raise _NoSftp(self.sftp_off)
                self._sftp, self._sftp_transport = client, transport
            return self._sftp

    def _sftp_call(self, fn: Callable[[paramiko.SFTPClient], T]) -> T:
        """Run `fn` with the SFTP session of the live connection; reopen a dropped one once.
        Errors that are not about the connection (no such file...) pass through; _NoSftp
        where the host has no SFTP subsystem."""
        if self.sftp_off:
            raise _NoSftp(self.sftp_off)
        failed: paramiko.Transport | None = None
        for attempt in (0, 1):
            transport = self._transport(failed)
            try:
                sftp = self._sftp_client(transport)
                return fn(sftp)
            except (EOFError, paramiko.SSHException, OSError) as exc:
                if transport.is_active() and not isinstance(exc, EOFError):
                    raise
                if attempt == 1:
                    raise self._error(f"connection to {self.target} lost during a file transfer "
                                      f"and reopening did not help: {exc or type(exc).__name__}") from exc
                failed = transport
        raise AssertionError("unreachable")

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        target = self.expand(path)
        parent, base = posixpath.split(target)
        tmp = f"{parent}/.{base}.{uuid.uuid4().hex[:12]}.specops-tmp"

        def op(sftp: paramiko.SFTPClient) -> None:
            try:
                fh = sftp.open(tmp, "wb")
            except FileNotFoundError:
                made = self.run(["mkdir", "-p", "--", parent], timeout=30)
                if not made.ok:
                    raise OSError(f"mkdir -p {parent} failed: {made.tail(3)}") from None
                fh = sftp.open(tmp, "wb")
            try:
                with fh:
                    if mode is not None:  # before any byte lands: a 0600 secrets file is never readable
                        fh.chmod(mode)
                    fh.set_pipelined(True)
                    fh.write(data)
                want = mode
                if want is None:
                    try:
                        want = stat.S_IMODE(sftp.stat(target).st_mode or 0o644)
                    except FileNotFoundError:
                        want = 0o644
                sftp.chmod(tmp, want)
                sftp.posix_rename(tmp, target)
            except BaseException:
                try:
                    sftp.remove(tmp)
                except Exception:  # noqa: BLE001 - removing the temp file is best effort; the upload's error is raised
                    pass
                raise

        try:
            self._sftp_call(op)
        except _NoSftp:
            self._exec_put(data, target, tmp, mode)
        except TransportError:
            raise
        except (OSError, paramiko.SSHException) as exc:
            raise self._error(f"cannot write {target} on {self.target}: {_why(exc)}") from exc

    def get(self, path: str) -> bytes:
        target = self.expand(path)

        def op(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(target, "rb") as fh:
                fh.prefetch()
                return fh.read()

        try:
            return self._sftp_call(op)
        except _NoSftp:
            return self._exec_read(target, ["base64", "-w0", "--", target])
        except TransportError:
            raise
        except (OSError, paramiko.SSHException) as exc:
            raise self._error(f"cannot read {target} on {self.target}: {_why(exc)}") from exc

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        target = self.expand(path)

        def op(sftp: paramiko.SFTPClient) -> bytes:
            with sftp.open(target, "rb") as fh:
                size = fh.stat().st_size or 0
                count = min(length, size - offset)
                if count <= 0:
                    return b""
                if count <= paramiko.SFTPFile.MAX_REQUEST_SIZE:
                    fh.seek(offset)
                    return fh.read(count)
                return b"".join(fh.readv([(offset, count)]))

        try:
            return self._sftp_call(op)
        except _NoSftp:
            script = ('[ -r "$1" ] || { echo "$1: No such file or directory" >&2; exit 1; }; '
                      'tail -c +"$2" -- "$1" | head -c "$3" | base64 -w0')
            return self._exec_read(target, ["bash", "-c", script, "_", target, str(offset + 1), str(length)])
        except TransportError:
            raise
        except (OSError, paramiko.SSHException) as exc:
            raise self._error(f"cannot read {target} on {self.target}: {_why(exc)}") from exc

    def stat_size(self, path: str) -> int | None:
        """None only when the file does not exist: any other failure (the connection, no
        permission) raises, so a transport problem never reads as "missing"."""
        target = self.expand(path)
        try:
            return self._sftp_call(lambda sftp: sftp.stat(target).st_size)
        except _NoSftp:
            res = self.run(["stat", "-L", "-c", "%s", "--", target], timeout=_FILE_TIMEOUT_S)
            if res.ok and res.stdout.strip().isdigit():
                return int(res.stdout.strip())
            if "No such file" in res.stderr or "Not a directory" in res.stderr:
                return None
            raise self._error(f"cannot stat {target} on {self.target}: {res.tail(2) or f'exit {res.rc}'}") from None
        except FileNotFoundError:
            return None
        except TransportError:
            raise
        except (OSError, paramiko.SSHException) as exc:
            raise self._error(f"cannot stat {target} on {self.target}: {_why(exc)}") from exc

    @property
    def home(self) -> str:
        """The login user's home on the host (asked once per transport)."""
        if self._home is None:
            try:
                self._home = self._sftp_call(lambda sftp: sftp.normalize("."))
            except _NoSftp:
                res = self.run(["bash", "-c", 'printf %s "$HOME"'], timeout=_FILE_TIMEOUT_S)
                if not res.ok or not res.stdout.startswith("/"):
                    raise self._error(f"cannot read the home directory on {self.target}: {res.tail(2)}") from None
                self._home = res.stdout.rstrip("/") or "/"
        return self._home

    # ------------------------------------------------------------------ files without SFTP

    def _exec_read(self, target: str, argv: list[str]) -> bytes:
        """A file's bytes by a command that prints them in base64 (text-safe through the session)."""
        res = self.run(argv, timeout=_FILE_TIMEOUT_S)
        if not res.ok:
            why = "no such file" if "No such file" in res.stderr else (res.tail(2) or f"exit {res.rc}")
            raise self._error(f"cannot read {target} on {self.target}: {why}")
        try:
            return base64.b64decode(res.stdout.strip(), validate=True)
        except ValueError as exc:
            raise self._error(f"cannot read {target} on {self.target}: garbled transfer ({exc})") from exc

    def _exec_put(self, data: bytes, target: str, tmp: str, mode: int | None) -> None:
        """Write by `cat` on stdin into a temp file beside the target, then rename: as atomic as SFTP's."""
        script = ('umask 077; mkdir -p -- "$(dirname -- "$2")" || exit 1; m="$3"; '
                  '[ -n "$m" ] || m=$(stat -c %a -- "$2" 2>/dev/null) || m=644; [ -n "$m" ] || m=644; '
                  'cat > "$1" && chmod "$m" "$1" && mv -f -- "$1" "$2" || { rm -f -- "$1"; exit 1; }')
        res = self.run(["bash", "-c", script, "_", tmp, target, "" if mode is None else f"{mode:o}"],
                       timeout=_FILE_TIMEOUT_S + len(data) / 1e6, stdin=data)
        if not res.ok:
            raise self._error(f"cannot write {target} on {self.target}: {res.tail(2) or f'exit {res.rc}'}")

    def expand(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            path = self.home + path[1:]
        elif not path.startswith("/"):
            path = posixpath.join(self.home, path)
        return posixpath.normpath(path)

    # ------------------------------------------------------------------ the rest of the protocol

    def forward(self, port: int) -> AbstractContextManager[str]:
        return ssh_forward(self._transport(), port)

    def notes(self) -> list[str]:
        return [n for n in (self.session_error, self.sftp_off) if n]

    def identity(self) -> str:
        if not self.host_key_status:
            return "not checked"
        return f"{self.host_key_status} {self.host_key_fingerprint}".strip()


def _answers(transport: paramiko.Transport) -> bool:
    """Whether the connection still runs a command (`true`) within a few seconds."""
    try:
        chan = transport.open_session(timeout=5)
        try:
            chan.exec_command("true")
            return chan.status_event.wait(5) and chan.recv_exit_status() == 0
        finally:
            chan.close()
    except Exception:  # noqa: BLE001 - any failure means "not answering"
        return False


def _why(exc: BaseException) -> str:
    """A short reason for an SFTP failure (`no such file`, `permission denied`...)."""
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
