"""Where a server's port may come from: the one rule for every port specops (tune's added
arms) and its tests and benchmarks choose.

A port inside the host kernel's ephemeral range (`ip_local_port_range`, 32768-60999 on a
stock Linux) can be taken between the moment it is found free and the moment the server
binds it: every outgoing connection's source port and every bind(0) land there (weights and
wheels downloading, a metrics scraper, SGLang's own NCCL port). So a chosen port lies
outside that range, and so does the port SGLang (0.5.12+) binds its gRPC server on, HTTP +
GRPC_OFFSET, which must also stay <= 65535. Where no port satisfies that, the caller gets
a clear error, never a random port."""

from __future__ import annotations

from typing import Iterable

from specops.errors import ConfigError

#: the kernel's setting, read on the host the servers run on
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: Linux's default, used where the host cannot say (no /proc, another kernel)
DEFAULT_EPHEMERAL = (32768, 60999)
#: SGLang 0.5.12+ binds its gRPC server here, relative to the HTTP port
GRPC_OFFSET = 10000
#: below this a port needs privileges; above MAX_PORT none exists
MIN_PORT, MAX_PORT = 1024, 65535

Interval = tuple[int, int]


def parse_ephemeral(text: str | None) -> Interval:
    """The range `ip_local_port_range` holds ("32768\\t60999"), or DEFAULT_EPHEMERAL when
    the text is missing or not two ordered port numbers."""
    try:
        low, high = (int(field) for field in (text or "").split())
    except ValueError:
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high <= MAX_PORT else DEFAULT_EPHEMERAL


def local_ephemeral() -> Interval:
    """This machine's ephemeral range (where the tests' servers run)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as fh:
            return parse_ephemeral(fh.read())
    except OSError:
        return DEFAULT_EPHEMERAL


def in_range(port: int, interval: Interval) -> bool:
    return interval[0] <= port <= interval[1]


def _minus(intervals: list[Interval], cut: Interval) -> list[Interval]:
    out: list[Interval] = []
    for low, high in intervals:
        if high < cut[0] or low > cut[1]:
            out.append((low, high))
            continue
        if low < cut[0]:
            out.append((low, cut[0] - 1))
        if high > cut[1]:
            out.append((cut[1] + 1, high))
    return out


def safe_intervals(ephemeral: Interval, offset: int = GRPC_OFFSET) -> list[Interval]:
    """Every port p, as ordered intervals, with p and p + offset both outside `ephemeral`
    and p + offset <= MAX_PORT. Empty when there is none (a range of 1024-65535)."""
    low, high = ephemeral
    allowed = _minus([(MIN_PORT, MAX_PORT - offset)], (low, high))
    return _minus(allowed, (low - offset, high - offset)) if offset else allowed


def _no_port(ephemeral: Interval, where: str) -> ConfigError:
    return ConfigError(f"no port lies outside the kernel's ephemeral range {ephemeral[0]}-{ephemeral[1]} with "
                       f"its gRPC port (+{GRPC_OFFSET}) outside it too and <= {MAX_PORT}",
                       where=where, hint=f"narrow {EPHEMERAL_RANGE_FILE} on the host "
                                         "(e.g. sysctl net.ipv4.ip_local_port_range='32768 60999')")


def require_safe(ephemeral: Interval, offset: int = GRPC_OFFSET, where: str = "ports") -> list[Interval]:
    """safe_intervals, or ConfigError (naming `where`) when there is none."""
    intervals = safe_intervals(ephemeral, offset)
    if not intervals:
        raise _no_port(ephemeral, where)
    return intervals


def safe_block(ephemeral: Interval, offset: int = GRPC_OFFSET, where: str = "ports") -> Interval:
    """One interval of safe ports none of which is another's gRPC twin (its length is at most
    `offset`): the top of the largest safe interval. Callers that hand out many ports (the
    tests, split between workers) pick from it. ConfigError when no safe port exists."""
    intervals = require_safe(ephemeral, offset, where)
    low, high = max(intervals, key=lambda iv: (iv[1] - iv[0], iv[1]))
    return (max(low, high - offset + 1), high) if offset else (low, high)


def without_ports(intervals: list[Interval], taken: Iterable[int], offset: int = GRPC_OFFSET) -> list[Interval]:
    """`intervals` less every port that would collide with a port in `taken` (one an arm of
    hosts.yaml already names, free now only because its server is not up): the port itself,
    and the ports whose gRPC twin (+offset) is it or is its twin."""
    out = list(intervals)
    for port in sorted(set(taken)):
        for cut in {port, port - offset, port + offset}:
            out = _minus(out, (cut, cut))
    return out


def first_ports(n: int, ephemeral: Interval, where: str = "ports", taken: Iterable[int] = ()) -> list[int]:
    """`n` safe ports, none another's twin nor colliding with `taken`, without checking that
    they are free: for a host that could not say which are (the servers' own bind then tells)."""
    found = [p for low, high in without_ports([safe_block(ephemeral, where=where)], taken)
             for p in range(low, high + 1)][:n]
    if len(found) < n:
        raise ConfigError(f"only {len(found)} ports lie outside the kernel's ephemeral range {ephemeral[0]}-"
                          f"{ephemeral[1]} with their gRPC ports outside it too; {n} are needed", where=where)
    return found


def format_intervals(intervals: list[Interval]) -> str:
    """"1024-22767,61000-65535": the candidates handed to a host's port finder."""
    return ",".join(f"{low}-{high}" for low, high in intervals)
