"""A string `shell:` command runs in one bash: over SSH the user's ~/.bashrc is read once
per host (by the login shell that starts the session helper), not once more per command.

Debian's bash reads ~/.bashrc in any top-level shell that sees SSH_CLIENT; a second bash
per command read it each time (with a pyenv or conda init there, ~100 ms a command).
The sshd here gives the login user a HOME the test controls (`SetEnv HOME=...`), whose
~/.bashrc appends a line to a counter file each time it is read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from specops.transport.ssh import SSHTransport
from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml
from tests.support.sshd import SSHD, SSHServer, start_sshd, stop_sshd


@pytest.fixture(scope="module")
def rc_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SSHServer, Path]]:
    if not Path(SSHD).exists():
        pytest.skip(f"{SSHD} not found")
    root = tmp_path_factory.mktemp("rc-sshd")
    home = root / "home"
    home.mkdir()
    (home / ".bashrc").write_text(f"echo read >> {home}/bashrc-reads\n")
    server, proc = start_sshd(root / "sshd", hosts=1, extra_config=f"SetEnv HOME={home}\n")
    try:
        yield server, home
    finally:
        stop_sshd(proc)


def _reads(home: Path) -> int:
    path = home / "bashrc-reads"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _transport(server: SSHServer, **kw) -> SSHTransport:
    return SSHTransport("rc", server.address(0), port=server.port, user=server.user, key_filename=server.key_path,
                        known_hosts=server.known_hosts, python=sys.executable, **kw)


def test_scripts_through_the_session_read_bashrc_once(rc_host: tuple[SSHServer, Path]) -> None:
    server, home = rc_host
    (home / "bashrc-reads").unlink(missing_ok=True)
    t = _transport(server)
    try:
        assert t.run("echo $HOME", timeout=10).stdout.strip() == str(home)  # the fixture's HOME took
        for i in range(10):
            r = t.run(f"x={i}; echo $((x + 1))", timeout=10, env={"A": "b"}, cwd="/tmp")
            assert r.ok and r.stdout == f"{i + 1}\n", r
        assert t.session_commands == 11 and t.channel_commands == 0
    finally:
        t.close()
    assert _reads(home) == 1  # the login shell that started the helper; no command's bash


def test_scripts_on_channels_read_bashrc_once_per_channel(rc_host: tuple[SSHServer, Path]) -> None:
    """Without the helper each channel's login shell reads it (sshd's doing); the command's
    own bash does not read it again."""
    server, home = rc_host
    (home / "bashrc-reads").unlink(missing_ok=True)
    t = _transport(server, use_session=False)
    try:
        for _ in range(5):
            assert t.run("true; true", timeout=10).ok
    finally:
        t.close()
    assert _reads(home) == 5


def test_script_semantics_survive_running_inline(rc_host: tuple[SSHServer, Path], tmp_path: Path) -> None:
    """Multi-line scripts, `exit`, a failing cd and bash's line numbers behave as in `bash -c`."""
    server, _home = rc_host
    t = _transport(server)
    try:
        r = t.run("echo one\necho two\nexit 3\necho never", timeout=10, cwd=str(tmp_path))
        assert (r.rc, r.stdout) == (3, "one\ntwo\n")
        r = t.run("echo ran", timeout=10, cwd=str(tmp_path / "absent"))
        assert r.rc == 1 and r.stdout == "" and "absent" in r.stderr
        r = t.run("true\n)", timeout=10)
        assert r.rc == 2 and "line 2" in r.stderr, r.stderr
        r = t.run("echo $0 $PWD", timeout=10, cwd=str(tmp_path))
        assert r.stdout.split() == ["bash", str(tmp_path)]
        assert r.command == "bash -c 'echo $0 $PWD'"  # the journal shows what running it means
    finally:
        t.close()


def test_twenty_shell_steps_read_bashrc_once(rc_host: tuple[SSHServer, Path], tmp_path: Path) -> None:
    server, home = rc_host
    (home / "bashrc-reads").unlink(missing_ok=True)
    entry = {"address": server.address(0), "port": server.port, "user": server.user, "key": server.key_path,
             "known_hosts": server.known_hosts, "workdir": str(tmp_path / "w"), "python": sys.executable}
    inv = inventory(tmp_path, {"rc": entry})
    steps = [{"name": f"s{i}", "shell": f"echo step {i} > {{{{ workdir }}}}/s{i}"} for i in range(20)]
    book = write_yaml(tmp_path / "p.yaml", {"name": "many", "steps": steps})
    res = run_cli("deploy", "--host", "rc", "-i", str(inv), "-p", str(book))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w/s19").read_text() == "step 19\n"
    assert _reads(home) == 1
    assert not [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "warning"]


PYENV = Path.home() / ".pyenv" / "bin" / "pyenv"


def test_a_stale_pyenv_rehash_lock_does_not_stall_a_login(tmp_path: Path) -> None:
    """The test sshd's sessions (tests/support/sshd.SESSION_ENV) must not wait on a lock file
    a killed login left: this machine's ~/.bashrc runs `pyenv init`, whose rehash waits 60 s
    for it, and on main every later login over the test sshd did (CI's slow, failing run).
    Here the real pyenv rehashes into a pyenv root of the test's own, with its lock left."""
    if not Path(SSHD).exists() or not PYENV.exists():
        pytest.skip(f"needs {SSHD} and pyenv at {PYENV}")
    home = tmp_path / "home"
    shims = home / ".pyenv" / "shims"
    shims.mkdir(parents=True)
    (shims / ".pyenv-shim").write_text("#!/usr/bin/env bash\n")  # the lock a killed rehash left
    (home / ".bashrc").write_text(f"export PYENV_ROOT={home}/.pyenv\ncommand {PYENV} rehash 2>/dev/null\n"
                                  f"echo read >> {home}/bashrc-reads\n")
    server, proc = start_sshd(tmp_path / "sshd", hosts=1, extra_config=f"SetEnv HOME={home}\n")
    try:
        t = _transport(server, use_session=False)
        try:
            # 20 s for the command (the backstop adds 10): a 60 s wait for the lock misses it
            r = t.run(["echo", "in"], timeout=20)
        finally:
            t.close()
    finally:
        stop_sshd(proc)
    assert r.ok and r.stdout == "in\n", r
    assert _reads(home) == 1 and (shims / ".pyenv-shim").exists()  # the rc ran; the lock is the user's
