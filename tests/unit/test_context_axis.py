"""Context length as an axis (issue 24): the simulator's KV term, the point matrix, the
settings and --resume rules for length lists, and the per-length report on hand-built records."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.bench.matrix import Point, length_pairs, plan_points
from specops.bench.resume import check_resume
from specops.bench.settings import BenchSettings
from specops.decide.summary import context_rows
from specops.errors import ConfigError
from specops.records import store
from specops.records.schema import CONTEXT_AXIS, ResultRecord
from specops.report.artifacts import render_report
from specops.report.markdown import render_markdown
from specops.report.summary import summarize
from specops.report.summary_doc import summary_document
from specops.sim import model as M

# EAGLE-3 over baseline: wins to c=4 at 256 tokens, to c=16 at 8192 (as the simulator models it)
TPS = {256: {"baseline": {2: 180, 4: 300, 8: 440, 16: 580, 32: 670},
             "eagle3": {2: 330, 4: 345, 8: 350, 16: 350, 32: 350}},
       8192: {"baseline": {2: 150, 4: 220, 8: 290, 16: 330, 32: 350},
              "eagle3": {2: 280, 4: 320, 8: 330, 16: 335, 32: 300}}}


def _records(tps: dict[int, dict[str, dict[int, float]]], axis: bool = True) -> list[ResultRecord]:
    out = []
    for length, arms in tps.items():
        for arm, levels in arms.items():
            for c, v in levels.items():
                rec = ResultRecord(host="h", arm=arm, mechanism="m", concurrency=c, repeat=0, completed=16,
                                   output_throughput=v, input_len=length, output_len=64, num_prompts=16)
                if axis:
                    rec.extra[CONTEXT_AXIS] = True
                out.append(rec)
    return out


MANIFEST = {"run_id": "r", "bench": {"input_len": [256, 8192], "output_len": 64, "concurrency": [2, 4, 8, 16, 32]}}


def test_kv_term_is_zero_at_short_contexts_and_moves_the_crossover_up() -> None:
    levels = [1, 2, 4, 8, 16, 32, 64]
    assert M.context_ms(64 * 512, 64) == 0.0                      # input + output <= 512: as calibrated
    for c in levels:
        for arm in ("baseline", "eagle3"):
            assert M.predicted_output_throughput(arm, c, context=384) == M.predicted_output_throughput(arm, c)
    assert M.predicted_output_throughput("baseline", 64) == pytest.approx(773.0)
    assert M.predicted_output_throughput("eagle3", 64) == pytest.approx(354.0)
    # beyond the free context, each KV token costs a plain step KV_MS_PER_TOKEN; a speculative
    # step reads it once for all k+1 tokens, plus 1/32 per draft step
    assert M.context_ms(1512, 1) == pytest.approx(1000 * M.KV_MS_PER_TOKEN)
    assert M.context_ms(1512, 1, 3) == pytest.approx(1000 * M.KV_MS_PER_TOKEN * (1 + 3 / 32))
    crossings = [M.predicted_crossover(levels, context=n) for n in (256, 4096, 16384, 32768)]
    assert crossings == [8, 8, 16, None]   # None: EAGLE-3 ahead at every level (MagicDec's regime)
    ratio = [M.predicted_output_throughput("eagle3", 8, context=n) / M.predicted_output_throughput("baseline", 8, context=n)
             for n in (256, 2048, 8192)]
    assert ratio == sorted(ratio) and ratio[0] < 0.8 and ratio[2] > 0.95


def test_plan_points_sweeps_lengths_between_arm_and_level() -> None:
    assert plan_points(["a"], [1, 2], 1, [(256, 8)]) == [Point("a", 1, 0), Point("a", 2, 0)]  # one length: as before
    pts = plan_points(["a", "b"], [2, 1], 2, length_pairs([2048, 256], [8]))
    assert [p.label() for p in pts[:4]] == ["a c=1 in=256 out=8 r=0", "a c=2 in=256 out=8 r=0",
                                          "a c=1 in=2048 out=8 r=0", "a c=2 in=2048 out=8 r=0"]
    assert len(pts) == 2 * 2 * 2 * 2 and pts[4].arm == "b" and pts[8].arm == "b"   # repeat 1 runs b first
    assert length_pairs([256, 1024], [16, 64]) == [(256, 16), (256, 64), (1024, 16), (1024, 64)]


def test_settings_keep_one_length_an_int_and_refuse_bad_lists() -> None:
    one = BenchSettings.from_dict({"input_len": [256], "output_len": 32})
    assert (one.input_len, one.output_len, one.lengths()) == (256, 32, [(256, 32)])
    two = BenchSettings.from_dict({"input_len": [2048, 256], "output_len": [32]})
    assert two.input_len == [2048, 256] and two.lengths() == [(256, 32), (2048, 32)]
    assert two.length_of(Point("a", 1, 0, 2048, 32)) == (2048, 32)
    for bad, said in (({"input_len": [256, 0]}, "--input-len must be at least 1"),
                      ({"output_len": [8, 8]}, "--output-len lists a length twice"),
                      ({"input_len": ["x"]}, "must be a list of ints")):
        with pytest.raises(ConfigError, match=said):
            BenchSettings.from_dict(bad)


def test_resume_treats_lengths_like_concurrency(tmp_path: Path) -> None:
    had = {"input_len": [256, 2048], "output_len": 64, "concurrency": [1, 2]}
    same, notes = check_resume(had, {"input_len": [2048, 256]}, tmp_path)
    assert same == had and notes == []
    with pytest.raises(ConfigError, match="add --extend to add lengths to it"):
        check_resume(had, {"input_len": [8192]}, tmp_path)
    grown, notes = check_resume(had, {"input_len": 8192}, tmp_path, extend=True)
    assert grown["input_len"] == [256, 2048, 8192]
    assert notes == ["--extend keeps the run's points at --input-len 256,2048 (not in --input-len 8192)"]
    grown, _ = check_resume({"input_len": 256, "output_len": 64}, {"output_len": [64, 128]}, tmp_path, extend=True)
    assert grown["output_len"] == [64, 128] and grown["input_len"] == 256


def test_report_gives_a_crossover_and_threshold_per_length() -> None:
    summary = summarize(_records(TPS), MANIFEST)
    assert [(s.host, s.length) for s in summary.hosts] == [("h", (256, 64)), ("h", (8192, 64))]
    rows = context_rows(summary)
    assert [(r.input_len, r.crossover.below, r.crossover.above) for r in rows] == [(256, 4, 8), (8192, 16, 32)]
    assert rows[0].crossover.value < rows[1].crossover.value
    assert [r.threshold for r in rows] == [4, 16]
    assert any(line.startswith("crossover by context length: in=256 out=64: c≈") for line in summary.headline)
    text = render_markdown(summary, MANIFEST)
    assert "## Context length" in text and "## Results on h in=8192 out=64" in text
    assert not any("client settings differ" in w for w in summary.warnings)
    doc = summary_document(summary, MANIFEST)
    assert [(c["input_len"], c["recommended_threshold"]) for c in doc["contexts"]] == [(256, 4), (8192, 16)]
    assert [(h["host"], h["input_len"], h["output_len"]) for h in doc["hosts"]] == [("h", 256, 64), ("h", 8192, 64)]
    assert doc["settings"]["input_len"] == [256, 8192]


def test_one_length_run_reads_as_before() -> None:
    """A run of one length has no contexts, no lengths in its host entries, and records that
    differ in length at a point are still one point (the latest) and a fairness warning."""
    recs = _records({256: TPS[256]}, axis=False)
    summary = summarize(recs, {"bench": {"input_len": 256, "output_len": 64}})
    assert [s.length for s in summary.hosts] == [None] and context_rows(summary) == []
    doc = summary_document(summary, {})
    assert "contexts" not in doc and "input_len" not in doc["hosts"][0]
    assert "## Context length" not in render_markdown(summary, {"bench": {"input_len": 256, "output_len": 64}})
    odd = _records({256: TPS[256], 8192: TPS[8192]}, axis=False)
    assert len(store.effective_records(odd)) == len(odd) // 2   # same points: the latest wins


def test_render_writes_the_context_plot_only_for_several_lengths(tmp_path: Path) -> None:
    for name, recs, manifest, want in (("two", _records(TPS), MANIFEST, True),
                                       ("one", _records({256: TPS[256]}, axis=False),
                                        {"run_id": "one", "bench": {"input_len": 256}}, False)):
        run = tmp_path / name
        run.mkdir()
        for rec in recs:
            store.append_result(run, rec)
        store.write_manifest(run, manifest)
        summary = render_report(run)
        plot = run / "plots" / "crossover_context.png"
        assert plot.exists() == want and (plot in summary.plot_paths) == want
        assert ("crossover_context.png" in (run / "report.md").read_text()) == want
