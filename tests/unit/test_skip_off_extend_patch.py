"""dynamic-spec-disable honours SGLang 0.5.14's SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND (issue 54):
a drafting-off step skips the draft extend and leaves shape-valid zeros for the next draft.

Here, without torch: where the hooks sit in every release's workers, the v1 release that cannot
skip (0.5.12, whose extend builds the next draft input itself), and the helpers themselves run on
stand-in tensors (numpy). On a real server (tokens identical, the skip taking effect, drafting
resuming cold): tests/real_sglang/test_adaptive_releases.py.
"""

from __future__ import annotations

import ast
import logging
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specops.sglang.adaptive import SKIP_ZERO_STEP_EXTEND
from tests.support.sglang_trees import apply_set, copy_tree

pytestmark = pytest.mark.xdist_group("skip_off_extend_patch")

SET = "dynamic-spec-disable"
V1 = "python/sglang/srt/speculative/eagle_worker.py"
V2 = "python/sglang/srt/speculative/eagle_worker_v2.py"
#: releases with the v1 worker, with the v2 worker (the set's range is 0.4.10 - 0.5.13)
V1_RELEASES = ["0.4.10", "0.5.3", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12"]
V2_RELEASES = ["0.5.4", "0.5.10.post1", "0.5.12", "0.5.13"]
HELPERS = ("should_speculate", "specops_drafting", "specops_skip_extend_set", "specops_skips_off_extend",
           "specops_stub_skipped_extend", "specops_skipped_extend_v1", "specops_skipped_extend_v2")


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for version in sorted(set(V1_RELEASES) | set(V2_RELEASES)):
        tree = copy_tree(version, tmp_path_factory.mktemp("skip") / version)
        apply_set(SET, tree)
        out[version] = tree
    return out


def _method(module: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    klass = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _first_statement(path: Path, cls: str, name: str) -> str:
    body = _method(ast.parse(path.read_text()), cls, name).body
    first = body[1] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body[0]
    return ast.unparse(first)


@pytest.mark.parametrize("version", V1_RELEASES)
def test_the_v1_extend_asks_first_whether_to_skip(trees, version):
    first = _first_statement(trees[version] / V1, "EAGLEWorker", "forward_draft_extend_after_decode")
    assert first == "if specops_skipped_extend_v1(self, batch):\n    return", first


@pytest.mark.parametrize("version", V2_RELEASES)
def test_the_v2_extend_asks_first_whether_to_skip(trees, version):
    first = _first_statement(trees[version] / V2, "EagleDraftWorker", "_draft_extend_for_decode")
    assert first == "if specops_skipped_extend_v2(self, batch, batch_result):\n    return", first


def _module_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return names


@pytest.mark.parametrize("version", V1_RELEASES)
def test_only_the_v1_worker_whose_extend_builds_the_next_input_refuses_the_switch(trees, version):
    """SPECOPS_CAN_SKIP_EXTEND (v1) is `"EagleDraftExtendInput" not in globals()`: the module
    imports that name exactly where forward_draft_extend_after_decode returns a new draft input
    (0.5.12) instead of filling the verify's in place through capture_for_decode."""
    path = trees[version] / V1
    extend = _method(ast.parse(path.read_text()), "EAGLEWorker", "forward_draft_extend_after_decode")
    fills_in_place = "self.capture_for_decode(logits_output, forward_batch.spec_info)" in ast.unparse(extend)
    assert ("EagleDraftExtendInput" not in _module_names(path)) is fills_in_place, version
    assert fills_in_place is (version != "0.5.12"), version
    text = path.read_text()
    assert 'SPECOPS_CAN_SKIP_EXTEND = "EagleDraftExtendInput" not in globals()' in text
    assert "if specops_skip_extend_set() and not SPECOPS_CAN_SKIP_EXTEND:" in text


class _FakeTorch:
    """What the helpers call of torch, on numpy."""
    float32, int64, bfloat16 = np.float32, np.int64, np.float16

    @staticmethod
    def zeros(shape: tuple[int, ...], dtype: Any, device: str) -> np.ndarray:
        assert device == "cpu"
        return np.zeros(shape, dtype=dtype)


def _helpers(path: Path) -> dict[str, Any]:
    module = ast.parse(path.read_text())
    wanted = [n for n in module.body if (isinstance(n, ast.FunctionDef) and n.name in HELPERS)
              or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in (
                  "SPECOPS_SKIP_EXTEND_ENV", "SPECOPS_STEPS", "SPECOPS_DRAFTING_OFF", "SPECOPS_DRAFTING_ON")
                  for t in n.targets))]
    import os
    namespace: dict[str, Any] = {"torch": _FakeTorch, "os": os, "logger": logging.getLogger("skip-test")}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def _worker(threshold: int) -> types.SimpleNamespace:
    config = types.SimpleNamespace(hidden_size=8, dtype=np.float16)
    return types.SimpleNamespace(server_args=types.SimpleNamespace(speculative_disable_batch_threshold=threshold),
                                 topk=1, device="cpu", draft_model_runner=types.SimpleNamespace(model_config=config),
                                 draft_runner=types.SimpleNamespace(model_config=config))


@pytest.mark.parametrize("value,skips", [("1", True), ("true", True), ("YES", True), ("y", True),
                                         ("0", False), ("false", False), ("", False), (None, False)])
def test_a_drafting_off_v1_step_skips_its_extend_exactly_when_the_switch_is_set(trees, monkeypatch, value, skips):
    h = _helpers(trees["0.5.10.post1"] / V1)
    assert h["SPECOPS_SKIP_EXTEND_ENV"] == SKIP_ZERO_STEP_EXTEND
    if value is None:
        monkeypatch.delenv(SKIP_ZERO_STEP_EXTEND, raising=False)
    else:
        monkeypatch.setenv(SKIP_ZERO_STEP_EXTEND, value)
    worker = _worker(threshold=1)
    # the verify of 3 requests left one verified token each (a one-token verify), and the target's
    # hidden states (EAGLE-3's three layers: 24 wide), which the skip must not hand the draft
    draft_input = types.SimpleNamespace(verified_id=np.arange(3), hidden_states=np.ones((3, 24)),
                                        topk_p=None, topk_index=None)
    batch = types.SimpleNamespace(spec_info=draft_input)
    assert h["specops_drafting"](worker, 3) is False
    assert h["specops_skipped_extend_v1"](worker, batch) is skips
    if skips:
        assert draft_input.topk_p.shape == (3, 1) and draft_input.topk_p.dtype == np.float32
        assert draft_input.topk_index.shape == (3, 1) and draft_input.topk_index.dtype == np.int64
        assert draft_input.hidden_states.shape == (3, 8) and draft_input.hidden_states.dtype == np.float16
        assert not draft_input.hidden_states.any() and not draft_input.topk_p.any()
    else:
        assert draft_input.topk_p is None and draft_input.hidden_states.shape == (3, 24)
    # the mark is the step's own: the next extend (no draft call decided it) runs
    assert h["specops_skipped_extend_v1"](worker, batch) is False


def test_a_drafting_step_runs_its_extend_with_the_switch_set(trees, monkeypatch):
    monkeypatch.setenv(SKIP_ZERO_STEP_EXTEND, "1")
    h = _helpers(trees["0.5.10.post1"] / V2)
    worker = _worker(threshold=4)
    result = types.SimpleNamespace(next_draft_input=types.SimpleNamespace(topk_p=None, topk_index=None,
                                                                          hidden_states=None))
    batch = types.SimpleNamespace(seq_lens=np.array([5, 6]))
    assert h["specops_drafting"](worker, 2) is True  # 2 <= 4: drafting
    assert h["specops_skipped_extend_v2"](worker, batch, result) is False
    assert result.next_draft_input.topk_p is None
    assert h["specops_drafting"](worker, 5) is False  # 5 > 4: off, skipped, one entry a request
    assert h["specops_skipped_extend_v2"](worker, batch, result) is True
    assert result.next_draft_input.topk_index.shape == (2, 1)
    assert result.next_draft_input.hidden_states.shape == (2, 8)
