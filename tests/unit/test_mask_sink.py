"""Issue 55, point 1: one masking sink. Each test is a leak measured at 4bb13d4, where a rule
was kept by hand at one place and missed at the next: a cut before the mask (a crash's
reason, the live view's unfinished line, the client's error bodies), an encoding before
the mask (a secret holding `"` or `\\` in `--json` output), secrets found by upper-case
names only (`api_key` in a manifest's /server_info)."""

from __future__ import annotations

import asyncio
import html
import json
import os
import stat
from pathlib import Path
from typing import Iterator

import aiohttp
import pytest
from aiohttp import web

from specops.bench.client import Prompt, _one_request
from specops.fsutil import WriteError, append_whole, atomic_write
from specops.records.manifest import render as render_manifest
from specops.secrets import MASK, clip, dumps_masked, looks_secret, mask_text, redact, remember
from specops.servers.logwatch import failure_reason
from specops.servers.records import ServerState
from specops.servers.watch import KEEP_BYTES, ArmWatch, loading_line
from tests.support.canary import assert_clean, pieces, texts

#: A 35-character token (the measured one's length), a password holding `"` and `\`, and a
#: short 8-character secret: every test runs each through its route.
TOKEN = "hf_SinkT0kenValue9x8w7v6u5t4s3r2q1"
QUOTED = 'Pa"ss\\w0rd-Zq81x'
SHORT = 'k"8\\Zq7w'
SECRETS = [TOKEN, QUOTED, SHORT]


@pytest.fixture(autouse=True)
def _known() -> None:
    for value in SECRETS:
        remember(value, declared=True)


def _clean(text: str, secret: str) -> None:
    assert_clean(texts({"text": text}, secret))


def test_the_canary_finds_the_json_escaped_form_of_a_secret() -> None:
    """The scan itself: an escaped secret holds no 8-character piece of the plain value, so
    the scan looks for the pieces of its encoded forms too."""
    escaped = json.dumps(SHORT)[1:-1]
    assert SHORT not in escaped and any(p in escaped for p in pieces(SHORT))


@pytest.mark.parametrize("secret", SECRETS)
def test_encoded_json_is_masked_after_encoding(secret: str) -> None:
    """`DB_PASSWORD=Pa"ss\\w0rd-Zq81x` showed `***` as text but `Pa\\"ss\\\\w0rd-Zq81x` once
    JSON-encoded: the mask ran on the encoded text and no longer matched."""
    doc = {"detail": f"connect failed: password {secret} refused", "lines": [f"{secret}"]}
    encoded = json.dumps(doc)
    _clean(mask_text(encoded), secret)
    _clean(mask_text(json.dumps(encoded)), secret)  # a JSON document inside a JSON string
    _clean(mask_text(json.dumps(doc, ensure_ascii=False, indent=1)), secret)
    assert MASK in mask_text(html.escape(doc["detail"]))  # report.html's `&quot;`
    out = dumps_masked(doc, indent=1)
    _clean(out, secret)
    assert json.loads(out)["detail"] == f"connect failed: password {MASK} refused"


@pytest.mark.parametrize("secret", SECRETS)
def test_a_crash_reason_is_masked_before_its_cut(secret: str) -> None:
    """A server that died logging `...: $HF_TOKEN` with the token near character 216: the
    reason was cut at 240 characters, then masked, and 27 of 35 characters reached the
    console, events.jsonl and `--json`."""
    for start in range(200, 240, 3):
        log = "loading\n" + "RuntimeError: " + "x" * (start - len("RuntimeError: ")) + secret + " denied\n"
        reason = failure_reason(log)
        assert reason is not None and len(reason) <= 240
        _clean(reason, secret)
        assert MASK in reason or start + len(MASK) > 240


@pytest.mark.parametrize("secret", SECRETS)
def test_deploys_failure_line_holds_no_piece_of_the_logged_token(secret: str) -> None:
    """The route measured: the local supervisor's failure (servers.lifecycle) words its
    first line with the reason; every sink after it (console, events.jsonl, `--json`) masks
    the message, which must then hold no piece of the token the server logged at 216."""
    from specops.servers.lifecycle import _fail, _Watch
    from specops.transport.local import LocalTransport

    line = "[2026-01-01 10:00:00 TP0] Scheduler hit an exception: RuntimeError: cannot fetch model: "
    line += "x" * (216 - len(line)) + secret
    st = _watch().state
    w = _Watch(st)
    w.feed(("Load weight begin\n" + line + "\n").encode())
    w.alive = False
    err = _fail(LocalTransport(), w, 1.0)
    _clean(mask_text(err.message), secret)
    _clean(dumps_masked({"error": err.message}), secret)


def _watch(text: str = "") -> ArmWatch:
    st = ServerState(arm="eagle3", kind="eagle3", pid=2, pgid=2, proc_start="", port=1, command="", argv=[], env={},
                     args_hash="", log_path="", state_path="", mechanism="", started_at=0.0, workdir="")
    w = ArmWatch(st)
    w.feed(text.encode())
    return w


@pytest.mark.parametrize("secret", SECRETS)
def test_the_live_view_never_shows_an_unfinished_line(secret: str) -> None:
    """A chunk that ends inside a token: its unfinished last line held 20 characters of it,
    which no mask recognises. The live view shows the last complete line."""
    line = f"Fetching with Authorization: Bearer {secret} ok\n"
    w = _watch("Load weight begin\n")
    w.feed(line[:line.index(secret) + len(secret) - 2].encode())  # the chunk ends inside the secret
    shown = loading_line([w], 3.0)
    _clean(shown, secret)
    assert shown == "3s eagle3: Load weight begin"
    w.feed(line[line.index(secret) + len(secret) - 2:].encode())
    assert loading_line([w], 4.0) == f"4s eagle3: Fetching with Authorization: Bearer {MASK} ok"


def test_the_kept_log_starts_at_a_whole_line() -> None:
    """The watch keeps the log's last KEEP_BYTES: a trim inside a line that holds a token
    would keep its unmaskable tail for the crash excerpt."""
    head = "a" * 100 + TOKEN + "\n"
    w = _watch()
    w.feed((head + "b" * (KEEP_BYTES - len(TOKEN) // 2) + "\n").encode())
    _clean(w.text, TOKEN)
    assert w.text.startswith("b")


def test_a_progress_bar_still_shows_in_the_live_view() -> None:
    """tqdm redraws its bar after a `\r`, never ending the line: the view shows the bar as
    of its previous redraw, not the line before it."""
    w = _watch("Load weight begin\n\rLoading shards: 25% 1/4\rLoading shards: 50% 2/4")
    assert loading_line([w], 1.0).startswith("1s eagle3: Loading shards: ")


def test_secret_keys_of_any_case_are_masked() -> None:
    """Only upper-case names counted: an arm with `--api-key sk-...` left
    `"api_key": "sk-..."` in a bench manifest.json (the stored /server_info)."""
    key = "sk-lowerCaseKey0123456789"
    info = {"api_key": key, "token": "t0kenValue", "password": "hunter22", "client_secret": "cs-12345",
            "Authorization": "Bearer abcdefgh", "max_total_tokens": 4096, "max_tokens": "128",
            "eos_token": "</s>", "tokenizer_path": "/m/tok", "key": "~/.ssh/id"}
    masked = redact(info)
    assert {k for k, v in masked.items() if v == MASK} == {"api_key", "token", "password", "client_secret",
                                                           "Authorization"}
    assert not any(looks_secret(k) for k in ("max_tokens", "tokenizer_path", "eos_token", "key", "num_tokens"))
    argv = ["python", "-m", "sglang.launch_server", "--api-key", key, "--port", "30000"]
    assert redact(argv) == [*argv[:4], MASK, "--port", "30000"]
    for text in (" ".join(argv), json.dumps(argv), str(argv), json.dumps(info), str(info),
                 f"ServerArgs(model_path='m', api_key='{key}', port=3)", f"--api-key={key}"):
        _clean(mask_text(text), key)


def test_the_manifest_masks_an_arms_server_info() -> None:
    """manifest.json with an arm's /server_info as bench stores it, the server echoing its
    --api-key: no piece of the key, in the document, its argv or its command."""
    key = "sk-manifestKey0123456789ab"
    argv = ["python", "-m", "sglang.launch_server", "--api-key", key]
    manifest = {"hosts": {"gpu": {"arms": {"eagle3": {
        "command": " ".join(argv), "argv": argv, "mechanism": "eagle3",
        "server_args": {"api_key": key, "model_path": "m", "Authorization": f"Bearer {key}"}}}}}}
    text = render_manifest(manifest)
    _clean(text, key)
    assert json.loads(text)["hosts"]["gpu"]["arms"]["eagle3"]["server_args"]["api_key"] == MASK


@pytest.mark.parametrize("secret", SECRETS)
def test_clip_masks_before_it_cuts_a_short_or_quoted_secret(secret: str) -> None:
    text = "x" * 50 + secret + "y" * 50
    for limit in range(52, 50 + len(secret) + 1):
        _clean(clip(text, limit, keep="start"), secret)
        _clean(clip(text, limit + 50 - len(MASK), keep="end"), secret)


# ----- the builtin client: a server's error body, cut at 300 characters ------------------


def _serve_error(body: str) -> str:
    """A request through the client to a server that answers HTTP 500 with `body`."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=500, text=body)

    async def main() -> str:
        app = web.Application()
        app.router.add_post("/generate", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                res = await _one_request(session, f"http://127.0.0.1:{port}/generate", "generate",
                                         Prompt("hi", 1, 1), None, 10.0, 0.0)
        finally:
            await runner.cleanup()
        return str(res.error)

    return asyncio.run(main())


@pytest.mark.parametrize("secret", SECRETS)
def test_the_clients_error_is_masked_before_its_cut(secret: str) -> None:
    """bench/client.py cut a server's error body at 300 characters, then the record was
    masked: a token across the cut left its head."""
    body = "denied " + "z" * (290 - len("denied ") - len("HTTP 500: ")) + secret + " for this request"
    error = _serve_error(body)
    _clean(error, secret)
    assert error.startswith("HTTP 500: denied") and len(error) <= 300


# ----- fsutil: no symlink followed, the umask respected, secret files private, lines masked ----


def test_append_whole_refuses_a_symlinked_file(tmp_path: Path) -> None:
    """A symlinked events.jsonl was followed: lines went to whatever it named."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.jsonl").symlink_to(elsewhere)
    with pytest.raises(WriteError):
        append_whole(run / "events.jsonl", b'{"event": "x"}\n')
    assert elsewhere.read_text() == ""


def test_append_whole_masks_the_encoded_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append_whole(path, (json.dumps({"stdout": f"pw {QUOTED}"}) + "\n").encode() + b"\xff\n")
    data = path.read_bytes()
    _clean(data.decode(errors="replace"), QUOTED)
    assert data.endswith(b"\xff\n") and json.loads(data.splitlines()[0])["stdout"] == f"pw {MASK}"


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_027")
def test_new_files_respect_the_umask_and_secret_ones_are_private(tmp_path: Path) -> None:
    """atomic_write forced 0644 whatever the umask; a file holding argv or env is 0600."""
    atomic_write(tmp_path / "report.md", "x")
    assert _mode(tmp_path / "report.md") == 0o640
    append_whole(tmp_path / "results.jsonl", b"{}\n")
    assert _mode(tmp_path / "results.jsonl") == 0o640
    atomic_write(tmp_path / "state.json", "{}", secret=True)
    assert _mode(tmp_path / "state.json") == 0o600
    append_whole(tmp_path / "argv.jsonl", b"{}\n", secret=True)
    assert _mode(tmp_path / "argv.jsonl") == 0o600
    (tmp_path / "kept").write_text("")
    os.chmod(tmp_path / "kept", 0o604)
    atomic_write(tmp_path / "kept", "y")
    assert _mode(tmp_path / "kept") == 0o604  # an existing file keeps its mode
    atomic_write(tmp_path / "given", "z", mode=0o644)
    assert _mode(tmp_path / "given") == 0o644


def test_atomic_write_replaces_a_symlink_never_writes_through_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("old")
    os.chmod(target, 0o600)
    link = tmp_path / "manifest.json"
    link.symlink_to(target)
    atomic_write(link, "new")
    assert target.read_text() == "old" and not link.is_symlink() and link.read_text() == "new"
    assert _mode(link) != 0o777
