"""Reach a port on the host from here (`Transport.forward`); for SSH hosts, whose servers
listen on 127.0.0.1 only, through the host's SSH connection.

The SSH forward is a small threaded TCP listener on 127.0.0.1 whose every accepted
connection becomes a `direct-tcpip` channel of the host's existing SSH connection (no new
login).
"""

from __future__ import annotations

import select
import socket
import socketserver
import threading
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Iterator

import paramiko

from specops.transport.base import Transport

_CHUNK = 64 * 1024


def _pump(client: socket.socket, channel: paramiko.Channel) -> None:
    """Copy bytes both ways until either side closes."""
    try:
        while True:
            waiting: list[Any] = [client, channel]  # a Channel is select()able (it has fileno())
            readable, _, _ = select.select(waiting, [], [], 1.0)
            if client in readable:
                data = client.recv(_CHUNK)
                if not data:
                    break
                channel.sendall(data)
            if channel in readable:
                data = channel.recv(_CHUNK)
                if not data:
                    break
                client.sendall(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    finally:
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
        except (paramiko.SSHException, OSError, EOFError):
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
