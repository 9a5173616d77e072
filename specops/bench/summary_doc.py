"""`summary.json`: what report.md says, for machines (CI gates, notebooks, `specops compare`).

The document is versioned (`schema`); a field is only ever added, never renamed, within
a major version. It is built from the same ReportSummary as report.md, so the two can
never disagree, and like the report it is a function of the run directory's files alone.

Shape (specops.summary/1):

    {"schema": "specops.summary/1", "run_id": str|null, "simulated": bool,
     "settings": {"runner", "dataset", "input_len", "output_len", "num_prompts", "repeats",
                  "concurrency", "arms", "seed"},             # what the client did
     "sglang": {"version", "commit"}, "gpu": str|null, "gpu_count": int|null,
     "headline": [str], "warnings": [str],
     "servers": [str],        # arms restarted (same arguments) or shared with other runs
     "hosts": [{"host": str,
                "crossover": {"kind": "interpolated"|"never"|"every"|"n/a", "value", "below", "above"},
                "recommended_threshold": int|null, "threshold_text": str,
                "adaptive": {"checked": bool, "ok": bool|null,
                             "shortfalls": [{"concurrency": int, "ratio": float|null}]},
                "points": [{"arm", "concurrency", "repeats", "output_throughput": {"median", "min", "max"},
                            "median_ttft_ms", "median_tpot_ms", "accept_length",
                            "running_batch": {"p50", "p90", "server_accept_length"},   # the server's own count
                            "ratio_to_baseline": {"median", "low", "high", "pairs"}|null}]}],
     "failed_points": [{"host", "arm", "concurrency", "repeat", "error"}],
     "tuning": {...}}          # only in runs made by `specops tune`: tune.json's result
"""

from __future__ import annotations

import json
from typing import Any

from specops.bench.report import ReportSummary

SCHEMA = "specops.summary/1"
SUMMARY_JSON = "summary.json"
SETTING_KEYS = ("runner", "dataset", "input_len", "output_len", "num_prompts", "prompts_per_level", "repeats",
                "concurrency", "arms", "seed")


def settings_of(manifest: dict[str, Any]) -> dict[str, Any]:
    """The client settings a comparison must agree on, from the manifest."""
    bench = manifest.get("bench") or {}
    client = manifest.get("client") or {}
    return {k: bench.get(k, client.get(k)) for k in SETTING_KEYS if bench.get(k, client.get(k)) is not None}


def summary_document(summary: ReportSummary, manifest: dict[str, Any]) -> dict[str, Any]:
    hosts = []
    for s in summary.hosts:
        points = []
        for c, arm, cell, ratio in s.rows():
            points.append({
                "arm": arm, "concurrency": c, "repeats": cell.repeats,
                "output_throughput": {"median": cell.median_tps, "min": cell.min_tps, "max": cell.max_tps},
                "median_ttft_ms": cell.median_ttft_ms, "median_tpot_ms": cell.median_tpot_ms,
                "accept_length": cell.accept_length,
                "running_batch": {"p50": cell.running_p50, "p90": cell.running_p90,
                                  "server_accept_length": cell.server_accept_length},
                "ratio_to_baseline": None if ratio is None else {
                    "median": ratio.ratio, "low": ratio.low, "high": ratio.high, "pairs": ratio.pairs},
            })
        shortfalls = s.adaptive_shortfalls
        hosts.append({
            "host": s.host,
            "crossover": {"kind": s.crossover.kind, "value": s.crossover.value,
                          "below": s.crossover.below, "above": s.crossover.above},
            "recommended_threshold": s.threshold, "threshold_text": s.threshold_text(),
            "adaptive": {"checked": shortfalls is not None,
                         "ok": None if shortfalls is None else not shortfalls,
                         "shortfalls": [{"concurrency": c, "ratio": r} for c, r in (shortfalls or [])]},
            "points": points,
        })
    return {
        "schema": SCHEMA, "run_id": manifest.get("run_id"), "simulated": summary.simulated,
        "settings": settings_of(manifest),
        "sglang": {"version": manifest.get("sglang_version"), "commit": manifest.get("sglang_commit")},
        "gpu": manifest.get("gpu"), "gpu_count": manifest.get("gpu_count"),
        "headline": summary.headline, "warnings": summary.warnings, "servers": summary.servers, "hosts": hosts,
        "failed_points": [{k: r.get(k) for k in ("host", "arm", "concurrency", "repeat", "error")}
                          for r in summary.failed],
        **({"tuning": summary.tuning.get("result")} if summary.tuning else {}),
    }


def render_summary_json(summary: ReportSummary, manifest: dict[str, Any]) -> str:
    """Deterministic text (sorted keys), so `specops report` reproduces it byte for byte."""
    return json.dumps(summary_document(summary, manifest), indent=1, sort_keys=True) + "\n"
