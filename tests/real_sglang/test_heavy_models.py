"""The heavy vLLM model builder (make_heavy_models.py) at a small widening: the widened target's
greedy tokens are the tiny target's (its own proof, run by the vLLM runtime's torch), and the
files are what vLLM reads (the widths, the compensated norms, the head's widened fc, the swap).

The full-size set (hidden 2048, 1.2 GB) is bench/real_crossover.py's; this builds one of hidden
128 / intermediate 512 in seconds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.real_sglang import NEWER_ENGINES_GROUP
from tests.support.real_sglang.models import HEAVY_SCRIPT, _env, ensure_vllm_models
from tests.support.real_sglang.runtime import VLLM, runtime_python

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(NEWER_ENGINES_GROUP), pytest.mark.timeout(600)]

HIDDEN, INTERMEDIATE = 128, 512
#: reads the built files with the runtime's safetensors: shapes, the norm scale, the fc blocks, the swap
_INSPECT = r"""
import json, sys
from safetensors.torch import load_file
tiny, heavy = sys.argv[1], sys.argv[2]
t, h = load_file(tiny + "/target/model.safetensors"), load_file(heavy + "/target/model.safetensors")
td, hd = load_file(tiny + "/draft/model.safetensors"), load_file(heavy + "/draft/model.safetensors")
n = "model.layers.0."
scale = (h[n + "input_layernorm.weight"][:64] / t[n + "input_layernorm.weight"]).tolist()
fc = hd["fc.weight"]
blocks_equal = all(bool((fc[:, i * fc.shape[1] // 3:i * fc.shape[1] // 3 + 64] == td["fc.weight"][:, i * 64:(i + 1) * 64]).all())
                   for i in range(3))
rest_zero = float(fc.abs().sum() - td["fc.weight"].abs().sum()) == 0.0
swapped = int((hd["lm_head.weight"] != td["lm_head.weight"]).any(1).sum())
print(json.dumps({
    "gate": list(h[n + "mlp.gate_proj.weight"].shape), "down": list(h[n + "mlp.down_proj.weight"].shape),
    "embed": list(h["model.embed_tokens.weight"].shape), "o_proj": list(h[n + "self_attn.o_proj.weight"].shape),
    "padded_zero": float(h[n + "mlp.down_proj.weight"][64:].abs().sum() + h[n + "mlp.gate_proj.weight"][128:].abs().sum()),
    "norm_scale": [min(scale), max(scale)], "fc": list(fc.shape), "fc_blocks_equal": blocks_equal,
    "fc_rest_zero": rest_zero, "swapped_rows": swapped}))
"""


def test_a_widened_target_keeps_the_tiny_targets_greedy_tokens(tmp_path: Path) -> None:
    tiny = ensure_vllm_models()
    python = runtime_python(VLLM)
    out = tmp_path / "heavy"
    proc = subprocess.run([str(python), str(HEAVY_SCRIPT), str(tiny.root), str(out), "--hidden", str(HIDDEN),
                           "--intermediate", str(INTERMEDIATE), "--no-timing"],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = json.loads((out / "build.json").read_text())
    assert build["identity"]["identical"] is True and build["identity"]["first_difference"] is None, build
    assert build["identity"]["prompts"] >= 5 and build["identity"]["tokens_each"] >= 16
    config = json.loads((out / "target" / "config.json").read_text())
    tiny_config = json.loads((tiny.target / "config.json").read_text())
    assert (config["hidden_size"], config["intermediate_size"]) == (HIDDEN, INTERMEDIATE)
    assert config["head_dim"] == tiny_config["head_dim"] and config["num_attention_heads"] == tiny_config["num_attention_heads"]
    assert config["rms_norm_eps"] == pytest.approx(tiny_config["rms_norm_eps"] * 64 / HIDDEN)
    draft = json.loads((out / "draft" / "config.json").read_text())
    assert draft["target_hidden_size"] == HIDDEN and draft["hidden_size"] == 64
    assert 0 < build["draft"]["swapped_tokens"] and 0.1 < build["draft"]["missed_fraction"] < 0.5, build["draft"]
    seen = subprocess.run([str(python), "-c", _INSPECT, str(tiny.root), str(out)], capture_output=True, text=True,
                          timeout=120, env=_env())
    assert seen.returncode == 0, seen.stderr[-2000:]
    facts = json.loads(seen.stdout)
    assert facts["gate"] == [INTERMEDIATE, HIDDEN] and facts["down"] == [HIDDEN, INTERMEDIATE]
    assert facts["embed"][1] == HIDDEN and facts["o_proj"][0] == HIDDEN and facts["padded_zero"] == 0.0
    assert facts["norm_scale"] == pytest.approx([(64 / HIDDEN) ** 0.5] * 2, rel=1e-5)
    assert facts["fc"] == [64, 3 * HIDDEN] and facts["fc_blocks_equal"] and facts["fc_rest_zero"], facts
    # each swapped token and its unused partner: two rows a pair
    assert facts["swapped_rows"] == 2 * build["draft"]["swapped_tokens"], facts


def test_a_build_whose_tokens_differ_fails(tmp_path: Path) -> None:
    """The proof has teeth: a target whose norm is not compensated (a sabotaged tiny set's
    config: its eps scaled by 10^4) changes the tokens, and the build exits non-zero."""
    tiny = ensure_vllm_models()
    broken = tmp_path / "tiny"
    for part in ("target", "draft"):
        (broken / part).mkdir(parents=True)
        for f in (tiny.root / part).iterdir():
            (broken / part / f.name).symlink_to(f)
    (broken / "vocab.txt").write_text((tiny.root / "vocab.txt").read_text())
    config = json.loads((tiny.target / "config.json").read_text())
    (broken / "target" / "config.json").unlink()
    (broken / "target" / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 0.5}))
    proc = subprocess.run([str(runtime_python(VLLM)), str(HEAVY_SCRIPT), str(broken), str(tmp_path / "heavy"),
                           "--hidden", str(HIDDEN), "--intermediate", str(INTERMEDIATE), "--no-timing",
                           "--reference", str(tiny.root)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode != 0
    assert "greedy tokens differ" in proc.stderr, proc.stderr[-2000:]
