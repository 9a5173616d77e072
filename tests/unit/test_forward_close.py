"""The forward's upstream thread ends quietly when the SSH transport went first: paramiko's
`Channel.close()` then raises EOFError (seen in CI as an unhandled thread exception)."""

from __future__ import annotations

import socket
import threading

from specops.transport import forward


class GoneChannel:
    """A channel whose transport has closed: what paramiko's Channel does then, and only that
    (a real transport cannot be made to die between the client's last byte and close())."""

    def __init__(self) -> None:
        self.sent = b""
        self.close_called = False

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def close(self) -> None:
        self.close_called = True
        raise EOFError()


def test_upstream_ends_without_raising_when_close_finds_the_transport_gone() -> None:
    client, peer = socket.socketpair()
    channel = GoneChannel()
    errors: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)  # type: ignore[assignment]
    try:
        peer.sendall(b"hello")
        peer.close()
        t = threading.Thread(target=forward._upstream, args=(client, channel))
        t.start()
        t.join(30)
    finally:
        threading.excepthook = previous
        client.close()
    assert not t.is_alive()
    assert channel.sent == b"hello" and channel.close_called
    assert errors == []
