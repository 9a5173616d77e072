"""Make the real tier's tiny models for vLLM offline (run with the vLLM runtime's python):

    <vllm runtime python> make_vllm_models.py OUT

The SGLang tier's recipe (make_models.py: the same sentences, tokenizer, target training and
two-step head training), with the shapes vLLM 0.32.0's CPU build takes:

OUT/target      tiny Llama, hidden 64 with 2 heads and 1 KV head: head_dim 32 (vLLM's CPU
                attention refuses 16: "Unsupported CPU attention configuration: head_dim=16")
OUT/draft       EAGLE-3 head trained on it (Eagle3LlamaForCausalLM: one layer, target-wide),
                capturing the inputs of layers 1, 2, 3 (vLLM's eagle_aux_hidden_state_layer_ids
                count layers as they are entered, SGLang's one before); no d2t/t2d: the vocabularies
                are equal and vLLM refuses them then ("no module or parameter named
                'draft_id_to_target_id'")
OUT/bad-draft   the same head as SGLang loads it, d2t/t2d kept: vLLM's worker dies loading it
OUT/build.json  the build's figures (make_models.py's)

vLLM's Eagle3LlamaForCausalLM forward is SGLang's (llama_eagle3.py: cat(input_layernorm(embed),
hidden_norm(hidden)), the fused norms, step 2 reading step 1's pre-norm output), so
make_models._Head trains it unchanged.

Standalone on purpose (no specops import): models.py hashes this file and make_models.py.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_models as mm

HEADS, KV_HEADS = 2, 1  # head_dim 64 / 2 = 32
AUX_LAYERS = [1, 2, 3]  # vLLM: the layers whose input is captured (SGLang's [0, 1, 2])


def _vllm_shapes() -> None:
    """make_models reads its shape constants when called: set vLLM's."""
    mm.HEADS, mm.KV_HEADS, mm.AUX_LAYERS = HEADS, KV_HEADS, AUX_LAYERS


def make_vllm_draft(out: Path, vocab: int, tokenizer, head) -> None:
    """make_models.make_draft's head without d2t/t2d, its config naming vLLM's capture layers."""
    from safetensors.torch import load_file, save_file

    mm.make_draft(out, vocab, tokenizer, head)
    weights = {k: v for k, v in load_file(str(out / "model.safetensors")).items() if k not in ("d2t", "t2d")}
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = AUX_LAYERS
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    import torch

    torch.set_num_threads(1)
    _vllm_shapes()
    started = time.monotonic()
    tokenizer = mm.train_tokenizer(out / "tokenizer")
    model, target_loss = mm.train_target(tokenizer)
    vocab = mm.make_target(out / "target", tokenizer, model)
    target_s = time.monotonic() - started
    head, figures = mm.train_head(model, tokenizer)
    mm.make_draft(out / "bad-draft", vocab, tokenizer, head)  # d2t/t2d kept
    make_vllm_draft(out / "draft", vocab, tokenizer, head)
    shutil.rmtree(out / "tokenizer")
    report = {"target_loss": round(target_loss, 4), "target_s": round(target_s, 1), **figures,
              "total_s": round(time.monotonic() - started, 1)}
    (out / "build.json").write_text(json.dumps(report) + "\n")
    print(json.dumps(report))
    (out / "vocab.txt").write_text(f"{vocab}\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_vllm_models.py OUT")
    main(Path(sys.argv[1]))
