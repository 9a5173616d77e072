"""Every file a bench run's report consists of, written from the run directory alone:
report.md, summary.json, plots/*.png and report.html (which embeds the plots).

`specops report DIR` calls this again and gets the same bytes: nothing of the render
time goes into any of them.
"""

from __future__ import annotations

from pathlib import Path

from specops.config.slo import Slo
from specops.decide.summary import ReportSummary
from specops.errors import ConfigError
from specops.fsutil import atomic_write
from specops.records import store
from specops.records.tune import load_tune
from specops.report.html_report import REPORT_HTML, render_html
from specops.report.markdown import REPORT_MD, render_markdown
from specops.report.phase_plot import write_phase_plot
from specops.report.plots import write_plots
from specops.report.summary import summarize
from specops.report.summary_doc import SUMMARY_JSON, render_summary_json


def render_report(run_dir: Path, *, plots: bool = True, objective: str | None = None,
                  slo: Slo | None = None) -> ReportSummary:
    """Re-render the report files from results.jsonl + manifest.json; return the summary
    (`objective`, `slo`: in place of the bench's own, for `specops report --objective`)."""
    run_dir = Path(run_dir)
    records = store.load_results(run_dir)
    manifest = store.load_manifest(run_dir)
    try:
        summary = summarize(records, manifest, objective=objective, slo=slo)
    except ConfigError as exc:  # points of one arm under different server arguments: name the file
        raise ConfigError(exc.message, where=str(run_dir / store.RESULTS_JSONL), hint=exc.hint) from None
    summary.tuning = load_tune(run_dir)
    summary.report_path = run_dir / REPORT_MD
    atomic_write(summary.report_path, render_markdown(summary, manifest))
    atomic_write(run_dir / SUMMARY_JSON, render_summary_json(summary, manifest))
    if plots:
        summary.plot_paths = write_plots(summary, run_dir / "plots") + write_phase_plot(summary, run_dir / "plots")
    atomic_write(run_dir / REPORT_HTML, render_html(summary, manifest, summary.plot_paths))
    return summary
