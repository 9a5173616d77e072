"""The `builtin` runner: specops's own asyncio streaming client (aiohttp).

For hosts without SGLang's benchmark (the simulator, the offline demo). It measures what
`bench_serving` measures, the same way: streaming requests at a fixed maximum
concurrency, TTFT at the first chunk carrying tokens, ITL from chunk gaps (a chunk with
several tokens, as speculative servers send, has its gap spread evenly over them and the
record says `itl_spread`), TPOT = (E2E - TTFT) / (tokens - 1), output tokens from the
server's own count (`meta_info.completion_tokens` or `usage`), input tokens too
(`prompt_tokens`) where the server reports them.

It sends what bench_serving sends (issue 54): the `random` dataset is `input_len` random
token ids a prompt (`input_ids` on /generate, a list of ids as a completions `prompt`), as
bench_serving's `random-ids`, which the sglang runner passes for `random`. It used to send
`input_len` random words, which a real tokenizer cuts into more tokens: on the real tier's
tiny model (byte-level BPE, vocab 500) 128 words were 365 prompt tokens, so the builtin
client offered the server 2.85x the prompt tokens of bench_serving "on the same requests",
filling its KV cache sooner (at 256/256 the tier's 2048-token cache held 2 such requests
where bench_serving's fit 4: at 2 requests/s the old client's mean TTFT was 1184 ms against
bench_serving's 27, its TPOT 2.70 ms against 2.27), and its figures differed for that reason,
not for how it measured (bench/RESULTS.md, "Client agreement").

It also records client lag: for each request, how long after its concurrency slot came
free it was actually sent. A client that cannot keep up (a saturated event loop, a
connection pool limit) shows up there instead of silently lowering the offered load.

A rate point (`rate`) is an open loop instead: request i is sent at its arrival offset
(bench/arrivals.py) times the server's `sim_time_scale`, never waiting for earlier ones,
and declares that offset to the simulator (`X-Sim-Open-Loop`, which SGLang ignores), which
puts it on its model clock there; the record gets the offered rate, the rate requests
completed at and whether the server was saturated (bench/saturation.py). Client lag is then
how late each request left against its scheduled wall time.

Protocol per point: one warm-up request alone, then warm-up requests (at least
`concurrency`; all discarded), POST
/flush_cache, the measured run, GET /server_info for the accept length. A simulator
that runs on a scaled clock says so in /server_info (`sim_time_scale`, wall = model x
scale) and the record is `simulated`. Where the simulator stamps each chunk with its
model clock (`sim_arrival_t`, `sim_t`), every timing is read from those stamps
(`extra.clock: sim-model`), so the figures do not depend on how loaded this machine is;
otherwise wall timings are converted back to model units (`sim-wall-scaled`).
Client lag stays in wall-clock milliseconds: it is a property of this machine.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence, cast

import aiohttp

from specops.bench.arrivals import DEFAULT_ARRIVAL, TRACE, Arrival, offsets, parse_arrival
from specops.bench.phases import Done, Timeline, phase_figures, timeline_of, token_series
from specops.bench.quantiles import percentile
from specops.bench.saturation import is_saturated, offered_rate
from specops.bench.trace import Trace, read_trace
from specops.bench.warmup import WARMUP_ALONE
from specops.errors import ConfigError
from specops.records.schema import STATUS_FAILED, STATUS_OK, ResultRecord
from specops.secrets import clip, remember_env
from specops.sim.closedloop import loop_header
from specops.sim.openloop import open_header

DEFAULT_PROMPT_FLOOR = 16      # fewest measured requests per point, whatever the concurrency
PROMPTS_PER_SLOT = 4           # at least 4x the concurrency, so ramp-up and drain do not dominate
DEFAULT_TIMEOUT_S = 300.0
OPEN_WARMUP = 2                # warm-up requests (in a closed loop of 2) before a rate point
APIS = ("generate", "completions")


def default_num_prompts(concurrency: int, floor: int = DEFAULT_PROMPT_FLOOR) -> int:
    """max(4 x concurrency, floor)."""
    return max(PROMPTS_PER_SLOT * concurrency, floor)


# ---------------------------------------------------------------- prompts

@dataclass(frozen=True)
class Prompt:
    text: str
    input_len: int      # tokens: exact for `ids`; a dataset's text counts its words
    output_len: int
    ids: tuple[int, ...] | None = None   # token ids, sent instead of `text`

    def content(self) -> str | list[int]:
        """What the request carries as its prompt: the ids where there are some, else the text."""
        return list(self.ids) if self.ids is not None else self.text


#: Random prompts are token ids drawn from [RANDOM_ID_LO, RANDOM_ID_HI): ids every tokenizer
#: this tool meets has (a byte-level BPE's 256 bytes, the tier's 500-token vocabularies),
#: past the specials a small vocabulary puts first (0-2). Each id is drawn on its own, so two
#: prompts share no prefix the server's radix cache could reuse.
RANDOM_ID_LO, RANDOM_ID_HI = 3, 256


def random_ids(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(RANDOM_ID_LO, RANDOM_ID_HI) for _ in range(n))


def _load_dataset_texts(path: Path) -> list[str]:
    """Prompts from a ShareGPT JSON list (first human turn) or a JSONL of {prompt|text}."""
    # imported here: yaml (~25 ms) would otherwise load in every point's client process
    from specops.config.yamlfile import read_text

    raw = read_text(path, "dataset")  # missing, unreadable, not UTF-8: one error naming the file
    items: list[Any]
    try:
        items = json.loads(raw) if raw.lstrip().startswith("[") else [
            json.loads(line) for line in raw.splitlines() if line.strip()]
    except ValueError as exc:
        raise ConfigError(f"dataset is neither a JSON list nor JSON lines: {exc}", where=str(path)) from None
    texts: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        conv = item.get("conversations") or item.get("conversation")
        if isinstance(conv, list):
            for turn in conv:
                if isinstance(turn, dict) and turn.get("from") in ("human", "user") and turn.get("value"):
                    texts.append(str(turn["value"]))
                    break
        else:
            text = item.get("prompt") or item.get("text")
            if isinstance(text, str):
                texts.append(text)
    if not texts:
        raise ConfigError("dataset holds no prompts (ShareGPT 'conversations' or 'prompt'/'text' keys)",
                          where=str(path))
    return texts


def make_prompts(n: int, *, input_len: int, output_len: int, seed: int, dataset: str = "random") -> list[Prompt]:
    """`n` prompts, the same for the same arguments on every run and every arm. `random`:
    `input_len` random token ids each, what bench_serving's `random-ids` sends (the sglang
    runner's `random`), so the server prefills exactly `input_len` tokens whatever its
    tokenizer (words were 2.85 tokens each on the real tier's; see the module docstring)."""
    rng = random.Random(f"specops-bench:{seed}")
    if dataset == "random":
        return [Prompt("", input_len, output_len, random_ids(rng, input_len)) for _ in range(n)]
    if dataset == "sharegpt":
        raise ConfigError("the builtin runner does not download ShareGPT; pass the JSON file's path",
                          where="bench --dataset", hint="--dataset /path/to/ShareGPT_V3_unfiltered_cleaned_split.json")
    texts = _load_dataset_texts(Path(dataset).expanduser())
    rng.shuffle(texts)
    return [Prompt(texts[i % len(texts)], len(texts[i % len(texts)].split()), output_len) for i in range(n)]


def trace_prompts(trace: Trace, seed: int) -> list[Prompt]:
    """A trace's requests as prompts of its own lengths in tokens: random token ids, the same
    on every run and every arm."""
    rng = random.Random(f"specops-trace:{seed}:{trace.sha256}")
    return [Prompt("", r.input_len, r.output_len, random_ids(rng, r.input_len)) for r in trace.requests]


# ---------------------------------------------------------------- one request

@dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    output_tokens: int = 0
    input_tokens: int | None = None    # the server's count of the prompt (meta_info / usage)
    ttft: float | None = None          # seconds, wall
    e2e: float | None = None
    itls: list[float] = field(default_factory=list)
    spread: bool = False               # some chunk carried several tokens
    chunks: int = 0                    # stream chunks that carried tokens
    sent_at: float = 0.0               # perf_counter, or the simulator's model clock (sim_clock)
    ended_at: float = 0.0
    lag: float = 0.0                   # sent_at - slot free (wall)
    sim_clock: bool = False            # times are the simulator's model clock, in model seconds
    marks: list[tuple[float, int]] = field(default_factory=list)  # (chunk time, tokens), as sent_at


def _payload(api: str, prompt: Prompt, model: str | None) -> dict[str, Any]:
    if api == "generate":
        return {("text" if prompt.ids is None else "input_ids"): prompt.content(), "stream": True,
                "sampling_params": {"temperature": 0.0, "max_new_tokens": prompt.output_len, "ignore_eos": True}}
    return {"model": model or "default", "prompt": prompt.content(), "max_tokens": prompt.output_len,
            "temperature": 0.0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


class _SimClock:
    """The simulator's model-clock stamps of one request's chunks (`sim_arrival_t`, `sim_t`):
    where every chunk with tokens carries them, the request is timed on that clock."""

    def __init__(self) -> None:
        self.arrival: float | None = None
        self.last: float | None = None
        self.complete = True

    def at(self, data: Any, wall: float, carries_tokens: bool) -> float:
        """The chunk's time: its model-clock stamp where it has one, else the wall time."""
        src = data.get("meta_info") if isinstance(data, dict) and isinstance(data.get("meta_info"), dict) else data
        arrival = src.get("sim_arrival_t") if isinstance(src, dict) else None
        stamp = src.get("sim_t") if isinstance(src, dict) else None
        if isinstance(arrival, (int, float)) and isinstance(stamp, (int, float)):
            self.arrival, self.last = float(arrival), float(stamp)
            return self.last
        if carries_tokens:
            self.complete = False
        return wall

    def apply(self, res: "RequestResult") -> None:
        if self.complete and self.arrival is not None and self.last is not None:
            res.sent_at, res.ended_at, res.sim_clock = self.arrival, self.last, True


def _split_counts(chunks: list[tuple[float, float | None]], total: int | None) -> list[tuple[float, int]]:
    """Give every chunk an integer token count; unknown counts share what is left evenly."""
    known = sum(k for _, k in chunks if k is not None)
    unknown = [i for i, (_, k) in enumerate(chunks) if k is None]
    share = 0.0
    if unknown:
        rest = (total if total is not None else known + len(unknown)) - known
        share = max(rest, 0) / len(unknown)
    out: list[tuple[float, int]] = []
    acc = 0.0
    emitted = 0
    for t, k in chunks:
        acc += share if k is None else k
        count = int(round(acc)) - emitted
        emitted += count
        out.append((t, count))
    return out


class _TokenCounter:
    """New tokens per streamed chunk, from the server's running count where it reports one
    (SGLang's meta_info, OpenAI usage), else 1 per text chunk (None: unknown, spread later)."""

    def __init__(self, api: str):
        self.api, self.last = api, 0
        self.total: int | None = None
        self.prompt: int | None = None   # the server's count of the prompt's tokens

    def _prompt(self, src: dict[str, Any]) -> None:
        value = src.get("prompt_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            self.prompt = value

    def _count(self, count: int) -> int:
        new, self.last, self.total = count - self.last, count, count
        return new

    def new_tokens(self, data: dict[str, Any]) -> float | None:
        if self.api == "generate":
            meta = data.get("meta_info") or {}
            self._prompt(meta)
            if "completion_tokens" in meta:
                return self._count(int(meta["completion_tokens"]))
            return 1 if data.get("text") else 0
        usage = data.get("usage") or {}
        self._prompt(usage)
        choices = data.get("choices") or []
        if usage.get("completion_tokens") is not None:
            new = self._count(int(usage["completion_tokens"]))
            return new if choices else 0
        return None if (choices and choices[0].get("text")) else 0


async def _one_request(session: aiohttp.ClientSession, url: str, api: str, prompt: Prompt,
                       model: str | None, timeout_s: float, slot_free_at: float,
                       headers: dict[str, str] | None = None, answered: asyncio.Event | None = None) -> RequestResult:
    """One streamed request; `answered` is set once the server has taken it (its response
    began) or it failed."""
    try:
        return await _stream(session, url, api, prompt, model, timeout_s, slot_free_at, headers, answered)
    finally:
        if answered is not None:
            answered.set()


async def _stream(session: aiohttp.ClientSession, url: str, api: str, prompt: Prompt, model: str | None,
                  timeout_s: float, slot_free_at: float, headers: dict[str, str] | None,
                  answered: asyncio.Event | None) -> RequestResult:
    res = RequestResult()
    payload = _payload(api, prompt, model)
    chunks: list[tuple[float, float | None]] = []   # (arrival, new tokens or None if unknown)
    counter = _TokenCounter(api)
    res.sent_at = time.perf_counter()
    res.lag = max(0.0, res.sent_at - slot_free_at)
    clock = _SimClock()
    try:
        async with session.post(url, json=payload, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if answered is not None:
                answered.set()
            if resp.status != 200:
                res.error = clip(f"HTTP {resp.status}: {(await resp.text()).strip()}", 300, keep="start")
                return res
            async for raw in resp.content:
                line = raw.strip()
                if not line:
                    continue
                now = time.perf_counter()
                text = line.decode("utf-8", errors="replace")
                if text.startswith("data:"):
                    text = text[5:].strip()
                if text == "[DONE]":
                    break
                data = json.loads(text)
                if isinstance(data, dict) and data.get("error"):
                    err = data["error"]
                    res.error = clip("server error: " + str(err.get("message") if isinstance(err, dict) else err),
                                     300, keep="start")
                    return res
                new = counter.new_tokens(data)
                now = clock.at(data, now, new is None or new > 0)
                if new is None or new > 0:
                    chunks.append((now, new))
            res.ended_at = time.perf_counter()  # [DONE] or EOF: the server's count decides
            clock.apply(res)
    except asyncio.TimeoutError:
        res.error = f"timed out after {timeout_s:g}s"
        return res
    except (aiohttp.ClientError, ValueError, OSError) as exc:
        res.error = clip(f"{type(exc).__name__}: {exc}", 300, keep="start")
        return res
    total = counter.total
    counted = _split_counts(chunks, total)
    res.chunks = len(counted)
    res.marks = counted
    res.output_tokens = total if total is not None else sum(k for _, k in counted)
    res.input_tokens = counter.prompt
    if not counted or res.output_tokens <= 0:
        res.error = "stream ended without any output tokens"
        return res
    res.ttft = counted[0][0] - res.sent_at
    res.e2e = res.ended_at - res.sent_at
    prev = counted[0][0]
    for t, k in counted[1:]:
        if k <= 0:
            continue
        if k > 1:
            res.spread = True
        res.itls.extend([(t - prev) / k] * k)
        prev = t
    res.ok = True
    return res


# ---------------------------------------------------------------- a batch at fixed concurrency

async def _run_batch(session: aiohttp.ClientSession, url: str, api: str, prompts: Sequence[Prompt],
                     concurrency: int, model: str | None, timeout_s: float) -> tuple[list[RequestResult], float, float]:
    """Run `prompts` with at most `concurrency` in flight; (results, start, end) in perf_counter.

    Each request declares the closed loop it belongs to (`X-Sim-Closed-Loop`, which SGLang
    ignores), so the simulator runs no step while a refill is on its way: its figures are then
    the workload's, however slowly this machine runs the client."""
    results: list[RequestResult | None] = [None] * len(prompts)
    next_index = 0
    headers = loop_header(uuid.uuid4().hex, min(concurrency, len(prompts)), len(prompts)) if prompts else None
    start = time.perf_counter()

    async def worker() -> None:
        nonlocal next_index
        free_at = start
        while next_index < len(prompts):
            i = next_index
            next_index += 1
            res = await _one_request(session, url, api, prompts[i], model, timeout_s, free_at, headers)
            results[i] = res
            free_at = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
    end = time.perf_counter()
    return [r for r in results if r is not None], start, end


async def _run_open(session: aiohttp.ClientSession, url: str, api: str, prompts: Sequence[Prompt],
                    offs: Sequence[float], scale: float, model: str | None,
                    timeout_s: float) -> tuple[list[RequestResult], float, float]:
    """Send request i at `offs[i] x scale` wall seconds from the start, never waiting for
    earlier ones (an open loop); (results, start, end) in perf_counter.

    Each request declares its offset (`X-Sim-Open-Loop`): the simulator puts it on its model
    clock there, so a late send on a loaded machine changes nothing it measures. The first
    request opens the loop on the server before any other leaves (its response has begun)."""
    key, n = uuid.uuid4().hex, len(prompts)
    opened = asyncio.Event()
    start = time.perf_counter()

    async def send(i: int) -> RequestResult:
        due = start + offs[i] * scale
        if i > 0:
            await opened.wait()
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        headers = open_header(key, i, offs[i], offs[i + 1] if i + 1 < n else None, n)
        return await _one_request(session, url, api, prompts[i], model, timeout_s, due, headers,
                                  opened if i == 0 else None)

    results = await asyncio.gather(*(send(i) for i in range(n)))
    return list(results), start, time.perf_counter()


class _LoopLagProbe:
    """Measures how late the event loop wakes a 5 ms sleeper: a saturated client shows here."""

    def __init__(self, period: float = 0.005):
        self.period = period
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.period)
            self.lags.append(max(0.0, time.perf_counter() - t - self.period))

    def __enter__(self) -> "_LoopLagProbe":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._task:
            self._task.cancel()


# ---------------------------------------------------------------- statistics

def _stats(prefix: str, seconds: Sequence[float], scale: float) -> dict[str, float | None]:
    ms = [s * 1000.0 / scale for s in seconds]
    return {
        f"mean_{prefix}_ms": statistics.fmean(ms) if ms else None,
        f"p50_{prefix}_ms": percentile(ms, 50),
        f"p90_{prefix}_ms": percentile(ms, 90),
        f"p99_{prefix}_ms": percentile(ms, 99),
    }


# ---------------------------------------------------------------- server side endpoints

async def _server_info(session: aiohttp.ClientSession, base_url: str, timeout_s: float) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info"):
        try:
            async with session.get(base_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status == 200:
                    data = await resp.json(content_type=None)
                    if isinstance(data, dict):
                        return data
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            continue
    return {}


def accept_length_from_info(info: dict[str, Any]) -> float | None:
    """`internal_states[0].avg_spec_accept_length`, or the top-level key of old versions.

    None when absent or not positive (a server that does not speculate has none).
    """
    if isinstance(info.get("decode"), list) and info["decode"]:
        info = info["decode"][0]
    states = info.get("internal_states")
    value = None
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = states[0].get("avg_spec_accept_length")
    if value is None:
        value = info.get("avg_spec_accept_length")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


async def _flush_cache(session: aiohttp.ClientSession, base_url: str, timeout_s: float) -> str:
    """POST /flush_cache; SGLang refuses while requests run, so retry briefly. A server without
    the endpoint (vLLM: 404) says so at once: retrying cannot make it appear."""
    last = ""
    for _ in range(10):
        try:
            async with session.post(base_url + "/flush_cache", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status == 200:
                    return "ok"
                if resp.status in (404, 405):
                    return f"unsupported: HTTP {resp.status} (the server has no /flush_cache)"
                last = clip(f"HTTP {resp.status}: {(await resp.text()).strip()}", 200, keep="start")
        except aiohttp.ClientConnectorError as exc:
            return f"failed: {exc}"  # nothing listens: retrying will not help
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.2)
    return f"failed: {last}"


async def _model_name(session: aiohttp.ClientSession, base_url: str, timeout_s: float) -> str | None:
    try:
        async with session.get(base_url + "/v1/models", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status == 200:
                data = await resp.json(content_type=None)
                return cast(str, data["data"][0]["id"])  # the server's JSON
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, IndexError, TypeError):
        pass
    return None


# ---------------------------------------------------------------- one point

async def measure_point_async(
    base_url: str,
    *,
    concurrency: int = 0,
    rate: float | None = None,
    arrival: str = DEFAULT_ARRIVAL,
    trace: str | None = None,
    phases: str | None = None,
    num_prompts: int | None = None,
    input_len: int = 128,
    output_len: int = 128,
    seed: int = 1,
    warmup: int | None = None,
    api: str = "generate",
    dataset: str = "random",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    model: str | None = None,
) -> ResultRecord:
    """One benchmark point, a closed loop at `concurrency`, an open loop at `rate` requests per
    second with `arrival`'s gaps, or a replayed `trace` file (its arrivals and lengths, an open
    loop at its mean rate), or `phases` of rates one after another (bench/phases.py, an open loop
    at their mean rate, figures per phase in `extra.phases`); returns its normalized record
    (host/arm/repeat left blank)."""
    if api not in APIS:
        raise ConfigError(f"unknown api {api!r}; expected one of {', '.join(APIS)}", where="builtin runner")
    replay = read_trace(Path(trace)) if trace is not None else None
    if replay is not None:
        rate, arrival, num_prompts = replay.mean_rate or 1.0, TRACE, len(replay.requests)
    tl = timeline_of(phases, arrival, seed, where="builtin runner") if phases is not None else None
    rate, num_prompts = (tl.mean_rate, len(tl.offsets)) if tl is not None else (rate, num_prompts)
    process = parse_arrival(arrival, where="builtin runner")
    if rate is not None:
        if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
            raise ConfigError(f"rate must be a positive number of requests per second, got {rate!r}",
                              where="builtin runner")
    elif not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be a positive integer, got {concurrency!r}", where="builtin runner")
    # an open loop's warm-up is a short closed loop: it only has to wake the server
    warm_conc = concurrency if rate is None else OPEN_WARMUP
    num_prompts = default_num_prompts(concurrency if rate is None else math.ceil(rate)) if num_prompts is None else num_prompts
    warmup = warm_conc if warmup is None else max(warmup, 0)
    base_url = base_url.rstrip("/")
    url = base_url + ("/generate" if api == "generate" else "/v1/completions")
    prompts = (trace_prompts(replay, seed) if replay is not None else
               make_prompts(num_prompts, input_len=input_len, output_len=output_len, seed=seed, dataset=dataset))
    warm_prompts = make_prompts(warmup, input_len=input_len, output_len=output_len, seed=seed + 1_000_003,
                                dataset=dataset)
    info_timeout = min(timeout_s, 30.0)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        info = await _server_info(session, base_url, info_timeout)
        if api == "completions" and model is None:
            model = await _model_name(session, base_url, info_timeout)
        warm_results: list[RequestResult] = []
        alone = WARMUP_ALONE if warm_prompts and warm_conc > 1 else 0
        if alone:
            warm_results, _, _ = await _run_batch(session, url, api, warm_prompts[:alone], 1, model, timeout_s)
        if warm_prompts:
            more, _, _ = await _run_batch(session, url, api, warm_prompts, warm_conc, model, timeout_s)
            warm_results += more
        flush = await _flush_cache(session, base_url, info_timeout)
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        scale_raw = info.get("sim_time_scale")
        scale = float(scale_raw) if isinstance(scale_raw, (int, float)) and scale_raw > 0 else 1.0
        offs = _arrival_offsets(replay, tl, len(prompts), rate, process, seed)
        with _LoopLagProbe() as probe:
            if rate is None:
                results, start, end = await _run_batch(session, url, api, prompts, concurrency, model, timeout_s)
            else:
                results, start, end = await _run_open(session, url, api, prompts, offs, scale, model, timeout_s)
        epoch_start = time.time() - (time.perf_counter() - start)
        info_after = await _server_info(session, base_url, info_timeout)

    scale_raw = info.get("sim_time_scale") or info_after.get("sim_time_scale")
    scale = float(scale_raw) if isinstance(scale_raw, (int, float)) and scale_raw > 0 else 1.0
    simulated = bool(info.get("simulated") or info_after.get("simulated") or isinstance(scale_raw, (int, float)))
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    ends = [r.ended_at for r in ok if not r.sim_clock]
    duration_wall = (max(ends) if ends else end) - start
    model_clock = bool(ok) and all(r.sim_clock for r in ok)
    if model_clock:
        # the simulator's own clock: from the first arrival to the last token, in model seconds
        # (a loaded machine slows the point's wall time, not this)
        duration = max(r.ended_at for r in ok) - min(r.sent_at for r in ok)
        duration_wall = end - start
        unit = 1.0
    else:
        duration = duration_wall / scale
        unit = scale  # wall seconds per model second
    out_tokens = sum(r.output_tokens for r in ok)
    lags_ms = [r.lag * 1000.0 for r in results]
    errors = sorted({r.error for r in failed if r.error})
    offered = offered_rate(offs)
    completing = len(ok) / duration if ok and duration > 0 else None
    record = ResultRecord(
        runner="builtin",
        concurrency=concurrency if rate is None else 0,
        rate=rate,
        arrival=process.text() if rate is not None else None,
        offered_rate=offered,
        saturated=is_saturated(offered, completing) if rate is not None else None,
        completed=len(ok),
        failed=len(failed),
        duration_s=duration,
        output_throughput=out_tokens / duration if ok and duration > 0 else None,
        request_throughput=len(ok) / duration if ok and duration > 0 else None,
        accept_length=accept_length_from_info(info_after),
        simulated=simulated,
        status=STATUS_OK if ok and not failed else STATUS_FAILED,
        error=None if ok and not failed else (
            f"{len(failed)} of {len(results)} requests failed: " + "; ".join(errors[:3]) if failed
            else "no request completed"),
        total_input_tokens=sum(p.input_len if r.input_tokens is None else r.input_tokens
                               for p, r in zip(prompts, results, strict=True) if r.ok),
        total_output_tokens=out_tokens,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        itl_spread=any(r.spread for r in ok),
        client_lag_mean_ms=statistics.fmean(lags_ms) if lags_ms else None,
        client_lag_p99_ms=percentile(lags_ms, 99),
        client_lag_max_ms=max(lags_ms) if lags_ms else None,
        sim_time_scale=scale if scale_raw is not None else None,
        started_at=started_at,
        engine_version=info.get("version") if isinstance(info.get("version"), str) else None,
        extra={
            "api": api, "dataset": dataset, "seed": seed, "warmup": warmup, "warmup_alone": alone,
            "warmup_failed": sum(1 for r in warm_results if not r.ok),
            "flush_cache": flush,
            "loop_lag_p99_ms": percentile([x * 1000 for x in probe.lags], 99),
            "loop_lag_max_ms": max(probe.lags) * 1000 if probe.lags else None,
            "client_lag_units": "wall-clock ms",
            "clock": "sim-model" if model_clock else ("sim-wall-scaled" if simulated else "wall"),
            "duration_wall_s": duration_wall,
            "stream_chunks": sum(r.chunks for r in ok),
            **({"trace": {"path": trace, "sha256": replay.sha256, "requests": len(replay.requests),
                          "duration_s": replay.duration_s}} if replay is not None else {}),
        },
    )
    if tl is not None:
        record.extra.update(_phase_extra(tl, phases or "", results, start, epoch_start, unit))
    for name, values in (("ttft", [r.ttft for r in ok if r.ttft is not None]),
                         ("tpot", [(r.e2e - r.ttft) / (r.output_tokens - 1)
                                   for r in ok if r.output_tokens > 1 and r.e2e is not None and r.ttft is not None]),
                         ("itl", [x for r in ok for x in r.itls]),
                         ("e2e", [r.e2e for r in ok if r.e2e is not None])):
        for key, value in _stats(name, values, unit).items():
            setattr(record, key, value)
    # [TTFT, TPOT, E2E] ms per completed request: what an SLO is checked against (decide/slo.py)
    ms = 1000.0 / unit
    record.extra["request_latencies_ms"] = [
        [round(r.ttft * ms, 3), round((r.e2e - r.ttft) * ms / (r.output_tokens - 1), 3) if r.output_tokens > 1
         else None, round(r.e2e * ms, 3)] for r in ok if r.ttft is not None and r.e2e is not None]
    return record


def _arrival_offsets(replay: Trace | None, tl: Timeline | None, n: int, rate: float | None, process: Arrival,
                     seed: int) -> list[float]:
    """When each request of the point is sent: a trace's own offsets, a phase timeline's, those
    drawn for a rate, or none (a closed loop)."""
    if replay is not None:
        return [r.offset_s for r in replay.requests]
    if tl is not None:
        return list(tl.offsets)
    return offsets(n, rate, process, seed) if rate is not None else []


def _phase_extra(tl: Timeline, text: str, results: list[RequestResult], start: float, epoch_start: float,
                 unit: float) -> dict[str, Any]:
    """A phase run's figures per phase, its tokens over time, and where its timeline starts on
    the clock the server's log lines carry (the model clock's origin, else the wall clock's
    epoch seconds), so bench/switching.py can place each log line in its phase."""
    model = any(r.sim_clock for r in results if r.ok)
    origin = next((r.sent_at - tl.offsets[i] for i, r in enumerate(results) if r.ok and r.sim_clock), 0.0)
    base = origin if model else start
    done = [Done(i, r.ok, r.ttft / unit if r.ttft is not None else None,
                 (r.e2e - r.ttft) / unit / (r.output_tokens - 1)
                 if r.ok and r.output_tokens > 1 and r.e2e is not None and r.ttft is not None else None,
                 r.e2e / unit if r.e2e is not None else None,
                 tuple(((t - base) / unit, n) for t, n in r.marks)) for i, r in enumerate(results)]
    return {"phases": phase_figures(tl, done), "phases_spec": text, "phase_series": token_series(tl, done),
            "phase_clock": {"kind": "model", "origin": origin} if model else {"kind": "epoch", "origin": epoch_start}}


def measure_point(base_url: str, **kwargs: Any) -> ResultRecord:
    """Synchronous wrapper: `asyncio.run(measure_point_async(...))`. See measure_point_async.
    The secrets of this process's environment (on the host: the arm's, loaded from its 0600
    file) are masked in what a server answers before any of it is cut into an error."""
    remember_env(os.environ)
    return asyncio.run(measure_point_async(base_url, **kwargs))
