"""The heavy model builder (make_heavy_models.py) at a small widening, for vLLM's set and for
SGLang's (--wide-head): the widened target's greedy tokens are the tiny target's (its own proof,
run by the runtime's torch; a sabotaged source fails it), and the files are what the engine reads
(the widths, the compensated norms, the head's widened fc, or the whole head for SGLang, the swap).

The full-size sets (hidden 2048, 1.2 GB) are bench/real_crossover.py's; this builds one of hidden
128 / intermediate 512 in seconds. Each test in the xdist group of the runtime it runs
(tests/support/real_sglang/__init__.py): vLLM's set with the newer engines, SGLang's with the
patch route."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.real_sglang import NEWER_ENGINES_GROUP, PATCH_ROUTE_GROUP
from tests.support.real_sglang.models import HEAVY_SCRIPT, SGLANG_HEAVY_ARGS, _env, ensure_models, ensure_vllm_models
from tests.support.real_sglang.runtime import VLLM, runtime_python

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(600)]
ON_VLLM = pytest.mark.xdist_group(NEWER_ENGINES_GROUP)   # the vLLM runtime builds its set
ON_SGLANG = pytest.mark.xdist_group(PATCH_ROUTE_GROUP)   # SGLang 0.5.10.post1's runtime builds its set

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


@ON_VLLM
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


def _sabotaged(tiny: Path, broken: Path) -> Path:
    """A copy of a tiny set (links to its files) whose target's norm eps is scaled by 10^4: its
    norm is no longer compensated exactly, so a heavy build from it gives other tokens."""
    for part in ("target", "draft"):
        (broken / part).mkdir(parents=True)
        for f in (tiny / part).iterdir():
            (broken / part / f.name).symlink_to(f)
    (broken / "vocab.txt").write_text((tiny / "vocab.txt").read_text())
    config = json.loads((tiny / "target" / "config.json").read_text())
    (broken / "target" / "config.json").unlink()
    (broken / "target" / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 0.5}))
    return broken


@ON_VLLM
def test_a_build_whose_tokens_differ_fails(tmp_path: Path) -> None:
    """The proof has teeth: a target whose norm is not compensated (a sabotaged tiny set's
    config: its eps scaled by 10^4) changes the tokens, and the build exits non-zero."""
    tiny = ensure_vllm_models()
    broken = _sabotaged(tiny.root, tmp_path / "tiny")
    proc = subprocess.run([str(runtime_python(VLLM)), str(HEAVY_SCRIPT), str(broken), str(tmp_path / "heavy"),
                           "--hidden", str(HIDDEN), "--intermediate", str(INTERMEDIATE), "--no-timing",
                           "--reference", str(tiny.root)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode != 0
    assert "greedy tokens differ" in proc.stderr, proc.stderr[-2000:]


#: the SGLang head's files: each weight's tiny block in place (fc's 3 and q/k/v's 2 input blocks
#: each at its own offset), zeros elsewhere, norms scaled by sqrt(64/H)
_INSPECT_HEAD = r"""
import json, sys
from safetensors.torch import load_file
tiny, heavy, h = sys.argv[1], sys.argv[2], int(sys.argv[3])
t, w = load_file(tiny + "/draft/model.safetensors"), load_file(heavy + "/draft/model.safetensors")
def block(name, parts, small=64):
    tw, hw = t[name], w[name]
    inner = [hw[:tw.shape[0], i * h:i * h + small] for i in range(parts)]
    equal = all(bool((x == tw[:, i * small:(i + 1) * small]).all()) for i, x in enumerate(inner))
    outside = hw.clone()
    for i in range(parts):
        outside[:tw.shape[0], i * h:i * h + small] = 0
    rest = float(outside.abs().sum())
    return {"shape": list(hw.shape), "equal": equal, "rest": rest}
n = "midlayer."
out = {"fc": block("fc.weight", 3), "q": block(n + "self_attn.q_proj.weight", 2),
       "k": block(n + "self_attn.k_proj.weight", 2), "embed": block("embed_tokens.weight", 1),
       "o_proj": list(w[n + "self_attn.o_proj.weight"].shape), "down": list(w[n + "mlp.down_proj.weight"].shape),
       "norm_scale": (w[n + "hidden_norm.weight"][:64] / t[n + "hidden_norm.weight"]).tolist(),
       "norm_rest": float(w["norm.weight"][64:].abs().sum()),
       "swapped_rows": int((w["lm_head.weight"][:, :64] != t["lm_head.weight"]).any(1).sum())}
print(json.dumps(out))
"""


def _sglang_build(tiny: Path, out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(runtime_python()), str(HEAVY_SCRIPT), str(tiny), str(out), *SGLANG_HEAVY_ARGS,
                           "--hidden", str(HIDDEN), "--intermediate", str(INTERMEDIATE), "--no-timing", *more],
                          capture_output=True, text=True, timeout=300, env=_env())


@ON_SGLANG
def test_sglangs_set_widens_the_head_too_and_keeps_the_tokens(tmp_path: Path) -> None:
    """SGLang's set (--wide-head over the tier's tiny one, SGLang's runtime): the target's greedy
    tokens proven the tiny target's, and the head as wide as the target (SGLang refuses a
    narrower one) with the tiny head's weights in place and zeros elsewhere."""
    tiny = ensure_models()
    out = tmp_path / "heavy"
    proc = _sglang_build(tiny.root, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    build = json.loads((out / "build.json").read_text())
    assert build["identity"]["identical"] is True and build["identity"]["first_difference"] is None, build
    # proved in each dtype the SGLang routes may run it in (bench/real_crossover.py: bfloat16)
    assert {d: p["identical"] for d, p in build["identity"]["by_dtype"].items()} == \
        {"float32": True, "bfloat16": True}, build["identity"]
    draft = json.loads((out / "draft" / "config.json").read_text())
    tiny_draft = json.loads((tiny.draft / "config.json").read_text())
    assert draft["hidden_size"] == draft["target_hidden_size"] == HIDDEN, draft
    assert draft["rms_norm_eps"] == pytest.approx(tiny_draft["rms_norm_eps"] * 64 / HIDDEN)
    assert draft["head_dim"] == tiny_draft["head_dim"] and draft["intermediate_size"] == tiny_draft["intermediate_size"]
    assert (out / "sharegpt.json").is_file() and (out / "vocab.txt").read_text() == (tiny.root / "vocab.txt").read_text()
    seen = subprocess.run([str(runtime_python()), "-c", _INSPECT_HEAD, str(tiny.root), str(out), str(HIDDEN)],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert seen.returncode == 0, seen.stderr[-2000:]
    facts = json.loads(seen.stdout)
    assert facts["fc"] == {"shape": [HIDDEN, 3 * HIDDEN], "equal": True, "rest": 0.0}, facts
    assert facts["q"]["shape"][1] == 2 * HIDDEN and facts["q"]["equal"] and facts["q"]["rest"] == 0.0, facts
    assert facts["k"]["equal"] and facts["k"]["rest"] == 0.0 and facts["embed"]["equal"], facts
    assert facts["o_proj"][0] == HIDDEN and facts["down"][0] == HIDDEN and facts["norm_rest"] == 0.0, facts
    assert facts["norm_scale"] == pytest.approx([(64 / HIDDEN) ** 0.5] * 64, rel=1e-5)
    assert 0 < build["draft"]["swapped_tokens"] and facts["swapped_rows"] == 2 * build["draft"]["swapped_tokens"]


@ON_SGLANG
def test_sglangs_build_from_a_sabotaged_target_fails(tmp_path: Path) -> None:
    """The SGLang build's proof has teeth too: the tiny SGLang target with its eps scaled (its
    norm no longer compensated exactly) gives other tokens than the tier's, and the build fails."""
    tiny = ensure_models()
    broken = _sabotaged(tiny.root, tmp_path / "tiny")
    proc = _sglang_build(broken, tmp_path / "heavy", "--reference", str(tiny.root))
    assert proc.returncode != 0
    assert "greedy tokens differ" in proc.stderr, proc.stderr[-2000:]
