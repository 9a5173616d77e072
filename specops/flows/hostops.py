"""The host operations `tune` and `demo` run around their sweeps, each on a connection it
opens and closes itself: free ports for the arms tune adds, releasing the servers a tune
phase kept up, stopping the demo's servers."""

from __future__ import annotations

from typing import Callable

from specops.config.inventory import Host
from specops.servers import read_states, stop_arms, stop_states
from specops.transport.connect import open_transport

_FREE_PORTS = ("import socket\nsocks = [socket.socket() for _ in range({n})]\n"
               "for s in socks: s.bind(('127.0.0.1', 0))\nprint(' '.join(str(s.getsockname()[1]) for s in socks))")


def free_ports(host: Host, n: int) -> list[int]:
    """Ports free on the host right now, for the arms tune adds (adaptive-t*, eagle3-k*):
    the profiles' own ports may be held by deployed servers, the next ones by anybody.
    [] when the host could not say (the tuner then picks its own)."""
    with open_transport(host) as transport:
        res = transport.run([host.python, "-c", _FREE_PORTS.format(n=n)], timeout=60)
    try:
        ports = [int(p) for p in res.stdout.split()] if res.ok else []
    except ValueError:
        ports = []
    return ports if len(ports) == n else []


def releaser(host: Host, run_id: str) -> Callable[[list[str]], None]:
    """Stop the named arms' servers that this run launched and a phase kept up (a server
    someone else launched, e.g. by `specops deploy`, is left alone)."""
    def release(arms: list[str]) -> None:
        with open_transport(host) as transport:
            states = read_states(transport, host.workdir)
            mine = [states[a] for a in arms if a in states and states[a].launched_by == run_id]
            if mine:
                stop_states(transport, mine)
    return release


def stop_all(host: Host) -> list[str]:
    """Stop every server on the host (the demo's end); the arms stopped."""
    with open_transport(host) as transport:
        return [r.arm for r in stop_arms(transport, host.workdir)]
