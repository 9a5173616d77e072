"""What the Transport protocol declares works the same on both transports, and nothing
outside specops/transport asks which transport it holds."""

from __future__ import annotations

import ast
import http.server
import threading
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

import specops
from specops.transport.base import Transport
from specops.transport.local import LocalTransport
from specops.transport.ssh import SSHTransport

SPECOPS = Path(specops.__file__).parent


@pytest.fixture(params=["local", "ssh"])
def transport(request, tmp_path: Path) -> Iterator[Transport]:
    if request.param == "local":
        t: Transport = LocalTransport("local", home=str(tmp_path))
    else:
        sshd = request.getfixturevalue("sshd")
        t = SSHTransport("h0", sshd.address(0), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                         known_hosts=str(tmp_path / "known_hosts"), connect_timeout=5.0)
    yield t
    t.close()


@pytest.fixture
def http_port() -> Iterator[int]:
    """A tiny HTTP server on 127.0.0.1 (the sshd "hosts" are this machine)."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"hello " + self.path.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_home_is_the_same_kind_of_thing_on_both(transport: Transport) -> None:
    home = transport.home
    assert isinstance(home, str) and home.startswith("/")
    assert transport.expand("~") == home
    assert transport.run(["pwd"], timeout=10).stdout.strip() == home  # commands start there


def test_forward_reaches_a_port_on_the_host(transport: Transport, http_port: int) -> None:
    with transport.forward(http_port) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "/x", timeout=10) as resp:
            assert resp.read() == b"hello /x"


def test_notes_and_identity(transport: Transport) -> None:
    transport.run(["true"], timeout=10)
    assert transport.notes() == []
    ident = transport.identity()
    if isinstance(transport, SSHTransport):
        assert ident.startswith(("known ", "recorded in ")) and "SHA256:" in ident
    else:
        assert ident == "n/a (local)"


def test_ssh_notes_say_why_it_runs_slower(sshd, tmp_path: Path) -> None:
    t = SSHTransport("h0", sshd.address(0), port=sshd.port, user=sshd.user, key_filename=sshd.key_path,
                     known_hosts=str(tmp_path / "known_hosts"), python="/nonexistent/python3")
    try:
        assert t.run(["true"], timeout=10).ok
        notes = t.notes()
        assert len(notes) == 1 and "/nonexistent/python3" in notes[0] and "channel per command" in notes[0]
    finally:
        t.close()


def test_local_close_ends_commands_still_running(tmp_path: Path) -> None:
    t = LocalTransport("local", home=str(tmp_path))
    result: list = []
    thread = threading.Thread(target=lambda: result.append(t.run("sleep 30", timeout=60)))
    thread.start()
    while not t._running:  # the command has started
        thread.join(0.05)
    t.close()
    thread.join(20)
    assert not thread.is_alive() and result and result[0].rc != 0


def _outside_transport() -> Iterator[tuple[Path, ast.AST]]:
    for path in SPECOPS.rglob("*.py"):
        if "transport" in path.relative_to(SPECOPS).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            yield path, node


def test_nothing_outside_transport_asks_which_transport_it_holds() -> None:
    concrete = {"LocalTransport", "SSHTransport"}
    found = []
    for path, node in _outside_transport():
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        if node.func.id == "isinstance" and len(node.args) == 2:
            kinds = node.args[1]
            names = {n.id for n in ast.walk(kinds) if isinstance(n, ast.Name)}
            if names & concrete:
                found.append(f"{path}:{node.lineno}: isinstance(..., {', '.join(sorted(names & concrete))})")
        if node.func.id in ("getattr", "hasattr") and node.args:
            target = ast.unparse(node.args[0])
            if "transport" in target:
                found.append(f"{path}:{node.lineno}: {node.func.id}({target}, ...)")
    assert found == []
