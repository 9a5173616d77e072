"""Issue 53: an arm whose configured port lies in the host's ephemeral range gets a warning
at deploy naming the arm and the range, before its server starts: any outgoing connection
on the host (weights, wheels, a metrics scraper) can hold such a port when the server binds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specops.steps import server as server_step
from tests.support.arms import sim_inventory
from tests.support.deploy import only_run_dir, run_cli, write_yaml


def _baseline_host(tmp_path: Path) -> tuple[Path, Path, int]:
    """A local simulated host with the baseline arm alone; its inventory, a launch playbook and the port."""
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"] = {a: v for a, v in data["vars"]["arms"].items() if a == "baseline"}
    write_yaml(inv, data)
    pb = write_yaml(tmp_path / "p.yaml", {"name": "p", "steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "launch", "server": {"arms": ["baseline"], "tree": "{{ workdir }}/sglang"}, "timeout": 300}]})
    return inv, pb, int(data["vars"]["arms"]["baseline"]["port"])


def test_an_arm_port_in_the_hosts_ephemeral_range_is_named_at_deploy(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    inv, pb, port = _baseline_host(tmp_path)
    read: list[object] = []

    def host_range(transport: object) -> tuple[int, int]:  # the host's range, as if it held this port
        read.append(transport)
        return port - 5, port + 5

    monkeypatch.setattr(server_step, "read_ephemeral", host_range)
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb), "--json")
        assert res.exit_code == 0, res.output
        warnings = json.loads(res.output)["hosts"]["gpu"]["warnings"]
        expected = (f"arm baseline: port {port} lies in host gpu's ephemeral port range {port - 5}-{port + 5} "
                    "(/proc/sys/net/ipv4/ip_local_port_range)")
        assert [w["step"] for w in warnings if w["message"].startswith(expected)] == ["launch"], warnings
        assert len(read) == 1  # read once per launch step, over the host's own connection
        journal = [json.loads(line) for line in (only_run_dir(tmp_path / "runs") / "events.jsonl").read_text()
                   .splitlines()]
        kinds = [(e.get("kind") or e.get("type"), e.get("message", "")) for e in journal]
        warn_at = next(i for i, (_, m) in enumerate(kinds) if m.startswith(expected))
        server_at = next(i for i, e in enumerate(journal) if e.get("arm") == "baseline" and "pid" in e)
        assert warn_at < server_at, kinds  # said before the server started
    finally:
        run_cli("stop", "--host", "gpu", "-i", str(inv))


def test_an_arm_port_outside_the_range_says_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv, pb, port = _baseline_host(tmp_path)
    monkeypatch.setattr(server_step, "read_ephemeral", lambda transport: (port + 1, port + 100))
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb), "--json")
        assert res.exit_code == 0, res.output
        assert not [w for w in json.loads(res.output)["hosts"]["gpu"]["warnings"] if "ephemeral" in w["message"]]
    finally:
        run_cli("stop", "--host", "gpu", "-i", str(inv))
