"""`specops tune`'s words: decide/tune.py searches and judges as data (`Verdict`,
`TuneResult`, `ThresholdChoice`); this module says them, for the terminal, the report's
Tuning section and tune.json (whose `text`, `reason` and rule fields are these words), and
makes a several-length tune's tune.json (`lengths_document`; records/tune.py writes it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from specops.decide.threshold import ThresholdChoice
from specops.decide.tune import GAIN_KEPT, TOLERANCE, OffPathShortfall, TuneResult, Verdict, length_row
from specops.report.words import THRESHOLD_RULE, threshold_reason

VERIFY_ORDER = ("nearest the threshold first (|log2 c - log2(T + 0.5)|, lower first on a tie): the levels "
                "where the adaptive arm stops speculating are where a wrong threshold shows")
TIERS_RULE = ("per level, the draft-step count (0 = no speculation) with the highest median throughput; a new "
              "count's tier starts just above the running batch p90 of the last level of the count before, and "
              "no higher than the running-batch median of its own first level")
FOR_LENGTH_RULE = ("the adaptive arm takes one threshold: with several lengths, --write puts in the threshold "
                   "of --for-length L (an input length tuned), else of the first length given; the other "
                   "lengths' thresholds are in tune.json and the table")


def choice_doc(choice: ThresholdChoice) -> dict[str, Any]:
    """tune.json's `choice`: the decision's figures and its reason in words."""
    return {"threshold": choice.threshold, "level": choice.level, "losing_level": choice.losing_level,
            "running_p90": choice.running_p90, "losing_running_p50": choice.losing_running_p50,
            "reason": threshold_reason(choice), "unit": choice.unit, "top": choice.top}


def verdict_text(v: Verdict) -> str:
    """One candidate's verdict, as the terminal and tune.json say it."""
    if v.ok:
        worst = min((r for r in v.ratios.values() if r is not None), default=None)
        kept = "" if v.gain_kept is None else f", keeps {v.gain_kept:.0%} of EAGLE-3's gain at the lowest level"
        return (f"{v.arm}: verified: >= {TOLERANCE:.2f}x of the better arm at every level "
                f"(worst {worst:.3f}x){kept}")
    parts = [f"c={c} {v.ratios[c]:.3f}x" for c in v.shortfalls if v.ratios.get(c) is not None]
    parts += [f"c={c} missing" for c in v.missing]
    if v.gain_kept is not None and v.gain_kept < GAIN_KEPT:
        parts.append(f"keeps {v.gain_kept:.0%} of EAGLE-3's gain at the lowest level (< {GAIN_KEPT:.0%})")
    if v.skipped:
        parts.append(f"stopped there: c={','.join(map(str, sorted(v.skipped)))} not measured")
    return f"{v.arm}: rejected: " + ", ".join(parts)


def recheck_text(arm: str, c: int, refs: list[str], before: float | None, after: float | None) -> str:
    """A level where `arm` fell short against reference points measured earlier, and what the
    reference arms measured again beside it say."""
    def ratio(r: float | None) -> str:
        return "-" if r is None else f"{r:.3f}x"
    return (f"{arm} at c={c}: {ratio(before)} of the better arm as measured earlier; "
            f"{', '.join(refs)} measured again beside it: {ratio(after)}")


def off_path_text(arm: str, found: OffPathShortfall, *, switch: str | None = None,
                  extend_skipped: bool = False) -> str:
    """Why a candidate fell short where it was not drafting: in words, with the arm that measures it.
    `switch`: the engine's variable that skips a drafting-off step's draft extend (offered unless
    `extend_skipped`, the arm's env already setting it)."""
    text = (f"at c={found.level} {arm} had drafting off in {found.off_share:.0%} of its decode steps and still ran "
            f"{found.ratio:.3f}x of the better arm: the cost of its drafting-off path (the draft model stays loaded")
    closing = "), which no threshold removes; a `kind: spec-off` arm measures it beside the baseline"
    if switch and extend_skipped:
        return text + f"; its draft extend was already skipped, {switch}=1, so drafting resumed cold" + closing
    if not switch:
        return text + closing
    return (text + "; its draft extend still runs each drafting-off step" + closing
            + f". The engine skips that extend with {switch}=1 in the adaptive arm's env (its draft KV cache "
              "then goes stale while drafting is off, so drafting resumes cold)")


def result_of(doc: Mapping[str, Any]) -> TuneResult:
    """A TuneResult from tune.json's `result` (keys it does not know left out)."""
    return TuneResult(**{k: v for k, v in doc.items() if k in TuneResult.__dataclass_fields__})


def tune_lines(result: TuneResult | Mapping[str, Any]) -> list[str]:
    """What the terminal and the report say of a tune (a TuneResult, or tune.json's `result`)."""
    res = result if isinstance(result, TuneResult) else result_of(result)
    out = []
    if res.reused_from:
        out.append(f"coarse points reused from {res.reused_from}")
    if res.reuse:
        out.append(res.reuse)
    b0, b1 = res.bracket
    if b0 is not None or b1 is not None:
        out.append(f"bracket: EAGLE-3 wins up to c={b0 if b0 is not None else '-'}, "
                   f"loses from c={b1 if b1 is not None else '- (never)'}")
    if res.fine_levels:
        how = "bisection levels" if res.bisected else "fine levels"
        out.append(f"{how}: {', '.join(str(c) for c in res.fine_levels)}")
    if res.choice:
        out.append(f"rule: {res.rule}")
        if res.choice.get("threshold") is not None:
            out.append(f"chosen threshold {res.choice['threshold']} ({res.choice['reason']})")
        else:
            out.append(f"no threshold: {res.choice['reason']}")
    for cand in res.candidates:
        out += [recheck_text(r["arm"], r["concurrency"], r["references"], r["before"], r["after"])
                for r in res.rechecks if r["arm"] == cand["arm"]]
        out.append(cand["text"])
    if res.tiers is not None:
        shown = ", ".join(f"{b}+: {s}" for b, s in res.tiers.items())
        out.append(f"tiers (running batch: draft steps): {shown}")
        if res.tiers_verdict:
            out.append(res.tiers_verdict["text"])
        if res.default_comparison:
            out.append(res.default_comparison["text"])
    out.append(f"result: {res.status}: {res.message}")
    out.append(points_text(res))
    return out


def points_text(res: TuneResult) -> str:
    return f"points: {res.measured_points} measured, {res.reused_points} reused"


def lengths_table(results: Sequence[TuneResult], chosen: tuple[int, int]) -> list[str]:
    """The per-length recommendation, one row per length (the terminal's table)."""
    head = ("input", "output", "status", "threshold", "bracket", "measured", "reused")
    rows = [head]
    for r in results:
        b0, b1 = r.bracket
        mark = " *" if (r.input_len, r.output_len) == chosen else ""
        rows.append((str(r.input_len), str(r.output_len), r.status,
                     (str(r.threshold) if r.threshold is not None else "-") + mark,
                     f"{b0 if b0 is not None else '-'}..{b1 if b1 is not None else '-'}",
                     str(r.measured_points), str(r.reused_points)))
    widths = [max(len(row[k]) for row in rows) for k in range(len(head))]
    out = ["per context length (threshold in the server's running-batch units):"]
    out += ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    out.append(f"  * the length --write is for: {FOR_LENGTH_RULE}")
    return out


def lengths_document(items: Sequence[tuple[Path, TuneResult]], chosen: tuple[int, int],
                     written: str | None) -> dict[str, Any]:
    """tune.json of a several-length tune (records/tune.py writes it): one row per length (its
    own run directory holds its full tune.json and report), which length --write is for, and
    what was written."""
    return {"schema": "specops.tune-lengths/1", "rule": THRESHOLD_RULE, "for_length_rule": FOR_LENGTH_RULE,
            "for_length": {"input_len": chosen[0], "output_len": chosen[1]}, "written": written,
            "lengths": [{**length_row(res), "run_dir": str(d)} for d, res in items],
            "measured_points": sum(res.measured_points for _, res in items),
            "reused_points": sum(res.reused_points for _, res in items)}

