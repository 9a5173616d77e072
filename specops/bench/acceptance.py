"""`specops verify`: the acceptance check a user runs on their own host after `deploy`; this
module measures, decide/verify.py judges, report/verify.py words the report.

The same checks the real-SGLang CPU tier makes, against the arms the host runs now:
greedy `output_ids` of adaptive (and EAGLE-3, where the host has that arm) against
baseline's at concurrency 1 and with threshold+2 requests in flight at once; the adaptive
server's log span during the check (the dynamic-spec-disable patch's transition lines, or
SGLang's own native switch lines, `steps N -> 0` and back); every arm's `/server_info`;
what each speculative arm's requests were verified and accepted (the requests' own
`spec_verify_ct`, or the server's /metrics counters); and the adaptive arm's `Decode batch`
lines around drafting resuming (a draft KV cache left stale while drafting was off shows
there, and greedy identity may not catch it). One of the requests in flight at once asks
for more tokens than the rest, so it runs on alone once they finish: drafting resumes in the
middle of a request that decoded through the off stretch. `measure` returns all of it as a
`Measurement`; nothing here judges it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from specops import __version__
from specops.bench.client import accept_length_from_info
from specops.bench.running import parse_metrics
from specops.config.inventory import Host, Inventory
from specops.engines import engine_of
from specops.errors import ConfigError, StepError
from specops.secrets import clip, remember_sources
from specops.servers import ServerState, read_states, supervisor_for
from specops.servers.arms import arms_from_vars
from specops.sim.closedloop import loop_header
from specops.transport.base import Transport
from specops.transport.forward import reach
from specops.transport.nvidia import read_gpus
from specops.transport.probes import read_cpu

KINDS = ("baseline", "eagle3", "adaptive")
#: the arms verify cannot do without: the reference and the arm whose switch it proves (an
#: EAGLE-3 arm is checked too where the host has one)
REQUIRED = ("baseline", "adaptive")
#: prompts cycled for the checks (greedy, so any text serves; distinct so a mix-up shows)
PROMPTS = ("Speculative decoding", "The quick brown fox", "A small model", "Once upon a time",
           "The capital of France is", "def fibonacci(n):", "In the beginning", "GPU kernels are")
#: /server_info keys the report shows (never the whole document: it holds api keys)
INFO_KEYS = ("version", "model_path", "device", "tp_size", "max_running_requests", "cuda_graph_max_bs",
             "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "speculative_disable_batch_threshold", "speculative_adaptive",
             "simulated")
REQUEST_TIMEOUT_S = 600.0
#: an error reply's characters shown, of at most ERROR_BODY_READ bytes read (masked before the cut)
ERROR_BODY_CHARS = 300
ERROR_BODY_READ = 64 * 1024
#: the most of the adaptive log read for transitions (the span of this check only)
LOG_SPAN_LIMIT = 8 * 1024 * 1024
#: decode steps read right after drafting resumes (`--resume-steps`): a real head's per-step
#: acceptance varies, so fewer make a noisy mean (the CPU tier, whose head accepts every
#: draft, reads 3)
DEFAULT_RESUME_STEPS = 8
#: the adaptive mechanism whose server logs its drafting transitions
PATCH_MECHANISM = "dynamic-spec-disable-patch"
#: SGLang's own tiers (0.5.14+): its worker logs a switch line when it changes step count
NATIVE_MECHANISM = "native-adaptive"
#: draft steps an EAGLE arm runs when its /server_info does not say (SGLang's largest default)
DEFAULT_NUM_STEPS = 5


# ----------------------------------------------------------------------------- HTTP

@dataclass(frozen=True)
class Reply:
    """One greedy request's answer: its token ids and what the server counted for it
    (`spec_verify_ct`: verify steps, absent on a server that does not speculate)."""

    ids: list[int]
    completion_tokens: int
    verify_steps: int | None


@dataclass
class Acceptance:
    """What an arm's requests were verified and accepted: SGLang's accept length is tokens
    per verify step (its meta_info's `spec_verify_ct`); the first token of each request
    comes from prefill, every verify step commits one token of the target's plus the drafted
    tokens it accepted. vLLM counts per server instead (`count`: its /metrics drafts and
    accepted tokens across the requests), its accept length 1 + accepted / drafts."""

    requests: int = 0
    tokens: int = 0
    verify_steps: int = 0
    reported: bool = True  # every request carried spec_verify_ct
    counted: int | None = None  # accepted drafts by the server's counters, where it counts

    def add(self, replies: list[Reply]) -> None:
        for r in replies:
            self.requests += 1
            self.tokens += r.completion_tokens
            self.verify_steps += r.verify_steps or 0
            self.reported = self.reported and r.verify_steps is not None

    def count(self, before: tuple[float, float], after: tuple[float, float]) -> None:
        """Add the server's (drafts, accepted) counters' growth over some of the requests."""
        self.verify_steps += int(after[0] - before[0])
        self.counted = (self.counted or 0) + int(after[1] - before[1])

    @property
    def accepted_drafts(self) -> int:
        if self.counted is not None:
            return self.counted
        return max(0, self.tokens - self.requests - self.verify_steps)

    @property
    def accept_length(self) -> float | None:
        if self.counted is not None:
            return round(1 + self.counted / self.verify_steps, 4) if self.verify_steps else None
        return round(self.tokens / self.verify_steps, 4) if self.reported and self.verify_steps else None

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "tokens": self.tokens, "verify_steps": self.verify_steps,
                "accepted_drafts": self.accepted_drafts, "accept_length": self.accept_length,
                "source": "server counters" if self.counted is not None else "requests"}


def generate(base_url: str, prompt: str, max_new_tokens: int, headers: dict[str, str] | None = None,
             api: str = "generate") -> Reply:
    """Greedy token ids for one prompt, exactly N tokens (ignore_eos): SGLang's `/generate`
    (`output_ids`, and `spec_verify_ct`), or with `api` `completions` an OpenAI-compatible
    `/v1/completions` asked for `return_token_ids` (vLLM's; no verify count)."""
    if api == "completions":
        doc = _post(base_url, "/v1/completions", {"prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0,
                                                  "ignore_eos": True, "return_token_ids": True}, headers)
        return _completion_reply(doc)
    return _generate_reply(_post(base_url, "/generate", {"text": prompt, "sampling_params": _greedy(max_new_tokens)},
                                 headers))


def generate_batch(base_url: str, jobs: list[tuple[str, int]], headers: dict[str, str] | None = None) -> list[Reply]:
    """The (prompt, max_new_tokens) jobs as one SGLang batched `/generate` (a list of texts,
    sampling_params one each): its tokenizer sends them to the scheduler back to back from
    one loop, so they share a running batch whatever the machine's load, where requests sent
    apart reach it one by one and on a fast engine each can finish before the next arrives."""
    doc = _post(base_url, "/generate", {"text": [p for p, _ in jobs],
                                        "sampling_params": [_greedy(n) for _, n in jobs]}, headers)
    if not isinstance(doc, list) or len(doc) != len(jobs):
        raise StepError(f"/generate answered a batch of {len(jobs)} with "
                        f"{f'{len(doc)} replies' if isinstance(doc, list) else 'one reply'}")
    return [_generate_reply(one) for one in doc]


def _greedy(max_new_tokens: int) -> dict[str, Any]:
    return {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}


def _post(base_url: str, path: str, body: dict[str, Any], headers: dict[str, str] | None) -> Any:
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise StepError(f"{path} answered {exc.code}: {_body(exc)}") from None
    except (OSError, ValueError) as exc:
        raise StepError(f"{path} failed: {exc}") from None


def _generate_reply(doc: Any) -> Reply:
    """One `/generate` answer: its `output_ids`, and the verify steps SGLang counted for it."""
    ids = doc.get("output_ids") if isinstance(doc, dict) else None
    if not isinstance(ids, list):
        raise StepError("/generate answered without `output_ids`: this server cannot show its token ids")
    meta = doc.get("meta_info") if isinstance(doc.get("meta_info"), dict) else {}
    verify = meta.get("spec_verify_ct")
    completion = meta.get("completion_tokens")
    return Reply([int(i) for i in ids], int(completion) if isinstance(completion, int) else len(ids),
                 int(verify) if isinstance(verify, int) and not isinstance(verify, bool) else None)


def _completion_reply(doc: Any) -> Reply:
    """A `/v1/completions` answer with `return_token_ids`: its first choice's `token_ids`."""
    choices = doc.get("choices") if isinstance(doc, dict) else None
    ids = choices[0].get("token_ids") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    if not isinstance(ids, list):
        raise StepError("/v1/completions answered without `token_ids`: this server cannot show its token ids")
    return Reply([int(i) for i in ids], len(ids), None)


def get_json(base_url: str, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(base_url + path, timeout=60) as resp:
        doc = json.loads(resp.read())
    return doc if isinstance(doc, dict) else {}


def _counters(base_url: str, names: tuple[str, str] | None) -> tuple[float, float] | None:
    """(drafts, accepted tokens) from the server's /metrics counters; None where the engine
    keeps none (SGLang: its replies carry the count) or the read fails."""
    if names is None:
        return None
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=60) as resp:
            values = parse_metrics(resp.read().decode(errors="replace"))
    except (OSError, ValueError):
        return None
    drafts, accepted = (values.get(name) for name in names)
    return None if drafts is None or accepted is None else (drafts, accepted)


def _server_info(base_url: str) -> dict[str, Any]:
    for path in ("/server_info", "/get_server_info", "/version"):  # vLLM shows its version alone
        try:
            return get_json(base_url, path)
        except (OSError, ValueError):
            continue
    raise StepError("no /server_info")


def at_once(base_url: str, jobs: list[tuple[str, int]], api: str = "generate") -> list[Reply]:
    """The (prompt, max_new_tokens) jobs in flight together: one decode batch of len(jobs)
    requests. On `/generate` one batched request (generate_batch). A completions batch
    cannot give each prompt its own length, so there the requests leave together from one
    thread each; all declare themselves one closed loop, so the simulator starts no step
    before all have arrived however loaded the machine is (the engines ignore the header)."""
    loop = loop_header(uuid.uuid4().hex, len(jobs), len(jobs))
    if api == "generate":
        return generate_batch(base_url, jobs, loop)
    start = threading.Barrier(len(jobs))

    def one(job: tuple[str, int]) -> Reply:
        try:
            start.wait(timeout=60)  # every thread ready first: the requests leave together
        except threading.BrokenBarrierError:
            raise StepError(f"could not start {len(jobs)} requests at once") from None
        return generate(base_url, job[0], job[1], loop, api)

    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(pool.map(one, jobs))


# ----------------------------------------------------------------------------- the checks

def arm_names(inventory: Inventory, host: Host) -> dict[str, str]:
    """kind -> the first arm of that kind in the host's vars: baseline and adaptive are
    needed, eagle3 is checked where there is one."""
    specs = arms_from_vars(inventory.host_vars(host), where=f"host {host.name}")
    names: dict[str, str] = {}
    for spec in specs.values():
        names.setdefault(spec.kind, spec.name)
    missing = [k for k in REQUIRED if k not in names]
    if missing:
        raise ConfigError(f"verify needs a {' and a '.join(missing)} arm on {host.name}; its arms: "
                          f"{', '.join(f'{n} ({s.kind})' for n, s in specs.items())}", where=f"host {host.name}")
    return {k: names[k] for k in KINDS if k in names}


def device_facts(transport: Transport, device: str = "gpu") -> dict[str, str]:
    """What the host computes on: a CPU host's CPU alone (its driver's GPUs, if any, serve
    nothing here and are not named), else its GPUs, driver and CUDA too."""
    if device == "cpu":
        return {"device": "cpu", "cpu": read_cpu(transport).describe()}
    gpus = read_gpus(transport)
    return {"cpu": read_cpu(transport).describe(), "gpus": gpus.describe(),
            "driver": gpus.driver_version or "-", "cuda": gpus.cuda_version or "-"}


def _threshold(state: ServerState, info: dict[str, Any]) -> int | None:
    value = state.effective_threshold or info.get("speculative_disable_batch_threshold")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _log_span(transport: Transport, path: str, start: int | None) -> str:
    """What the log gained since `start` (capped; transition lines are rare)."""
    end = transport.stat_size(path)
    if end is None:
        return ""
    begin = start if start is not None and start <= end else 0
    begin = max(begin, end - LOG_SPAN_LIMIT)
    return transport.read_range(path, begin, end - begin).decode(errors="replace")


def _body(exc: urllib.error.HTTPError) -> str:
    """An error reply's first characters, masked before the cut: a cut through a secret would
    leave a part the mask no longer recognizes."""
    return clip(exc.read(ERROR_BODY_READ).decode(errors="replace"), ERROR_BODY_CHARS, keep="start")


# ----------------------------------------------------------------------------- measuring

@dataclass
class Measurement:
    """Everything verify measured on one host's arms, for decide/verify.py to judge: each
    arm's facts and /server_info, the greedy ids per prompt (alone, in flight at once, alone
    again), what each arm's requests were verified and accepted, and the adaptive arm's log
    span during the check (None where its mechanism logs no transitions)."""

    host: str
    specops_version: str
    prompts: int
    max_new_tokens: int
    resume_steps: int
    adaptive: ServerState
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> name, port, mechanism, pid, engine, info
    info_errors: list[str] = field(default_factory=list)          # arms whose /server_info failed
    device: dict[str, str] = field(default_factory=dict)
    threshold: int | None = None
    single: list[str] = field(default_factory=list)               # the prompts sent alone
    jobs: list[tuple[str, int]] = field(default_factory=list)     # (prompt, new tokens) sent at once
    alone: dict[str, list[list[int]]] = field(default_factory=dict)   # kind -> ids per prompt sent alone
    again: dict[str, list[list[int]]] = field(default_factory=dict)   # ... the first prompt, alone again
    at_once: dict[str, list[list[int]]] = field(default_factory=dict)  # ... per job of the batch
    accepted: dict[str, Acceptance] = field(default_factory=dict)
    server_accept: dict[str, float | None] = field(default_factory=dict)  # /server_info's accept length
    request_errors: list[str] = field(default_factory=list)
    log: str | None = None
    #: the engine's switch, where the adaptive arm's env sets it: its drafting-off steps skip the
    #: draft extend, so drafting resumes cold (ServingEngine.skips_off_extend)
    cold_resume_switch: str | None = None


def read_infos(chosen: dict[str, ServerState], urls: dict[str, str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every arm's facts and /server_info (the keys that matter, INFO_KEYS), and the arms
    whose /server_info failed, with the error."""
    arms: dict[str, dict[str, Any]] = {}
    bad: list[str] = []
    for kind, state in chosen.items():
        try:
            info = _server_info(urls[kind])
        except (StepError, OSError) as exc:
            bad.append(f"{kind} ({state.arm}): {exc}")
            info = {}
        shown = {k: info[k] for k in INFO_KEYS if k in info}
        arms[kind] = {"name": state.arm, "port": state.port, "mechanism": state.mechanism,
                      "pid": state.pid, "engine": engine_of(state.argv, state.engine).title, "info": shown}
    return arms, bad


def _ready_arms(transport: Transport, host: Host, names: dict[str, str]) -> dict[str, ServerState]:
    """The arms' states, every one ready and reachable through the host's own port."""
    states = read_states(transport, host.workdir)
    statuses = {s.arm: s for s in supervisor_for(host).status(transport, host.workdir, list(names.values()))}
    down = [f"{n} ({statuses[n].state if n in statuses else 'never launched'})" for n in names.values()
            if n not in states or n not in statuses or statuses[n].state != "ready"]
    if down:
        raise StepError(f"arms not ready on {host.name}: {', '.join(down)}", where=f"host {host.name}",
                        hint=f"`specops deploy --host {host.name}` launches them; `specops status` shows them")
    chosen: dict[str, ServerState] = {k: states[n] for k, n in names.items()}
    slurm = [s.arm for s in chosen.values() if s.slurm]
    if slurm:
        raise ConfigError(f"verify reaches servers through the host's own port; {', '.join(slurm)} run as Slurm "
                          f"jobs on compute nodes", where=f"host {host.name}")
    return chosen


def measure(inventory: Inventory, host: Host, transport: Transport, *, prompts: int = 3,
            max_new_tokens: int = 8, resume_steps: int = DEFAULT_RESUME_STEPS) -> Measurement:
    """Send verify's requests to the host's running arms and read what they answered and
    logged (a host with no running arms is a StepError; a request that fails is recorded)."""
    if prompts < 1 or max_new_tokens < 1 or resume_steps < 1:
        raise ConfigError("--prompts, --max-new-tokens and --resume-steps must be at least 1")
    remember_sources(host.secrets.values())  # masked should a server echo one: the report goes anywhere
    names = arm_names(inventory, host)
    chosen = _ready_arms(transport, host, names)
    adaptive = chosen["adaptive"]
    m = Measurement(host=host.name, specops_version=__version__, prompts=prompts, max_new_tokens=max_new_tokens,
                    resume_steps=resume_steps, adaptive=adaptive)
    m.device = device_facts(transport, host.device)
    engine = engine_of(adaptive.argv, adaptive.engine)
    if engine.skips_off_extend(adaptive.env):
        m.cold_resume_switch = engine.off_extend_switch
    with contextlib.ExitStack() as reached:
        urls = {kind: reached.enter_context(reach(transport, state.port)) for kind, state in chosen.items()}
        m.arms, m.info_errors = read_infos(chosen, urls)
        m.threshold = _threshold(adaptive, m.arms["adaptive"]["info"])
        m.single = [PROMPTS[i % len(PROMPTS)] for i in range(prompts)]
        batch = [PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f" ({i})")
                 for i in range((m.threshold or 0) + 2)]
        # the first runs on alone for `resume_steps` whole draft steps (and one to spare) after
        # the others finish: drafting resumes in the middle of it
        steps = m.arms["adaptive"]["info"].get("speculative_num_steps")
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else DEFAULT_NUM_STEPS
        m.jobs = [(p, max_new_tokens + (resume_steps + 1) * (steps + 1) if i == 0 else max_new_tokens)
                  for i, p in enumerate(batch)]
        m.accepted = {kind: Acceptance() for kind in chosen}
        start = transport.stat_size(adaptive.log_path)
        for kind, url in urls.items():
            _send(m, kind, chosen[kind], url)
        if adaptive.mechanism in (PATCH_MECHANISM, NATIVE_MECHANISM):
            m.log = _log_span(transport, adaptive.log_path, start)
        for kind in [k for k in m.accepted if k != "baseline"]:  # after the requests: the servers' running average
            try:
                m.server_accept[kind] = accept_length_from_info(_server_info(urls[kind]))
            except StepError:
                m.server_accept[kind] = None
    return m


def _send(m: Measurement, kind: str, state: ServerState, url: str) -> None:
    """One arm's requests: the prompts alone, the batch at once, the first prompt alone again;
    its acceptance from the replies, or from its /metrics counters where its engine keeps them."""
    engine = engine_of(state.argv, state.engine)
    api, counted = engine.client_api, engine.metrics.accept_counters
    try:
        c0 = _counters(url, counted)
        alone = [generate(url, p, m.max_new_tokens, api=api) for p in m.single]
        c1 = _counters(url, counted)
        m.at_once[kind] = [r.ids for r in at_once(url, m.jobs, api)]
        c2 = _counters(url, counted)
        again = [generate(url, m.single[0], m.max_new_tokens, api=api)]  # alone again: below the threshold
        c3 = _counters(url, counted)
    except StepError as exc:
        m.request_errors.append(f"{kind} ({state.arm}): {exc}")
        return
    m.alone[kind], m.again[kind] = [r.ids for r in alone], [r.ids for r in again]
    m.accepted[kind].add(alone + again)
    if c0 and c1 and c2 and c3:  # the requests sent alone, by the server's own counters
        m.accepted[kind].count(c0, c1)
        m.accepted[kind].count(c2, c3)
