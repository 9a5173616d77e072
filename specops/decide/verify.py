"""`specops verify`'s verdicts: what bench/acceptance.py measured on the host's arms, judged
check by check as data (ok True, False, or None where the evidence is unavailable, and the
figures the verdict rests on); report/verify.py says them in words and writes verify.md.

- identity: greedy `output_ids` of each speculative arm equal baseline's, per prompt;
- drafting: the adaptive server's log shows drafting off at a running batch above its
  threshold and on again at or below it (the patch's transition lines, or SGLang's native
  `steps N -> 0` switch lines);
- acceptance: each speculative arm accepted drafted tokens;
- resumed: right after drafting resumes the adaptive arm accepts at least RESUME_FLOOR as
  many tokens per step as before it stopped (within the steps' noise), unless the arm skips
  its drafting-off steps' draft extend, which makes it resume cold by design;
- infos: every arm answers `/server_info`, all with one engine version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Protocol, Sequence

from specops.bench.running import OffStretch, off_stretches
from specops.sglang.adaptive import STEP_SWITCH_RE, TRANSITION_RE, parse_transitions

#: the adaptive arm's accept length in its first steps after drafting resumes, at least this
#: share of its accept length before drafting stopped
RESUME_FLOOR = 0.9
#: the speculative kinds whose tokens and acceptance are checked against baseline's
SPECULATIVE = ("eagle3", "adaptive")


class AcceptFigures(Protocol):
    """What an arm's requests were verified and accepted (bench/acceptance.py's `Acceptance`)."""

    requests: int
    tokens: int
    verify_steps: int

    @property
    def accepted_drafts(self) -> int: ...

    @property
    def accept_length(self) -> float | None: ...


@dataclass(frozen=True)
class Difference:
    """The first token at which a speculative arm's ids left baseline's, for one prompt."""

    kind: str
    index: int
    at: int
    want: list[int]
    got: list[int]


@dataclass
class Identity:
    ok: bool
    kinds: list[str]                 # the speculative arms compared
    requests: int                    # prompts per arm
    differences: list[Difference]
    baseline: list[list[int]]        # baseline's ids per prompt


def identity(requests: int, ids: Mapping[str, list[list[int]]]) -> Identity:
    """Per prompt, each speculative arm's ids against baseline's."""
    kinds = [k for k in SPECULATIVE if k in ids]
    diffs = []
    for kind in kinds:
        for i, (want, got) in enumerate(zip(ids["baseline"], ids[kind], strict=True)):
            if want != got:
                at = next((j for j, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                          min(len(want), len(got)))
                diffs.append(Difference(kind, i, at, want, got))
    return Identity(not diffs, kinds, requests, diffs, list(ids["baseline"]))


class DraftingWhy(Enum):
    UNAVAILABLE = "unavailable"          # the mechanism's server logs no transition lines
    NO_THRESHOLD = "no_threshold"        # the adaptive server reports no threshold
    NO_LINES = "no_lines"                # no transition (or switch-to-0) line during the check
    NONE_ABOVE = "none_above"            # drafting went off only at running batches <= threshold
    NEVER_BACK = "never_back"            # off above the threshold, never on again at or below it
    CAPPED = "capped"                    # no switch, and the threshold is not below max running requests
    SWITCHED = "switched"                # off above, on again at or below: the check passes


@dataclass
class Drafting:
    ok: bool | None
    why: DraftingWhy
    native: bool                         # SGLang's own switch lines, not the patch's transition lines
    threshold: int | None
    lines: list[str]                     # the log's transition (or switch) lines
    off_batch: int | None = None
    on_batch: int | None = None
    off_batches: list[int] = field(default_factory=list)  # native: every batch drafting went off at
    seen_any: bool = False               # the patch's reader found some transition line
    max_running: int | None = None       # the server's max_running_requests, where it says
    mechanism: str = ""
    log_path: str | None = None


def transitions(text: str, threshold: int | None) -> Drafting:
    """The patch's lines: drafting off at a running batch above the threshold, and on again
    at or below it later."""
    lines = [ln for ln in text.splitlines() if TRANSITION_RE.search(ln)]
    found = parse_transitions(text)
    if threshold is None:
        return Drafting(False, DraftingWhy.NO_THRESHOLD, False, threshold, lines)
    off = next((i for i, t in enumerate(found) if not t.drafting and t.batch > threshold), None)
    if off is None:
        return Drafting(False, DraftingWhy.NO_LINES, False, threshold, lines, seen_any=bool(found))
    on = next((i for i, t in enumerate(found[off:], off) if t.drafting and t.batch <= threshold), None)
    if on is None:
        return Drafting(False, DraftingWhy.NEVER_BACK, False, threshold, lines, found[off].batch)
    return Drafting(True, DraftingWhy.SWITCHED, False, threshold, lines, found[off].batch, found[on].batch)


def switches(text: str, threshold: int | None) -> Drafting:
    """SGLang's native tiers: a switch to 0 steps at a running batch above the threshold (the
    next decode line's), and back to drafting later, at or below it (off_stretches)."""
    lines = [ln for ln in text.splitlines() if STEP_SWITCH_RE.search(ln)]
    if threshold is None:
        return Drafting(False, DraftingWhy.NO_THRESHOLD, True, threshold, lines)
    stretches = off_stretches(text, threshold)
    if not stretches:
        return Drafting(False, DraftingWhy.NO_LINES, True, threshold, lines)
    wide = next((s for s in stretches if s.off_batch > threshold), None)
    if wide is None:
        return Drafting(False, DraftingWhy.NONE_ABOVE, True, threshold, lines,
                        off_batches=[s.off_batch for s in stretches])
    if wide.on_batch is None:
        return Drafting(False, DraftingWhy.NEVER_BACK, True, threshold, lines, wide.off_batch)
    return Drafting(True, DraftingWhy.SWITCHED, True, threshold, lines, wide.off_batch, wide.on_batch)


def drafting(native: bool, mechanism: str, log_path: str, log: str | None, threshold: int | None,
             max_running: int | None = None) -> Drafting:
    """The drafting evidence of the adaptive arm's log span (None: its mechanism logs none;
    `native`: SGLang's own tiers, whose switch lines are read instead of the patch's). Where
    it shows no switch and the threshold is not below the server's `max_running` requests, no
    running batch could exceed it: nothing to show either way (ok None), not a failure."""
    if log is None:
        return Drafting(None, DraftingWhy.UNAVAILABLE, native, threshold, [], mechanism=mechanism, log_path=log_path)
    found = switches(log, threshold) if native else transitions(log, threshold)
    found.mechanism, found.log_path, found.max_running = mechanism, log_path, max_running
    if (found.why == DraftingWhy.NO_LINES and threshold is not None and max_running is not None
            and threshold >= max_running):
        found.ok, found.why = None, DraftingWhy.CAPPED
    return found


@dataclass
class Accepted:
    ok: bool | None                      # None: a speculative arm's acceptance is not reported
    kinds: list[str]
    none: list[str]                      # arms that accepted no drafted token
    figures: dict[str, AcceptFigures]
    server: dict[str, Any]               # /server_info's accept length per arm (None: not reported)


def accepted(figures: Mapping[str, AcceptFigures], server: Mapping[str, Any]) -> Accepted:
    """Each speculative arm accepted drafted tokens in the requests it answered alone: an arm
    whose drafts are never accepted is the target plus wasted work."""
    kinds = [k for k in SPECULATIVE if k in figures]
    none = [k for k in kinds if figures[k].accept_length is not None and figures[k].accepted_drafts == 0]
    ok: bool | None = True
    if none:
        ok = False
    elif any(figures[k].accept_length is None for k in kinds):
        ok = None
    return Accepted(ok, kinds, none, {k: figures[k] for k in kinds}, {k: server.get(k) for k in kinds})


class ResumedWhy(Enum):
    UNAVAILABLE = "unavailable"          # the mechanism's server logs no transition lines
    NO_FIGURES = "no_figures"            # no accept length on both sides of an off stretch
    LOW = "low"                          # some stretch resumed below RESUME_FLOOR, beyond the noise
    COLD = "cold"                        # ... where the arm skips the draft extend while off: by design
    KEPT = "kept"                        # every measured stretch kept its acceptance


@dataclass
class Resumed:
    ok: bool | None
    why: ResumedWhy
    steps: int
    stretches: list[OffStretch]
    measured: int = 0
    low: int = 0
    mechanism: str = ""


def resumed(mechanism: str, log: str | None, threshold: int | None, steps: int, cold: bool = False) -> Resumed:
    """The adaptive arm's accept length in its first `steps` steps after drafting resumed,
    against its accept length before drafting stopped, per off stretch, from its own decode
    lines. A stretch fails when even two standard errors above its after-mean stay below
    RESUME_FLOOR of the before-mean: a real head's per-step acceptance varies, and a check
    that fails on that noise is one users learn to ignore. `cold`: the arm skips its
    drafting-off steps' draft extend, so its draft state is stale when drafting resumes (its
    first step drafts from zeros): a low stretch is that setting's cost, not judged a failure."""
    if log is None:
        return Resumed(None, ResumedWhy.UNAVAILABLE, steps, [], mechanism=mechanism)
    stretches = off_stretches(log, threshold or 0, steps)
    measured = [s for s in stretches if s.ratio is not None]
    if not measured:
        return Resumed(None, ResumedWhy.NO_FIGURES, steps, stretches, mechanism=mechanism)
    low = [s for s in measured if s.ratio_bound is not None and s.ratio_bound < RESUME_FLOOR]
    if low and cold:
        return Resumed(None, ResumedWhy.COLD, steps, stretches, len(measured), len(low), mechanism)
    if low:
        return Resumed(False, ResumedWhy.LOW, steps, stretches, len(measured), len(low), mechanism)
    return Resumed(True, ResumedWhy.KEPT, steps, stretches, len(measured), 0, mechanism)


@dataclass
class Infos:
    ok: bool
    arms: int                            # how many arms were asked
    errors: list[str]                    # the arms whose /server_info failed, with the error
    versions: list[str]                  # the versions the arms answer (sorted, as text)
    engines: list[str]                   # the engines' titles (sorted)
    version: Any = None                  # the one version, where they agree


def infos(arms: Mapping[str, Mapping[str, Any]], errors: Sequence[str]) -> Infos:
    """Every arm's /server_info answered, and all with one version."""
    versions = {a["info"].get("version") for a in arms.values()}
    engines = sorted({str(a["engine"]) for a in arms.values()})
    shown = sorted(map(str, versions))
    if errors:
        return Infos(False, len(arms), list(errors), shown, engines)
    if len(versions) != 1 or None in versions:
        return Infos(False, len(arms), [], shown, engines)
    return Infos(True, len(arms), [], shown, engines, versions.pop())
