"""`specops verify`: the acceptance check a user runs on their own host after `deploy`.

The same checks the real-SGLang CPU tier makes, against the arms the host runs now:
greedy `output_ids` of adaptive (and EAGLE-3, where the host has that arm) equal
baseline's at concurrency 1 and with threshold+2 requests in flight at once; the adaptive
server's log shows drafting turned off above its threshold and on again below it (the
dynamic-spec-disable patch's transition lines, or SGLang's own native switch lines,
`steps N -> 0` and back); every arm's
`/server_info`; each speculative arm accepts drafted tokens (the requests' own
`spec_verify_ct`); and the adaptive arm drafts as well right after drafting resumes as
before it stopped (its `Decode batch` lines: a draft KV cache left stale while drafting was
off shows there, and greedy identity may not catch it). One of the requests in flight at
once asks for more tokens than the rest, so it runs on alone once they finish: drafting
resumes in the middle of a request that decoded through the off stretch. The result is one
report a user attaches to a bug report: versions, device, driver, the checks with their
evidence, no secrets (`redact`).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from specops import __version__
from specops.bench.client import accept_length_from_info
from specops.bench.running import RESUMED_STEPS, OffStretch, off_stretches, parse_metrics
from specops.config.inventory import Host, Inventory
from specops.engines import engine_of
from specops.errors import ConfigError, StepError
from specops.secrets import clip, redact, remember_sources
from specops.servers import ServerState, read_states, supervisor_for
from specops.servers.arms import arms_from_vars
from specops.sglang.adaptive import STEP_SWITCH_RE, TRANSITION_RE, parse_transitions
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
EXCERPT_LINES = 20
NUMBERS = {2: "two", 3: "three"}
#: the adaptive arm's accept length in its first steps after drafting resumes, at least this
#: share of its accept length before drafting stopped
RESUME_FLOOR = 0.9
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


@dataclass
class Check:
    """One check's verdict: `ok` None means the evidence is unavailable (not a failure)."""

    name: str
    ok: bool | None
    detail: str
    evidence: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "PASS" if self.ok else "FAIL" if self.ok is False else "UNAVAILABLE"


@dataclass
class Verification:
    host: str
    specops_version: str
    prompts: int
    max_new_tokens: int
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> name, port, mechanism, info
    device: dict[str, str] = field(default_factory=dict)
    threshold: int | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.ok is False]

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["ok"] = self.ok
        doc["failed"] = self.failed
        for c, d in zip(self.checks, doc["checks"], strict=True):
            d["verdict"] = c.verdict
        redacted: dict[str, Any] = redact(doc)  # redact keeps the shape it is given
        return redacted


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
        path = "/v1/completions"
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0,
                                "ignore_eos": True, "return_token_ids": True}
    else:
        path = "/generate"
        body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                    "ignore_eos": True}}
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise StepError(f"{path} answered {exc.code}: {_body(exc)}") from None
    except (OSError, ValueError) as exc:
        raise StepError(f"{path} failed: {exc}") from None
    if api == "completions":
        return _completion_reply(doc)
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
    requests. They leave together, and declare themselves one closed loop, so the simulator
    starts no step before all have arrived however loaded the machine is (SGLang ignores the
    header)."""
    start = threading.Barrier(len(jobs))
    loop = loop_header(uuid.uuid4().hex, len(jobs), len(jobs))

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


def _identity(name: str, prompts: list[str], ids: dict[str, list[list[int]]]) -> Check:
    """Per prompt, each speculative arm's ids against baseline's; the first difference shown."""
    evidence: list[str] = []
    kinds = [k for k in ("eagle3", "adaptive") if k in ids]
    for kind in kinds:
        for i, (want, got) in enumerate(zip(ids["baseline"], ids[kind], strict=True)):
            if want != got:
                at = next((j for j, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                          min(len(want), len(got)))
                evidence.append(f"{kind} prompt {i} {prompts[i]!r}: differs at token {at}: "
                                f"baseline {want} vs {kind} {got}")
    n = len(prompts)
    if evidence:
        return Check(name, False, f"{len(evidence)} of {len(kinds) * n} outputs differ from baseline's", evidence)
    owners = " and ".join(f"{k}'s" for k in kinds)
    return Check(name, True, f"{n} requests: {owners} ids equal baseline's token for token",
                 [f"prompt {i} {p!r}: {ids['baseline'][i]}" for i, p in enumerate(prompts)][:EXCERPT_LINES])


def _transitions(text: str, threshold: int | None) -> Check:
    """Drafting off at a running batch above the threshold, and on again at or below it later."""
    name = "drafting stopped above the threshold and resumed below it"
    lines = [ln for ln in text.splitlines() if TRANSITION_RE.search(ln)]
    found = parse_transitions(text)
    if threshold is None:
        return Check(name, False, "the adaptive server reports no threshold", lines[-EXCERPT_LINES:])
    off = next((i for i, t in enumerate(found) if not t.drafting and t.batch > threshold), None)
    if off is None:
        why = ("no transition line in the adaptive server's log during the check" if not found else
               f"no 'drafting off' line with a running batch above {threshold}")
        return Check(name, False, why + f" ({threshold + 2} requests were sent at once)", lines[-EXCERPT_LINES:])
    on = next((i for i, t in enumerate(found[off:], off) if t.drafting and t.batch <= threshold), None)
    if on is None:
        return Check(name, False, f"drafting went off (batch {found[off].batch}) but never came back on at a "
                                  f"batch <= {threshold}", lines[-EXCERPT_LINES:])
    return Check(name, True, f"off at running batch {found[off].batch} > {threshold}, on again at "
                             f"{found[on].batch} <= {threshold}", lines[-EXCERPT_LINES:])


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


def verify(inventory: Inventory, host: Host, transport: Transport, *, prompts: int = 3,
           max_new_tokens: int = 8, resume_steps: int = DEFAULT_RESUME_STEPS) -> Verification:
    """Run every check against the host's running arms; the verdicts, never an exception
    for a check that fails (a host with no running arms is a StepError)."""
    if prompts < 1 or max_new_tokens < 1 or resume_steps < 1:
        raise ConfigError("--prompts, --max-new-tokens and --resume-steps must be at least 1")
    remember_sources(host.secrets.values())  # masked should a server echo one: the report goes anywhere
    names = arm_names(inventory, host)
    result = Verification(host=host.name, specops_version=__version__, prompts=prompts, max_new_tokens=max_new_tokens)
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
    result.device = device_facts(transport, host.device)
    adaptive = chosen["adaptive"]
    with contextlib.ExitStack() as reached:
        urls = {kind: reached.enter_context(reach(transport, state.port)) for kind, state in chosen.items()}
        result.checks.append(_infos(result, chosen, urls))
        result.threshold = _threshold(adaptive, result.arms["adaptive"]["info"])
        single = [PROMPTS[i % len(PROMPTS)] for i in range(prompts)]
        batch = [PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f" ({i})")
                 for i in range((result.threshold or 0) + 2)]
        # the first runs on alone for `resume_steps` whole draft steps (and one to spare) after
        # the others finish: drafting resumes in the middle of it
        steps = result.arms["adaptive"]["info"].get("speculative_num_steps")
        steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else DEFAULT_NUM_STEPS
        jobs = [(p, max_new_tokens + (resume_steps + 1) * (steps + 1) if i == 0 else max_new_tokens)
                for i, p in enumerate(batch)]
        ids1: dict[str, list[list[int]]] = {}
        idsn: dict[str, list[list[int]]] = {}
        after: dict[str, list[list[int]]] = {}
        accepted = {kind: Acceptance() for kind in chosen}
        start = transport.stat_size(adaptive.log_path)
        errors: list[str] = []
        for kind, url in urls.items():
            engine = engine_of(chosen[kind].argv)
            api, counted = engine.client_api, engine.metrics.accept_counters
            try:
                c0 = _counters(url, counted)
                alone = [generate(url, p, max_new_tokens, api=api) for p in single]
                c1 = _counters(url, counted)
                idsn[kind] = [r.ids for r in at_once(url, jobs, api)]
                c2 = _counters(url, counted)
                again = [generate(url, single[0], max_new_tokens, api=api)]  # alone again: below the threshold
                c3 = _counters(url, counted)
            except StepError as exc:
                errors.append(f"{kind} ({chosen[kind].arm}): {exc}")
                continue
            ids1[kind], after[kind] = [r.ids for r in alone], [r.ids for r in again]
            accepted[kind].add(alone + again)
            if c0 and c1 and c2 and c3:  # the requests sent alone, by the server's own counters
                accepted[kind].count(c0, c1)
                accepted[kind].count(c2, c3)
        if errors:
            result.checks.append(Check("greedy requests", False, "requests failed", errors))
        else:
            result.checks.append(_identity("greedy token identity at concurrency 1",
                                           single + [f"{single[0]} (alone again, after the batch)"],
                                           {k: ids1[k] + after[k] for k in chosen}))
            result.checks.append(_identity(f"greedy token identity at concurrency {len(batch)} (above the "
                                           f"threshold)", [f"{p} ({n} tokens)" for p, n in jobs], idsn))
        logged = adaptive.mechanism in (PATCH_MECHANISM, NATIVE_MECHANISM)
        log = _log_span(transport, adaptive.log_path, start) if logged else None
        result.checks.append(_drafting(adaptive, log, result.threshold))
        for kind in [k for k in accepted if k != "baseline"]:  # after the requests: the servers' running average
            result.arms[kind]["acceptance"] = accepted[kind].to_dict()
            try:
                result.arms[kind]["server_accept_length"] = accept_length_from_info(_server_info(urls[kind]))
            except StepError:
                result.arms[kind]["server_accept_length"] = None
    if not errors:
        result.checks.append(_accept(result, accepted))
        result.checks.append(_resumed(result, adaptive, log, resume_steps))
    return result


def _infos(result: Verification, chosen: dict[str, ServerState], urls: dict[str, str]) -> Check:
    """Every arm's /server_info (the keys that matter), and one SGLang version across them."""
    evidence: list[str] = []
    bad: list[str] = []
    for kind, state in chosen.items():
        try:
            info = _server_info(urls[kind])
        except (StepError, OSError) as exc:
            bad.append(f"{kind} ({state.arm}): {exc}")
            info = {}
        shown = {k: info[k] for k in INFO_KEYS if k in info}
        result.arms[kind] = {"name": state.arm, "port": state.port, "mechanism": state.mechanism,
                             "pid": state.pid, "engine": engine_of(state.argv).title, "info": shown}
        evidence.append(f"{kind} ({state.arm}, port {state.port}, {state.mechanism}): "
                        f"{json.dumps(shown, sort_keys=True)}")
    versions = {a["info"].get("version") for a in result.arms.values()}
    title = " / ".join(sorted({str(a["engine"]) for a in result.arms.values()}))
    name = f"/server_info of the {NUMBERS.get(len(chosen), str(len(chosen)))} arms"
    if bad:
        return Check(name, False, "; ".join(bad), evidence)
    if len(versions) != 1 or None in versions:
        return Check(name, False, f"the arms answer as different {title} versions: {sorted(map(str, versions))}",
                     evidence)
    return Check(name, True, f"all {NUMBERS.get(len(chosen), str(len(chosen)))} answer, {title} {versions.pop()}",
                 evidence)


def _threshold(state: ServerState, info: dict[str, Any]) -> int | None:
    value = state.effective_threshold or info.get("speculative_disable_batch_threshold")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _no_transition_lines(name: str, adaptive: ServerState) -> Check:
    return Check(name, None, f"the adaptive arm uses {adaptive.mechanism}, whose server logs no transition lines: "
                             "this evidence is unavailable")


def _switches(text: str, threshold: int | None) -> Check:
    """SGLang's native tiers: a switch to 0 steps at a running batch above the threshold (the
    next decode line's), and back to drafting later, at or below it (off_stretches)."""
    name = "drafting stopped above the threshold and resumed below it"
    lines = [ln for ln in text.splitlines() if STEP_SWITCH_RE.search(ln)]
    if threshold is None:
        return Check(name, False, "the adaptive server reports no threshold", lines[-EXCERPT_LINES:])
    stretches = off_stretches(text, threshold)
    if not stretches:
        return Check(name, False, f"no 'steps N -> 0' switch line in the adaptive server's log during the check "
                                  f"({threshold + 2} requests were sent at once)", lines[-EXCERPT_LINES:])
    wide = next((s for s in stretches if s.off_batch > threshold), None)
    if wide is None:
        return Check(name, False, f"drafting went off only at running batches <= {threshold}: "
                                  f"{[s.off_batch for s in stretches]}", lines[-EXCERPT_LINES:])
    if wide.on_batch is None:
        return Check(name, False, f"drafting went off (batch {wide.off_batch}) but never came back on at a "
                                  f"batch <= {threshold}", lines[-EXCERPT_LINES:])
    return Check(name, True, f"SGLang's tiers: 0 steps at running batch {wide.off_batch} > {threshold}, drafting "
                             f"again at {wide.on_batch} <= {threshold}", lines[-EXCERPT_LINES:])


def _drafting(adaptive: ServerState, log: str | None, threshold: int | None) -> Check:
    name = "drafting stopped above the threshold and resumed below it"
    if log is None:
        return _no_transition_lines(name, adaptive)
    check = _switches(log, threshold) if adaptive.mechanism == NATIVE_MECHANISM else _transitions(log, threshold)
    check.evidence = [f"log: {adaptive.log_path}", *check.evidence]
    return check


def _accept(result: Verification, accepted: dict[str, Acceptance]) -> Check:
    """Each speculative arm accepted drafted tokens in the requests it answered alone (its
    requests' own `spec_verify_ct`, or vLLM's /metrics counters over them): an arm whose
    drafts are never accepted is the target plus wasted work, a draft model that does not
    fit it or a broken accept path."""
    name = "drafted tokens accepted"
    shown, brief, none = [], [], []
    kinds = [k for k in ("eagle3", "adaptive") if k in accepted]
    for kind in kinds:
        a, server = accepted[kind], result.arms[kind].get("server_accept_length")
        brief.append(f"{kind}: accept length {a.accept_length if a.accept_length is not None else 'not reported'}")
        shown.append(f"{brief[-1]} ({a.tokens} tokens of {a.requests} requests in {a.verify_steps} verify steps, "
                     f"{a.accepted_drafts} drafted tokens accepted); /server_info "
                     f"{f'{server:.3f}' if isinstance(server, float) else 'not reported'}")
        if a.accept_length is not None and a.accepted_drafts == 0:
            none.append(kind)
    if none:
        return Check(name, False, f"{' and '.join(none)} accepted none of its drafted tokens: its draft model does "
                                  "not fit the target, or its accept path is broken", shown)
    if any(accepted[k].accept_length is None for k in kinds):
        return Check(name, None, "a speculative arm's replies carry no `spec_verify_ct` and its server counts "
                                 "no drafts on /metrics", shown)
    return Check(name, True, "; ".join(brief), shown)


def _resumed(result: Verification, adaptive: ServerState, log: str | None, steps: int = RESUMED_STEPS) -> Check:
    """The adaptive arm's accept length in its first `steps` steps after drafting resumed,
    against its accept length before drafting stopped, per off stretch, from its own decode
    lines. A stretch fails when even two standard errors above its after-mean stay below
    RESUME_FLOOR of the before-mean: a real head's per-step acceptance varies, and a check
    that fails on that noise is one users learn to ignore."""
    name = "acceptance after drafting resumed"
    if log is None:
        return _no_transition_lines(name, adaptive)
    stretches = off_stretches(log, result.threshold or 0, steps)
    result.arms["adaptive"]["off_stretches"] = [s.to_dict() for s in stretches]
    shown = [_stretch_line(s) for s in stretches]
    measured = [s for s in stretches if s.ratio is not None]
    if not measured:
        return Check(name, None, "the adaptive server's `Decode batch` lines carry no accept length on both sides of "
                                 "an off stretch (SGLang logs one every 40 steps unless launched with "
                                 "`--decode-log-interval 1`)", shown)
    low = [s for s in measured if s.ratio_bound is not None and s.ratio_bound < RESUME_FLOOR]
    if low:
        return Check(name, False, f"{len(low)} of {len(measured)} off stretches resumed below {RESUME_FLOOR}x the "
                                  "accept length before drafting stopped: a draft KV cache left stale while "
                                  "drafting was off shows so", shown)
    return Check(name, True, f"{len(measured)} off stretch(es): the first {steps} steps after drafting resumed "
                             f"accept at least {RESUME_FLOOR}x as many tokens as before it stopped (within the "
                             "steps' noise)", shown)


def _stretch_line(s: OffStretch) -> str:
    def mean(xs: tuple[float, ...]) -> str:
        return f"{statistics.fmean(xs):.2f} ({len(xs)} steps)" if xs else "none logged"
    on = f"on at running batch {s.on_batch}" if s.on_batch is not None else "never back on"
    ratio = f": {s.ratio:.2f}x" if s.ratio is not None else ""
    if s.ratio is not None and s.ratio_bound is not None and s.ratio_bound != s.ratio:
        ratio += f" (at most {s.ratio_bound:.2f}x within two standard errors)"
    return (f"off at running batch {s.off_batch}, {on}; accept length before {mean(s.before)}, "
            f"after {mean(s.after)}{ratio}")


# ----------------------------------------------------------------------------- the report

def report_markdown(v: Verification) -> str:
    """One file to attach to a bug report: versions, device, driver, checks, log excerpts."""
    lines = [f"# specops verify: {v.host}", "",
             f"Result: **{'PASS' if v.ok else 'FAIL: ' + ', '.join(v.failed)}**", "",
             "## Versions and device", "",
             f"- specops {v.specops_version}"]
    for kind, arm in v.arms.items():
        info = arm.get("info", {})
        lines.append(f"- {kind} (`{arm['name']}`, port {arm['port']}, mechanism {arm['mechanism']}): "
                     f"{arm.get('engine', 'SGLang')} {info.get('version', '?')}"
                     + (" (simulated)" if info.get("simulated") else ""))
    lines += ["- device: cpu"] if v.device.get("device") == "cpu" else [
        f"- GPUs: {v.device.get('gpus', '-')}", f"- driver: {v.device.get('driver', '-')}, CUDA: {v.device.get('cuda', '-')}"]
    lines += [f"- CPU: {v.device.get('cpu', '-')}",
              f"- adaptive threshold: {v.threshold if v.threshold is not None else '-'}",
              f"- prompts: {v.prompts} alone, {(v.threshold or 0) + 2} at once; {v.max_new_tokens} new tokens, "
              "greedy, ignore_eos", "", "## Checks", ""]
    for c in v.checks:
        lines += [f"### {c.verdict}: {c.name}", "", c.detail, ""]
        if c.evidence:
            lines += ["```", *c.evidence, "```", ""]
    text: str = redact("\n".join(lines))  # redact keeps the shape it is given
    return text
