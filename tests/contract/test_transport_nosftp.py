"""SSHTransport against a real sshd whose config has no SFTP subsystem (hardened images):
files move by exec, "missing" means missing, and a real SGLang tree reads as itself."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from specops.errors import TransportError
from specops.hostfiles.treefiles import TransportTreeFiles
from specops.sglang.layout import detect_layout
from specops.transport.ssh import SSHTransport


@pytest.fixture
def nosftp(sshd_nosftp, tmp_path):
    t = SSHTransport("bare", sshd_nosftp.address(0), port=sshd_nosftp.port, user=sshd_nosftp.user,
                     key_filename=sshd_nosftp.key_path, known_hosts=str(tmp_path / "known_hosts"),
                     connect_timeout=5.0)
    yield t
    t.close()


def test_files_move_by_exec_without_sftp(nosftp, tmp_path):
    target = tmp_path / "deep" / "er" / "f.bin"
    payload = bytes(range(256)) * 513  # binary, not a multiple of anything
    nosftp.put(payload, str(target), mode=0o640)
    assert target.read_bytes() == payload
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert nosftp.sftp_off  # it really went without SFTP
    assert nosftp.get(str(target)) == payload
    assert nosftp.stat_size(str(target)) == len(payload)
    assert nosftp.read_range(str(target), 1000, 300) == payload[1000:1300]
    assert nosftp.read_range(str(target), len(payload) + 5, 10) == b""
    assert nosftp.home == os.path.expanduser("~")
    assert nosftp.expand("~/x") == os.path.expanduser("~/x")
    # a rewrite keeps the mode of the file it replaces
    nosftp.put(b"again", str(target))
    assert target.read_bytes() == b"again" and oct(target.stat().st_mode & 0o777) == "0o640"


def test_missing_is_none_and_other_errors_raise(nosftp, tmp_path):
    assert nosftp.stat_size(str(tmp_path / "absent")) is None
    with pytest.raises(TransportError, match="no such file"):
        nosftp.get(str(tmp_path / "absent"))
    # a path through a regular file: not "missing", an error (ENOTDIR reads as absent too,
    # as it does over SFTP); a broken connection must raise, never read as missing
    (tmp_path / "plain").write_text("x")
    assert nosftp.stat_size(str(tmp_path / "plain" / "child")) is None
    nosftp.close()
    nosftp.address = "127.0.0.1"
    nosftp.port = 1  # nothing listens: the next call cannot reach the host
    with pytest.raises(TransportError):
        nosftp.stat_size(str(tmp_path / "plain"))


def test_a_real_sglang_tree_reads_as_itself_without_sftp(nosftp, sglang_tree, tmp_path):
    """Before: every read failed, stat_size said "missing", and the layout was 'unknown'."""
    tree = sglang_tree("0.5.10.post1")
    layout = detect_layout(TransportTreeFiles(nosftp, str(tree)))
    assert layout.args_layout == "classic" and layout.version == "0.5.10.post1"
    assert layout.eagle_workers
    shutil.rmtree(tree / ".git")
    assert detect_layout(TransportTreeFiles(nosftp, str(tree))).version == "0.5.10.post1"


def test_sftp_host_still_uses_sftp(sshd, tmp_path):
    t = SSHTransport("h", sshd.address(0), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                     known_hosts=str(tmp_path / "kh"), connect_timeout=5.0)
    try:
        f = Path(tmp_path / "a.txt")
        t.put(b"hello", str(f))
        assert t.get(str(f)) == b"hello" and t.sftp_off == ""
        assert t.stat_size(str(tmp_path / "nope")) is None
    finally:
        t.close()
