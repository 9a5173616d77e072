"""The host operations `tune` and `demo` run around their sweeps, each on a connection it
opens and closes itself: free ports for the arms tune adds, releasing the servers a tune
phase kept up, stopping the demo's servers."""

from __future__ import annotations

from typing import Callable

from specops.config.inventory import Host
from specops.servers import read_states, stop_arms, stop_states
from specops.transport.connect import open_transport

#: where the arms tune adds get their ports: below the kernel's ephemeral range (32768-60999
#: by default) an outgoing connection or a bind(0) cannot take one before its server binds it,
#: and SGLang (0.5.12+) also binds its gRPC port at HTTP + 10000, refusing one past 65535:
#: each port is chosen with that one free too
PORT_RANGE = (20000, 55535)
GRPC_OFFSET = 10000
_FREE_PORTS = """
import random, socket, sys
low, high, offset, n = (int(a) for a in sys.argv[1:5])
held, ports = [], []
for port in random.Random().sample(range(low, high + 1), high - low + 1):
    if len(ports) == n:
        break
    if any(abs(port - p) in (0, offset) for p in ports):
        continue
    socks = [socket.socket(), socket.socket()]
    try:
        socks[0].bind(("127.0.0.1", port))
        socks[1].bind(("127.0.0.1", port + offset))
    except OSError:
        for s in socks:
            s.close()
        continue
    held += socks
    ports.append(port)
print(" ".join(str(p) for p in ports))
"""


def free_ports(host: Host, n: int) -> list[int]:
    """Ports free on the host right now, for the arms tune adds (adaptive-t*, eagle3-k*):
    the profiles' own ports may be held by deployed servers, the next ones by anybody. Each
    from PORT_RANGE with its gRPC twin (+GRPC_OFFSET) free as well, and no two that collide
    that way. [] when the host could not say (the tuner then picks its own)."""
    low, high = PORT_RANGE
    with open_transport(host) as transport:
        res = transport.run([host.python, "-c", _FREE_PORTS, str(low), str(high), str(GRPC_OFFSET), str(n)],
                            timeout=60)
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
