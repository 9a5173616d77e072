"""Issue 55 point 5: `tune --write` into a hosts.yaml that is a symbolic link (the repository
ships one: ./hosts.yaml -> specops/data/hosts.yaml) changes the file the link points to,
atomically, and the link stays a link."""

from __future__ import annotations

import os
from pathlib import Path

from specops.config.writeback import write_adaptive

HOSTS = """\
hosts:
  local: {connection: local, engine: sim}
vars:
  arms:
    adaptive: {port: 30002, threshold: 8, num_steps: 3}   # tuned by specops
"""


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    real = tmp_path / "data" / "hosts.yaml"
    real.parent.mkdir()
    real.write_text(HOSTS)
    real.chmod(0o640)
    link = tmp_path / "hosts.yaml"
    link.symlink_to(os.path.join("data", "hosts.yaml"))   # relative, as the repository's
    return link, real


def test_a_linked_hosts_yaml_is_written_through_the_link(tmp_path: Path) -> None:
    link, real = _linked(tmp_path)
    write_adaptive(link, "local", "adaptive", threshold=5)
    assert link.is_symlink() and os.readlink(link) == os.path.join("data", "hosts.yaml")   # once replaced by a copy
    assert "threshold: 5," in real.read_text() and link.read_text() == real.read_text()
    assert real.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["hosts.yaml"]   # no temp file left beside it


def test_a_chain_of_links_reaches_the_file(tmp_path: Path) -> None:
    link, real = _linked(tmp_path)
    outer = tmp_path / "outer.yaml"
    outer.symlink_to(link)
    write_adaptive(outer, "local", "adaptive", threshold=3, tiers={1: 3, 4: 0})
    assert outer.is_symlink() and link.is_symlink()
    assert "threshold: 3, tiers: {1: 3, 4: 0}" in real.read_text()
