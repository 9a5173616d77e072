"""Issue 55: `verify` on a vLLM host said "SGLang 0.31.0" (the engine's name comes from the
engine that launched the arm now), and an error reply was cut to 300 characters before it was
masked, so the cut could leave part of a secret the mask no longer recognized."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from specops.bench import acceptance
from specops.errors import StepError
from specops.report.verify import Verification, infos_check, report_markdown
from specops.secrets import MASK, remember
from specops.servers import ServerState
from specops.vllm.serving import LAUNCH_MODULE

SECRET = "hf_" + "Q7rX2mZp9LkT4vWb8NcY1sDe6GuJ3aHf0"  # 35 characters


def _state(arm: str, port: int, argv: list[str]) -> ServerState:
    return ServerState(arm=arm, kind=arm, pid=1, pgid=1, proc_start="1", port=port, command=" ".join(argv), argv=argv, env={},
                       args_hash="h", log_path="/l", state_path="/s", mechanism="none", started_at=0.0, workdir="/w")


@pytest.mark.parametrize(("argv", "title"), [
    (["/v/bin/python", "-m", LAUNCH_MODULE, "--model", "m"], "vLLM"),
    (["python", "-m", "sglang.launch_server", "--model-path", "m"], "SGLang")])
def test_the_version_check_and_the_report_name_the_arms_engine(monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                                title: str) -> None:
    monkeypatch.setattr(acceptance, "_server_info", lambda url: {"version": "0.31.0"})
    result = Verification(host="cpu", specops_version="x", prompts=1, max_new_tokens=1)
    chosen = {"baseline": _state("baseline", 1, argv), "adaptive": _state("adaptive", 2, argv)}
    check = infos_check(result, *acceptance.read_infos(chosen, {"baseline": "u1", "adaptive": "u2"}))
    assert check.ok and check.detail == f"all two answer, {title} 0.31.0", check.detail
    assert result.arms["baseline"]["engine"] == title
    text = report_markdown(result)
    assert f"mechanism none): {title} 0.31.0" in text
    if title == "vLLM":
        assert "SGLang" not in text and "SGLang" not in check.detail


class _Refusing(http.server.BaseHTTPRequestHandler):
    """Answers 400 with a body whose secret straddles the 300th character."""

    def do_POST(self) -> None:
        body = ("x" * 280 + SECRET + " and more").encode()
        self.send_response(400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def refusing() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_error_reply_is_masked_before_it_is_cut(refusing: str) -> None:
    remember(SECRET, declared=True)
    with pytest.raises(StepError) as err:
        acceptance.generate(refusing, "hi", 1)
    message = err.value.message
    assert SECRET[:8] not in message, message  # the cut left 20 of its 35 characters before
    assert MASK in message and "answered 400" in message
