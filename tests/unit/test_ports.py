"""Issue 53: one port rule. Every port specops or its tests choose lies outside the host
kernel's ephemeral range, with SGLang's gRPC twin (HTTP + 10000) outside it too and at most
65535; a host whose range leaves no such port gets a clear error, not a random port. Tune
once picked 36532 from (20000, 55535) while a download held it: 'address already in use'."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specops import ports
from specops.config.inventory import Host, load_inventory
from specops.errors import ConfigError
from specops.flows import hostops
from specops.sim import testing
from tests.support.deploy import inventory

Picker = Callable[[tuple[int, int]], list[int]]


def _outside(picked: list[int], ephemeral: tuple[int, int]) -> None:
    """The rule itself: what a picker returns may never break it."""
    for port in picked:
        twin = port + ports.GRPC_OFFSET
        assert ports.MIN_PORT <= port and twin <= ports.MAX_PORT, (port, ephemeral)
        assert not ports.in_range(port, ephemeral) and not ports.in_range(twin, ephemeral), (port, ephemeral)


def _block(ephemeral: tuple[int, int]) -> list[int]:
    low, high = ports.safe_block(ephemeral)
    return [low, high, (low + high) // 2]


def _intervals(ephemeral: tuple[int, int]) -> list[int]:
    return [p for low, high in ports.require_safe(ephemeral) for p in (low, high)]


def _first(ephemeral: tuple[int, int]) -> list[int]:
    return ports.first_ports(3, ephemeral)


def _tests_picker(ephemeral: tuple[int, int]) -> list[int]:
    """The tests' picker's worker shares (the bind itself is not this property's subject)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(testing, "local_ephemeral", lambda: ephemeral)
    try:
        picked = []
        for worker in ("gw0", "gw1"):
            mp.setenv("PYTEST_XDIST_WORKER", worker)
            mp.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
            picked += list(testing._worker_range())
        return picked
    finally:
        mp.undo()


PICKERS: dict[str, Picker] = {"safe_block": _block, "safe_intervals": _intervals, "first_ports": _first,
                              "tests' worker ranges": _tests_picker}

ranges = st.tuples(st.integers(1, ports.MAX_PORT), st.integers(1, ports.MAX_PORT)).map(lambda t: (min(t), max(t)))


@settings(max_examples=300, deadline=None)
@given(ephemeral=ranges)
def test_no_picker_returns_a_port_inside_the_range_or_a_random_one(ephemeral: tuple[int, int]) -> None:
    for name, picker in PICKERS.items():
        if not ports.safe_intervals(ephemeral):
            with pytest.raises(ConfigError, match=f"ephemeral range {ephemeral[0]}-{ephemeral[1]}"):
                picker(ephemeral)
            continue
        try:
            picked = picker(ephemeral)
        except ConfigError as e:  # only first_ports may run short, and it says so
            assert name == "first_ports" and "ports lie outside" in str(e), (name, e)
            continue
        _outside(picked, ephemeral)


@pytest.mark.parametrize("ephemeral", [(32768, 60999), (1024, 65535), (49152, 65535), (10000, 20000)])
def test_the_rule_on_known_ranges(ephemeral: tuple[int, int]) -> None:
    if ephemeral == (1024, 65535):  # no port outside it at all: a clear error naming the range and the setting
        with pytest.raises(ConfigError, match="1024-65535") as err:
            ports.safe_block(ephemeral, where="host gpu-a")
        assert "host gpu-a" in str(err.value) and "ip_local_port_range" in str(err.value)
        return
    low, high = ports.safe_block(ephemeral)
    assert high - low + 1 >= 1000  # room for every test worker and tune's arms
    _outside(list(range(low, high + 1)), ephemeral)
    assert not set(range(low, high + 1)) & {p + ports.GRPC_OFFSET for p in range(low, high + 1)}


def test_the_default_block_is_below_the_stock_range() -> None:
    assert ports.safe_block(ports.DEFAULT_EPHEMERAL) == (12768, 22767)


def test_the_property_check_has_teeth() -> None:
    """The old tune range (20000-55535) fails the rule on a stock kernel: 36532 was taken."""
    with pytest.raises(AssertionError):
        _outside([36532], ports.DEFAULT_EPHEMERAL)
    with pytest.raises(AssertionError):
        _outside([22768], ports.DEFAULT_EPHEMERAL)  # its twin, 32768, is the range's first port
    with pytest.raises(AssertionError):
        _outside([61000], (32768, 60999))  # outside, but its twin passes 65535


@pytest.mark.parametrize("text", [None, "", "garbage", "60999 32768", "0 100", "1 70000"])
def test_an_unreadable_range_falls_back_to_linuxs_default(text: str | None) -> None:
    assert ports.parse_ephemeral(text) == ports.DEFAULT_EPHEMERAL


def test_the_range_is_read_as_the_kernel_writes_it() -> None:
    assert ports.parse_ephemeral("40000\t50000\n") == (40000, 50000)


def _local_host(tmp_path: Path) -> Host:
    inv = inventory(tmp_path, {"a": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "a")}})
    return load_inventory(inv).hosts["a"]


@pytest.mark.parametrize("ephemeral", [(32768, 60999), (15000, 40000), (20000, 65535)])
def test_tunes_ports_follow_the_hosts_own_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                ephemeral: tuple[int, int]) -> None:
    """The range is the host's (read over its connection), not this machine's."""
    monkeypatch.setattr(hostops, "read_ephemeral", lambda transport: ephemeral)
    picked = hostops.free_ports(_local_host(tmp_path), 4)
    assert len(set(picked)) == 4
    _outside(picked, ephemeral)


def test_tune_refuses_a_host_with_no_safe_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostops, "read_ephemeral", lambda transport: (1024, 65535))
    with pytest.raises(ConfigError, match="host a: no port lies outside the kernel's ephemeral range 1024-65535"):
        hostops.free_ports(_local_host(tmp_path), 2)


def test_a_port_hosts_yaml_names_is_no_candidate_nor_are_its_twins() -> None:
    """CI on a fresh machine: tune gave adaptive-t4 the port the test's hosts.yaml gave the
    baseline (free then, its server not up yet), and bench refused the arms."""
    offset = 5
    assert ports.without_ports([(1000, 1010)], [1003], offset) == [(1000, 1002), (1004, 1007), (1009, 1010)]
    assert ports.without_ports([(1000, 1010)], [1012, 1003, 1003], offset) == [
        (1000, 1002), (1004, 1006), (1009, 1010)]   # 1007's twin is 1012; duplicates are one port
    assert ports.without_ports([(1000, 1010)], [], offset) == [(1000, 1010)]


def test_tune_never_picks_a_port_an_arm_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every port of the block but three is named by arms: those three are what tune gets,
    bound or not (the unchecked fallback keeps the rule too)."""
    low, high = ports.safe_block(ports.DEFAULT_EPHEMERAL)
    spare = [low + 10, (low + high) // 2, high - 3]
    taken = [p for p in range(low, high + 1) if p not in spare]
    monkeypatch.setattr(hostops, "read_ephemeral", lambda transport: ports.DEFAULT_EPHEMERAL)
    assert sorted(hostops.free_ports(_local_host(tmp_path), 3, taken=taken)) == spare
    assert ports.first_ports(3, ports.DEFAULT_EPHEMERAL, taken=taken) == spare
    with pytest.raises(ConfigError, match="only 3 ports lie outside"):
        ports.first_ports(4, ports.DEFAULT_EPHEMERAL, taken=taken)
