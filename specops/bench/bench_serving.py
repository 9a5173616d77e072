"""The `sglang` runner: SGLang's own `bench_serving`, its command and its JSON line parsed.

Key names come from the `result = {...}` dict that `bench_serving.py` appends with
`json.dumps` to `--output-file` (read in the 0.4.10.post2, 0.5.4, 0.5.10.post1 and 0.5.14
wheels): every version has duration, completed, request/output throughput and
mean/median/p99 of TTFT, TPOT and ITL plus mean/median/p99 E2E latency
(`*_e2e_latency_ms`) and accept_length; 0.5.10 adds p90 E2E, `server_info`, `tag`,
`total_throughput`; 0.5.14 adds p90/p95 for TTFT and TPOT. Older releases (0.2/0.3) lack
p99, ITL and some E2E keys; a missing key is None. Python's json accepts the `NaN` and
`Infinity` that numpy statistics produce on empty lists; they become None here.

Per-request latencies (what an SLO is checked against, decide/slo.py) come from the
`result_details` arrays that `--output-details` adds to the same line (every cached release,
0.4.10 to 0.5.23): `ttfts` (s), `itls` (s, one list per request: the sglang backend spreads a
chunk's gap over its tokens), `output_lens` (0 for a failed request), `errors` ("" when it
succeeded), `input_lens`, `generated_texts`. The arrays hold no end-to-end latency, so a
request's E2E is its TTFT plus its ITLs (the time of its last token; bench_serving's own
figure also waits for the closing `[DONE]` line) and its TPOT is its ITLs over
`output_len - 1`, bench_serving's own definition on the same times. They are kept as the
builtin client keeps them (`extra.request_latencies_ms`); the arrays themselves, generated
text included, are dropped from `raw`. A line without them says why in
`extra.request_latencies_missing`, and the point has no goodput (never a zero).

A rate point runs `--request-rate R` without `--max-concurrency` (an open loop). Every
cached release (0.4.10 to 0.5.23) draws exponential gaps (Poisson) and has no option for
another process; where a tree's benchmark has `--burstiness` (gamma gaps of shape
burstiness = 1 / CV^2), `--arrival gamma:CV` passes it, else any arrival but Poisson is
refused naming the release (the builtin runner draws them all).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from specops.bench.arrivals import DEFAULT_ARRIVAL, parse_arrival
from specops.errors import ConfigError, SpecopsError
from specops.hostfiles.treefiles import TreeFiles
from specops.records.schema import LATENCIES_KEY, MISSING_KEY, clean_number
from specops.secrets import clip
from specops.sglang.flags import FlagSet, module_flags, module_path, tree_version
from specops.sglang.layout import BENCH_MODULES, bench_module

# bench_serving key -> normalized field. First key present wins.
_KEY_MAP: dict[str, tuple[str, ...]] = {
    "duration_s": ("duration",),
    "completed": ("completed",),
    "output_throughput": ("output_throughput",),
    "request_throughput": ("request_throughput",),
    "total_input_tokens": ("total_input_tokens",),
    "total_output_tokens": ("total_output_tokens",),
    "accept_length": ("accept_length",),
    "measured_concurrency": ("concurrency",),
    "max_concurrency": ("max_concurrency",),
    "input_len": ("random_input_len",),
    "output_len": ("random_output_len",),
}
for _metric, _suffix in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"), ("e2e", "e2e_latency_ms")):
    _KEY_MAP[f"mean_{_metric}_ms"] = (f"mean_{_suffix}",)
    _KEY_MAP[f"p50_{_metric}_ms"] = (f"median_{_suffix}", f"p50_{_suffix}")
    _KEY_MAP[f"p90_{_metric}_ms"] = (f"p90_{_suffix}",)
    _KEY_MAP[f"p95_{_metric}_ms"] = (f"p95_{_suffix}",)
    _KEY_MAP[f"p99_{_metric}_ms"] = (f"p99_{_suffix}",)
    _KEY_MAP[f"std_{_metric}_ms"] = (f"std_{_suffix}",)

_INT_FIELDS = {"completed", "total_input_tokens", "total_output_tokens", "max_concurrency", "input_len", "output_len"}

# `--dataset` values of `specops bench` -> bench_serving's --dataset-name. Our "random"
# is random token ids: bench_serving's own "random" samples text from ShareGPT, which
# it downloads, and GPU hosts are often offline.
DATASET_NAMES = {"random": "random-ids", "random-ids": "random-ids", "random-text": "random", "sharegpt": "sharegpt"}

#: the flag of a benchmark whose arrivals can be bursty (gamma gaps of shape 1 / CV^2)
BURSTINESS_FLAG = "--burstiness"
#: the flag that makes bench_serving append its per-request arrays to the result line
DETAILS_FLAG = "--output-details"
#: the flag that makes a random-ids point send its token ids as ids (else decoded to text, tokenized again by
#: the server inside its TTFT): what the builtin client sends for `random`
TOKENIZE_FLAG = "--tokenize-prompt"
#: the keys of bench_serving's `result_details` (`cached_tokens*` only with --cache-report)
DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
               "cached_tokens", "cached_tokens_details")


def bench_serving_argv(
    python: str,
    *,
    module: str = "sglang.bench_serving",
    port: int | None = None,
    base_url: str | None = None,
    dataset: str = "random",
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int = 0,
    output_file: str,
    rate: float | None = None,
    burstiness: float | None = None,
    seed: int = 1,
    model: str | None = None,
    tokenizer: str | None = None,
    warmup_requests: int | None = None,
    flush_cache: bool = True,
    output_details: bool = False,
    tokenize_prompt: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """The argument list for one point of `python -m <module>` (`sglang.bench_serving`, or
    `sglang.benchmark.serving` on trees that have it: see `bench_command`).

    `dataset` is random / random-ids / random-text / sharegpt, or a path (a ShareGPT
    JSON file, passed as --dataset-path). `rate`: an open loop at that many requests/s
    (`burstiness`: its gamma shape) instead of `concurrency`. Warm-up defaults to
    `concurrency` requests (2 on a rate point);
    `--flush-cache` runs after the warm-up, before the measured run; `output_details` adds
    `--output-details` (per-request latencies in the result line); `tokenize_prompt` adds
    `--tokenize-prompt` to a random-ids point, so its prompts go as the token ids themselves
    (without it bench_serving decodes them to text, and the server tokenizes that inside the
    TTFT it measures). bench_serving appends to `output_file`, so give each point its own file.
    """
    if (port is None) == (base_url is None):
        raise SpecopsError("give exactly one of port and base_url", where="bench_serving_argv")
    sizes = (("input_len", input_len), ("output_len", output_len), ("num_prompts", num_prompts))
    for name, value in sizes + ((("concurrency", concurrency),) if rate is None else ()):
        if not isinstance(value, int) or value < 1:
            raise SpecopsError(f"{name} must be a positive integer, got {value!r}", where="bench_serving_argv")
    argv = [python, "-m", module, "--backend", "sglang"]
    argv += ["--base-url", base_url] if base_url else ["--host", "127.0.0.1", "--port", str(port)]
    dataset_path = None
    dataset_name = DATASET_NAMES.get(dataset)
    if dataset_name is None:
        dataset_name, dataset_path = "sharegpt", dataset
    argv += ["--dataset-name", dataset_name]
    if dataset_path:
        argv += ["--dataset-path", dataset_path]
    if model:
        argv += ["--model", model]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    argv += [
        "--random-input-len", str(input_len),
        "--random-output-len", str(output_len),
        "--random-range-ratio", "1.0",
        "--sharegpt-output-len", str(output_len),
        "--num-prompts", str(num_prompts),
        *(["--max-concurrency", str(concurrency), "--request-rate", "inf"] if rate is None
          else ["--request-rate", repr(float(rate))]),
        *(["--burstiness", repr(burstiness)] if burstiness is not None else []),
        "--seed", str(seed),
        "--warmup-requests", str((concurrency if rate is None else 2) if warmup_requests is None else warmup_requests),
        "--output-file", output_file,
        "--disable-tqdm",
    ]
    if flush_cache:
        argv.append("--flush-cache")
    if output_details:
        argv.append(DETAILS_FLAG)
    if tokenize_prompt and dataset_name == "random-ids":
        argv.append(TOKENIZE_FLAG)
    argv += list(extra)
    return argv


@dataclass
class BenchCommand:
    """SGLang's serving benchmark as one tree ships it: its module and the flags it accepts."""

    module: str
    flags: FlagSet
    version: str | None

    @property
    def details(self) -> bool:
        """Whether this benchmark writes per-request latencies (`--output-details`)."""
        return self.flags.has_flag(DETAILS_FLAG)

    def argv(self, python: str, **kwargs: Any) -> list[str]:
        """bench_serving_argv for this tree, with `--output-details` and, on a random-ids
        point, `--tokenize-prompt` where the tree's benchmark has them; refused (naming the
        flag and the version) when the tree's benchmark would reject or find a flag ambiguous."""
        kwargs.setdefault("output_details", self.details)
        kwargs.setdefault("tokenize_prompt", self.flags.has_flag(TOKENIZE_FLAG))
        arrival = parse_arrival(kwargs.pop("arrival", DEFAULT_ARRIVAL), where="sglang runner")
        if kwargs.get("rate") is not None and arrival.kind != "poisson":
            if arrival.kind != "gamma" or not self.flags.has_flag(BURSTINESS_FLAG):
                raise ConfigError(f"{self.module} of SGLang {self.version or '(unknown version)'} draws Poisson "
                                  f"arrivals only (no {BURSTINESS_FLAG} for --arrival {arrival.text()})",
                                  where="sglang runner", hint="use --arrival poisson, or --runner builtin")
            kwargs["burstiness"] = 1.0 / (arrival.cv * arrival.cv)
        argv = bench_serving_argv(python, module=self.module, **kwargs)
        refusal = self.flags.check(argv[3:])
        if refusal:
            raise ConfigError(f"{self.module} of SGLang {self.version or '(unknown version)'} would refuse "
                              f"its command: {refusal}", where="sglang runner",
                              hint="use --runner builtin, or an SGLang version whose benchmark has that flag")
        return argv


def bench_command(files: TreeFiles) -> BenchCommand:
    """The tree's serving benchmark (`sglang.benchmark.serving` since 0.5.16, else
    `sglang.bench_serving`) with the flags read from its source."""
    module = bench_module(files)
    data = files.read(module_path(module)) if module else None
    if module is None or data is None:
        raise ConfigError(f"the SGLang tree at {files.root} has no serving benchmark "
                          f"({' or '.join(BENCH_MODULES)})", where="sglang runner", hint="use --runner builtin")
    return BenchCommand(module, module_flags(data, module_path(module), prog=module), tree_version(files))


#: Fields in wall-clock time units: on a simulator's scaled clock (wall = model x scale)
#: durations and latencies are divided by the scale, rates multiplied, as the builtin
#: client does, so a report never mixes clocks.
_TIME_FIELDS = tuple(f for f in _KEY_MAP if f.endswith("_ms")) + ("duration_s",)
_RATE_FIELDS = ("output_throughput", "request_throughput")


def to_model_time(record: dict[str, Any], time_scale: Any) -> dict[str, Any]:
    """`record` converted from the wall clock to the server's model clock when the server
    runs on a scaled clock (`/server_info` sim_time_scale); unchanged otherwise."""
    if not isinstance(time_scale, (int, float)) or isinstance(time_scale, bool) or time_scale <= 0:
        return record
    out = dict(record)
    for name in _TIME_FIELDS:
        if isinstance(out.get(name), (int, float)):
            out[name] = out[name] / time_scale
    for name in _RATE_FIELDS:
        if isinstance(out.get(name), (int, float)):
            out[name] = out[name] * time_scale
    extra = dict(out.get("extra") or {})
    extra["duration_wall_s"] = record.get("duration_s")
    if isinstance(extra.get(LATENCIES_KEY), list):
        extra[LATENCIES_KEY] = [[None if v is None else round(v / time_scale, 3) for v in one]
                                for one in extra[LATENCIES_KEY]]
    out.update(sim_time_scale=float(time_scale), simulated=True, extra=extra)
    return out


def _number(value: Any, field: str) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        value = clean_number(float(value))
        if value is None:
            return None
        return int(value) if field in _INT_FIELDS else value
    if isinstance(value, str):  # some versions write "inf" request rates etc.
        try:
            return _number(float(value), field)
        except ValueError:
            return None
    return None


def parse_bench_serving_line(line: str, *, num_prompts: int | None = None) -> dict[str, Any]:
    """Map one bench_serving JSON line (any version) onto the normalized record fields.

    Missing keys and NaN/Infinity values become None. `failed` is `num_prompts -
    completed` when `num_prompts` is given (bench_serving does not count failures).
    The line itself is kept under `raw` (less bench_serving's per-request arrays, which
    become `extra.request_latencies_ms`). Raises SpecopsError on text that is not a JSON
    object.
    """
    text = line.strip()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SpecopsError(f"bench_serving output is not JSON: {exc}: {clip(text, 200, keep='start')!r}",
                           where="bench_serving output file") from None
    if not isinstance(data, dict):
        raise SpecopsError(f"bench_serving output is not a JSON object: {clip(text, 200, keep='start')!r}",
                           where="bench_serving output file")
    details = [k for k in DETAIL_KEYS if k in data]
    raw = json.dumps({k: v for k, v in data.items() if k not in details}) if details else text
    out: dict[str, Any] = {"runner": "sglang", "raw": raw}
    for field, keys in _KEY_MAP.items():
        value = None
        for key in keys:
            if key in data:
                value = _number(data[key], field)
                break
        out[field] = value
    if out["accept_length"] is None:
        out["accept_length"] = _accept_from_server_info(data.get("server_info"))
    if out["accept_length"] is not None and out["accept_length"] <= 0:
        out["accept_length"] = None  # no speculation: bench_serving prints none either
    completed = out["completed"] or 0
    out["completed"] = completed
    out["failed"] = max(0, num_prompts - completed) if num_prompts is not None else 0
    out["num_prompts"] = num_prompts
    out["tag"] = data.get("tag")
    out["dataset_name"] = data.get("dataset_name")
    latencies, why = request_latencies(data)
    out["extra"] = {LATENCIES_KEY: latencies} if latencies is not None else {MISSING_KEY: why}
    return out


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return clean_number(float(value))


def request_latencies(data: dict[str, Any]) -> tuple[list[list[float | None]] | None, str]:
    """[TTFT, TPOT, E2E] ms per completed request from bench_serving's `--output-details`
    arrays (see the module docstring), or (None, why not)."""
    ttfts, itls, lens, errors = (data.get(k) for k in ("ttfts", "itls", "output_lens", "errors"))
    if not isinstance(ttfts, list) or not isinstance(itls, list) or not isinstance(lens, list):
        return None, (f"bench_serving wrote no per-request latencies (no ttfts/itls/output_lens: its "
                      f"{DETAILS_FLAG} is missing from this SGLang release): goodput and SLO attainment "
                      "are unavailable for this point")
    if not isinstance(errors, list):
        errors = [""] * len(ttfts)
    if not len(ttfts) == len(itls) == len(lens) == len(errors):
        return None, (f"bench_serving's per-request arrays differ in length (ttfts {len(ttfts)}, itls "
                      f"{len(itls)}, output_lens {len(lens)}, errors {len(errors)}): goodput and SLO "
                      "attainment are unavailable for this point")
    out: list[list[float | None]] = []
    for ttft_s, gaps, n, error in zip(ttfts, itls, lens, errors, strict=True):
        if error:
            continue  # a failed request: counted in `failed`, never meets an SLO
        ttft = _seconds(ttft_s)
        ttft = ttft if ttft is not None and ttft > 0 else None   # 0.0: no token arrived
        decode = sum(g for g in (_seconds(x) for x in (gaps if isinstance(gaps, list) else [])) if g is not None)
        tokens = n if isinstance(n, int) and not isinstance(n, bool) else 0
        tpot = round(decode * 1000 / (tokens - 1), 3) if tokens > 1 else None
        out.append([None if ttft is None else round(ttft * 1000, 3), tpot,
                    None if ttft is None else round((ttft + decode) * 1000, 3)])
    return out, ""


def _accept_from_server_info(info: Any) -> float | None:
    """0.5.10+ embed /server_info; its internal_states carry the accept length too."""
    if not isinstance(info, dict):
        return None
    if isinstance(info.get("decode"), list) and info["decode"]:
        info = info["decode"][0]
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        value = _number(states[0].get("avg_spec_accept_length"), "accept_length")
        if value is not None:
            return value
    return _number(info.get("avg_spec_accept_length"), "accept_length")


def parse_bench_serving_output(text: str, *, num_prompts: int | None = None) -> dict[str, Any]:
    """Parse the last non-empty line of an output file (bench_serving appends to it)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise SpecopsError("bench_serving wrote no result line (it prints 'Error running benchmark' "
                           "when every request failed)", where="bench_serving output file",
                           hint="look at the bench_serving stdout and the server log")
    return parse_bench_serving_line(lines[-1], num_prompts=num_prompts)

