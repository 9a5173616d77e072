"""Reach a port on the host from here (`Transport.forward`); for SSH hosts, whose servers
listen on 127.0.0.1 only, through the host's SSH connection.

The SSH forward is a small threaded TCP listener on 127.0.0.1 whose every accepted
connection becomes a `direct-tcpip` channel of the host's existing SSH connection (no new
login).
"""

from __future__ import annotations

import socket
import socketserver
import threading
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Iterator

from specops.transport.base import Transport

if TYPE_CHECKING:
    import paramiko

_CHUNK = 64 * 1024


def _ssh_errors() -> tuple[type[BaseException], ...]:
    """What ends a forwarded connection. paramiko is imported here (already loaded by the
    SSH transport whose forward this is), not at the top: the bench sweep imports `reach`
    from this module, and `deploy` on a local host need not load paramiko."""
    import paramiko

    return (OSError, EOFError, paramiko.SSHException)


def _upstream(client: socket.socket, channel: paramiko.Channel) -> None:
    """Client -> host until the client is done; then the channel closes, which also ends
    the other direction's `recv`."""
    try:
        while data := client.recv(_CHUNK):
            channel.sendall(data)
    except _ssh_errors():
        pass
    finally:
        try:
            channel.close()
        except _ssh_errors():
            pass  # the transport is already gone (the host or the connection closed first)


def _pump(client: socket.socket, channel: paramiko.Channel) -> None:
    """Copy bytes both ways until either side closes: one blocking thread per direction.

    Not `select()` on the channel: `Channel.fileno()` gives it an os.pipe that paramiko's
    reader thread may be `set()`ting, unlocked, while `close()` closes it; the byte then
    lands in whatever file reused that number (under concurrency, the SSH socket itself:
    "Bad file descriptor" in the transport thread, the connection and every response
    riding it cut short)."""
    up = threading.Thread(target=_upstream, args=(client, channel), daemon=True)
    up.start()
    try:
        while data := channel.recv(_CHUNK):
            client.sendall(data)
    except _ssh_errors():
        pass
    finally:
        try:
            client.shutdown(socket.SHUT_RDWR)  # wakes `_upstream`'s recv
        except OSError:
            pass
        up.join(timeout=10)
        channel.close()
        client.close()


class _Forwarder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, ssh: paramiko.Transport, remote_port: int):
        self.ssh, self.remote_port = ssh, remote_port
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: _Forwarder = self.server  # type: ignore[assignment]
        try:
            channel = server.ssh.open_channel("direct-tcpip", ("127.0.0.1", server.remote_port),
                                              self.request.getpeername(), timeout=10)
        except _ssh_errors():
            self.request.close()
            return
        _pump(self.request, channel)


def reach(transport: Transport, port: int) -> AbstractContextManager[str]:
    """A base URL on this machine that reaches 127.0.0.1:`port` on the host (see
    `Transport.forward`)."""
    return transport.forward(port)


@contextmanager
def ssh_forward(ssh: paramiko.Transport, port: int) -> Iterator[str]:
    """Forward a local ephemeral port to 127.0.0.1:`port` through the connection `ssh`."""
    forwarder = _Forwarder(ssh, port)
    thread = threading.Thread(target=forwarder.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{forwarder.server_address[1]}"
    finally:
        forwarder.shutdown()
        forwarder.server_close()
