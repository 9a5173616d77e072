"""The builtin client against a fake server that streams what real SGLang 0.5.10.post1 sends
(issue 54, point 1: the builtin client and SGLang's bench_serving disagreed on a real server).

What the real server sent, read on 2026-12-05 from one /generate stream on the tier's tiny
model: `data: {...}` lines whose `text` is the whole text so far and whose
`meta_info.completion_tokens` is the running count, the first chunk 1 token, later chunks
now and then 2 (`completion_tokens` 1, 3, 4, ...), `prompt_tokens` in every chunk, then
`data: [DONE]`. The tier's byte-level BPE (vocab 500) made a 128-word prompt of the
builtin client 365 prompt tokens: the client asked for 128 and the server prefilled and
cached 2.85 times that, while bench_serving (`random-ids`, which specops's sglang runner
passes for `--dataset random`) sent exactly 128 token ids. Here the fake server tokenizes a
text prompt at 3 tokens a word (an input_ids prompt is taken as it is), so a client that
sends words instead of tokens is seen at once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from specops.bench.client import measure_point_async

TOKENS_PER_WORD = 3


class FakeSglang:
    """/generate streaming as SGLang does, plus the endpoints the client touches."""

    def __init__(self) -> None:
        self.prompt_tokens: list[int] = []

    def prompt_len(self, body: dict[str, Any]) -> int:
        ids = body.get("input_ids")
        if isinstance(ids, list):
            assert all(isinstance(i, int) and 0 <= i < 256 for i in ids), ids[:8]
            return len(ids)
        return TOKENS_PER_WORD * len(str(body.get("text") or "").split())

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n_in = self.prompt_len(body)
        self.prompt_tokens.append(n_in)
        n_out = int(body["sampling_params"]["max_new_tokens"])
        assert body["sampling_params"].get("ignore_eos") is True
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        counts, done = [], 0
        while done < n_out:  # 1 token first, then 2, 1, 2, ... (SGLang's merged chunks)
            done = min(n_out, done + (1 if not counts else 2 if len(counts) % 2 else 1))
            counts.append(done)
        for k in counts:
            meta = {"completion_tokens": k, "prompt_tokens": n_in, "cached_tokens": 0,
                    "finish_reason": {"type": "length", "length": n_out} if k == n_out else None}
            chunk = {"text": " tok" * k, "output_ids": list(range(k)), "meta_info": meta}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def ok(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.5.10.post1"} if request.path.endswith("info") else {})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/flush_cache", self.ok)
        app.router.add_get("/server_info", self.ok)
        return app


async def _measure(fake: FakeSglang, **kwargs: Any) -> dict[str, Any]:
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        record = await measure_point_async(f"http://127.0.0.1:{port}", **kwargs)
    finally:
        await runner.cleanup()
    return record.to_dict()


def test_random_prompts_are_input_len_tokens_as_the_server_counts_them() -> None:
    fake = FakeSglang()
    rec = asyncio.run(_measure(fake, concurrency=2, num_prompts=6, input_len=32, output_len=9, warmup=0))
    assert rec["completed"] == 6 and rec["failed"] == 0, rec.get("error")
    assert fake.prompt_tokens == [32] * 6  # what bench_serving's random-ids sends
    assert rec["total_input_tokens"] == 6 * 32 and rec["total_output_tokens"] == 6 * 9


def test_input_tokens_are_the_servers_count_when_it_reports_one(tmp_path: Path) -> None:
    """A dataset of text prompts: the record says what the server prefilled, not words."""
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": " ".join(["word"] * 10)}) + "\n")
    fake = FakeSglang()
    rec = asyncio.run(_measure(fake, concurrency=1, num_prompts=3, input_len=0, output_len=5, warmup=0,
                               dataset=str(data)))
    assert fake.prompt_tokens == [30] * 3
    assert rec["total_input_tokens"] == 90


def test_merged_chunks_give_one_itl_per_token_after_the_first() -> None:
    """bench_serving's accounting on the same stream: output tokens from completion_tokens,
    a chunk of k tokens has its gap spread over its k tokens."""
    fake = FakeSglang()
    rec = asyncio.run(_measure(fake, concurrency=1, num_prompts=2, input_len=8, output_len=9, warmup=0))
    assert rec["total_output_tokens"] == 18
    assert rec["extra"]["stream_chunks"] == 2 * 6  # 1, 3, 4, 6, 7, 9
    assert rec["itl_spread"] is True
    assert len(rec["extra"]["request_latencies_ms"]) == 2
