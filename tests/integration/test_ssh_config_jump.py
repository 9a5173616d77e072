"""Issue 12: SSH as users have it. `~/.ssh/config` (or `ssh_config: PATH`) fills HostName,
User, Port, IdentityFile and ProxyJump, inventory keys win; `proxy_jump:` in the inventory;
a jump through one loopback address to another, over the real sshd."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.deploy import inventory, run_cli, write_yaml


def _accepted(sshd: Any) -> int:
    return Path(sshd.log_path).read_text().count("Accepted publickey")


def _smoke(tmp_path: Path, inv: Path) -> str:
    book = write_yaml(tmp_path / "p.yaml", {"name": "s", "steps": [
        {"name": "where", "shell": "echo connected-as-$(id -un)", "verify": {"stdout_contains": "connected-as-"}}]})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(book), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    return res.output


def test_proxy_jump_in_the_inventory_hops_through_another_address(tmp_path: Path, sshd: Any) -> None:
    entry = sshd.host_entry(1, workdir=str(tmp_path / "w"))
    entry["proxy_jump"] = f"{sshd.user}@{sshd.address(0)}:{sshd.port}"
    before = _accepted(sshd)
    _smoke(tmp_path, inventory(tmp_path, {"gpu": entry}, defaults={"ssh_config": False}))
    assert _accepted(sshd) - before == 2  # the jump host, then the target through it


def test_an_alias_from_a_config_file_with_its_proxy_jump(tmp_path: Path, sshd: Any) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"""Host jumpbox
  HostName {sshd.address(0)}
Host gpu-alias
  HostName {sshd.address(1)}
  Port {sshd.port}
  User {sshd.user}
  IdentityFile {sshd.key_path}
  ProxyJump {sshd.user}@{sshd.address(0)}:{sshd.port}
""")
    entry = {k: v for k, v in sshd.host_entry(1, workdir=str(tmp_path / "w")).items()
             if k not in ("address", "port", "user", "key")}
    entry["address"] = "gpu-alias"
    before = _accepted(sshd)
    _smoke(tmp_path, inventory(tmp_path, {"gpu": entry}, defaults={"ssh_config": str(config)}))
    assert _accepted(sshd) - before == 2


def test_host_named_by_the_config_without_an_address_and_inventory_keys_win(tmp_path: Path, sshd: Any) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host gpu\n  HostName {sshd.address(1)}\n  Port 1\n  User nobody-here\n"
                      f"  IdentityFile {sshd.key_path}\n")
    entry = {k: v for k, v in sshd.host_entry(1, workdir=str(tmp_path / "w")).items()
             if k not in ("address", "key")}  # port and user given: they beat the config's
    before = _accepted(sshd)
    _smoke(tmp_path, inventory(tmp_path, {"gpu": entry}, defaults={"ssh_config": str(config)}))
    assert _accepted(sshd) - before == 1


def test_no_address_and_no_config_entry_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host other\n  HostName 127.0.0.9\n")
    inv = inventory(tmp_path, {"gpu": {"workdir": str(tmp_path / "w")}}, defaults={"ssh_config": str(config)})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(write_yaml(tmp_path / "p.yaml", {
        "name": "s", "steps": [{"name": "x", "shell": "true"}]})), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code != 0 and "has no 'address'" in res.output and "no Host entry" in res.output, res.output
    inv = inventory(tmp_path, {"gpu": {"workdir": "/w"}}, defaults={"ssh_config": False})
    res = run_cli("hosts", "-i", str(inv))
    assert res.exit_code == 2 and "ssh_config is off" in res.output, res.output
