"""`specops verify`'s report: decide/verify.py's verdicts over what bench/acceptance.py
measured, in words. One check is a name, a verdict (PASS, FAIL, or UNAVAILABLE where the
evidence is), a sentence and its evidence lines; `report_markdown` is the one file a user
attaches to a bug report (versions, device, driver, the checks with their evidence, no
secrets: `redact`), and `Verification.to_dict` is verify.json."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from specops.bench.acceptance import NATIVE_MECHANISM, Acceptance, Measurement
from specops.bench.running import RESUMED_STEPS, OffStretch
from specops.decide import verify as judge
from specops.decide.verify import RESUME_FLOOR, DraftingWhy, ResumedWhy
from specops.secrets import redact
from specops.servers import ServerState

EXCERPT_LINES = 20
NUMBERS = {2: "two", 3: "three"}
DRAFTING = "drafting stopped above the threshold and resumed below it"
ACCEPTED = "drafted tokens accepted"
RESUMED = "acceptance after drafting resumed"


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


# ----------------------------------------------------------------------------- one check each

def identity_check(name: str, prompts: list[str], ids: dict[str, list[list[int]]]) -> Check:
    """Per prompt, each speculative arm's ids against baseline's; the first difference shown."""
    found = judge.identity(len(prompts), ids)
    evidence = [f"{d.kind} prompt {d.index} {prompts[d.index]!r}: differs at token {d.at}: "
                f"baseline {d.want} vs {d.kind} {d.got}" for d in found.differences]
    n = found.requests
    if not found.ok:
        return Check(name, False, f"{len(evidence)} of {len(found.kinds) * n} outputs differ from baseline's", evidence)
    owners = " and ".join(f"{k}'s" for k in found.kinds)
    return Check(name, True, f"{n} requests: {owners} ids equal baseline's token for token",
                 [f"prompt {i} {p!r}: {found.baseline[i]}" for i, p in enumerate(prompts)][:EXCERPT_LINES])


def _drafting_words(found: judge.Drafting) -> Check:
    t = found.threshold
    lines = found.lines[-EXCERPT_LINES:]
    if found.why == DraftingWhy.UNAVAILABLE:
        return Check(DRAFTING, None, f"the adaptive arm uses {found.mechanism}, whose server logs no transition "
                                     "lines: this evidence is unavailable")
    if found.why == DraftingWhy.NO_THRESHOLD:
        return Check(DRAFTING, False, "the adaptive server reports no threshold", lines)
    assert t is not None
    if found.why == DraftingWhy.CAPPED:
        return Check(DRAFTING, None, f"the adaptive arm's threshold {t} is not below its max_running_requests "
                                     f"{found.max_running}: no running batch can exceed it, so the arm drafts at "
                                     "every load and there is no switch to show; a threshold below it (`tune "
                                     "--write` sets one) makes this checkable", lines)
    if found.why == DraftingWhy.NO_LINES:
        if found.native:
            why = "no 'steps N -> 0' switch line in the adaptive server's log during the check"
        else:
            why = ("no transition line in the adaptive server's log during the check" if not found.seen_any else
                   f"no 'drafting off' line with a running batch above {t}")
        return Check(DRAFTING, False, why + f" ({t + 2} requests were sent at once)", lines)
    if found.why == DraftingWhy.NONE_ABOVE:
        return Check(DRAFTING, False, f"drafting went off only at running batches <= {t}: {found.off_batches}", lines)
    if found.why == DraftingWhy.NEVER_BACK:
        return Check(DRAFTING, False, f"drafting went off (batch {found.off_batch}) but never came back on at a "
                                      f"batch <= {t}", lines)
    if found.native:
        return Check(DRAFTING, True, f"SGLang's tiers: 0 steps at running batch {found.off_batch} > {t}, drafting "
                                     f"again at {found.on_batch} <= {t}", lines)
    return Check(DRAFTING, True, f"off at running batch {found.off_batch} > {t}, on again at "
                                 f"{found.on_batch} <= {t}", lines)


def transitions_check(text: str, threshold: int | None) -> Check:
    """The patch's transition lines in a log span, judged and worded."""
    return _drafting_words(judge.transitions(text, threshold))


def drafting_check(adaptive: ServerState, log: str | None, threshold: int | None,
                   max_running: int | None = None) -> Check:
    """The adaptive arm's drafting evidence (its log span; None where its mechanism logs none,
    or where `max_running`, the server's max_running_requests, leaves no batch above the
    threshold)."""
    found = judge.drafting(adaptive.mechanism == NATIVE_MECHANISM, adaptive.mechanism, adaptive.log_path, log,
                           threshold, max_running)
    check = _drafting_words(found)
    if log is not None:
        check.evidence = [f"log: {adaptive.log_path}", *check.evidence]
    return check


def accept_check(result: Verification, accepted: dict[str, Acceptance]) -> Check:
    """Each speculative arm accepted drafted tokens in the requests it answered alone (its
    requests' own `spec_verify_ct`, or vLLM's /metrics counters over them): an arm whose
    drafts are never accepted is the target plus wasted work, a draft model that does not
    fit it or a broken accept path."""
    found = judge.accepted(accepted, {k: result.arms[k].get("server_accept_length") for k in accepted
                                      if k in result.arms})
    shown, brief = [], []
    for kind in found.kinds:
        a, server = found.figures[kind], found.server.get(kind)
        brief.append(f"{kind}: accept length {a.accept_length if a.accept_length is not None else 'not reported'}")
        shown.append(f"{brief[-1]} ({a.tokens} tokens of {a.requests} requests in {a.verify_steps} verify steps, "
                     f"{a.accepted_drafts} drafted tokens accepted); /server_info "
                     f"{f'{server:.3f}' if isinstance(server, float) else 'not reported'}")
    if found.ok is False:
        return Check(ACCEPTED, False, f"{' and '.join(found.none)} accepted none of its drafted tokens: its draft "
                                      "model does not fit the target, or its accept path is broken", shown)
    if found.ok is None:
        return Check(ACCEPTED, None, "a speculative arm's replies carry no `spec_verify_ct` and its server counts "
                                     "no drafts on /metrics", shown)
    return Check(ACCEPTED, True, "; ".join(brief), shown)


def resumed_check(result: Verification, adaptive: ServerState, log: str | None, steps: int = RESUMED_STEPS,
                  cold_switch: str | None = None) -> Check:
    """The adaptive arm's acceptance right after drafting resumed, per off stretch (the
    stretches go into verify.json's adaptive arm). `cold_switch`: the engine's variable the
    arm's env sets to skip its drafting-off steps' draft extend (it then resumes cold)."""
    found = judge.resumed(adaptive.mechanism, log, result.threshold, steps, cold=cold_switch is not None)
    if found.why == ResumedWhy.UNAVAILABLE:
        return Check(RESUMED, None, f"the adaptive arm uses {adaptive.mechanism}, whose server logs no transition "
                                    "lines: this evidence is unavailable")
    result.arms["adaptive"]["off_stretches"] = [s.to_dict() for s in found.stretches]
    shown = [stretch_line(s) for s in found.stretches]
    if found.why == ResumedWhy.NO_FIGURES:
        return Check(RESUMED, None, "the adaptive server's `Decode batch` lines carry no accept length on both sides "
                                    "of an off stretch (SGLang logs one every 40 steps unless launched with "
                                    "`--decode-log-interval 1`)", shown)
    if found.why == ResumedWhy.COLD:
        return Check(RESUMED, None, f"{found.low} of {found.measured} off stretches resumed below {RESUME_FLOOR}x "
                                    f"the accept length before drafting stopped, as the adaptive arm's "
                                    f"{cold_switch}=1 has it: its drafting-off steps skipped the draft extend, so "
                                    "drafting resumed cold; a warm resume is not this arm's to show", shown)
    if found.why == ResumedWhy.LOW:
        return Check(RESUMED, False, f"{found.low} of {found.measured} off stretches resumed below {RESUME_FLOOR}x "
                                     "the accept length before drafting stopped: a draft KV cache left stale while "
                                     "drafting was off shows so", shown)
    return Check(RESUMED, True, f"{found.measured} off stretch(es): the first {steps} steps after drafting resumed "
                                f"accept at least {RESUME_FLOOR}x as many tokens as before it stopped (within the "
                                "steps' noise)", shown)


def stretch_line(s: OffStretch) -> str:
    def mean(xs: tuple[float, ...]) -> str:
        return f"{statistics.fmean(xs):.2f} ({len(xs)} steps)" if xs else "none logged"
    on = f"on at running batch {s.on_batch}" if s.on_batch is not None else "never back on"
    ratio = f": {s.ratio:.2f}x" if s.ratio is not None else ""
    if s.ratio is not None and s.ratio_bound is not None and s.ratio_bound != s.ratio:
        ratio += f" (at most {s.ratio_bound:.2f}x within two standard errors)"
    return (f"off at running batch {s.off_batch}, {on}; accept length before {mean(s.before)}, "
            f"after {mean(s.after)}{ratio}")


def infos_check(result: Verification, arms: dict[str, dict[str, Any]], errors: list[str]) -> Check:
    """Every arm's /server_info (the keys that matter), and one engine version across them;
    the arms' facts go into the report's arms."""
    result.arms.update(arms)
    found = judge.infos(arms, errors)
    evidence = [f"{kind} ({a['name']}, port {a['port']}, {a['mechanism']}): {json.dumps(a['info'], sort_keys=True)}"
                for kind, a in arms.items()]
    title = " / ".join(found.engines)
    count = NUMBERS.get(found.arms, str(found.arms))
    name = f"/server_info of the {count} arms"
    if found.errors:
        return Check(name, False, "; ".join(found.errors), evidence)
    if not found.ok:
        return Check(name, False, f"the arms answer as different {title} versions: {found.versions}", evidence)
    return Check(name, True, f"all {count} answer, {title} {found.version}", evidence)


# ----------------------------------------------------------------------------- the whole report

def verification(m: Measurement) -> Verification:
    """Every check of one host's measurement, judged and worded, in the order verify.md lists them."""
    result = Verification(host=m.host, specops_version=m.specops_version, prompts=m.prompts,
                          max_new_tokens=m.max_new_tokens)
    result.checks.append(infos_check(result, m.arms, m.info_errors))
    result.threshold = m.threshold
    result.device = m.device
    if m.request_errors:
        result.checks.append(Check("greedy requests", False, "requests failed", m.request_errors))
    else:
        kinds = list(m.accepted)
        result.checks.append(identity_check("greedy token identity at concurrency 1",
                                            m.single + [f"{m.single[0]} (alone again, after the batch)"],
                                            {k: m.alone[k] + m.again[k] for k in kinds}))
        result.checks.append(identity_check(f"greedy token identity at concurrency {len(m.jobs)} (above the "
                                            f"threshold)", [f"{p} ({n} tokens)" for p, n in m.jobs], m.at_once))
    cap = m.arms.get("adaptive", {}).get("info", {}).get("max_running_requests")
    result.checks.append(drafting_check(m.adaptive, m.log, m.threshold,
                                        cap if isinstance(cap, int) and not isinstance(cap, bool) else None))
    for kind in [k for k in m.accepted if k != "baseline"]:
        result.arms[kind]["acceptance"] = m.accepted[kind].to_dict()
        result.arms[kind]["server_accept_length"] = m.server_accept.get(kind)
    if not m.request_errors:
        result.checks.append(accept_check(result, m.accepted))
        result.checks.append(resumed_check(result, m.adaptive, m.log, m.resume_steps, m.cold_resume_switch))
    return result


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
