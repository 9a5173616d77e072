"""The simulator's HTTP server and start-up sequence (SGLang's endpoints, log lines, faults).

Start-up follows SGLang's order: server args dumped, weights "loaded" (while /health says
503), scheduler built (where injected or real start-up failures surface, as a scheduler
traceback), Uvicorn lines, a warm-up request, then the ready line and /health 200.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, AsyncIterator

from aiohttp import web
from aiohttp.typedefs import Handler

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.sglang import paths
from specops.sglang.adaptive import decode_graphs_off
from specops.sglang.flags import TreeFlags, compile_or_raise
from specops.sglang.layout import ready_path
from specops.sglang.serving import READY_LINE
from specops.sglang.treeversion import tree_version
from specops.sim import model as M
from specops.sim.closedloop import LOOP_HEADER, LoopHeaderError, parse_loop_header
from specops.sim.logs import SimLog, init_failure_traceback, scheduler_crash_traceback
from specops.sim.openloop import OPEN_HEADER, parse_open_header
from specops.sim.scheduler import Declared, EngineConfig, Mark, Scheduler, SimRequest

#: the simulated tokenizer's vocabulary (Llama 3's size), for `output_ids`
VOCAB_SIZE = 128256


@dataclass
class SimOptions:
    """Simulator-only knobs (flags `--sim-*` or env `SPECOPS_SIM_*`)."""

    tree: Path
    time_scale: float = M.DEFAULT_TIME_SCALE
    fail_at_start: bool = False
    crash_after: int | None = None
    slow_start: float = 0.0  # extra wall seconds of loading (503)
    slow_health: float = 0.0  # wall seconds a ready server's /health takes (SGLang's runs a generation)
    seed: int = 0
    noise: float | None = None  # relative step-time drift (None: the model's default)
    accept_length: float | None = None  # a speculative arm's accept length at batch 1 (None: the model's)
    params: M.ModelParams = M.DEFAULT_PARAMS  # the model's knobs (--sim-model FILE: a calibrated one)


def resolve_args(args: dict[str, Any], log: SimLog) -> None:
    """What ServerArgs.__post_init__ would settle before the dump: 48-cap and EAGLE-3 defaults."""
    if not args.get("speculative_algorithm"):
        if args.get("max_running_requests") is None:
            args["max_running_requests"] = M.BASELINE_DEFAULT_MAX_RUNNING
        return
    if args.get("max_running_requests") is None:
        log.info(
            "Max running requests is reset to 48 for speculative decoding. You can override this by "
            "explicitly setting --max-running-requests."
        )
        args["max_running_requests"] = M.SPEC_DEFAULT_MAX_RUNNING
    for key, val in (("speculative_num_steps", M.DEFAULT_SPEC_NUM_STEPS), ("speculative_eagle_topk", 1),
                     ("speculative_num_draft_tokens", M.DEFAULT_SPEC_NUM_STEPS + 1)):
        if args.get(key) is None:
            args[key] = val


def arm_model(args: dict[str, Any], accept_length: float | None = None) -> tuple[M.ArmModel, str | None]:
    """Which arm resolved args describe and the adaptive mechanism (raises on a bad adaptive
    config); `accept_length`: the speculative arm's at batch 1 (--sim-accept-length)."""
    if not args.get("speculative_algorithm"):
        return M.ArmModel("baseline"), None
    steps = int(args["speculative_num_steps"])
    if args.get("speculative_adaptive"):
        # like SGLang's router: padded to the capture buckets only where decode CUDA graphs run
        buckets = None if decode_graphs_off(args) else M.spec_cuda_graph_bs(args.get("_cuda_graph_max_bs") or 256)
        tiers = M.load_adaptive_config(args.get("speculative_adaptive_config"), buckets)
        return M.ArmModel("adaptive", tiers=tiers, num_steps=steps, accept_at_batch_1=accept_length), "native-adaptive"
    threshold = args.get("speculative_disable_batch_threshold")
    if threshold:
        return (M.ArmModel("adaptive", threshold=int(threshold), num_steps=steps, accept_at_batch_1=accept_length),
                "disable-batch-threshold")
    return M.ArmModel("eagle3", num_steps=steps, accept_at_batch_1=accept_length), None


def _count_prompt_tokens(body: dict[str, Any], text_key: str) -> int:
    """input_ids count, else whitespace words of the text (a client sending N words gets N tokens)."""
    ids = body.get("input_ids")
    if isinstance(ids, list):
        return len(ids)
    text = body.get(text_key)
    if isinstance(text, list) and text and isinstance(text[0], int):
        return len(text)
    return max(1, len(str(text or "").split()))


def prompt_content(body: dict[str, Any], text_key: str) -> str:
    """What seeds a request's draws: its prompt, as text or ids."""
    ids = body.get("input_ids")
    return json.dumps(ids if isinstance(ids, list) else body.get(text_key), default=str)


def output_ids(content: str, seed: int, n: int) -> list[int]:
    """Greedy token ids as real SGLang returns them: a function of the prompt (and the
    simulated model, `--sim-seed`) only, so every arm decodes the same ids for one prompt
    whatever shares its batch; `specops verify` compares them."""
    rng = random.Random(f"output_ids:{seed}:{content}")
    return [rng.randrange(VOCAB_SIZE) for _ in range(n)]


class SimServer:
    """State shared by the HTTP handlers: loading/ready flags, resolved args, the scheduler."""

    def __init__(self, flags: TreeFlags, args: dict[str, Any], opts: SimOptions, log: SimLog):
        self.flags = flags
        self._init_state(args, opts, log, bool(args.get("incremental_streaming_output") or args.get("stream_output")))

    def _init_state(self, args: dict[str, Any], opts: SimOptions, log: SimLog, incremental: bool) -> None:
        """What every face's handlers share (vLLM's face too: sim.vllm_server)."""
        self.args, self.opts, self.log = args, opts, log
        self.ready = False
        self.loading = True
        self.scheduler: Scheduler | None = None
        self.arm: M.ArmModel | None = None
        self.mechanism: str | None = None
        self.started = time.time()
        self.incremental = incremental

    def _sched(self) -> Scheduler:
        """The scheduler; handlers that use it run only after _unavailable() said it exists."""
        if self.scheduler is None:
            raise RuntimeError("scheduler not started")
        return self.scheduler

    # ------------------------------------------------------------------ app
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._access_log])
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        if ready_path(LocalTreeFiles(self.flags.tree)) == "/ready":
            r.add_get("/ready", self.health)  # only where the tree's http_server has it (0.5.20+)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_get("/model_info", self.model_info)
        r.add_get("/v1/models", self.models)
        r.add_post("/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_route("*", "/flush_cache", self.flush_cache)
        if self.args.get("enable_metrics"):  # SGLang serves /metrics only with --enable-metrics
            r.add_get("/metrics", self.metrics)
        return app

    @web.middleware
    async def _access_log(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        who = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
        self.log.info(f'INFO:     {who} - "{request.method} {request.path_qs} HTTP/1.1" {resp.status} {resp.reason}')
        return resp

    # ------------------------------------------------------------------ simple endpoints
    async def health(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.Response(status=503, text="")
        if self.opts.slow_health > 0:
            await asyncio.sleep(self.opts.slow_health)
        return web.Response(status=200, text="")

    async def server_info(self, request: web.Request) -> web.Response:
        info = {k: v for k, v in self.args.items() if not k.startswith("_")}
        sched = self.scheduler
        info.update(
            version=sim_version(str(self.flags.tree), self.flags.version),
            simulated=True,
            sim_time_scale=self.opts.time_scale,
            sim_arm=self.arm.arm if self.arm else None,
            sim_mechanism=self.mechanism,
            sim_layout=self.flags.layout,
            sim_tree=str(self.flags.tree),
            internal_states=[{
                "avg_spec_accept_length": round(sched.avg_accept_length, 4) if sched else 0.0,
                "last_gen_throughput": round(sched.last_gen_throughput, 2) if sched else 0.0,
                "memory_usage": {"weight": 15.06, "kvcache": 48.8, "token_capacity": self.args.get("max_total_tokens")},
                "effective_max_running_requests_per_dp": self.args.get("max_running_requests"),
            }],
            sim_stats=sched.stats() if sched else None,
        )
        return web.json_response(info, dumps=lambda o: json.dumps(o, default=str))

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text with SGLang's gauge names (srt/metrics collector: `sglang:num_running_reqs`...)."""
        sched = self.scheduler
        label = '{model_name="%s"}' % str(self.args.get("served_model_name") or self.args.get("model_path") or "")
        gauges = [("num_running_reqs", "The number of running requests.", len(sched.running) if sched else 0),
                  ("num_queue_reqs", "The number of requests in the waiting queue.", len(sched.waiting) if sched else 0),
                  ("gen_throughput", "The generation throughput (token/s).", sched.last_gen_throughput if sched else 0.0)]
        if self.arm and self.arm.arm != "baseline":
            gauges += [("spec_accept_length", "The average acceptance length of speculative decoding.",
                        sched.last_accept_length if sched else 0.0),
                       ("spec_num_steps", "The number of speculative steps.", sched.last_steps if sched else 0)]
        lines = []
        for name, doc, value in gauges:
            lines += [f"# HELP sglang:{name} {doc}", f"# TYPE sglang:{name} gauge", f"sglang:{name}{label} {float(value)}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.args.get("model_path"), "tokenizer_path": self.args.get("tokenizer_path"),
                                  "is_generation": True, "simulated": True})

    async def models(self, request: web.Request) -> web.Response:
        name = self.args.get("served_model_name") or self.args.get("model_path")
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": int(self.started), "owned_by": "sglang",
            "root": self.args.get("model_path"), "max_model_len": self.args.get("context_length") or 131072}]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.scheduler and self.scheduler.busy:
            return web.Response(status=400, text="Cache not flushed. Please check backend logs for more details. "
                                "(When there are running or waiting requests, the operation will not be performed.)\n")
        self.log.info("Cache flushed successfully!", rank=True)
        return web.Response(status=200, text="Cache flushed.\nPlease check backend logs for more details. "
                            "(When there are running or waiting requests, the operation will not be performed.)\n")

    # ------------------------------------------------------------------ generation
    def _unavailable(self) -> web.Response | None:
        if self.scheduler is None:
            return web.json_response({"error": {"message": "The server is not ready yet (loading)."}}, status=503)
        return None

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise web.HTTPBadRequest(text=json.dumps({"error": {"message": f"invalid JSON body: {e}"}}),
                                     content_type="application/json") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text='{"error": {"message": "body must be a JSON object"}}', content_type="application/json")
        return body

    def _meta(self, req: SimRequest, mark: Mark | None = None, last: bool | None = None) -> dict[str, Any]:
        """meta_info as of `mark` (a step's emission; default: the request's latest state)."""
        mark = mark or Mark(req.generated, req.sim_t, req.verify_steps)
        done = req.finished if last is None else last
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": mark.generated} if done else None,
            "prompt_tokens": req.prompt_tokens,
            "completion_tokens": mark.generated,
            "cached_tokens": 0,
            "e2e_latency": round(mark.sim_t - req.sim_arrival_t, 6),
            "sim_arrival_t": req.sim_arrival_t,  # the model clock (see specops.sim.scheduler)
            "sim_t": mark.sim_t,
        }
        if self.arm and self.arm.arm != "baseline":
            meta["spec_verify_ct"] = mark.verify_steps
            meta["spec_accept_length"] = round(mark.generated / mark.verify_steps, 4) if mark.verify_steps else 0.0
        return meta

    async def _wait_tokens(self, req: SimRequest) -> None:
        await req.event.wait()
        req.event.clear()

    async def _step_chunks(self, req: SimRequest) -> AsyncIterator[tuple[int, Mark, bool]]:
        """(tokens sent before, the step's mark, last) for every step that gave `req` tokens, in
        order: one chunk per step however late this handler runs, so a loaded machine changes
        when chunks leave, not what they say."""
        sent = seen = 0
        while True:
            if seen == len(req.marks):
                await self._wait_tokens(req)
                continue
            mark = req.marks[seen]
            seen += 1
            last = req.finished and seen == len(req.marks)
            if mark.generated > sent or last:
                yield sent, mark, last
                sent = mark.generated
            if last:
                return

    def _loop(self, request: web.Request) -> Declared:
        """The client's declared closed loop (X-Sim-Closed-Loop) or open-loop arrival
        (X-Sim-Open-Loop), or a 400 for a malformed one."""
        try:
            return (parse_loop_header(request.headers.get(LOOP_HEADER))
                    or parse_open_header(request.headers.get(OPEN_HEADER)))
        except LoopHeaderError as exc:
            raise web.HTTPBadRequest(text=json.dumps({"error": {"message": str(exc)}}),
                                     content_type="application/json") from None

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if (bad := self._unavailable()) is not None:
            return bad
        body = await self._body(request)
        if isinstance(body.get("text"), list) or (body.get("input_ids") and isinstance(body["input_ids"][0], list)):
            return await self._generate_batch(request, body)
        sp = body.get("sampling_params") or {}
        content = prompt_content(body, "text")
        loop = self._loop(request)
        req = self._sched().new_request(_count_prompt_tokens(body, "text"), int(sp.get("max_new_tokens", 128)),
                                        body.get("rid"), content=content)
        self._sched().submit(req, loop)
        text = ""
        try:
            if not body.get("stream"):
                while not req.finished:
                    await self._wait_tokens(req)
                return web.json_response(self._whole(req, content))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            async for sent, mark, last in self._step_chunks(req):
                piece = req.token_text(sent, mark.generated)
                text += piece
                chunk = {"text": piece if self.incremental else text, "meta_info": self._meta(req, mark, last),
                         "index": 0}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        except (asyncio.CancelledError, ConnectionResetError):
            self._sched().abort(req)
            raise

    async def _generate_batch(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        """SGLang's batched `/generate` (a list of texts or of input_ids, sampling_params one
        for all or one each): every request is queued before any step runs, as SGLang's
        tokenizer sends a batch's requests to its scheduler back to back; a list of replies in
        the order given. Not streamed."""
        key = "input_ids" if body.get("input_ids") else "text"
        prompts = body[key]
        sp = body.get("sampling_params") or {}
        params = sp if isinstance(sp, list) else [sp] * len(prompts)
        if body.get("stream") or len(params) != len(prompts) or not all(isinstance(p, dict) for p in params):
            why = ("a streamed batch is not simulated" if body.get("stream") else
                   f"sampling_params: one for all or one per prompt ({len(prompts)}), each an object")
            return web.json_response({"error": {"message": f"batched /generate: {why}"}}, status=400)
        loop = self._loop(request)
        reqs = []
        for prompt, one in zip(prompts, params, strict=True):
            item = {key: prompt}
            content = prompt_content(item, "text")
            req = self._sched().new_request(_count_prompt_tokens(item, "text"), int(one.get("max_new_tokens", 128)),
                                            content=content)
            reqs.append((req, content))
        for req, _ in reqs:
            self._sched().submit(req, loop)
        try:
            for req, _ in reqs:
                while not req.finished:
                    await self._wait_tokens(req)
        except (asyncio.CancelledError, ConnectionResetError):
            for req in [r for r, _ in reqs if not r.finished]:
                self._sched().abort(req)
            raise
        return web.json_response([self._whole(req, content) for req, content in reqs])

    def _whole(self, req: SimRequest, content: str) -> dict[str, Any]:
        """A finished request's unstreamed `/generate` reply: its text, meta_info and the greedy
        ids its prompt (`content`) gives."""
        return {"text": req.token_text(0, req.generated), "meta_info": self._meta(req),
                "output_ids": output_ids(content, self.opts.seed, req.generated)}

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if (bad := self._unavailable()) is not None:
            return bad
        body = await self._body(request)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            if len(prompt) != 1:
                return web.json_response({"error": {"message": "batched prompts are not simulated; send one prompt"}}, status=400)
            body = {**body, "prompt": prompt[0]}
        loop = self._loop(request)
        req = self._sched().new_request(_count_prompt_tokens(body, "prompt"), int(body.get("max_tokens") or 16),
                                        content=prompt_content(body, "prompt"))
        self._sched().submit(req, loop)
        model = body.get("model") or self.args.get("served_model_name") or self.args.get("model_path")
        cid, created = f"cmpl-{req.rid}", int(time.time())

        def usage() -> dict[str, Any]:
            return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.generated,
                    "total_tokens": req.prompt_tokens + req.generated, "prompt_tokens_details": None}

        try:
            if not body.get("stream"):
                while not req.finished:
                    await self._wait_tokens(req)
                return web.json_response({
                    "id": cid, "object": "text_completion", "created": created, "model": model,
                    "choices": [{"index": 0, "text": req.token_text(0, req.generated), "logprobs": None,
                                 "finish_reason": "length", "matched_stop": None}],
                    "usage": usage(), "metadata": {"weight_version": "default"}})
            include_usage = bool((body.get("stream_options") or {}).get("include_usage")) or bool(
                self.args.get("stream_response_default_include_usage"))
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            async for sent, mark, last in self._step_chunks(req):
                chunk = {"id": cid, "object": "text_completion", "created": created, "model": model,
                         "choices": [{"index": 0, "text": req.token_text(sent, mark.generated), "logprobs": None,
                                      "finish_reason": "length" if last else None, "matched_stop": None}],
                         "usage": None, "sim_arrival_t": req.sim_arrival_t, "sim_t": mark.sim_t}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if include_usage:
                final: dict[str, Any] = {"id": cid, "object": "text_completion", "created": created, "model": model,
                         "choices": [], "usage": usage()}
                await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        except (asyncio.CancelledError, ConnectionResetError):
            self._sched().abort(req)
            raise

    # ------------------------------------------------------------------ lifecycle
    def _die(self, code: int = 1) -> None:
        """Exit at once after a failure block (no graceful shutdown: the process 'crashed')."""
        self.log.info("Received sigquit from a child process. It usually means the child failed.")
        sys.stdout.flush()
        sys.stderr.flush()
        if code < 0:
            os.kill(os.getpid(), -code)
        os._exit(code)

    def _scheduler_init_error(self, exc_text: str) -> None:
        self.log.info("Scheduler hit an exception: " + init_failure_traceback(self.flags.tree, exc_text).rstrip("\n"), rank=True)
        self._die(1)

    async def _crash(self) -> None:
        exc = ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
               "CUDA kernel errors might be asynchronously reported at any other API call, so the stacktrace below might be incorrect.\n"
               "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
               "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
        tb = scheduler_crash_traceback(self.flags.tree, self.arm is not None and self.arm.arm != "baseline", exc)
        self.log.info("Scheduler hit an exception: " + tb.rstrip("\n"), rank=True)
        self._die(-signal.SIGKILL)

    def _check_worker_sources(self) -> None:
        """A speculative server imports the EAGLE workers at scheduler start: a broken one kills it."""
        spec_dir = self.flags.tree / paths.SPECULATIVE_DIR
        for path in sorted(spec_dir.glob("*.py")) if spec_dir.is_dir() else []:
            try:
                compile_or_raise(path)
            except SyntaxError as e:
                exc = "".join(traceback.format_exception_only(type(e), e)).rstrip("\n")
                tb = init_failure_traceback(self.flags.tree, "").rstrip("\n")
                self.log.info("Scheduler hit an exception: " + tb + "\n" + exc, rank=True)
                self._die(1)

    async def start(self, sock: socket.socket) -> None:
        """Run the start-up sequence, then serve until killed."""
        log, args, opts = self.log, self.args, self.opts
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.SockSite(runner, sock)
        await site.start()

        log.info("Attention backend not explicitly specified. Use flashinfer backend by default.", rank=True)
        log.info("Init torch distributed begin.", rank=True)
        log.info("Init torch distributed ends. mem usage=0.00 GB", rank=True)
        log.info("Load weight begin. avail mem=139.25 GB", rank=True)
        await asyncio.sleep(M.LOAD_SECONDS + max(0.0, opts.slow_start))
        log.info("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=124.19 GB, mem usage=15.06 GB.", rank=True)
        if args.get("speculative_algorithm"):
            log.info("Load weight begin. avail mem=124.10 GB", rank=True)
            log.info("Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=123.21 GB, mem usage=0.89 GB.", rank=True)
            self._check_worker_sources()
        if opts.fail_at_start:
            mem = args.get("mem_fraction_static") or 0.88
            self._scheduler_init_error(
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={mem}")
        try:
            self.arm, self.mechanism = arm_model(args, opts.accept_length)
            self.arm = replace(self.arm, params=opts.params)
        except (OSError, ValueError) as e:
            self._scheduler_init_error(f"{type(e).__name__}: {e}")
            return
        max_running = int(args["max_running_requests"])
        max_total = args.get("max_total_tokens") or M.DEFAULT_MAX_TOTAL_TOKENS
        args["max_total_tokens"] = max_total
        log.info(f"KV Cache is allocated. #tokens: {max_total}, K size: 24.41 GB, V size: 24.41 GB", rank=True)
        log.info("Capture cuda graph begin. This can take up to several minutes. avail mem=73.40 GB", rank=True)
        log.info("Capture cuda graph end. Time elapsed: 0.01 s. mem usage=0.51 GB. avail mem=72.89 GB.", rank=True)
        log.info(f"max_total_num_tokens={max_total}, chunked_prefill_size={args.get('chunked_prefill_size') or 8192}, "
                 f"max_prefill_tokens={args.get('max_prefill_tokens') or 16384}, max_running_requests={max_running}, "
                 f"context_len={args.get('context_length') or 131072}, available_gpu_mem=72.89 GB", rank=True)
        cfg = EngineConfig(arm=self.arm, max_running=max_running, time_scale=opts.time_scale, seed=opts.seed,
                           max_total_tokens=max_total, cuda_graph_max_bs=args.get("_cuda_graph_max_bs") or 256,
                           crash_after=opts.crash_after, noise=opts.noise,
                           decode_log_interval=max(1, int(args.get("decode_log_interval") or M.DECODE_LOG_INTERVAL)))
        self.scheduler = Scheduler(cfg, log, on_crash=self._crash)
        sched_task = asyncio.create_task(self.scheduler.run())
        log.info(f"INFO:     Started server process [{os.getpid()}]")
        log.info("INFO:     Waiting for application startup.")
        log.info("INFO:     Application startup complete.")
        log.info(f"INFO:     Uvicorn running on http://{args['host']}:{args['port']} (Press CTRL+C to quit)")
        warm = self._sched().new_request(6, 8, rid="warmup-0")
        self._sched().submit(warm)
        while not warm.finished:
            await warm.event.wait()
            warm.event.clear()
        log.info('INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200 OK')
        self.loading = False
        self.ready = True
        log.info(READY_LINE)
        await sched_task  # returns only if the scheduler loop ends (it runs until the process dies)
        await asyncio.Event().wait()


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket first, so a busy port fails as early and plainly as SGLang's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


@functools.lru_cache(maxsize=8)
def sim_version(tree: str, fallback: str) -> str:
    """The version of the tree the simulator read (what `/server_info` reports, as SGLang
    reports its own), by the same reader the install check uses. Cached by (tree, fallback):
    a simulator process serves one tree, which does not change under it."""
    version, _ = tree_version(LocalTreeFiles(tree))
    return version or fallback
