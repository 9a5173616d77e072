"""The simulator's performance model: one place for every constant, and pure predictions.

Calibrated on the observation this project starts from: at high concurrency the baseline
saturates near 773 output tok/s and EAGLE-3 near 354 tok/s, while at concurrency 1 EAGLE-3
is ahead (here about 2x). A decode step costs `STEP_MS + STEP_MS_PER_REQ * batch` model-ms
and is never faster than the arm's compute ceiling allows (a roofline), so throughput rises
with the batch and then flattens at the ceiling. Baseline emits 1 token per request per step;
EAGLE-3 emits its accept length (about 3 at batch 1, slowly falling) at a higher step cost.
Adaptive speculates while the running batch is at or below its threshold and otherwise runs
as the baseline minus a small tax.

Context length: a decode step also reads every running request's KV cache (attention),
which is memory-bound and costs the same whether the step verifies 1 token or k+1, so long
contexts make a plain step dearer while speculation spreads the read over its accept length:
the crossover moves to larger batches (MagicDec, Chen et al. 2024, arXiv:2408.11049). The
calibrated per-request cost already covers CONTEXT_FREE_TOKENS of context per request; each
KV token beyond that adds KV_MS_PER_TOKEN to the step (`context_ms`), so runs at the usual
short lengths (input + output <= 512) are exactly as before.

Time: every duration here is *model* time. The server sleeps `model_seconds * time_scale`
of wall time, so a client measuring wall time converts with `to_model_seconds` /
`to_model_throughput` (the server reports `sim_time_scale` in /server_info).
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

Arm = Literal["baseline", "eagle3", "adaptive"]

# ---------------------------------------------------------------- calibration (model units)
BASELINE_STEP_MS = 8.7  # fixed cost of one decode step (weights read once)
BASELINE_STEP_MS_PER_REQ = 1.15  # extra cost per running request
BASELINE_CEILING_TOK_S = 773.0  # compute ceiling: output tok/s the baseline saturates at

EAGLE_STEP_MS = 11.3  # draft + verify of one speculative step
EAGLE_STEP_MS_PER_REQ = 3.0  # verify work grows faster with the batch
EAGLE_CEILING_TOK_S = 354.0  # EAGLE-3 saturation (output tok/s)
EAGLE_ACCEPT_LEN_BS1 = 3.0  # mean tokens emitted per request per step at batch 1
EAGLE_ACCEPT_DECAY_PER_DOUBLING = 0.08  # accept length lost per doubling of the batch
EAGLE_ACCEPT_LEN_FLOOR = 2.4
DEFAULT_SPEC_NUM_STEPS = 3  # SGLang's usual EAGLE-3 choice; accept length <= steps + 1

ADAPTIVE_TAX = 0.03  # adaptive above threshold = baseline throughput * (1 - tax)

SPEC_DEFAULT_MAX_RUNNING = 48  # SGLang resets speculative servers to 48 unless the flag is set
BASELINE_DEFAULT_MAX_RUNNING = 2048  # what the KV pool would allow for a small model
DEFAULT_MAX_TOTAL_TOKENS = 400_000  # KV cache size, for the "token usage" figure only

# context (attention over the KV cache): Llama-3.1-8B reads 128 KiB of KV per token (32 layers x
# 8 KV heads x 128 dims x K and V x 2 bytes) against 16 GB of weights per step, whose read is
# the fixed step cost above: 8.7 ms x 128 KiB / 16 GB
KV_MS_PER_TOKEN = BASELINE_STEP_MS * 131072 / 16.06e9
CONTEXT_FREE_TOKENS = 512  # context per request the calibrated per-request cost already includes
DRAFT_KV_SHARE = 1 / 32  # an EAGLE-3 draft step reads its 1 layer's KV: 1/32 of the target's

PREFILL_STEP_MS = 4.0  # one prefill (extend) batch: fixed + per input token
PREFILL_MS_PER_TOKEN = 0.02

NOISE_REL = 0.03  # std-dev of the slow step-time drift (redrawn every log interval)
DECODE_LOG_INTERVAL = 40  # decode steps between "Decode batch" lines, as SGLang's default

DEFAULT_TIME_SCALE = 1.0
LOAD_SECONDS = 0.3  # wall seconds of simulated weight loading (503 on /health meanwhile)



@dataclass(frozen=True)
class ModelParams:
    """The model's knobs in one value: the constants above by default (the demo's simulated
    GPU), or a model fitted to a real engine's run (`specops calibrate`, decide/calibrate.py)
    and handed to a sim host as `sim: {model: FILE}` (sim/modelfile.py reads it).

    The EAGLE figures are those of `spec_steps` draft steps: a server running other step
    counts scales from them as accept_length and step_ms say."""

    baseline_step_ms: float = BASELINE_STEP_MS
    baseline_step_ms_per_req: float = BASELINE_STEP_MS_PER_REQ
    baseline_ceiling_tok_s: float = BASELINE_CEILING_TOK_S
    eagle_step_ms: float = EAGLE_STEP_MS
    eagle_step_ms_per_req: float = EAGLE_STEP_MS_PER_REQ
    eagle_ceiling_tok_s: float = EAGLE_CEILING_TOK_S
    accept_len_bs1: float = EAGLE_ACCEPT_LEN_BS1
    accept_decay_per_doubling: float = EAGLE_ACCEPT_DECAY_PER_DOUBLING
    accept_len_floor: float = EAGLE_ACCEPT_LEN_FLOOR
    spec_steps: int = DEFAULT_SPEC_NUM_STEPS
    adaptive_tax: float = ADAPTIVE_TAX
    prefill_step_ms: float = PREFILL_STEP_MS
    prefill_ms_per_token: float = PREFILL_MS_PER_TOKEN
    kv_ms_per_token: float = KV_MS_PER_TOKEN
    context_free_tokens: int = CONTEXT_FREE_TOKENS


DEFAULT_PARAMS = ModelParams()


# ---------------------------------------------------------------- per-step model


def chain_alpha(tokens_at_default: float, num_steps: int = DEFAULT_SPEC_NUM_STEPS) -> float:
    """Per-position acceptance rate a of a chain draft emitting `tokens_at_default` per step
    with `num_steps` drafts: solves (1 - a^(k+1)) / (1 - a) = tokens by bisection."""
    target = max(1.0, min(tokens_at_default, num_steps + 1.0 - 1e-9))
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(num_steps + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def accept_length(batch: int, num_steps: int | None = None, at_batch_1: float | None = None,
                  params: ModelParams = DEFAULT_PARAMS) -> float:
    """Mean tokens a speculative step of `num_steps` chain drafts emits per request at this batch.

    `at_batch_1`: a measured accept length at batch 1 for these steps (`--sim-accept-length`,
    to set the simulator beside a real head), falling with the batch as the calibrated one does
    to the same share of itself as the calibrated floor, at most num_steps + 1.

    At SGLang's usual 3 steps this is the calibrated EAGLE-3 figure (3.0 at batch 1, slowly
    falling with the batch). Other step counts follow a chain draft with the same per-position
    acceptance a: (1 - a^(k+1)) / (1 - a) tokens, e.g. a = 0.81 at batch 1 gives 1.8 tokens at
    1 step, 3.0 at 3, 4.3 at 7: more steps keep paying less. (EAGLE-3, Li et al. 2025,
    arXiv:2503.01840, Table 1: LLaMA-Instruct-3.1-8B reaches an average acceptance length of
    about 6-7.5 at temperature 0 with a deep *tree* draft; a chain draft, as SGLang's topk=1
    runs it, accepts less: the public EAGLE3-LLaMA3.1-Instruct-8B head measures 2.8-3.5 with a
    7-token chain at temperature 1, and about 3 at 3 steps in SGLang's own benchmarks.)
    """
    p = params
    decay = p.accept_decay_per_doubling * math.log2(max(1, batch))
    steps = p.spec_steps if num_steps is None else int(num_steps)
    if steps <= 0:
        return 1.0
    if at_batch_1 is not None:
        floor = at_batch_1 * p.accept_len_floor / p.accept_len_bs1
        return max(1.0, min(steps + 1.0, max(floor, at_batch_1 - decay)))
    acc = max(p.accept_len_floor, p.accept_len_bs1 - decay)
    if steps == p.spec_steps:
        return max(1.0, min(acc, steps + 1.0))
    alpha = chain_alpha(acc, p.spec_steps)
    return max(1.0, sum(alpha ** i for i in range(steps + 1)))


def step_ms(speculating: bool, batch: int, accept_len: float = 1.0, tax: float = 0.0,
            num_steps: int | None = None, kv_tokens: int = 0, params: ModelParams = DEFAULT_PARAMS) -> float:
    """Model-ms of one decode step for `batch` running requests (no noise).

    A speculative step with k draft steps costs the baseline step plus k/3 of the calibrated
    3-step overhead (drafting is sequential, verification grows with the k+1 tokens checked);
    its compute roof grows with the tokens verified, (k+1)/4 of the 3-step roof. The KV read
    of a long context (`kv_tokens`, see context_ms) adds to the memory-bound part, not the roof."""
    p = params
    batch = max(1, batch)
    steps = p.spec_steps if num_steps is None else int(num_steps)
    if speculating and steps > 0:
        f = steps / p.spec_steps
        fixed = p.baseline_step_ms + (p.eagle_step_ms - p.baseline_step_ms) * f
        per_req = p.baseline_step_ms_per_req + (p.eagle_step_ms_per_req - p.baseline_step_ms_per_req) * f
        linear = fixed + per_req * batch + context_ms(kv_tokens, batch, steps, p)
        acc3 = accept_length(batch, p.spec_steps, params=p) if steps != p.spec_steps else accept_len
        roof = batch * acc3 * 1000.0 / p.eagle_ceiling_tok_s * (steps + 1) / (p.spec_steps + 1)
    else:
        linear = p.baseline_step_ms + p.baseline_step_ms_per_req * batch + context_ms(kv_tokens, batch, params=p)
        roof = batch * 1000.0 / p.baseline_ceiling_tok_s
    return max(linear, roof) / (1.0 - tax)


def context_ms(kv_tokens: int, batch: int, draft_steps: int = 0, params: ModelParams = DEFAULT_PARAMS) -> float:
    """Model-ms a decode step spends reading KV beyond what the calibrated per-request cost
    covers: `kv_tokens` is the running batch's total context (prompt + generated tokens).
    Verification reads the cache once for its k+1 tokens; each draft step reads its one layer's."""
    extra = max(0, int(kv_tokens) - params.context_free_tokens * max(1, batch))
    return params.kv_ms_per_token * extra * (1.0 + DRAFT_KV_SHARE * max(0, draft_steps))


def prefill_ms(input_tokens: int, params: ModelParams = DEFAULT_PARAMS) -> float:
    """Model-ms of one prefill batch covering `input_tokens` new tokens."""
    return params.prefill_step_ms + params.prefill_ms_per_token * max(0, input_tokens)


# ---------------------------------------------------------------- arms and thresholds


def spec_cuda_graph_bs(max_bs: int = 256) -> list[int]:
    """SGLang's decode CUDA-graph batch sizes for speculative servers (0.5.14 source)."""
    bs = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
    bs += list(range(272, max_bs + 1, 16))
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


@dataclass(frozen=True)
class AdaptiveTiers:
    """An `--speculative-adaptive-config` read the way SGLang's AdaptiveSpeculativeParams does."""

    tiers: dict[int, list[int]]  # batch-size key -> candidate_steps
    cuda_graph_bs: tuple[int, ...] | None = None

    def candidates(self, batch: int) -> list[int]:
        """Pad the batch to a CUDA-graph bucket, take the closest tier at or below: its candidate steps."""
        padded = batch
        if self.cuda_graph_bs:
            i = bisect.bisect_left(self.cuda_graph_bs, batch)
            padded = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch
        keys = sorted(self.tiers)
        key = keys[max(0, bisect.bisect_right(keys, padded) - 1)]
        return sorted(set(self.tiers[key]))

    def steps_for(self, batch: int, initial_steps: int = DEFAULT_SPEC_NUM_STEPS,
                  params: ModelParams = DEFAULT_PARAMS) -> int:
        """The draft steps SGLang's AdaptiveStepSlot settles on for this batch's tier.

        Starts at the launch's num_steps (else the middle candidate) and applies its rule with
        the model's accept length until it stops moving: drop while accepted drafts (accept
        length - 1) <= prev - 0.5 (0.5 towards a zero step), rise while they exceed current - 0.5.
        """
        cands = self.candidates(batch)
        idx = cands.index(initial_steps) if initial_steps in cands else len(cands) // 2
        for _ in range(2 * len(cands) + 2):
            cur = cands[idx]
            if cur == 0:
                break  # a zero-step slot only probes up briefly; it runs without drafts
            drafts = accept_length(batch, cur, params=params) - 1.0
            prev = cands[idx - 1] if idx > 0 else None
            if prev is not None and drafts <= (0.5 if prev == 0 else prev - 0.5):
                idx -= 1
            elif idx + 1 < len(cands) and drafts > cur - 0.5:
                idx += 1
            else:
                break
        return cands[idx]

    def speculates(self, batch: int) -> bool:
        """True when the batch's tier runs any draft steps ([0] = off)."""
        return self.steps_for(batch) > 0

    def threshold(self, limit: int = 4096) -> int | None:
        """Largest batch that still speculates when all smaller ones do (None: never stops)."""
        last = 0
        for b in range(1, limit + 1):
            if not self.speculates(b):
                return last
            last = b
        return None


DEFAULT_ADAPTIVE_TIERS = {1: [1, 3, 7], 8: [0, 1, 3], 32: [0, 1], 64: [0]}


def load_adaptive_config(path: str | Path | None, cuda_graph_bs: list[int] | None = None) -> AdaptiveTiers:
    """Parse the JSON config like SGLang (only integer-string keys are tiers); None = its default."""
    if path is None:
        tiers = dict(DEFAULT_ADAPTIVE_TIERS)
    else:
        cfg = json.loads(Path(path).read_text())
        tiers = {}
        for key, entry in cfg.items():
            if not str(key).isdigit():
                continue
            steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
            if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
                raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
            tiers[int(key)] = steps
        if not tiers:
            raise ValueError(
                "speculative_adaptive_config must contain at least one integer-string BS key, "
                f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(cfg.keys())}'
            )
    return AdaptiveTiers(tiers=tiers, cuda_graph_bs=tuple(sorted(cuda_graph_bs)) if cuda_graph_bs else None)


@dataclass(frozen=True)
class ArmModel:
    """How one server decodes: never, always, or up to a batch threshold."""

    arm: Arm
    threshold: int | None = None  # adaptive: speculate while batch <= threshold (0/None: always)
    tiers: AdaptiveTiers | None = None  # native adaptive config (0.5.14+), instead of threshold
    num_steps: int | None = None
    accept_at_batch_1: float | None = None  # measured accept length (accept_length's at_batch_1)
    params: ModelParams = DEFAULT_PARAMS  # the model's knobs (a calibrated model: sim: {model: FILE})

    def speculates(self, batch: int) -> bool:
        if self.arm == "baseline":
            return False
        if self.arm == "eagle3":
            return True
        if self.tiers is not None:
            return self.tiers.speculates(batch)
        return not self.threshold or batch <= self.threshold

    def steps(self, batch: int) -> int:
        """Draft steps this server runs at this batch size (0: a plain decode step)."""
        if not self.speculates(batch):
            return 0
        initial = self.num_steps or self.params.spec_steps
        if self.tiers is not None:
            return self.tiers.steps_for(batch, initial, self.params)
        return initial

    def step(self, batch: int, kv_tokens: int = 0) -> tuple[float, float]:
        """(model-ms, mean tokens per request) of one decode step at this batch size, its
        requests holding `kv_tokens` of context in all."""
        k = self.steps(batch)
        if k > 0:
            acc = accept_length(batch, k, self.accept_at_batch_1, self.params)
            return step_ms(True, batch, acc, num_steps=k, kv_tokens=kv_tokens, params=self.params), acc
        tax = self.params.adaptive_tax if self.arm == "adaptive" else 0.0
        return step_ms(False, batch, 1.0, tax, kv_tokens=kv_tokens, params=self.params), 1.0

    def default_max_running(self) -> int:
        return BASELINE_DEFAULT_MAX_RUNNING if self.arm == "baseline" else SPEC_DEFAULT_MAX_RUNNING


# ---------------------------------------------------------------- predictions (pure)


def predicted_output_throughput(
    arm: Arm,
    concurrency: int,
    threshold: int | None = None,
    max_running: int | None = None,
    num_steps: int | None = None,
    tiers: AdaptiveTiers | None = None,
    context: int = 0,
    params: ModelParams = DEFAULT_PARAMS,
) -> float:
    """Steady-state decode output tok/s (model units) with `concurrency` requests in flight.

    Excludes prefill and the ramp-down tail of a finite benchmark, which cost a few percent.
    `threshold` only matters for `adaptive` (None or 0 = always speculate). `context`: each
    request's mean context in tokens (input + half the output); 0 or <= 512: no KV term.
    """
    if arm not in ("baseline", "eagle3", "adaptive"):
        raise ValueError(f"unknown arm {arm!r}: expected baseline, eagle3 or adaptive")
    model = ArmModel(arm=arm, threshold=threshold, num_steps=num_steps, tiers=tiers, params=params)
    batch = max(1, min(int(concurrency), max_running or model.default_max_running()))
    ms, acc = model.step(batch, batch * max(0, int(context)))
    return batch * acc * 1000.0 / ms


def predicted_crossover(levels: Iterable[int], max_running: int | None = None, context: int = 0,
                        params: ModelParams = DEFAULT_PARAMS) -> int | None:
    """First concurrency level where the baseline is at least as fast as EAGLE-3 (None: never)."""
    for c in sorted(set(levels)):
        if predicted_output_throughput("baseline", c, max_running=max_running, context=context, params=params) >= \
                predicted_output_throughput("eagle3", c, max_running=max_running, context=context, params=params):
            return c
    return None


def predicted_best_threshold(levels: Iterable[int], max_running: int | None = None) -> int:
    """Largest level below the crossover, i.e. where EAGLE-3 still beats the baseline (0: none)."""
    levels = sorted(set(levels))
    cross = predicted_crossover(levels, max_running)
    below = [c for c in levels if cross is None or c < cross]
    return below[-1] if below else 0


def implied_threshold(max_batch: int = 256, num_steps: int | None = None) -> int:
    """The running batch the model says speculation should stop after: the largest batch at
    which EAGLE-3 is at least as fast as the baseline, at it and every smaller batch (0: none)."""
    best = 0
    for b in range(1, max_batch + 1):
        if predicted_output_throughput("eagle3", b, num_steps=num_steps) < predicted_output_throughput("baseline", b):
            break
        best = b
    return best


def best_steps(batch: int, candidates: Iterable[int]) -> int:
    """Of these draft-step counts (0 = no speculation), the fastest at this running batch."""
    def tput(k: int) -> float:
        if k == 0:
            return predicted_output_throughput("baseline", batch)
        return predicted_output_throughput("eagle3", batch, num_steps=k)
    return max(sorted(set(candidates)), key=tput)


def to_model_seconds(wall_seconds: float, time_scale: float) -> float:
    """Wall seconds measured against a scaled simulator -> model seconds."""
    return wall_seconds / time_scale


def to_model_throughput(wall_tok_per_s: float, time_scale: float) -> float:
    """Tokens per wall second against a scaled simulator -> tokens per model second."""
    return wall_tok_per_s * time_scale
