"""Report math on hand-built records, the rendered report, and the plots."""

from __future__ import annotations

import json
import math

import pytest

from specops.decide.summary import find_crossover
from specops.errors import ConfigError
from specops.records import store
from specops.records.schema import ResultRecord
from specops.report.artifacts import render_report
from specops.report.markdown import SIM_BANNER, render_markdown, terminal_table
from specops.report.summary import fairness_warnings, summarize
from specops.report.words import crossover_text, tax_text

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _records(tps: dict[str, dict[int, list[float]]], *, simulated: bool = False) -> list[ResultRecord]:
    """tps[arm][concurrency] = [tok/s of repeat 0, repeat 1, ...]."""
    out = []
    for arm, levels in tps.items():
        for c, values in levels.items():
            for r, v in enumerate(values):
                out.append(ResultRecord(host="local", arm=arm, mechanism="m", concurrency=c, repeat=r,
                                        completed=16, output_throughput=v, mean_ttft_ms=10.0 * c,
                                        mean_tpot_ms=5.0 + c, simulated=simulated, input_len=32,
                                        output_len=32, num_prompts=16))
    return out


def test_crossover_is_interpolated_in_log2_concurrency():
    # ratio 1.2 at c=4, 0.8 at c=16: halfway in log2 between 4 (2) and 16 (4) is 2**3 = 8.
    cross = find_crossover([(1, 1.3), (4, 1.2), (16, 0.8), (64, 0.5)])
    assert cross.kind == "interpolated" and (cross.below, cross.above) == (4, 16)
    assert cross.value == pytest.approx(8.0)
    # 1.1 -> 0.7 between 2 and 8: a quarter of the way, 2**(1 + 0.25*2) = 2**1.5.
    assert find_crossover([(2, 1.1), (8, 0.7)]).value == pytest.approx(2 ** 1.5)


def test_crossover_never_and_at_every_level():
    assert find_crossover([(1, 1.5), (8, 1.01)]).kind == "never"
    every = find_crossover([(1, 0.9), (8, 1.2)])
    assert every.kind == "every" and "every level" in crossover_text(every)
    assert find_crossover([]).kind == "n/a"


def test_summary_medians_ratios_and_adaptive_check():
    records = _records({
        "baseline": {1: [100, 110, 90], 4: [300, 310, 290], 16: [700, 720, 680]},
        "eagle3":   {1: [150, 160, 140], 4: [330, 300, 360], 16: [350, 340, 360]},
        "adaptive": {1: [148, 150, 152], 4: [300, 280, 320], 16: [690, 700, 710]},
    })
    summary = summarize(records, {})
    host = summary.hosts[0]
    base = host.cells[("baseline", 4)]
    assert (base.median_tps, base.min_tps, base.max_tps, base.repeats) == (300, 290, 310, 3)
    r4 = host.ratios[("eagle3", 4)]
    assert r4.ratio == pytest.approx(330 / 300)
    assert (r4.low, r4.high) == (pytest.approx(300 / 310), pytest.approx(360 / 290))  # per-repeat ratios
    # eagle3 1.1 at c=4, 0.5 at c=16 -> 2**(2 + (0.1/0.6)*2).
    assert host.crossover.value == pytest.approx(2 ** (2 + 2 * (0.1 / 0.6)))
    assert host.threshold == 4
    # adaptive at c=4: 300 < 0.95 * 330 = 313.5 -> a shortfall; c=1 and c=16 pass.
    assert [c for c, _ in host.adaptive_shortfalls] == [4]
    assert summary.headline[0].startswith("crossover at c≈5.0 (between 4 and 16)")
    # no running batch in these records: the threshold is in concurrency units, and says so
    assert summary.headline[1] == ("recommended threshold: 4 (speculate while concurrency is <= 4; "
                                   "the server reported no running batch)")
    assert "c=4 (0.909x)" in summary.headline[2]


def test_failed_points_are_listed_and_excluded_from_the_medians():
    records = _records({"baseline": {1: [100, 100]}, "eagle3": {1: [120, 120]}})
    crash = ResultRecord(host="local", arm="eagle3", concurrency=1, repeat=2, status="failed", failed=16,
                         error="server exited: Traceback ... CUDA out of memory | see log")
    summary = summarize(records + [crash], {})
    assert summary.hosts[0].cells[("eagle3", 1)].repeats == 2
    assert [(r.arm, r.repeat) for r in summary.failed] == [("eagle3", 2)]
    text = render_markdown(summary, {})
    assert "## Failed points" in text
    assert "CUDA out of memory \\| see log" in text


def test_fairness_warnings_from_manifest_server_args():
    manifest = {"arms": {
        "baseline": {"server_args": {"max_running_requests": 256, "cuda_graph_max_bs": 256, "port": 30000,
                                     "model_path": "m"}},
        "eagle3": {"server_args": {"max_running_requests": 48, "cuda_graph_max_bs": 256, "port": 30001,
                                   "model_path": "m", "speculative_algorithm": "EAGLE3",
                                   "speculative_num_steps": 3}},
        "adaptive": {"argv": ["python", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30002",
                              "--speculative-algorithm", "EAGLE3", "--cuda-graph-max-bs", "128",
                              "--max-running-requests", "256"]},
    }}
    warnings = fairness_warnings(manifest)
    text = "\n".join(warnings)
    assert "max_running_requests differs" in text and "eagle3=48" in text
    assert "cuda_graph_max_bs differs" in text
    assert "port" not in text and "speculative" not in text.split("differs")[0]
    unfair_cap = fairness_warnings({"arms": {"eagle3": {"server_args": {"speculative_algorithm": "EAGLE3"}},
                                             "baseline": {"server_args": {}}}})
    assert any("caps it at 48" in w for w in unfair_cap)
    assert fairness_warnings({"arms": {"baseline": {"server_args": {"a": 1}},
                                       "eagle3": {"server_args": {"a": 1, "speculative_algorithm": "E",
                                                                  "max_running_requests": 8}}}}) == \
        ["max_running_requests differs between arms: baseline=unset, eagle3=8"]


def test_render_report_from_files_is_byte_identical_and_has_plots(tmp_path):
    records = _records({"baseline": {1: [100, 102], 4: [300, 310], 16: [700, 690]},
                        "eagle3": {1: [130, 128], 4: [320, 330], 16: [340, 360]},
                        "adaptive": {1: [129, 127], 4: [318, 320], 16: [680, 675]}}, simulated=True)
    for rec in records:
        store.append_result(tmp_path, rec, rewrite_csv=False)
    store.write_manifest(tmp_path, {"run_id": "r1", "sglang_version": "0.5.10.post1", "arms": {}})
    first = render_report(tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert SIM_BANNER in text and "crossover at c≈" in first.headline[0]
    assert "adaptive: reached >= 0.95x of the better arm at every level" in first.headline[2]
    render_report(tmp_path)
    assert (tmp_path / "report.md").read_text() == text
    assert [p.name for p in first.plot_paths] == ["throughput.png", "ratio.png", "ttft.png", "tpot.png", "pareto.png"]
    for path in first.plot_paths:
        data = path.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 10_000, path
    assert not list((tmp_path / "plots").glob("*.tmp"))
    table = terminal_table(first).table
    assert table.row_count == 9 and "SIMULATED" in str(table.title)


def test_empty_and_baseline_only_runs_render_without_crashing(tmp_path):
    summary = render_report(tmp_path)
    assert "No successful results yet." in (tmp_path / "report.md").read_text()
    assert all(p.read_bytes()[:8] == PNG_SIGNATURE for p in summary.plot_paths)
    only = summarize(_records({"baseline": {1: [100.0]}}), {})
    assert only.hosts[0].crossover.kind == "n/a" and "n/a" in only.headline[1]
    assert not math.isnan(only.hosts[0].cells[("baseline", 1)].median_tps)


def test_summary_json_says_what_the_report_says(tmp_path):
    records = _records({"baseline": {1: [100, 102], 4: [300, 310], 16: [700, 690]},
                        "eagle3": {1: [130, 128], 4: [320, 330], 16: [340, 360]},
                        "adaptive": {1: [129, 127], 4: [250, 240], 16: [680, 675]}}, simulated=True)
    for rec in records:
        store.append_result(tmp_path, rec, rewrite_csv=False)
    store.write_manifest(tmp_path, {"run_id": "r1", "sglang_version": "0.5.10.post1", "arms": {},
                                    "bench": {"input_len": 32, "output_len": 32, "repeats": 2, "arms": ["baseline"]}})
    summary = render_report(tmp_path, plots=False)
    first = (tmp_path / "summary.json").read_bytes()
    doc = json.loads(first)
    assert doc["schema"] == "specops.summary/2" and doc["run_id"] == "r1" and doc["simulated"] is True
    assert doc["settings"] == {"input_len": 32, "output_len": 32, "repeats": 2, "arms": ["baseline"]}
    (host,) = doc["hosts"]
    assert host["crossover"]["kind"] == "interpolated" and (host["crossover"]["below"], host["crossover"]["above"]) == (4, 16)
    assert host["crossover"]["value"] == pytest.approx(summary.hosts[0].crossover.value)
    assert host["recommended_threshold"] == summary.hosts[0].threshold == 4
    assert host["adaptive"] == {"checked": True, "ok": False,
                                "shortfalls": [{"concurrency": 4, "ratio": pytest.approx(245 / 325)}]}
    eagle16 = next(p for p in host["points"] if p["arm"] == "eagle3" and p["concurrency"] == 16)
    assert eagle16["output_throughput"] == {"median": 350.0, "min": 340.0, "max": 360.0}
    assert eagle16["ratio_to_baseline"]["median"] == pytest.approx(350 / 695)
    assert doc["headline"] == summary.headline
    render_report(tmp_path, plots=False)
    assert (tmp_path / "summary.json").read_bytes() == first  # a function of the files alone


def test_envelope_and_speculation_tax_from_drafting_off_evidence():
    records = _records({
        "baseline": {1: [100, 100], 4: [300, 300], 16: [700, 700]},
        "eagle3":   {1: [150, 150], 4: [330, 330], 16: [350, 350]},
        "adaptive": {1: [147, 147], 4: [297, 297], 16: [672, 686]},
    })
    for rec in records:   # the adaptive arm says when its drafting was off (another part writes this)
        if rec.arm == "adaptive":
            rec.extra["drafting_off_share"] = {1: 0.0, 4: 0.5, 16: 1.0}[rec.concurrency]
    host = summarize(records, {}).hosts[0]
    # adaptive over the better arm: 147/150, 297/330, 679/700
    assert host.envelope.ratios == pytest.approx({1: 0.98, 4: 0.9, 16: 0.97})
    assert host.envelope.worst == (4, pytest.approx(0.9))
    assert host.envelope.mean == pytest.approx((0.98 + 0.9 + 0.97) / 3)
    # drafting off for >= 90% of the point only at c=16: 679/700
    assert host.tax.source == "drafting_off" and host.tax.ratios == pytest.approx({16: 0.97})
    headline = summarize(records, {}).headline
    assert headline[3] == "adaptive vs the better of baseline and EAGLE-3: worst 0.900x at c=4, mean 0.950x over 3 levels"
    assert headline[4].startswith("speculation tax (adaptive / baseline where drafting is off): 0.970x at c=16 "
                                  "(levels where the records say drafting was off for >= 90% of the point)")


def test_speculation_tax_falls_back_to_levels_above_the_arms_threshold_and_says_so(tmp_path):
    records = _records({"baseline": {1: [100], 4: [300], 16: [700], 32: [800]},
                        "eagle3": {1: [150], 4: [330], 16: [350], 32: [360]},
                        "adaptive": {1: [150], 4: [320], 16: [665], 32: [784]}})
    manifest = {"hosts": {"local": {"arms": {"adaptive": {"effective_threshold": 8}}}}}
    summary = summarize(records, manifest)
    tax = summary.hosts[0].tax
    assert (tax.source, tax.threshold, tax.unit) == ("above_threshold", 8, "concurrency")
    assert tax.ratios == pytest.approx({16: 0.95, 32: 0.98})
    assert summary.headline[4] == ("speculation tax (adaptive / baseline where drafting is off): mean 0.965x, "
                                   "worst 0.950x at c=16, over c=16,32 (concurrency above the arm's threshold 8: "
                                   "no drafting-off evidence in the records)")
    assert "n/a" in tax_text(summarize(records, {}).hosts[0].tax)   # no threshold recorded, no evidence
    for rec in records:
        store.append_result(tmp_path, rec, rewrite_csv=False)
    store.write_manifest(tmp_path, {"run_id": "r", **manifest})
    render_report(tmp_path, plots=False)
    doc = json.loads((tmp_path / "summary.json").read_text())
    (host,) = doc["hosts"]
    assert host["envelope"]["worst"] == {"concurrency": 16, "ratio": pytest.approx(0.95)}   # 665/700
    assert host["envelope"]["mean"] == pytest.approx((1.0 + 320 / 330 + 0.95 + 0.98) / 4)
    assert host["speculation_tax"]["source"] == "above_threshold"
    assert host["speculation_tax"]["levels"] == [{"concurrency": 16, "ratio": pytest.approx(0.95)},
                                                {"concurrency": 32, "ratio": pytest.approx(0.98)}]
    html = (tmp_path / "report.html").read_text()
    assert "speculation tax (adaptive / baseline where drafting is off): mean 0.965x" in html
    assert "adaptive vs the better of baseline and EAGLE-3: worst 0.950x at c=16" in (tmp_path / "report.md").read_text()


def test_an_old_run_directory_still_renders(tmp_path):
    """Records written before envelopes, taxes and SLOs (no running batch, no extra): the
    report renders, and the new lines say what they could not compute."""
    old = [{"host": "h", "arm": arm, "concurrency": c, "repeat": 0, "status": "ok", "output_throughput": tps}
           for arm, c, tps in (("baseline", 1, 100.0), ("eagle3", 1, 150.0), ("adaptive", 1, 140.0))]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    summary = render_report(tmp_path, plots=False)
    assert summary.hosts[0].envelope.ratios == pytest.approx({1: 140 / 150})
    assert "speculation tax (adaptive / baseline where drafting is off): n/a" in summary.headline[4]
    assert json.loads((tmp_path / "summary.json").read_text())["hosts"][0]["speculation_tax"]["source"] == "none"
    # an SLO over records without per-request latencies (SGLang's runner, or an old run): said, not guessed
    with_slo = summarize([ResultRecord.from_dict(r) for r in old], {"bench": {"slo": {"ttft_ms": 100}}})
    assert with_slo.hosts[0].cells[("eagle3", 1)].goodput is None
    assert with_slo.headline[-1] == ("objective: throughput (output tok/s); SLO TTFT <= 100 ms: goodput n/a, the "
                                     "records carry no per-request latencies (the builtin runner keeps them)")


def test_pareto_frontier_per_gpu_figures_and_cost_per_million_tokens(tmp_path):
    from specops.report.plots import frontier

    assert frontier([(10, 100), (20, 80), (15, 90), (12, 70), (20, 60)]) == [(10, 100), (15, 90), (20, 80)]
    records = _records({"baseline": {1: [100, 100], 4: [300, 300]}, "eagle3": {1: [150, 150], 4: [330, 330]}})
    manifest = {"run_id": "r", "bench": {"gpu_hour_cost": {"local": 3.6}},
                "hosts": {"local": {"arms": {"eagle3": {"server_args": {"tp_size": 2, "dp_size": 1}},
                                             "baseline": {"server_args": {"tp_size": 1}}}}}}
    host = summarize(records, manifest).hosts[0]
    eagle4 = host.cells[("eagle3", 4)]
    assert eagle4.gpus == 2 and eagle4.tps_per_gpu == 165.0
    assert eagle4.tps_per_user == pytest.approx(1000 / (5.0 + 4))          # mean_tpot_ms = 5 + c
    # $3.6 per GPU-hour x 2 GPUs at 330 tok/s: 7.2 / (3600 x 330) per token = 6.06 $ per 1M tokens
    assert eagle4.cost_per_mtok == pytest.approx(3.6 * 2 * 1e6 / (3600 * 330))
    assert host.cells[("baseline", 1)].cost_per_mtok == pytest.approx(3.6 * 1e6 / (3600 * 100))
    for rec in records:
        store.append_result(tmp_path, rec, rewrite_csv=False)
    store.write_manifest(tmp_path, manifest)
    summary = render_report(tmp_path)
    point = next(p for p in json.loads((tmp_path / "summary.json").read_text())["hosts"][0]["points"]
                 if p["arm"] == "eagle3" and p["concurrency"] == 4)
    assert (point["gpus"], point["output_throughput_per_gpu"]) == (2, 165.0)
    assert point["cost_per_mtok"] == pytest.approx(eagle4.cost_per_mtok)
    text = (tmp_path / "report.md").read_text()
    assert "| $ / 1M output tok |" in text and f"| {eagle4.cost_per_mtok:.3f} |" in text
    pareto = tmp_path / "plots" / "pareto.png"
    assert pareto in summary.plot_paths and pareto.read_bytes()[:8] == PNG_SIGNATURE
    assert "$ / 1M output tok" in (tmp_path / "report.html").read_text()
    assert summarize(records, {}).hosts[0].cells[("eagle3", 4)].cost_per_mtok is None   # no price given


def test_objective_tpot_moves_the_crossover_and_threshold_and_is_named():
    records = _records({"baseline": {1: [100], 4: [300], 16: [700]}, "eagle3": {1: [150], 4: [330], 16: [350]}})
    for rec in records:   # EAGLE-3 is faster per request at c=1 only; at c=4 it wins on throughput, not TPOT
        if rec.arm == "eagle3":
            rec.mean_tpot_ms = {1: 4.0, 4: 12.0, 16: 40.0}[rec.concurrency]
        else:
            rec.mean_tpot_ms = {1: 8.0, 4: 10.0, 16: 20.0}[rec.concurrency]
    by_tps = summarize(records, {}).hosts[0]
    assert (by_tps.crossover.below, by_tps.crossover.above, by_tps.threshold) == (4, 16, 4)
    summary = summarize(records, {"bench": {"objective": "tpot"}})
    host = summary.hosts[0]
    # per-user speed 1000/TPOT: EAGLE-3 over baseline is 8/4 = 2.0 at c=1, 10/12 at c=4
    assert (host.crossover.below, host.crossover.above, host.threshold) == (1, 4, 1)
    assert host.crossover.value == pytest.approx(2 ** ((2.0 - 1) / (2.0 - 10 / 12) * 2))
    assert summary.headline[-1].startswith("objective: TPOT")
    with pytest.raises(ConfigError, match="needs an SLO"):
        summarize(records, {"bench": {"objective": "goodput"}})


def test_points_where_drafting_was_off_show_the_decode_lines_accept_length(tmp_path):
    """Issue 28: SGLang's /server_info accept length counts a one-token (no drafting) step as
    a speculative step of 1, so an adaptive point where drafting was off shows the figure from
    its decode lines, which leave those steps out; "-" where no step drafted."""
    records = _records({"baseline": {1: [100], 16: [700]}, "eagle3": {1: [150], 16: [350]},
                        "adaptive": {1: [147], 4: [300], 16: [690]}})
    for rec in records:
        if rec.arm != "baseline":
            rec.accept_length = {1: 2.6, 4: 1.4, 16: 1.1}[rec.concurrency]  # /server_info: diluted
        if rec.arm == "adaptive":
            off = {1: 0.0, 4: 0.5, 16: 1.0}[rec.concurrency]
            rec.extra.update({"drafting_off_share": off, "drafting_off": off > 0})
            rec.server_accept_length = {1: 2.6, 4: 2.5, 16: None}[rec.concurrency]
    cells = summarize(records, {}).hosts[0].cells
    assert cells[("adaptive", 1)].shown_accept_length() == 2.6   # drafting throughout: the server's figure
    assert cells[("adaptive", 4)].shown_accept_length() == 2.5   # half off: drafting steps only
    assert cells[("adaptive", 16)].shown_accept_length() is None  # all off: no accept length to show
    assert cells[("eagle3", 16)].shown_accept_length() == 1.1     # an arm without the evidence: as reported
    text = render_markdown(summarize(records, {}), {})
    rows = {(ln.split("|")[1].strip(), ln.split("|")[2].strip()): ln.split("|")[8].strip()
            for ln in text.splitlines() if ln.startswith("| ") and "| adaptive |" in ln}
    assert rows == {("1", "adaptive"): "2.60", ("4", "adaptive"): "2.50", ("16", "adaptive"): "-"}
