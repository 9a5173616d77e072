"""Reach a port on the host from here: directly for `local`, through the SSH connection
(a local forward over the existing session) for remote hosts, whose servers listen on
127.0.0.1 only."""

from __future__ import annotations

import socket
from contextlib import contextmanager
from typing import Iterator

from specops.transport.base import Transport
from specops.transport.local import LocalTransport


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def reach(transport: Transport, port: int) -> Iterator[str]:
    """Yield a base URL on this machine that reaches 127.0.0.1:`port` on the host."""
    if isinstance(transport, LocalTransport):
        yield f"http://127.0.0.1:{port}"
        return
    connection = getattr(transport, "connection")
    local = _free_port()
    with connection.forward_local(local_port=local, remote_port=port, remote_host="127.0.0.1",
                                  local_host="127.0.0.1"):
        yield f"http://127.0.0.1:{local}"
