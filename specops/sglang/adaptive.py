"""The adaptive arm's native config (SGLang >= 0.5.14) and the threshold it really gives.

SGLang routes a running batch of size b to an adaptive tier by first padding b up to its
CUDA-graph capture bucket (bisect_left over the bucket list), then taking the tier with
the largest key <= padded size (`AdaptiveSpeculativeParams._route` in
srt/speculative/adaptive_spec_params.py). A two-tier config {"1": [steps], "K": [0]}
therefore speculates exactly for the batches whose padded size is < K. We put K just past
the bucket that the threshold pads to, so every batch at or below the threshold still
speculates, and report that bucket as the effective threshold.

Only a server with decode CUDA graphs pads: with them off (`--disable-cuda-graph`, as on a
CPU host) SGLang gives its router no bucket list (`init_states(cuda_graph_bs=None)` in
eagle_worker_v2) and routes by the running batch itself, so K is the threshold + 1.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from typing import Any, Mapping

from specops import pysource


#: SGLang's speculative capture list (0.5.4 .. 0.5.14 `_generate_*cuda_graph_batch_sizes`,
#: the `else:` branch for speculative_algorithm set), used when the tree's own source
#: cannot be read.
def default_spec_buckets(max_bs: int) -> list[int]:
    bs = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
          + list(range(72, 257, 8)) + list(range(272, max_bs + 1, 16)))
    return _finish(bs, max_bs)


def _finish(bs: list[int], max_bs: int) -> list[int]:
    out = sorted({b for b in bs if 0 < b <= max_bs})
    if max_bs not in out:
        out.append(max_bs)
    return out


class _Unsupported(Exception):
    pass


def _eval(node: ast.AST, max_bs: int) -> object:
    """Evaluate the tiny expression language of the bucket lists: int literals, lists,
    range(), +, and the max-bs name. Anything else is unsupported (fall back)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.List):
        return [_eval(e, max_bs) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = _eval(node.left, max_bs), _eval(node.right, max_bs)
        if isinstance(node.op, ast.Add):
            return a + b  # type: ignore[operator]
        if isinstance(node.op, ast.Sub):
            return a - b  # type: ignore[operator]
        return a * b  # type: ignore[operator]
    if isinstance(node, ast.Name) and node.id == "max_bs":
        return max_bs
    if isinstance(node, ast.Attribute) and node.attr in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        return max_bs
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_eval(a, max_bs) for a in node.args]
        ints = [a for a in args if isinstance(a, int)]
        if node.func.id == "range" and len(ints) == len(args):
            return list(range(*ints))
        if node.func.id == "list" and len(args) == 1 and isinstance(args[0], list):
            return args[0]
    raise _Unsupported(ast.dump(node)[:80])


def buckets_from_source(source: str, max_bs: int) -> list[int] | None:
    """The speculative CUDA-graph bucket list as the tree's own source builds it (the `else`
    branch after `if <args>.speculative_algorithm is None` in `*cuda_graph_batch_sizes`:
    server_args.py up to 0.5.18, arg_groups/cuda_graph_hook.py since), or None when the
    source has no such function or it uses constructs we do not evaluate."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return None
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and "cuda_graph_batch_sizes" in fn.name
                and "cpu" not in fn.name and "compile" not in fn.name):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.If):
                continue
            t = node.test
            if (isinstance(t, ast.Compare) and isinstance(t.left, ast.Attribute)
                    and t.left.attr == "speculative_algorithm"
                    and isinstance(t.ops[0], ast.Is)):
                for stmt in node.orelse:
                    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                            and isinstance(stmt.targets[0], ast.Name)
                            and stmt.targets[0].id == "capture_bs"):
                        try:
                            value = _eval(stmt.value, max_bs)
                        except (_Unsupported, TypeError):
                            return None
                        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
                            return _finish(value, max_bs)
    return None


@dataclass
class AdaptivePlan:
    """The generated config and what it means at run time."""

    config: dict[str, dict[str, Any]]  # the JSON given to --speculative-adaptive-config
    threshold: int  # what the user asked for
    effective_threshold: int  # largest batch size that still speculates
    buckets: list[int]
    buckets_source: str  # the tree file they were read from, or "default"

    def note(self) -> str:
        if not self.buckets:   # no padding: CUDA graphs off
            return (f"speculates at running batch <= {self.threshold} (CUDA graphs off: SGLang routes by the "
                    f"running batch itself, unpadded)")
        if self.effective_threshold == self.threshold:
            return f"speculates at running batch <= {self.threshold} (a CUDA-graph bucket)"
        return (f"threshold {self.threshold} pads to CUDA-graph bucket {self.effective_threshold}: "
                f"speculates at running batch <= {self.effective_threshold}")


#: SGLang's switches that turn decode CUDA graphs off (0.5.14: the first; later releases
#: add the per-phase ones); any of them leaves the adaptive router unpadded
GRAPHS_OFF_SWITCHES = ("disable_cuda_graph", "disable_decode_cuda_graph")
GRAPHS_OFF_BACKEND = ("cuda_graph_backend_decode", "disabled")


#: SGLang's switch (0.5.14+, srt/environ.py, read in eagle_worker_v2) that skips the draft extend of
#: a zero-step decode: the draft's KV cache then goes stale while drafting is off. The
#: dynamic-spec-disable patch (0.4.10-0.5.13) reads it too, for its drafting-off steps
SKIP_ZERO_STEP_EXTEND = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"


def decode_graphs_off(args: Mapping[str, Any]) -> bool:
    """Whether server args (`launchargs.args_from_argv` form) turn decode CUDA graphs off,
    so SGLang's adaptive router routes by the running batch itself, unpadded."""
    if any(args.get(name) in (True, "True", "true", 1) for name in GRAPHS_OFF_SWITCHES):
        return True
    name, value = GRAPHS_OFF_BACKEND
    return str(args.get(name, "")).lower() == value


def pad_to_bucket(batch_size: int, buckets: list[int]) -> int:
    """SGLang's `_pad_to_cuda_graph_bs`: the smallest bucket >= batch_size (itself past the end)."""
    idx = bisect.bisect_left(buckets, batch_size)
    return buckets[idx] if idx < len(buckets) else batch_size


def route_steps(config: Mapping[str, Mapping[str, Any]], batch_size: int,
                buckets: list[int]) -> list[int]:
    """Candidate steps SGLang would use at `batch_size` (mirrors `_route`); for tests and reports."""
    keys = sorted(int(k) for k in config if k.isdigit())
    padded = pad_to_bucket(batch_size, buckets)
    idx = max(0, bisect.bisect_right(keys, padded) - 1)
    return list(config[str(keys[idx])]["candidate_steps"])


def buckets_from_sources(sources: Mapping[str, str], max_bs: int) -> tuple[list[int], str]:
    """The capture list from the first of `sources` ({tree path: text}) that builds it,
    with that path; SGLang's documented default list and "default" when none does."""
    for path, text in sources.items():
        buckets = buckets_from_source(text, max_bs)
        if buckets is not None:
            return buckets, path
    return default_spec_buckets(max_bs), "default"


def _buckets(sources: Mapping[str, str] | str | None, max_bs: int, graphs: bool) -> tuple[list[int], str]:
    """The list SGLang's router pads to and where it came from: an empty one (every batch routes
    as itself) without decode CUDA graphs."""
    if not graphs:
        return [], "none (CUDA graphs off)"
    if isinstance(sources, str):
        sources = {"server_args.py": sources}
    return buckets_from_sources(sources or {}, max_bs)


def adaptive_config(threshold: int, num_steps: int, max_bs: int,
                    sources: Mapping[str, str] | str | None = None, *, graphs: bool = True) -> AdaptivePlan:
    """Two tiers: `num_steps` for batches padding to <= bucket(threshold), 0 steps above.
    `sources` are the tree files that may build the capture list (a bare text: server_args.py);
    `graphs` False: the server runs without decode CUDA graphs, so nothing pads."""
    buckets, source = _buckets(sources, max_bs, graphs)
    effective = pad_to_bucket(threshold, buckets)
    tier = {"up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
    config = {
        "1": {"candidate_steps": [num_steps], **tier},
        str(effective + 1): {"candidate_steps": [0], **tier},
    }
    return AdaptivePlan(config, threshold, effective, buckets, source)


@dataclass
class TierPlan:
    """A measured tier config: from each running batch size up, the draft steps to run."""

    config: dict[str, dict[str, Any]]  # the JSON given to --speculative-adaptive-config
    tiers: dict[int, list[int]]
    effective_threshold: int | None  # largest batch that still drafts while all smaller ones do
    buckets: list[int]

    def note(self) -> str:
        shown = ", ".join(f"{b}+: {'/'.join(str(s) for s in steps)}" for b, steps in self.tiers.items())
        return f"measured tiers (running batch: draft steps) {shown}"


def tier_config(tiers: dict[int, list[int]], max_bs: int,
                sources: Mapping[str, str] | str | None = None, *,
                launch_steps: int | None = None, max_batch: int | None = None, graphs: bool = True) -> TierPlan:
    """The `--speculative-adaptive-config` for `tiers`: each key is where a tier starts in
    running-batch units; SGLang routes by the padded batch, so a tier starting at b gets the
    key bucket(b - 1) + 1 (every batch below b keeps the tier before). `sources` and `graphs`
    as for `adaptive_config`.

    `launch_steps` (the server's `--speculative-num-steps`) is listed in the config whatever
    the tiers say: SGLang sizes its draft-token buffers by the largest candidate step and
    starts on the launch's step count, so `{"1": [0]}` under `--speculative-num-steps 2`
    does not start. Where no tier lists it, it goes in a tier keyed above `max_batch` (the
    largest padded batch the server can form), which no batch reaches."""
    buckets, _ = _buckets(sources, max_bs, graphs)
    tier = {"up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
    config: dict[str, dict[str, Any]] = {}
    for start, steps in sorted(tiers.items()):
        key = 1 if start <= 1 else pad_to_bucket(start - 1, buckets) + 1
        config[str(key)] = {"candidate_steps": list(steps), **tier}
    effective = None
    for b in range(1, max(max_bs, max(tiers)) + 1):
        if max(route_steps(config, b, buckets)) == 0:
            break
        effective = b
    else:
        effective = None
    if launch_steps is not None and not any(launch_steps in t["candidate_steps"] for t in config.values()):
        above = max(max_batch or 0, max_bs, *buckets, *(int(k) for k in config)) + 1
        config[str(above)] = {"candidate_steps": [launch_steps], **tier}
    return TierPlan(config, dict(sorted(tiers.items())), effective, buckets)


# --------------------------------------------------------------------------- transition lines

#: What a server patched with `dynamic-spec-disable` (and the simulator) logs when a decode
#: batch first crosses `--speculative-disable-batch-threshold`, in either direction; never per
#: step. The patch set writes these same format strings into the tree (a unit test holds them
#: equal); SGLang's logger puts its `[time]` (or `[time TPn]`) prefix in front.
DRAFTING_OFF_LINE = "specops adaptive: drafting off (running batch {batch} > threshold {threshold})"
DRAFTING_ON_LINE = "specops adaptive: drafting on (running batch {batch} <= threshold {threshold})"
TRANSITION_RE = re.compile(r"specops adaptive: drafting (?P<state>on|off) \(running batch (?P<batch>\d+) "
                           r"(?:>|<=) threshold (?P<threshold>-?\d+)\)")


#: What such a server's `Decode batch` line says of the steps since the previous line: in place
#: of SGLang's accept figures when every one decoded through the one-token verify (SGLang
#: would count it as a speculative step and divide by the draft-token count), and after them
#: when only some did. The patch set writes these strings too (a unit test holds them equal).
ALL_OFF_NOTE = "drafting off (one-token verify, no accept figures), "
MIXED_NOTE = "specops drafting off: {off} of {steps} steps, "
MIXED_RE = re.compile(r"specops drafting off: (?P<off>\d+) of (?P<steps>\d+) steps")


def decode_line_note(off: int, steps: int) -> str | None:
    """The note for a `Decode batch` line over `steps` decode steps, `off` of them without
    drafting: None when all drafted (the line stays as SGLang writes it)."""
    if off <= 0:
        return None
    return ALL_OFF_NOTE if off >= steps else MIXED_NOTE.format(off=off, steps=steps)


@dataclass(frozen=True)
class Transition:
    """One transition line: drafting switched on or off at a running batch of `batch`."""

    drafting: bool
    batch: int
    threshold: int


def transition_line(drafting: bool, batch: int, threshold: int) -> str:
    return (DRAFTING_ON_LINE if drafting else DRAFTING_OFF_LINE).format(batch=batch, threshold=threshold)


def parse_transitions(log: str) -> list[Transition]:
    """Every transition line in a server log, in order."""
    return [Transition(m["state"] == "on", int(m["batch"]), int(m["threshold"])) for m in TRANSITION_RE.finditer(log)]


# --------------------------------------------------------------------------- native step switches

#: What SGLang's own adaptive speculation (>= 0.5.14, `--speculative-adaptive`) logs when its
#: EAGLE worker moves to another tier's step count (`EAGLEWorkerV2.apply_runtime_state`),
#: verbatim after the logger's `[time]` prefix, e.g.
#: `Switch adaptive runtime state: steps 2 -> 0, draft_tokens 3 -> 1`. Logged on a change
#: only, never per step; "-> 0" is the zero-step tier of specops' config (drafting off).
STEP_SWITCH_RE = re.compile(r"Switch adaptive runtime state: steps (?P<old>\d+) -> (?P<new>\d+), "
                            r"draft_tokens (?P<old_tokens>\d+) -> (?P<new_tokens>\d+)")


@dataclass(frozen=True)
class StepSwitch:
    """One native switch line: the worker went from `old` draft steps to `new`."""

    old: int
    new: int
    old_tokens: int
    new_tokens: int

    @property
    def drafting(self) -> bool:
        """Whether the worker drafts after the switch (a zero-step tier does not)."""
        return self.new > 0


def parse_step_switches(log: str) -> list[StepSwitch]:
    """Every native step-switch line in a server log, in order."""
    return [StepSwitch(int(m["old"]), int(m["new"]), int(m["old_tokens"]), int(m["new_tokens"]))
            for m in STEP_SWITCH_RE.finditer(log)]



#: SGLang's native adaptive lines as it words them (adaptive_spec_params.py, eagle_worker_v2.py
#: apply_runtime_state, 0.5.14): the simulator logs these, the readers below parse them
NATIVE_START_LINE = "AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps={candidates}"
STEP_SWITCH_LINE = "Switch adaptive runtime state: steps {old} -> {new}, draft_tokens {old_tokens} -> {new_tokens}"
#: SGLang's native adaptive start line (0.5.14+): the step count of its first tier
NATIVE_START_RE = re.compile(r"AdaptiveSpeculativeParams initialized: steps=(?P<new>\d+)")
#: fixed text of every line that says a drafting state (patch transitions, native start and
#: switches): what a host-side grep keeps beside the decode lines
DRAFTING_STATE_TEXTS = ("specops adaptive: drafting", "Switch adaptive runtime state",
                        "AdaptiveSpeculativeParams initialized")


def drafting_state(line: str) -> tuple[bool, bool] | None:
    """(drafting from here on, whether the line is a switch) for a line that says a drafting
    state: the patch's transition lines, SGLang's native switch lines (0 steps: off) and its
    start line (not a switch); None for any other line."""
    m = TRANSITION_RE.search(line)
    if m:
        return m["state"] == "on", True
    m = STEP_SWITCH_RE.search(line)
    if m:
        return int(m["new"]) > 0, True
    m = NATIVE_START_RE.search(line)
    if m:
        return int(m["new"]) > 0, False
    return None
