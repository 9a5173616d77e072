"""Tune's host setup (flows.hostops.free_ports), on this machine: the ports it reports for
the arms tune adds are distinct and free right now, each with the port SGLang binds its gRPC
server on (HTTP + 10000) free too, both outside this machine's ephemeral range (specops.ports)."""

from __future__ import annotations

import socket
from pathlib import Path

from specops.config.inventory import load_inventory
from specops.flows.hostops import free_ports
from specops.ports import in_range, local_ephemeral
from tests.support.deploy import inventory


def test_free_ports_are_free_on_this_machine(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"a": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "a")}})
    ports = free_ports(load_inventory(inv).hosts["a"], 3)
    assert len(set(ports)) == 3
    ephemeral = local_ephemeral()
    assert not [p for p in ports if in_range(p, ephemeral) or in_range(p + 10000, ephemeral)], (ports, ephemeral)
    assert all(p + 10000 <= 65535 for p in ports), ports   # a gRPC port past 65535 is refused by SGLang
    assert not {p + 10000 for p in ports} & set(ports), ports   # one arm's gRPC port is no other's HTTP port
    for port in ports:  # each one and its gRPC twin bind again here
        for bound in (port, port + 10000):
            with socket.socket() as s:
                s.bind(("127.0.0.1", bound))
