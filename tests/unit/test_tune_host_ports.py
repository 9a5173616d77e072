"""Tune's host setup (flows.hostops.free_ports), on this machine: the ports it reports for
the arms tune adds are distinct and free right now."""

from __future__ import annotations

import socket
from pathlib import Path

from specops.config.inventory import load_inventory
from specops.flows.hostops import free_ports
from tests.support.deploy import inventory


def test_free_ports_are_free_on_this_machine(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"a": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "a")}})
    ports = free_ports(load_inventory(inv).hosts["a"], 3)
    assert len(set(ports)) == 3
    for port in ports:  # each one binds again here
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
