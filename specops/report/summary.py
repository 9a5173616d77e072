"""The report's summary in words: decide/summary.py's `summarize_run` computes what the
report says as data; `summarize` adds its words (the headline, the fairness warnings, the
notes on the servers measured), which report.md, report.html, summary.json, `specops bench`
and `specops compare` print."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from specops.config.slo import Slo
from specops.decide.summary import ReportSummary, ServerFact, ok_records, record_length, server_facts, summarize_run
from specops.launchargs import args_from_argv
from specops.records.manifest import ArmRecord, ManifestLike, as_manifest
from specops.records.schema import ResultRecord, level_label, load_axis, load_level
from specops.report.words import context_headline, host_headline, objective_line
from specops.servers.fairness import fairness_warnings as fairness_warnings_for_args
from specops.servers.fairness import headline_warnings


def summarize(records: Sequence[ResultRecord], given: ManifestLike = None, *,
              objective: str | None = None, slo: Slo | None = None) -> ReportSummary:
    """Everything the report says, computed from records and the manifest (`objective`,
    `slo`: `specops report`'s own, in place of those the bench recorded)."""
    manifest = as_manifest(given)
    summary = summarize_run(records, manifest, objective=objective, slo=slo)
    summaries = summary.hosts
    summary.headline = fairness_headline(manifest) + host_headline(summaries) + context_headline(summaries) + (
        [objective_line(summary.objective, summary.slo, summaries, summary.latencies_missing,
                        summary.recorded_objective)] if summaries else [])
    summary.warnings = fairness_warnings(manifest, ok_records(records), by_length=summary.by_length)
    summary.servers = server_lines(summary.server_facts)
    return summary


# ---------------------------------------------------------------- fairness

def _args_of(arm_info: ArmRecord) -> dict[str, Any] | None:
    """Resolved server args of an arm from the manifest, or parsed from its launch argv."""
    if arm_info.server_args is not None:
        return dict(arm_info.server_args)
    return args_from_argv(arm_info.argv) if arm_info.argv else None


def fairness_warnings(manifest: ManifestLike, records: Sequence[ResultRecord] = (),
                      by_length: bool = False) -> list[str]:
    """Server args that differ between arms (the rule `deploy` uses too, from
    `specops.servers.fairness`), and uneven client settings (`by_length`: a sweep of several
    lengths, compared within each length)."""
    warnings: list[str] = []
    for label, arms in as_manifest(manifest).arm_sets():
        parsed = {arm: _args_of(info) for arm, info in sorted(arms.items())}
        known = {a: p for a, p in parsed.items() if p is not None}
        missing = sorted(a for a, p in parsed.items() if p is None)
        if missing:
            warnings.append(f"{label}server args not recorded for {', '.join(missing)}; fairness not checked for them")
        warnings += [label + w for w in fairness_warnings_for_args(known)]
    settings: dict[tuple[str, float, tuple[int, int] | None], set[tuple[Any, ...]]] = defaultdict(set)
    axes: dict[tuple[str, float, tuple[int, int] | None], str] = {}
    for rec in records:
        key = (str(rec.host), load_level(rec), record_length(rec) if by_length else None)
        settings[key].add((rec.input_len, rec.output_len, rec.num_prompts))
        axes[key] = load_axis(rec)
    for key, combos in sorted(settings.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or (0, 0))):
        host, c, _ = key
        if len(combos) > 1:
            shown = "; ".join(f"in={i} out={o} n={n}" for i, o, n in sorted(combos, key=repr))
            warnings.append(f"{'host ' + host + ': ' if host else ''}client settings differ at "
                            f"{level_label(c, axes[key])}: {shown}")
    return warnings


def fairness_headline(manifest: ManifestLike) -> list[str]:
    """The fairness differences that change what the ratios measure (attention backend,
    device): they head the report, not only its Fairness section."""
    out: list[str] = []
    for label, arms in as_manifest(manifest).arm_sets():
        known = {arm: p for arm, info in sorted(arms.items()) if (p := _args_of(info)) is not None}
        out += [w.replace("WARNING: ", "WARNING: " + label, 1) for w in headline_warnings(known)]
    return out


# ---------------------------------------------------------------- servers measured

def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def server_lines(facts: Sequence[ServerFact]) -> list[str]:
    """What the report says about the server instances its ok points measured: an arm
    restarted with the same arguments, an arm whose server other runs shared."""
    notes = []
    for f in facts:
        name = f"{f.arm} on {f.host}" if f.several_hosts else f.arm
        if f.restarts > 0:
            notes.append(f"{name} restarted {_times(f.restarts)} (same arguments)")
        if f.shared_with:
            runs = ", ".join(f.shared_with)
            notes.append(f"{name} shared its server with run{'s' if len(f.shared_with) > 1 else ''} {runs} (identical "
                         f"arguments): their clients loaded it too, so these numbers include that load")
    return notes


def server_notes(records: Sequence[ResultRecord]) -> list[str]:
    """The servers section's lines for these records (decide's `server_facts`, in words);
    raises ConfigError where one arm's points ran under different launch arguments."""
    return server_lines(server_facts(records))
