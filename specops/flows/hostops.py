"""The host operations `tune` and `demo` run around their sweeps, each on a connection it
opens and closes itself: free ports for the arms tune adds, releasing the servers a tune
phase kept up, stopping the demo's servers."""

from __future__ import annotations

from typing import Callable, Iterable

from specops.config.inventory import Host
from specops.ports import GRPC_OFFSET, first_ports, format_intervals, safe_block, without_ports
from specops.servers import read_states, stop_arms, stop_states
from specops.transport.connect import open_transport
from specops.transport.probes import read_ephemeral

#: run on the host: from the candidate intervals ("low-high,..."), `n` ports that bind now,
#: each with its gRPC twin (+offset) binding too, no two colliding that way; all held until
#: all are chosen
_FREE_PORTS = """
import random, socket, sys
spans, offset, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
candidates = [p for span in spans.split(",") for p in range(int(span.split("-")[0]), int(span.split("-")[1]) + 1)]
held, ports = [], []
for port in random.Random().sample(candidates, len(candidates)):
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


def free_ports(host: Host, n: int, taken: Iterable[int] = ()) -> list[int]:
    """Ports free on the host right now, for the arms tune adds (adaptive-t*, eagle3-k*):
    the profiles' own ports (`taken`) may be held by deployed servers, or free only because
    their servers are not up yet, the next ones by anybody. Each from the host's safe block
    (specops.ports: outside its ephemeral range, with its gRPC twin, +GRPC_OFFSET, outside it
    too and no port another's twin), colliding with no `taken` port, free with its twin right
    now. Where the host could not check which bind (no python there), the first such ports,
    unchecked: the servers' own bind then tells. ConfigError when the host's range leaves no
    safe port."""
    where = f"host {host.name}"
    with open_transport(host) as transport:
        ephemeral = read_ephemeral(transport)
        spans = without_ports([safe_block(ephemeral, where=where)], taken)
        res = transport.run([host.python, "-c", _FREE_PORTS, format_intervals(spans), str(GRPC_OFFSET), str(n)],
                            timeout=60)
    try:
        ports = [int(p) for p in res.stdout.split()] if res.ok and spans else []
    except ValueError:
        ports = []
    return ports if len(ports) == n else first_ports(n, ephemeral, where=where, taken=taken)


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
