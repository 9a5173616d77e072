"""Open the right Transport for an inventory host, or for this machine: the one place outside
specops/transport that names a concrete transport (tests/unit/test_transport_boundary.py)."""

from __future__ import annotations

from specops.config.inventory import Host
from specops.transport.base import Transport
from specops.transport.local import LocalTransport


def open_transport(host: Host) -> Transport:
    """A lazily-connecting transport: nothing touches the network until the first call."""
    if host.connection == "local":
        return LocalTransport(host.name)
    from specops.transport.ssh import SSHTransport
    from specops.transport.sshconfig import resolve

    target = resolve(host)  # ~/.ssh/config fills what the inventory leaves out
    return SSHTransport(
        host.name, target.address, port=target.port, user=target.user, key_filename=target.key,
        host_key=host.host_key, known_hosts=host.known_hosts, connect_timeout=host.connect_timeout,
        python=host.python, proxy_jump=target.proxy_jump,
    )


def this_machine() -> Transport:
    """This machine as a Transport: for work on local files (`specops patch` on a local tree
    runs its verify commands here)."""
    return LocalTransport()
