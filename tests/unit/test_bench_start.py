"""Where a bench run starts (run.resume.bench_start), without a terminal: a fresh directory,
a resumed run with its recorded settings, or a clear refusal (--extend without --resume, a
--resume directory with no manifest, an --out that already holds results)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.errors import ConfigError
from specops.run.resume import bench_start


def test_where_a_bench_run_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--extend adds levels"):
        bench_start({}, out=None, resume=None, extend=True)
    with pytest.raises(ConfigError, match="has no manifest.json"):
        bench_start({}, out=None, resume=tmp_path)
    held = tmp_path / "held"
    held.mkdir()
    (held / "results.jsonl").write_text("")
    with pytest.raises(ConfigError, match="already holds results"):
        bench_start({}, out=held, resume=None)
    fresh = bench_start({"seed": 1}, out=tmp_path / "new", resume=None)
    assert (fresh.settings, fresh.run_dir, fresh.notes, fresh.resumed) == ({"seed": 1}, tmp_path / "new", [], False)
    (held / "manifest.json").write_text(json.dumps({"bench": {"seed": 3, "dataset_hash": "h"}}))
    resumed = bench_start({"seed": 1}, out=None, resume=held, given={})
    assert (resumed.settings, resumed.run_dir, resumed.resumed) == ({"seed": 3}, held, True)
