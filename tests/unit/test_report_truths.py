"""Issue 38: report.md and report.html say the same things (one table model), and a
fairness difference that changes what is measured is in the headline."""

from __future__ import annotations

import re

from specops.records.schema import ResultRecord
from specops.report.html_report import render_html
from specops.report.markdown import render_markdown
from specops.report.summary import summarize


def _records(slo_cost: bool = False) -> list[ResultRecord]:
    out = []
    for arm, tps in (("baseline", {1: 100.0, 16: 700.0}), ("eagle3", {1: 150.0, 16: 350.0}),
                     ("adaptive", {1: 147.0, 16: 690.0})):
        for c, v in tps.items():
            rec = ResultRecord(host="local", arm=arm, mechanism="m", concurrency=c, repeat=0, completed=16,
                               output_throughput=v, mean_ttft_ms=10.0, mean_tpot_ms=5.0, input_len=32,
                               output_len=32, num_prompts=16)
            if arm == "adaptive":
                rec.extra.update({"drafting_off_share": 1.0 if c == 16 else 0.0, "drafting_off": c == 16})
            out.append(rec)
    return out


def _md_headers(text: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith("| concurrency | arm |"))
    return [h.strip() for h in line.strip("|").split("|")]


def _html_headers(text: str) -> list[str]:
    table = text[text.index("<h2>Results"):]
    head = table[:table.index("</thead>")]
    return [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>.*?</th>", head)]


def test_report_html_shows_every_column_report_md_shows() -> None:
    summary = summarize(_records(), {})
    md, page = render_markdown(summary, {}), render_html(summary, {}, [])
    assert "drafting" in _md_headers(md)
    assert _html_headers(page) == _md_headers(md)
    assert "off 100%" in page  # the adaptive arm's evidence that it stopped drafting
