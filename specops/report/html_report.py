"""`report.html`: the one file a user sends to a colleague.

Self-contained: the plots are embedded as data URIs, the tables sort on a click with a
few lines of inline script, no stylesheet or script is fetched, so it opens the same on
a laptop on a plane as on the GPU box. Built from the same ReportSummary as report.md.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specops.decide.summary import ADAPTIVE_TOLERANCE, ReportSummary
from specops.records.manifest import ManifestLike, as_manifest
from specops.records.schema import load_level
from specops.report.markdown import engine_label, result_columns, tune_section
from specops.report.phases import html_section
from specops.report.words import (
    THRESHOLD_RULE,
    adaptive_text,
    crossover_text,
    host_label,
    per_level_texts,
    saturation_text,
    threshold_text,
)
from specops.secrets import clip

REPORT_HTML = "report.html"

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{margin-bottom:.2rem} .facts{color:#555;font-size:.9rem} .sim{background:#fff4d6;border:1px solid #e0b84c;
padding:.6rem 1rem;border-radius:6px} table{border-collapse:collapse;margin:1rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.3rem .6rem;text-align:right} th{background:#f4f4f4;cursor:pointer;
user-select:none} td.l,th.l{text-align:left} tr.bad td{background:#fde8e8} .warn{color:#a33}
.plots{display:flex;flex-wrap:wrap;gap:1rem} .plots img{max-width:540px;width:100%;border:1px solid #eee}
"""

# Click a header to sort by that column (numbers numerically); click again to reverse.
_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v || a.cells[col].textContent, y = b.cells[col].dataset.v || b.cells[col].textContent;
      var nx = parseFloat(x), ny = parseFloat(y);
      return dir * ((isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
window.addEventListener('load', function () {
  var ok = Array.from(document.images).filter(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.dataset.plotsLoaded = String(ok.length);
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _cell(text: str, sort_value: float | None = None, left: bool = False) -> str:
    attrs = (' class="l"' if left else "") + (f' data-v="{sort_value}"' if sort_value is not None else "")
    return f"<td{attrs}>{_e(text)}</td>"


def _results_table(summary: ReportSummary) -> list[str]:
    out = []
    for s in summary.hosts:
        cols = result_columns(s, summary.slo)  # report.md's columns, the same model
        label = host_label(s)
        out.append(f"<h2>Results{' on ' + _e(label) if label else ''}</h2>")
        out.append('<table class="sortable"><thead><tr>'
                   + "".join(('<th class="l">' if col.left else "<th>") + f"{_e(col.header)}</th>" for col in cols)
                   + "</tr></thead><tbody>")
        short = {c for c, _ in (s.adaptive_shortfalls or [])}
        for row in s.rows():
            bad = row[1] == "adaptive" and row[0] in short
            out.append(('<tr class="bad">' if bad else "<tr>")
                       + "".join(_cell(col.text(*row), col.sort(*row), left=col.left) for col in cols) + "</tr>")
        out.append("</tbody></table>")
        out.append(f"<ul><li>crossover: {_e(crossover_text(s.crossover))}</li>"
                   f"<li>recommended threshold: {_e(threshold_text(s))}</li>"
                   f"<li>adaptive: {_e(adaptive_text(s))}</li>"
                   + "".join(f"<li>{_e(line)}</li>" for line in per_level_texts(s))
                   + "".join(f"<li>{_e(line)}</li>" for line in (saturation_text(s),) if line is not None)
                   + "</ul>")
    return out


def _plots(plot_paths: Sequence[Path]) -> list[str]:
    out = ['<h2>Plots</h2><div class="plots">']
    for path in plot_paths:
        try:
            data = base64.b64encode(Path(path).read_bytes()).decode()
        except OSError:
            continue
        out.append(f'<img alt="{_e(Path(path).stem)}" src="data:image/png;base64,{data}">')
    out.append("</div>")
    return out


def render_html(summary: ReportSummary, given: ManifestLike, plot_paths: Sequence[Path]) -> str:
    """The whole page as one string: deterministic for the same files."""
    manifest = as_manifest(given)
    facts = [f"{label}: <code>{_e(manifest.header(key))}</code>"
             for key, label in (("run_id", "run"), ("engine_version", engine_label(manifest)), ("sglang_commit", "commit"),
                                ("device", "device"), ("cpu", "CPU"),
                                ("gpu", "GPU"), ("gpu_count", "GPUs"), ("runner", "runner"),
                                ("dataset", "dataset"), ("input_len", "input len"), ("output_len", "output len"))
             if manifest.header(key) not in (None, "")]
    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>specops bench report {_e(manifest.run_id or '')}</title>",
           f"<style>{_STYLE}</style></head><body>", "<h1>specops bench report</h1>"]
    if facts:
        out.append(f'<p class="facts">{" · ".join(facts)}</p>')
    if summary.simulated:
        out.append('<p class="sim"><b>SIMULATED RESULTS.</b> These numbers come from specops\'s SGLang simulator, '
                   "not a GPU: they show the method and the shape of the curves, not your hardware.</p>")
    out.append("<h2>Headline</h2><ul>" + "".join(f"<li>{_e(line)}</li>" for line in summary.headline) + "</ul>")
    out += _results_table(summary)
    for s in summary.hosts:
        out += html_section(s, summary.slo)
    out += _plots(plot_paths)
    if summary.tuning:
        lines = [ln[2:] for ln in tune_section(summary.tuning) if ln.startswith("- ")]
        out.append("<h2>Tuning</h2><ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>")
    out.append("<h2>Fairness</h2><ul>" + ("".join(f'<li class="warn">{_e(w)}</li>' for w in summary.warnings)
                                          or "<li>no differences found between arms beyond the speculative "
                                             "arguments</li>") + "</ul>")
    if summary.failed:
        axis = "rate" if any(r.rate is not None for r in summary.failed) else "concurrency"
        out.append('<h2>Failed points</h2><table class="sortable"><thead><tr><th class="l">host</th>'
                   f'<th class="l">arm</th><th>{axis}</th><th>repeat</th><th class="l">error</th></tr></thead><tbody>')
        for r in summary.failed:
            out.append("<tr>" + "".join([_cell(str(r.host), left=True), _cell(str(r.arm), left=True),
                                         _cell(f"{load_level(r):g}"), _cell(str(r.repeat)),
                                         _cell(clip(str(r.error or "unknown error"), 300, keep="start"), left=True)]) + "</tr>")
        out.append("</tbody></table>")
    out.append("<h2>Method</h2><p>Medians over repeats; spread is min-max. The ratio is the arm's median over "
               "baseline's; the crossover is the first level where EAGLE-3's ratio drops below 1, interpolated in "
               f"log2(concurrency); the threshold (the rule `specops tune` uses too): "
               f"{_e(THRESHOLD_RULE)}; the adaptive arm should reach {ADAPTIVE_TOLERANCE:.2f}x of "
               "the better arm at every level; the envelope line is the worst and the mean, over the levels, of its "
               "median over the better arm's; the speculation tax is its median over baseline's where its drafting "
               "was off (the levels its records say so, else those above the threshold it was launched with).</p>")
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"
