"""`summary.json`: what report.md says, for machines (CI gates, notebooks, `specops compare`).

The document is versioned (`schema`); a field is only ever added, never renamed, within
a major version. It is built from the same ReportSummary as report.md, so the two can
never disagree, and like the report it is a function of the run directory's files alone.

Shape (specops.summary/2; /2 added `objective`, `slo`, each host's `threshold_unit`, `envelope`
and `speculation_tax`, and each point's `goodput`, `slo_attainment`, `gpus`,
`output_throughput_per_gpu`, `tokens_per_s_per_user` and `cost_per_mtok`: a reader of /1 reads
/2 unchanged; later /2 documents of a sweep of several context lengths add `contexts` and
each host entry's `input_len`/`output_len`, one entry per host and length, and their
settings' `input_len`/`output_len` are lists; a one-length run has none of these. A rate
sweep (`bench --rate`) names its levels "rate" (requests/s) wherever a concurrency sweep says
"concurrency", adds each point's `saturated` (bench/saturation.py), each host's
`axis: "rate"`, `threshold_rate` (the highest rate where EAGLE-3 still wins: the threshold in
request-rate terms), `saturated: [{"arm", "rate"}]` and `saturation_text`, and its settings'
`rate` and `arrival`):

    {"schema": "specops.summary/2", "run_id": str|null, "simulated": bool,
     "objective": "throughput"|"goodput"|"tpot",   # what crossover, threshold, envelope and tax compare
     "slo": {"ttft_ms", "tpot_ms", "e2e_ms"}|null,  # the limits given (config/slo.py)
     "settings": {"runner", "dataset", "input_len", "output_len", "num_prompts", "repeats",
                  "repeats_auto" (only when true: --repeats auto, repeats is then its MAX), "concurrency", "arms", "seed", "slo", "objective", "gpu_hour_cost"},   # what the client did
     "sglang": {"version", "commit"},   # the engine's release and commit, whichever engine served
     "engine": {"name": "SGLang"|"vLLM", "version"},   # runs recorded with engine_version (issue 55)
     "gpu": str|null, "gpu_count": int|null,
     "headline": [str], "warnings": [str],
     "servers": [str],        # arms restarted (same arguments) or shared with other runs
     "hosts": [{"host": str,
                "crossover": {"kind": "interpolated"|"never"|"every"|"n/a", "value", "below", "above"},
                "recommended_threshold": int|null, "threshold_text": str,
                "threshold_unit": "running batch"|"concurrency"|null,   # decide/threshold.py
                "adaptive": {"checked": bool, "ok": bool|null,
                             "shortfalls": [{"concurrency": int, "ratio": float|null}]},
                # adaptive / max(baseline, EAGLE-3) per level; null without an adaptive arm
                "envelope": {"levels": [{"concurrency", "ratio"}], "worst": {"concurrency", "ratio"}|null,
                             "mean": float|null, "text": str}|null,
                # adaptive / baseline where its drafting was off; source: "drafting_off" (the
                # records say so), "above_threshold" (levels above the arm's threshold), "none"
                "speculation_tax": {"levels": [{"concurrency", "ratio"}], "worst": {...}|null, "mean": float|null,
                                    "source": str, "threshold": int|null, "unit": str|null, "text": str}|null,
                # a spec-off arm (the speculative server, drafting off at every batch) / baseline at
                # every level: the tax of staying speculation-capable; null without such an arm
                "speculation_capable_tax": {"arm": str, "levels": [{"concurrency", "ratio"}],
                                            "worst": {...}|null, "mean": float|null, "text": str}|null,
                "points": [{"arm", "concurrency", "repeats", "output_throughput": {"median", "min", "max"},
                            "median_ttft_ms", "median_tpot_ms", "accept_length",
                            "goodput", "slo_attainment",        # req/s meeting the SLO, share; null without one
                            "gpus", "output_throughput_per_gpu", "tokens_per_s_per_user",   # the Pareto plot's axes
                            "cost_per_mtok",                    # $ per 1M output tokens; null without a price
                            "running_batch": {"p50", "p90", "server_accept_length"},   # the server's own count
                            "ratio_to_baseline": {"median", "low", "high", "pairs"}|null}]}],
     "failed_points": [{"host", "arm", "concurrency" (a rate point: "rate"), "repeat", "error"}],
     # only for a sweep of several context lengths (--input-len 256,2048): per host and length
     "contexts": [{"host", "input_len", "output_len", "crossover": {...}, "recommended_threshold",
                   "threshold_unit", "threshold_text"}],
     "tuning": {...}}          # only in runs made by `specops tune`: tune.json's result
"""

from __future__ import annotations

import json
from typing import Any

from specops.decide.summary import HostSummary, ReportSummary, context_rows
from specops.records.manifest import ManifestLike, as_manifest
from specops.records.schema import AXIS_CONCURRENCY, AXIS_RATE, load_axis, load_level
from specops.report.markdown import engine_label
from specops.report.phases import phases_doc
from specops.report.words import capable_tax_text, envelope_text, saturation_text, tax_text, threshold_text

SCHEMA = "specops.summary/2"
SUMMARY_JSON = "summary.json"
SETTING_KEYS = ("runner", "dataset", "input_len", "output_len", "num_prompts", "prompts_per_level", "repeats",
                "repeats_auto", "concurrency", "rate", "arrival", "arms", "seed", "slo", "objective", "gpu_hour_cost")


def settings_of(given: ManifestLike) -> dict[str, Any]:
    """The client settings a comparison must agree on, from the manifest (the recorded
    settings by key, a key the settings lack from the client's)."""
    manifest = as_manifest(given)
    bench = manifest.settings().to_dict()
    client = manifest.client or {}
    values = {k: bench.get(k, client.get(k)) for k in SETTING_KEYS}
    # `repeats_auto` only where it is on (`--repeats auto[:MAX]`: then `repeats` is the MAX)
    return {k: v for k, v in values.items() if v is not None and not (k == "repeats_auto" and not v)}


def _levels(ratios: dict[float, float], axis: str = AXIS_CONCURRENCY) -> list[dict[str, Any]]:
    return [{axis: c, "ratio": r} for c, r in sorted(ratios.items())]


def _worst(worst: tuple[float, float] | None, axis: str = AXIS_CONCURRENCY) -> dict[str, Any] | None:
    return None if worst is None else {axis: worst[0], "ratio": worst[1]}


def envelope_doc(s: HostSummary) -> dict[str, Any] | None:
    env = s.envelope
    if env is None:
        return None
    return {"levels": _levels(env.ratios, s.axis), "worst": _worst(env.worst, s.axis), "mean": env.mean,
            "text": envelope_text(env)}


def tax_doc(s: HostSummary) -> dict[str, Any] | None:
    tax = s.tax
    if tax is None:
        return None
    return {"levels": _levels(tax.ratios, s.axis), "worst": _worst(tax.worst, s.axis), "mean": tax.mean,
            "source": tax.source,
            "threshold": tax.threshold, "unit": tax.unit, "text": tax_text(tax)}


def capable_tax_doc(s: HostSummary) -> dict[str, Any] | None:
    tax = s.capable_tax
    if tax is None:
        return None
    return {"arm": tax.arm, "levels": _levels(tax.ratios), "worst": _worst(tax.worst), "mean": tax.mean,
            "text": capable_tax_text(tax)}


def summary_document(summary: ReportSummary, given: ManifestLike) -> dict[str, Any]:
    manifest = as_manifest(given)
    hosts = []
    for s in summary.hosts:
        points = []
        for c, arm, cell, ratio in s.rows():
            points.append({
                "arm": arm, s.axis: c, "repeats": cell.repeats,
                **({"saturated": cell.saturated} if s.axis == AXIS_RATE else {}),
                "output_throughput": {"median": cell.median_tps, "min": cell.min_tps, "max": cell.max_tps},
                "median_ttft_ms": cell.median_ttft_ms, "median_tpot_ms": cell.median_tpot_ms,
                "accept_length": cell.accept_length,
                "goodput": cell.goodput, "slo_attainment": cell.attainment,
                "gpus": cell.gpus, "output_throughput_per_gpu": cell.tps_per_gpu,
                "tokens_per_s_per_user": cell.tps_per_user, "cost_per_mtok": cell.cost_per_mtok,
                "running_batch": {"p50": cell.running_p50, "p90": cell.running_p90,
                                  "server_accept_length": cell.server_accept_length},
                "ratio_to_baseline": None if ratio is None else {
                    "median": ratio.ratio, "low": ratio.low, "high": ratio.high, "pairs": ratio.pairs},
            })
        shortfalls = s.adaptive_shortfalls
        length = {} if s.length is None else {"input_len": s.length[0], "output_len": s.length[1]}
        rates = {} if s.axis != AXIS_RATE else {
            "axis": s.axis, "threshold_rate": s.threshold_choice.level,
            "saturated": [{"arm": arm, "rate": c} for arm, c in s.saturated()],
            "saturation_text": saturation_text(s)}
        hosts.append({
            "host": s.host, **length, **rates,
            "crossover": {"kind": s.crossover.kind, "value": s.crossover.value,
                          "below": s.crossover.below, "above": s.crossover.above},
            "recommended_threshold": s.threshold, "threshold_text": threshold_text(s),
            "threshold_unit": s.threshold_choice.unit,
            "adaptive": {"checked": shortfalls is not None,
                         "ok": None if shortfalls is None else not shortfalls,
                         "shortfalls": [{s.axis: c, "ratio": r} for c, r in (shortfalls or [])]},
            "envelope": envelope_doc(s), "speculation_tax": tax_doc(s), "speculation_capable_tax": capable_tax_doc(s),
            "points": points, **({"phases": phases_doc(s.phases)} if s.phases is not None else {}),
        })
    return {
        "schema": SCHEMA, "run_id": manifest.run_id, "simulated": summary.simulated,
        "objective": summary.objective, "slo": summary.slo,
        "settings": settings_of(manifest),
        "sglang": {"version": manifest.engine_release(), "commit": manifest.sglang_commit},
        **({"engine": {"name": engine_label(manifest), "version": manifest.engine_version}}
           if manifest.engine_version else {}),
        "gpu": manifest.gpu, "gpu_count": manifest.gpu_count,
        "headline": summary.headline, "warnings": summary.warnings, "servers": summary.servers, "hosts": hosts,
        "failed_points": [{"host": r.host, "arm": r.arm, load_axis(r): load_level(r), "repeat": r.repeat,
                           "error": r.error}
                          for r in summary.failed],
        **({"tuning": summary.tuning.get("result")} if summary.tuning else {}),
        **({"contexts": contexts_doc(summary)} if context_rows(summary) else {}),
    }


def contexts_doc(summary: ReportSummary) -> list[dict[str, Any]]:
    """The crossover and threshold per host and context length (a several-length sweep)."""
    return [{"host": r.host, "input_len": r.input_len, "output_len": r.output_len,
             "crossover": {"kind": r.crossover.kind, "value": r.crossover.value,
                           "below": r.crossover.below, "above": r.crossover.above},
             "recommended_threshold": r.threshold, "threshold_unit": r.unit, "threshold_text": threshold_text(r)}
            for r in context_rows(summary)]


def render_summary_json(summary: ReportSummary, manifest: ManifestLike) -> str:
    """Deterministic text (sorted keys), so `specops report` reproduces it byte for byte."""
    return json.dumps(summary_document(summary, manifest), indent=1, sort_keys=True) + "\n"
