"""The simulator with vLLM's face: vLLM's flags (read from the tree), its start-up and stats
lines, `/health`, `/v1/models`, `/version`, `/metrics` with vLLM's names, `/v1/completions`
(streaming). The scheduler, the performance model and the model clock are the SGLang face's
(`SimServer`, `Scheduler`, `model`): one model, two faces, so figures depend on the workload
alone here too. The adaptive arm follows `num_speculative_tokens_per_batch_size`: K per
running batch, through the model's tiers with one candidate each."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from specops.sim import model as M
from specops.sim.scheduler import EngineConfig, Scheduler
from specops.sim.server import SimOptions, SimServer, output_ids, prompt_content
from specops.sim.vllm_logs import VLLMLog, engine_dead, engine_start_failure
from specops.vllm import schedule, serving
from specops.vllm.tree import VLLMFlags

#: vLLM's running limit when `--max-num-seqs` is not given
DEFAULT_MAX_NUM_SEQS = 256
#: model seconds between two stats lines (vLLM's VLLM_LOG_STATS_INTERVAL default: 5 s)
STATS_INTERVAL_S = 5.0


class SpecConfigError(ValueError):
    """A `--speculative-config` vLLM would refuse at start."""


def arm_model(args: dict[str, Any], has_schedule: bool, accept_length: float | None) -> tuple[M.ArmModel, str | None]:
    """The arm `--speculative-config` describes, and its mechanism; SpecConfigError as vLLM refuses."""
    raw = args.get("speculative_config")
    if not raw:
        return M.ArmModel("baseline"), None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SpecConfigError(f"--speculative-config is not JSON: {exc}") from None
    if not isinstance(config, dict) or config.get("method") not in ("eagle3", "eagle"):
        raise SpecConfigError(f"the simulator runs method eagle3 only, got {config!r}")
    n = config.get("num_speculative_tokens")
    if not isinstance(n, int) or n < 1:
        raise SpecConfigError(f"num_speculative_tokens must be a positive integer, got {n!r}")
    if schedule.SCHEDULE_KEY not in config:
        return M.ArmModel("eagle3", num_steps=n, accept_at_batch_1=accept_length), None
    if not has_schedule:
        raise SpecConfigError(f"Unexpected keyword argument '{schedule.SCHEDULE_KEY}' [type=unexpected_keyword_argument]")
    max_seqs = int(args.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS)
    try:
        steps = schedule.changes(config[schedule.SCHEDULE_KEY], max_seqs, n)
    except schedule.ScheduleError as exc:
        raise SpecConfigError(str(exc)) from None
    tiers = M.AdaptiveTiers({b: [k] for b, k in steps.items()})
    return M.ArmModel("adaptive", tiers=tiers, num_steps=n, accept_at_batch_1=accept_length), "native-schedule"


class VLLMSimServer(SimServer):
    """SimServer's handlers and scheduler behind vLLM's endpoints, lines and metrics."""

    def __init__(self, flags: VLLMFlags, tree: Path, has_schedule: bool, args: dict[str, Any], opts: SimOptions,
                 log: VLLMLog):
        self.vflags, self.tree, self.has_schedule, self.vlog = flags, tree, has_schedule, log
        self._init_state(args, opts, log, incremental=True)  # vLLM streams deltas

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._access_log])
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/version", self.version)
        r.add_get("/v1/models", self.models)
        r.add_get("/metrics", self.metrics)
        r.add_post("/v1/completions", self.completions)
        r.add_get("/server_info", self.server_info)  # the simulator's own: its clock, not vLLM's
        return app

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """SimServer's `/v1/completions`; asked for `return_token_ids` (not streamed), the
        choice carries `token_ids` as vLLM's does: a function of the prompt alone, as greedy is."""
        body = await self._body(request)
        if not body.get("return_token_ids") or body.get("stream"):
            return await super().completions(request)
        resp = await super().completions(request)
        if not isinstance(resp, web.Response) or resp.status != 200 or resp.body is None:
            return resp
        doc = json.loads(bytes(resp.body))  # type: ignore[arg-type]
        prompt = body.get("prompt")
        content = prompt_content({"prompt": prompt[0] if isinstance(prompt, list) and prompt
                                   and not isinstance(prompt[0], int) else prompt}, "prompt")
        doc["choices"][0]["token_ids"] = output_ids(content, self.opts.seed, doc["usage"]["completion_tokens"])
        return web.json_response(doc)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.vflags.version})

    async def models(self, request: web.Request) -> web.Response:
        name = self.args.get("served_model_name") or self.args.get("model")
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": int(self.started), "owned_by": "vllm",
            "root": self.args.get("model"), "parent": None, "max_model_len": int(self.args.get("max_model_len") or 131072)}]})

    def counters(self) -> tuple[int, int, int]:
        """(drafts, draft tokens, accepted tokens) as vLLM counts them: one draft per request per
        drafting step, the bonus token not accepted. Draft tokens count the launch's K a draft
        (the scheduler keeps no per-step K; exact for a threshold schedule and EAGLE-3)."""
        sched = self.scheduler
        if sched is None or self.arm is None or self.arm.arm == "baseline":
            return 0, 0, 0
        drafts = sched.total_verify
        return drafts, drafts * (self.arm.num_steps or 0), max(0, sched.total_accepted - drafts)

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text with vLLM's names (v1/metrics/loggers.py, v1/spec_decode/metrics.py)."""
        sched = self.scheduler
        label = '{engine="0",model_name="%s"}' % str(self.args.get("served_model_name") or self.args.get("model") or "")
        drafts, draft_tokens, accepted = self.counters()
        rows = [(serving.METRIC_RUNNING, "gauge", "Number of requests in model execution batches.",
                 len(sched.running) if sched else 0),
                (serving.METRIC_WAITING, "gauge", "Number of requests waiting to be processed.",
                 len(sched.waiting) if sched else 0),
                ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                 sched.output_tokens if sched else 0)]
        if self.arm and self.arm.arm != "baseline":
            rows += [(serving.METRIC_DRAFTS, "counter", "Number of spec decoding drafts.", drafts),
                     (serving.METRIC_DRAFT_TOKENS, "counter", "Number of draft tokens.", draft_tokens),
                     (serving.METRIC_ACCEPTED, "counter", "Number of accepted tokens.", accepted)]
        lines = []
        for name, kind, doc, value in rows:
            base = name.removesuffix("_total")
            lines += [f"# HELP {base} {doc}", f"# TYPE {base} {kind}", f"{name}{label} {float(value)}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def server_info(self, request: web.Request) -> web.Response:
        """Not vLLM's: the simulator's clock and accounting, which specops's client reads to label
        and time a simulated point (real vLLM answers 404 here, and the client goes without)."""
        sched = self.scheduler
        info = {"version": self.vflags.version, "simulated": True, "sim_face": "vllm",
                "sim_time_scale": self.opts.time_scale, "sim_arm": self.arm.arm if self.arm else None,
                "sim_mechanism": self.mechanism, "sim_tree": str(self.tree),
                "internal_states": [{"avg_spec_accept_length": round(sched.avg_accept_length, 4) if sched else 0.0}],
                "sim_stats": sched.stats() if sched else None}
        return web.json_response(info, dumps=lambda o: json.dumps(o, default=str))

    async def _crash(self) -> None:
        engine_dead(self.vlog, self.tree, "RuntimeError: CPU backend error: an illegal memory access was encountered")
        self.vlog.record("Engine core process EngineCore_DP0 died unexpectedly.", "utils.py:592", "ERROR")
        os.kill(os.getpid(), signal.SIGKILL)

    def _fail_start(self, exc_line: str) -> None:
        engine_start_failure(self.vlog, self.tree, exc_line)
        os._exit(1)

    async def _stats_loop(self, sched: Scheduler) -> None:
        """vLLM's periodic stats lines, every STATS_INTERVAL_S of the model clock while busy."""
        t0, tokens0, drafts0 = sched.model_time, sched.output_tokens, self.counters()
        while True:
            await asyncio.sleep(max(0.05, STATS_INTERVAL_S * self.opts.time_scale))
            span = sched.model_time - t0
            if span <= 0 and not sched.busy:
                continue  # idle: vLLM logs at debug level
            counts = self.counters()
            gen = (sched.output_tokens - tokens0) / span if span > 0 else 0.0
            used, usage = sched.token_usage()
            running = sched.last_running if span > 0 else len(sched.running)  # the interval's last step's batch
            self.vlog.record(serving.format_stats(0.0, gen, running, len(sched.waiting), usage), "loggers.py:257")
            d, dt, a = (c - c0 for c, c0 in zip(counts, drafts0, strict=True))
            if d > 0:
                k = (self.arm.num_steps or 1) if self.arm else 1
                self.vlog.record(serving.format_spec(a, dt, d, max(span, 1e-9), [min(1.0, a / d / k)] * k),
                                 "metrics.py:121")
            t0, tokens0, drafts0 = sched.model_time, sched.output_tokens, counts

    async def start(self, sock: Any) -> None:
        log, args, opts = self.vlog, self.args, self.opts
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        log.record(f"Initializing a V1 LLM engine (v{self.vflags.version}) with config: model='{args.get('model')}', "
                   f"speculative_config={args.get('speculative_config')}", "core.py:93", process="EngineCore_DP0")
        await asyncio.sleep(M.LOAD_SECONDS + max(0.0, opts.slow_start))
        log.record("Model loading took 15.06 GiB memory and 12.0 seconds", "gpu_model_runner.py:2100",
                   process="EngineCore_DP0")
        if opts.fail_at_start:
            self._fail_start("RuntimeError: Not enough memory for the KV cache: increase VLLM_CPU_KVCACHE_SPACE "
                             "or --gpu-memory-utilization")
        try:
            self.arm, self.mechanism = arm_model(args, self.has_schedule, opts.accept_length)
            self.arm = replace(self.arm, params=opts.params)
        except SpecConfigError as exc:
            self._fail_start(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                             f"SpeculativeConfig\n  Value error, {exc}")
            return
        if self.arm.arm != "baseline":
            log.record("EAGLE drafter KV cache initialized", "eagle.py:300", process="EngineCore_DP0")
        max_running = int(args.get("max_num_seqs") or DEFAULT_MAX_NUM_SEQS)
        log.record(f"Maximum concurrency for {args.get('max_model_len') or 131072} tokens per request: "
                   f"{max_running:.2f}x", "kv_cache_utils.py:1100", process="EngineCore_DP0")
        cfg = EngineConfig(arm=self.arm, max_running=max_running, time_scale=opts.time_scale, seed=opts.seed,
                           cuda_graph_max_bs=max_running, crash_after=opts.crash_after, noise=opts.noise)
        self.scheduler = Scheduler(cfg, log, on_crash=self._crash)
        sched_task = asyncio.create_task(self.scheduler.run())
        stats_task = asyncio.create_task(self._stats_loop(self.scheduler))
        log.record(f"Starting vLLM server on http://{args['host']}:{args['port']}", "api_server.py:140")
        log.raw(f"INFO:     Started server process [{os.getpid()}]")
        log.raw("INFO:     Waiting for application startup.")
        log.raw("INFO:     Application startup complete.")
        self.loading = False
        self.ready = True
        await asyncio.gather(sched_task, stats_task)
        await asyncio.Event().wait()
