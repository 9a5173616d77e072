"""The launch's warning for an EAGLE head whose width differs from its target's, on a release
that aborts on it (SGLang <= 0.5.10.x; measured on real 0.5.10.post1: see
specops/servers/eagle_heads.py). Real model directories on a real (local) host."""

from __future__ import annotations

import json
from pathlib import Path

from specops.servers.eagle_heads import head_width_warning, width_problem
from specops.transport.local import LocalTransport


def model_dir(root: Path, name: str, hidden: int | None) -> str:
    path = root / name
    path.mkdir()
    config = {"architectures": ["LlamaForCausalLM"]} | ({"hidden_size": hidden} if hidden is not None else {})
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def info(model: str, draft: str | None, version: str) -> dict:
    return {"model_path": model, "speculative_draft_model_path": draft, "version": version}


def test_a_narrow_head_on_0_5_10_is_named_with_both_widths_and_the_fix(tmp_path: Path) -> None:
    t = LocalTransport("gpu")
    target, head = model_dir(tmp_path, "target", 64), model_dir(tmp_path, "head", 32)
    warning = head_width_warning(t, "eagle3", info(target, head, "0.5.10.post1"))
    assert warning is not None
    assert warning.startswith("arm eagle3: the draft head's hidden_size 32 differs from the target's 64")
    assert "SGLang 0.5.10.post1" in warning and ">= 0.5.11" in warning


def test_no_warning_where_the_release_or_the_widths_are_fine_or_unknown(tmp_path: Path) -> None:
    t = LocalTransport("gpu")
    target, narrow = model_dir(tmp_path, "target", 64), model_dir(tmp_path, "narrow", 32)
    wide, unknown = model_dir(tmp_path, "wide", 64), model_dir(tmp_path, "unknown", None)
    assert head_width_warning(t, "eagle3", info(target, narrow, "0.5.11")) is None  # fixed there
    assert head_width_warning(t, "eagle3", info(target, wide, "0.5.10.post1")) is None  # as wide as the target
    assert head_width_warning(t, "eagle3", info(target, unknown, "0.5.10.post1")) is None  # no hidden_size
    assert head_width_warning(t, "eagle3", info(target, str(tmp_path / "gone"), "0.5.9")) is None  # no config.json
    assert head_width_warning(t, "baseline", info(target, None, "0.5.9")) is None  # no draft
    assert head_width_warning(t, "eagle3", info("org/model", "org/head", "0.5.9")) is None  # Hub ids: not read


def test_the_rule() -> None:
    assert width_problem("0.4.10", 4096, 2048) and width_problem("0.5.10.post1", 64, 32)
    assert not width_problem("0.5.11", 64, 32) and not width_problem("0.5.23", 64, 32)
    assert not width_problem("0.5.9", 64, 64) and not width_problem("0.5.9", None, 32)
