"""The report's sentences: decide/ returns numbers and enums (crossover, threshold, envelope,
tax, saturation, phases), and this module says them in words, the same words report.md,
report.html, summary.json, `specops bench`'s headline and `specops compare` print.

Nothing here decides: every figure and verdict comes from decide/ as data; a function here
only formats it (issue 56 point 4)."""

from __future__ import annotations

import statistics
from typing import Sequence

from specops.bench.saturation import RULE as SATURATION_RULE
from specops.config.slo import DEFAULT_OBJECTIVE, Slo, slo_text
from specops.decide.phases import PhaseSummary
from specops.decide.summary import (
    ADAPTIVE_TOLERANCE,
    DRAFTING_OFF_SHARE,
    TAX_EVIDENCE,
    TAX_NONE,
    TAX_THRESHOLD,
    CapableTax,
    Cell,
    ContextRow,
    Crossover,
    Envelope,
    HostSummary,
    Tax,
)
from specops.decide.threshold import UNIT_RUNNING, ThresholdChoice, Why
from specops.records.schema import AXIS_CONCURRENCY, AXIS_RATE, level_label

# ---------------------------------------------------------------- the threshold rule

NO_RUNNING = "the server reported no running batch"
THRESHOLD_RULE = ("threshold = p90 of the server's running batch at the highest level where EAGLE-3 is at least "
                  "as fast as baseline there and at every lower level (rounded down), kept below the median "
                  "running batch of the first level where it is slower; the adaptive arm speculates while its "
                  "running batch is <= threshold (the level itself, in concurrency units, where the server "
                  "reported no running batch)")


def threshold_reason(choice: ThresholdChoice) -> str:
    """Why `choose` decided what it did, in words (tune.json's `choice.reason`)."""
    axis = choice.axis
    if choice.why == Why.SLOWER_FROM_START:
        return "EAGLE-3 is slower than baseline from the lowest level measured: do not speculate"
    if choice.why == Why.NO_LEVELS:
        return "no levels with both baseline and EAGLE-3"
    if choice.why == Why.NO_RUNNING_RATE:
        return (f"{NO_RUNNING} at {level_label(choice.level, axis)}: a request rate is not a running batch, "
                "so no threshold")
    if choice.why == Why.NO_RUNNING_LEVEL:
        return f"{NO_RUNNING} at c={choice.level:g}: the level itself, in concurrency units"
    text = f"running batch p90 {choice.running_p90:g} at {level_label(choice.level, axis)}"
    if choice.why == Why.KEPT_BELOW:
        text += (f", kept below the median running batch {choice.losing_running_p50:g} at "
                 f"{level_label(choice.losing_level, axis)}")
    return text


def threshold_choice_text(choice: ThresholdChoice, axis: str = AXIS_CONCURRENCY) -> str:
    """The report's wording: the number and what it is compared with (`axis`: what the
    levels were, concurrency or request rate)."""
    if choice.threshold is None:
        return f"none: {threshold_reason(choice)}"
    t = choice.threshold
    if choice.unit == UNIT_RUNNING:
        what = f"speculate while the running batch is <= {t}"
    else:
        what = f"speculate while {axis} is <= {t:g}; {NO_RUNNING}"
    if choice.top:
        what = f"EAGLE-3 wins up to the highest level measured, {level_label(choice.level, axis)}: {what}"
    elif axis == AXIS_RATE and choice.level is not None:
        what += f"; in request-rate terms, EAGLE-3 wins up to {level_label(choice.level, axis)}"
    return f"{t:g} ({what})"


# ---------------------------------------------------------------- cells and per-level figures

def drafting_cell(cell: Cell) -> str:
    return "-" if cell.drafting_off_share is None else f"off {cell.drafting_off_share:.0%}"


def running_cell(cell: Cell) -> str:
    if cell.running_p50 is None:
        return "-"
    return f"{cell.running_p50:g}/{cell.running_p90:g}" if cell.running_p90 is not None else f"{cell.running_p50:g}"


def crossover_text(c: Crossover) -> str:
    if c.kind == "interpolated":
        return (f"{level_label(c.value, c.axis, '≈')} (between {c.below:g} and {c.above:g}, "
                "log2 interpolation)")
    if c.kind == "never":
        return "never (EAGLE-3 at or above baseline at every level measured)"
    if c.kind == "every":
        return "at every level (EAGLE-3 below baseline from the first level)"
    return "n/a (needs baseline and eagle3 results)"


def crossover_cell(c: Crossover) -> str:
    if c.kind == "interpolated":
        return f"{level_label(c.value, c.axis, '≈')} ({c.below:g}-{c.above:g})"
    return {"never": "never (EAGLE-3 wins at every level)", "every": "every level"}.get(c.kind, "n/a")


def _levels_text(levels: Sequence[float], axis: str) -> str:
    return level_label(None, axis).rstrip("-") if not levels else (
        ("c=" if axis == AXIS_CONCURRENCY else "rate=") + ",".join(f"{c:g}" for c in levels)
        + ("/s" if axis == AXIS_RATE else ""))


def _ratio_stats(ratios: dict[float, float], axis: str = AXIS_CONCURRENCY) -> str:
    """`0.956x at c=16`, or `mean 0.960x, worst 0.950x at c=32, over c=16,32,64`."""
    worst = min(ratios, key=lambda c: (ratios[c], c))
    if len(ratios) == 1:
        return f"{ratios[worst]:.3f}x at {level_label(worst, axis)}"
    return (f"mean {statistics.fmean(ratios.values()):.3f}x, worst {ratios[worst]:.3f}x at "
            f"{level_label(worst, axis)}, over {_levels_text(sorted(ratios), axis)}")


def envelope_text(env: Envelope) -> str:
    on = "" if env.objective == DEFAULT_OBJECTIVE else f" (on {env.objective})"
    head = f"adaptive vs the better of baseline and EAGLE-3{on}: "
    worst = env.worst
    if worst is None:
        return head + "n/a (no level with adaptive and another arm)"
    return (head + f"worst {worst[1]:.3f}x at {level_label(worst[0], env.axis)}, "
            f"mean {env.mean:.3f}x over {len(env.ratios)} level{'s' if len(env.ratios) > 1 else ''}")


def tax_where(tax: Tax) -> str:
    if tax.source == TAX_EVIDENCE:
        return f"levels where the records say drafting was off for >= {DRAFTING_OFF_SHARE:.0%} of the point"
    if tax.source == TAX_THRESHOLD:
        return f"{tax.unit} above the arm's threshold {tax.threshold}: no drafting-off evidence in the records"
    return "no drafting-off evidence in the records, and no threshold for the adaptive arm in the manifest"


def tax_text(tax: Tax) -> str:
    on = "" if tax.objective == DEFAULT_OBJECTIVE else f", on {tax.objective}"
    head = f"speculation tax (adaptive / baseline where drafting is off{on}): "
    if tax.source == TAX_NONE:
        return head + f"n/a ({tax_where(tax)})"
    if not tax.ratios:
        return head + f"n/a: drafting was off at no level measured ({tax_where(tax)})"
    return head + f"{_ratio_stats(tax.ratios, tax.axis)} ({tax_where(tax)})"


def capable_tax_text(tax: CapableTax) -> str:
    on = "" if tax.objective == DEFAULT_OBJECTIVE else f", on {tax.objective}"
    head = f"tax of staying speculation-capable ({tax.arm} / baseline, drafting off at every batch{on}): "
    if not tax.ratios:
        return head + "n/a: no level measured both arms"
    per = ", ".join(f"{level_label(c, tax.axis)} {r:.3f}x" for c, r in sorted(tax.ratios.items()))
    return head + f"{_ratio_stats(tax.ratios, tax.axis)}; per level: {per}"


def per_level_texts(s: HostSummary) -> list[str]:
    """The envelope, tax and capable-tax lines a host has (in that order)."""
    out = []
    if s.envelope is not None:
        out.append(envelope_text(s.envelope))
    if s.tax is not None:
        out.append(tax_text(s.tax))
    if s.capable_tax is not None:
        out.append(capable_tax_text(s.capable_tax))
    return out


# ---------------------------------------------------------------- one host

def host_label(s: HostSummary) -> str:
    """The host, and the context length where the sweep has several."""
    if s.length is None:
        return s.host
    return f"{s.host + ' ' if s.host else ''}in={s.length[0]} out={s.length[1]}"


def saturation_text(s: HostSummary) -> str | None:
    """What a rate sweep says of saturation (None on a concurrency sweep)."""
    if s.axis != AXIS_RATE:
        return None
    hit = s.saturated()
    if not hit:
        return f"saturated: none (every arm kept up at every rate measured; {SATURATION_RULE})"
    shown = ", ".join(f"{arm} at {c:g}/s" for arm, c in hit)
    return (f"saturated: {shown} (the server could not sustain the rate, its queue grew: those "
            f"figures are its capacity, not the rate's; {SATURATION_RULE})")


def threshold_text(s: HostSummary | ContextRow) -> str:
    """A host's (or a context length's) recommended threshold in words."""
    if s.crossover.kind == "n/a":
        return "n/a (needs baseline and eagle3 results)"
    choice = s.threshold_choice if isinstance(s, HostSummary) else s.choice
    return threshold_choice_text(choice, s.crossover.axis)


def adaptive_text(s: HostSummary) -> str:
    if s.adaptive_shortfalls is None:
        return "n/a (no adaptive results)"
    if not s.adaptive_shortfalls:
        return f"reached >= {ADAPTIVE_TOLERANCE:.2f}x of the better arm at every level"
    parts = [f"{level_label(c, s.axis)} ({'missing' if r is None else f'{r:.3f}x'})"
             for c, r in s.adaptive_shortfalls]
    return f"below {ADAPTIVE_TOLERANCE:.2f}x of the better arm at " + ", ".join(parts)


# ---------------------------------------------------------------- the headline

def host_headline(summaries: Sequence[HostSummary]) -> list[str]:
    lines = []
    for s in summaries:
        prefix = f"[{host_label(s)}] " if len(summaries) > 1 else ""
        if s.crossover.kind == "interpolated":
            cross = (f"crossover at {level_label(s.crossover.value, s.axis, '≈')} "
                     f"(between {s.crossover.below:g} and {s.crossover.above:g})")
        else:
            cross = "crossover: " + crossover_text(s.crossover)
        lines.append(prefix + cross)
        lines.append(prefix + "recommended threshold: " + threshold_text(s))
        lines.append(prefix + "adaptive: " + adaptive_text(s))
        if (saturation := saturation_text(s)) is not None:
            lines.append(prefix + saturation)
        lines += [prefix + line for line in per_level_texts(s)]
    return lines


def context_headline(summaries: Sequence[HostSummary]) -> list[str]:
    """One line per host of a several-length sweep: its crossover at each length."""
    hosts = sorted({s.host for s in summaries if s.length is not None})
    lines = []
    for host in hosts:
        parts = [f"in={s.length[0]} out={s.length[1]}: {crossover_cell(s.crossover)}"
                 for s in summaries if s.host == host and s.length is not None]
        lines.append(f"{'[' + host + '] ' if len(hosts) > 1 else ''}crossover by context length: " + "; ".join(parts))
    return lines


def objective_line(objective: str, slo: Slo | None, summaries: Sequence[HostSummary], why: str | None = None,
                   recorded: str | None = None) -> str:
    """What the crossover, threshold, envelope and tax were computed on, in words (`why`: the
    records' own reason for having no per-request latencies; `recorded`: the bench's own
    objective, said when `specops report --objective` chose another)."""
    text = _objective_words(objective, slo, summaries, why)
    if recorded is not None and recorded != objective:
        text += f" (chosen by specops report; the bench ran with objective {recorded})"
    return text


def _objective_words(objective: str, slo: Slo | None, summaries: Sequence[HostSummary], why: str | None) -> str:
    missing = slo and not any(cell.goodput is not None for s in summaries for cell in s.cells.values())
    no_latencies = (f"n/a: {why}" if why else
                    "n/a, the records carry no per-request latencies (the builtin runner keeps them)")
    if objective == "goodput" and slo:
        return f"objective: goodput (requests/s meeting {slo_text(slo)})" + (f": {no_latencies}" if missing else "")
    if objective == "tpot":
        text = "objective: TPOT (compared as per-user decode speed, 1000 / TPOT ms: the lower TPOT wins)"
    else:
        text = "objective: throughput (output tok/s)"
    if slo:
        text += f"; SLO {slo_text(slo)}: " + (f"goodput {no_latencies}" if missing else "goodput and attainment per point")
    return text


# ---------------------------------------------------------------- phases

LAG_DEFINITION = ("decode steps the server ran with its running batch past the threshold before the switch "
                  "line, and seconds from the end of the last step on the right side to that line")


def lag_text(p: PhaseSummary) -> str:
    if p.worst_lag_steps is None:
        return "switching lag: n/a (no switch line with a known threshold in the adaptive arm's log)"
    return (f"switching lag (adaptive): worst {p.worst_lag_steps} scheduler step(s), "
            f"{(p.worst_lag_s or 0.0) * 1000:.1f} ms after the running batch crossed threshold "
            f"{p.threshold}")


def phase_envelope_text(p: PhaseSummary) -> str:
    shown = [f"{r.label} {r.envelope:.3f}x" for r in p.rows if r.envelope is not None]
    return "envelope per phase (adaptive / best static arm): " + (", ".join(shown) if shown else "n/a")
