"""The tests' port picker stays out of the kernel's ephemeral range (where client source
ports and every bind(0), SGLang's own NCCL port among them, land) and splits its range
between xdist workers: a Slurm test's arm port was taken by such a port in CI."""

from __future__ import annotations

from specops.ports import GRPC_OFFSET, in_range, local_ephemeral
from specops.sim import testing


def test_ports_are_below_the_ephemeral_range_and_disjoint_per_worker(monkeypatch) -> None:
    ephemeral = local_ephemeral()
    seen: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        monkeypatch.setattr(testing, "_next_port", None)
        low, high = testing._worker_range()
        ports = set(testing.free_ports(5)) | {testing.free_port() for _ in range(20)}
        assert all(low <= p <= high for p in ports), (worker, ports)
        assert not [p for p in ports if in_range(p, ephemeral) or in_range(p + GRPC_OFFSET, ephemeral)], ports
        assert len(ports) == 25  # walked in order: no port picked twice
        seen[worker] = ports
    assert not seen["gw0"] & seen["gw1"]
