"""report.html opens on its own in a real browser (headless Chromium, Debian's package)
and shows the plots: the file a user sends to a colleague, with nothing fetched."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib.image import imread

from specops.records import store
from specops.records.schema import ResultRecord
from specops.report.artifacts import render_report

CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (.ci/run installs it)")


def _run_dir(tmp_path: Path) -> Path:
    tps = {"baseline": {1: [100, 102], 4: [300, 310], 16: [700, 690]},
           "eagle3": {1: [130, 128], 4: [320, 330], 16: [340, 360]},
           "adaptive": {1: [129, 127], 4: [318, 320], 16: [680, 675]}}
    for arm, levels in tps.items():
        for c, values in levels.items():
            for r, v in enumerate(values):
                store.append_result(tmp_path, ResultRecord(host="local", arm=arm, mechanism="m", concurrency=c,
                                                           repeat=r, completed=16, output_throughput=v,
                                                           simulated=True), rewrite_csv=False)
    store.write_manifest(tmp_path, {"run_id": "r1", "sglang_version": "0.5.10.post1", "arms": {}})
    render_report(tmp_path)
    return tmp_path


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--virtual-time-budget=3000", *args], capture_output=True, text=True, timeout=120)


def test_report_html_is_self_contained_and_shows_the_plots(tmp_path):
    run = _run_dir(tmp_path)
    page = (run / "report.html").read_text()
    assert "SIMULATED RESULTS" in page and page.count("data:image/png;base64,") == 5
    assert not re.search(r"""(src|href)=["']https?://""", page), "nothing may be fetched from the network"
    dom = _chromium("--dump-dom", (run / "report.html").as_uri()).stdout
    assert 'data-plots-loaded="5"' in dom, dom[:500]  # the browser decoded all five plots
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1200,2600", (run / "report.html").as_uri())
    pixels = imread(str(shot))
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1000
    # plots are colourful: the screenshot holds many more colours than a page of text would
    colours = {tuple(px) for px in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3)}
    assert len(colours) > 200, len(colours)
