"""The eagle-torch-native-v2 patch set (issue 54, point 3: EAGLE on torch_native for SGLang
0.5.14, whose only EAGLE worker is v2) on the release tree it is written for, and refused on
the others.

What runs without torch is run here: the set applied to 0.5.14's tree (again: nothing to do;
reverted: byte for byte), every touched file compiled, refused where an anchor is missing and
on 0.5.10.post1 (eagle-torch-native's); the patched code executed on numpy stand-ins: the
lengths a verify hands torch_native's extend and v2's draft extend left as it is (0.5.14's
ForwardMode has no is_draft_extend, which the first try of this set called), and the torch
code that stands in for EAGLE v2's bookkeeping kernels on a CPU. Which set deploy and bench
take per release: test_eagle_torch_native_patch.py. On a real server: the `--small` native
crossover (tests/real_sglang/test_real_crossover_sglang.py).
"""

from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import APPLIED, NEW, PatchError, load_patchset, revert
from specops.sglang.source import ensure_tree
from tests.support.eagle_views import Lens, V2Mode, bare_backend_class, batch, ints
from tests.support.sglang_trees import apply_set, copy_tree

pytestmark = pytest.mark.xdist_group("eagle_torch_native_patch")

SET = "eagle-torch-native-v2"
VERSION = "0.5.14"
BACKEND = "python/sglang/srt/layers/attention/torch_native_backend.py"
DRAFT = "python/sglang/srt/speculative/draft_utils.py"
OPS = "python/sglang/srt/speculative/triton_ops"
CACHE_LOCS, EAGLE, GATHER = f"{OPS}/cache_locs.py", f"{OPS}/eagle.py", f"{OPS}/gather_spec_extras.py"
TOUCHED = (BACKEND, DRAFT, CACHE_LOCS, EAGLE, GATHER)
#: file -> {Triton kernel: the torch function that stands in for it on a CPU}
KERNELS = {CACHE_LOCS: {"assign_req_to_token_pool": "specops_assign_req_to_token_pool",
                        "assign_draft_cache_locs_contiguous": "specops_assign_draft_cache_locs_contiguous"},
           EAGLE: {"fill_bonus_tokens": "specops_fill_bonus_tokens"}}


@pytest.fixture(scope="module")
def pristine() -> dict[str, bytes]:
    tree = ensure_tree(VERSION)
    return {rel: (tree / rel).read_bytes() for rel in TOUCHED}


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    tree = copy_tree(VERSION, tmp_path_factory.mktemp("etn2") / VERSION)
    report = apply_set(SET, tree)
    assert {r.status for r in report.results} == {NEW}, report.summary()
    return tree


def _module(tree: Path, rel: str) -> ast.Module:
    return ast.parse((tree / rel).read_text())


def test_applies_compiles_and_is_idempotent(patched, pristine):
    for rel in TOUCHED:
        assert (patched / rel).read_bytes() != pristine[rel], rel
        compile((patched / rel).read_bytes(), rel, "exec")
    again = apply_set(SET, patched)
    assert not again.changed and {r.status for r in again.results} == {APPLIED}


def test_revert_restores_every_file(tmp_path, pristine):
    tree = copy_tree(VERSION, tmp_path / "t")
    apply_set(SET, tree)
    revert(load_patchset(SET), LocalTreeFiles(tree))
    assert {rel: (tree / rel).read_bytes() for rel in TOUCHED} == pristine


def test_a_tree_missing_an_anchor_is_refused_and_left_unchanged(tmp_path, pristine):
    """A release whose draft-location kernel is named otherwise: the set says which edit has
    no anchor and writes nothing, the attention edits included."""
    tree = copy_tree(VERSION, tmp_path / "t")
    path = tree / CACHE_LOCS
    text = path.read_text().replace("def assign_draft_cache_locs_contiguous(", "def assign_draft_locs(")
    path.write_text(text)
    with pytest.raises(PatchError) as err:
        apply_set(SET, tree)
    assert "cpu-assign-draft-cache-locs-contiguous" in str(err.value) and "nothing was changed" in str(err.value)
    assert path.read_text() == text
    assert all((tree / rel).read_bytes() == pristine[rel] for rel in TOUCHED if rel != CACHE_LOCS)


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.9"])
def test_older_releases_are_refused_with_the_reason(tmp_path, version):
    tree = copy_tree(version, tmp_path / "t")
    before = (tree / BACKEND).read_bytes()
    with pytest.raises(PatchError) as err:
        apply_set(SET, tree)
    assert f"version {version} is older than 0.5.14" in str(err.value)
    assert "eagle-torch-native" in (err.value.hint or "")
    assert (tree / BACKEND).read_bytes() == before


# ---------------------------------------------------------------- the patched code, run

def _backend(tree: Path) -> Any:
    backend = bare_backend_class(tree, BACKEND, SWAKVPool=type("SWAKVPool", (), {}))
    return backend(types.SimpleNamespace(device="cpu", req_to_token_pool=None, token_to_kv_pool=None))


def _batch(mode: str, seq_lens: Lens, spec: Any = None) -> types.SimpleNamespace:
    return batch(V2Mode(mode), seq_lens, spec)


def test_a_verify_extends_by_the_chain_and_v2s_draft_extend_is_read_as_it_is(patched):
    backend = _backend(patched)
    verify = _batch("TARGET_VERIFY", ints(5, 9), types.SimpleNamespace(topk=1, draft_token_num=3))
    view = backend.eagle_extend_view(verify)
    assert (list(view.seq_lens), list(view.extend_prefix_lens), list(view.extend_seq_lens)) == ([8, 12], [5, 9],
                                                                                                 [3, 3])
    assert list(verify.seq_lens) == [5, 9]  # the batch itself untouched
    for mode in ("DRAFT_EXTEND_V2", "EXTEND"):
        batch = _batch(mode, ints(8, 10), types.SimpleNamespace(accept_length=ints(3, 1)))
        assert backend.eagle_extend_view(batch) is batch, mode
    with pytest.raises(ValueError, match="topk 1"):
        backend.eagle_extend_view(_batch("TARGET_VERIFY", ints(5), types.SimpleNamespace(topk=2, draft_token_num=4)))
    backend.eagle_draft_step = 1
    assert list(backend.eagle_draft_step_view(_batch("DECODE", ints(5, 9))).seq_lens) == [7, 11]


def test_each_kernel_is_rebound_right_after_its_definition_on_a_cpu_only(patched):
    """An importer (`from ...cache_locs import assign_draft_cache_locs_contiguous`) runs after
    the module, so it gets the rebinding; the module's own callers read the global at call time."""
    for rel, kernels in KERNELS.items():
        body = _module(patched, rel).body
        for kernel, torch_fn in kernels.items():
            at = next(i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef) and n.name == kernel)
            helper = body[at + 1]
            guard = next(n for n in body[at + 2:] if isinstance(n, ast.If))
            assert isinstance(helper, ast.FunctionDef) and helper.name == torch_fn
            assert ast.unparse(guard).startswith(f"if specops_on_cpu():\n    {kernel} = SpecopsTorchGrid({kernel}")
    body = _module(patched, GATHER).body
    at = next(i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef) and n.name == "gather_spec_extras")
    guard = next(n for n in body[at + 1:] if isinstance(n, ast.If))
    assert ast.unparse(guard) == "if specops_on_cpu():\n    gather_spec_extras = specops_gather_spec_extras"


def _kernels(tree: Path, monkeypatch) -> dict[str, Any]:
    fake = types.SimpleNamespace(int64=np.int64, arange=lambda n, device=None: np.arange(n))
    monkeypatch.setitem(sys.modules, "torch", fake)
    ns: dict[str, Any] = {"torch": fake}
    for rel in (CACHE_LOCS, EAGLE, GATHER):
        keep = [n for n in _module(tree, rel).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                and (n.name.startswith("specops_") and n.name != "specops_on_cpu" or n.name == "SpecopsTorchGrid")]
        exec(compile(ast.Module(body=keep, type_ignores=[]), rel, "exec"), ns)
    return ns


def _never(*args: Any) -> None:
    raise AssertionError("the Triton kernel ran")


def test_the_torch_kernels_write_what_the_triton_ones_write(patched, monkeypatch):
    ns = _kernels(patched, monkeypatch)
    grid, kernel = ns["SpecopsTorchGrid"], {(2,): _never}
    # prepare_for_decode: rows 3 and 1 of req_to_token get their new locations
    req_to_token = np.zeros((4, 16), dtype=np.int64)
    grid(kernel, ns["specops_assign_req_to_token_pool"])[(2,)](
        ints(3, 1), req_to_token, ints(5, 2), ints(8, 5), ints(40, 41, 42, 50, 51, 52), 16, 2)
    assert list(req_to_token[3, 5:8]) == [40, 41, 42] and list(req_to_token[1, 2:5]) == [50, 51, 52]
    assert req_to_token.sum() == 40 + 41 + 42 + 50 + 51 + 52
    # the draft's write targets (topk 1, 2 steps): read from req_to_token past each seq_len
    req_to_token[0, 4:6], req_to_token[2, 9:11] = (60, 61), (70, 71)
    out = np.full(4, -1)
    grid(kernel, ns["specops_assign_draft_cache_locs_contiguous"])[(2,)](
        ints(0, 2), req_to_token, ints(4, 9), out, 16, 1, 2)
    assert list(out) == [60, 61, 70, 71]
    # the bonus token: each request's last accepted one (accept_lens count it), stride 3
    bonus = ints(0, 0, dtype=np.int32)
    grid(kernel, ns["specops_fill_bonus_tokens"])[(2,)](ints([11, 12, 13], [21, 22, 23]), ints(3, 1), bonus, 3)
    assert list(bonus) == [13, 21] and bonus.dtype == np.int32
    # the overlap scheduler's gather: one row index for every buffer
    p, idx, tokens = np.arange(12).reshape(4, 3), np.arange(12, 24).reshape(4, 3), np.arange(30, 34)
    got = ns["specops_gather_spec_extras"](ints(2, 0), p, idx, tokens, None)
    assert [x.tolist() if x is not None else None for x in got] == [[[6, 7, 8], [0, 1, 2]],
                                                                   [[18, 19, 20], [12, 13, 14]], [32, 30], None]
    hidden = np.arange(8).reshape(4, 2)
    assert ns["specops_gather_spec_extras"](ints(3), p, idx, tokens, hidden)[3].tolist() == [[6, 7]]


def test_the_factory_builds_one_backend_per_draft_step_and_refuses_a_sliding_window_pool(patched, monkeypatch):
    backend_cls = type(_backend(patched))
    names = ["sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
             "sglang.srt.layers.attention.torch_native_backend"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[names[-1]].TorchNativeAttnBackend = backend_cls  # type: ignore[attr-defined]
    mod = _module(patched, DRAFT)
    klass = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == "TorchNativeMultiStepDraftBackend")
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=[klass], type_ignores=[]), DRAFT, "exec"), ns)
    runner = types.SimpleNamespace(device="cpu", req_to_token_pool=None, token_to_kv_pool=None)
    multi = ns["TorchNativeMultiStepDraftBackend"](runner, 1, 3)
    assert [b.eagle_draft_step for b in multi.attn_backends] == [0, 1]
    with pytest.raises(ValueError, match="--speculative-eagle-topk must be 1, got 4"):
        ns["TorchNativeMultiStepDraftBackend"](runner, 4, 3)
    swa = backend_cls.__init__.__globals__["SWAKVPool"]
    runner.token_to_kv_pool = type("Pool", (swa,), {"swa_layer_nums": 2})()
    with pytest.raises(ValueError, match="sliding-window KV pool"):
        ns["TorchNativeMultiStepDraftBackend"](runner, 1, 3)


SCM_DIRTY = "0.5.15.dev0+g51a0961b0.d20261205"


def _scm_version_file(tree: Path) -> None:
    """What an editable install of a patched (dirty) 0.5.14 git checkout writes (setuptools-scm)."""
    (tree / "python/sglang/_version.py").write_text(f"__version__ = version = '{SCM_DIRTY}'\n")


def test_its_own_patched_tree_is_not_refused_for_the_version_its_edits_made(tmp_path):
    """deploy applies the set, installs (setuptools-scm then names the dirty checkout the next
    dev release), and bench applies it again: nothing to do, not 'newer than 0.5.14'. A tree
    this set did not patch, or one changed since, is still judged by its version."""
    tree = copy_tree(VERSION, tmp_path / "t")
    apply_set(SET, tree)
    _scm_version_file(tree)
    again = apply_set(SET, tree)
    assert not again.changed and {r.status for r in again.results} == {APPLIED}
    (tree / DRAFT).write_text((tree / DRAFT).read_text() + "\n# edited since\n")
    with pytest.raises(PatchError, match=f"version {re.escape(SCM_DIRTY)} is newer than 0.5.14"):
        apply_set(SET, tree)
    fresh = copy_tree(VERSION, tmp_path / "fresh")
    _scm_version_file(fresh)
    with pytest.raises(PatchError, match="is newer than 0.5.14"):
        apply_set(SET, fresh)
