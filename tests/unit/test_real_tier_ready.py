"""The real tier's own ready check (tests/support/real_sglang/server.py) against a /health that
answers as SGLang's does: `health_generate` sleeps a whole second before it looks whether the
scheduler answered, so no /health is ever answered in under a second. A 1 s client timeout
saw it only when the reply happened to beat the clock by a hair: measured on 0.5.10.post1,
10-14 s of health requests timing out after every real server's ready line."""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
from pathlib import Path

from tests.support.real_sglang import server as real

SGLANG_HEALTH_SLEEP_S = 1.0  # http_server.py health_generate: `await asyncio.sleep(1)` first


class _SlowHealth(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(SGLANG_HEALTH_SLEEP_S + 0.2)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_server_whose_health_takes_over_a_second_is_ready_at_the_first_poll(tmp_path: Path) -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowHealth)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    log = tmp_path / "server.log"
    log.write_text(f"[2026-12-03 12:00:00] {real.READY_LINE}\n")
    proc = subprocess.Popen(["sleep", "60"])
    try:
        server = real.Server(proc, httpd.server_address[1], log, time.monotonic())
        assert server.poll_ready(), "a /health that answers 200 after 1.2 s is a ready server"
    finally:
        proc.kill()
        httpd.shutdown()
