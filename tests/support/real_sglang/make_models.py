"""Make the real_sglang tier's tiny models offline (run with the runtime's python, which has
torch, tokenizers and transformers):

    <runtime python> make_models.py OUT

OUT/target      tiny Llama (random weights, fixed seed, fp32) with a byte-level BPE tokenizer
OUT/draft       EAGLE-3 draft head for it (LlamaForCausalLMEagle3, one layer)
OUT/bad-draft   not an EAGLE head: a plain 4-layer Llama labelled LlamaForCausalLMEagle3, for
                crash tests (SGLang refuses it while building the draft model, on any device)
OUT/sharegpt.json  a ShareGPT-format dataset for bench_serving (sharegpt or random)

Standalone on purpose (no specops import): models.py hashes this file for its cache key.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SEED = 1234
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS = 64, 128, 4, 4, 2
#: The head is as wide as the target, as real EAGLE-3 heads are. SGLang <= 0.5.10.x assumes it:
#: a verify that finishes every running request leaves an empty draft input sized by the
#: TARGET's hidden_size (eagle_info.py, create_idle_input), and a request prefilled in that
#: step is then merged into it (EagleDraftInput.merge_batch: torch.cat of 64 with 32 wide
#: rows, the scheduler aborts). 0.5.11 sizes it by the draft's (`spec_hidden_size`). Measured
#: with a 32-wide head on the unpatched 0.5.10.post1 tree and plain EAGLE-3: a request sent
#: during the last decode step of the only running one aborted the server every time.
DRAFT_HIDDEN, DRAFT_INTERMEDIATE = HIDDEN, INTERMEDIATE
AUX_LAYERS = [0, 1, 2]  # SGLang's default capture layers do not fit a 4-layer target
MAX_POSITIONS = 2048
BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}{{ eos_token }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SENTENCES = [
    "Speculative decoding drafts a few tokens with a small model and verifies them with the large one.",
    "The target model checks every drafted token in one forward pass and keeps the longest accepted prefix.",
    "A draft head reads the hidden states of the target and proposes the next token cheaply.",
    "Greedy decoding always picks the most likely token, so the output does not depend on the draft.",
    "The server answers requests over HTTP and streams tokens back as they are generated.",
    "Benchmarks measure throughput in tokens per second and latency per request.",
    "A tree of draft tokens lets the verifier accept one branch among several candidates.",
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun.",
    "Numbers like 12, 345 and 6789 appear in logs, configs and reports every day.",
    "Patch the source, launch the arms, sweep the settings and write the report.",
    "Hello world! How are you today? I am fine, thank you very much.",
    "Every experiment records its host, its version, its flags and its results.",
]
BAD_VOCAB = 256 + 3  # the bad draft is a plain Llama: its vocab need not match


def train_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=[BOS, EOS, PAD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(SENTENCES * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   model_max_length=MAX_POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


#: weights' std: at 0.02-0.05 a 4-layer random Llama repeats one token forever (a weak identity
#: check); at 0.5 greedy outputs vary and the top-2 logit gap stays >= 0.03 over 16 tokens
#: (float32 kernels differ by ~1e-6), so greedy outputs are stable across attention backends
TARGET_INIT_STD = 0.5


def llama_config(vocab: int, bos: int, eos: int, pad: int, layers: int = LAYERS):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                       num_hidden_layers=layers, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                       max_position_embeddings=MAX_POSITIONS, initializer_range=TARGET_INIT_STD, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
                       torch_dtype="float32", architectures=["LlamaForCausalLM"])


def make_target(out: Path, tokenizer) -> int:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    vocab = len(tokenizer)
    config = llama_config(vocab, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return vocab


def make_draft(out: Path, vocab: int, tokenizer) -> None:
    """An EAGLE-3 head in the layout SGLang's LlamaForCausalLMEagle3.load_weights reads."""
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(SEED + 1)
    head_dim = DRAFT_HIDDEN // HEADS

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * 0.05).to(torch.float32)

    weights = {
        "embed_tokens.weight": rand(vocab, DRAFT_HIDDEN),  # replaced by the target's (set_embed: as wide as it)
        "fc.weight": rand(DRAFT_HIDDEN, 3 * HIDDEN),
        "midlayer.input_layernorm.weight": torch.ones(DRAFT_HIDDEN),
        "midlayer.hidden_norm.weight": torch.ones(DRAFT_HIDDEN),
        "midlayer.post_attention_layernorm.weight": torch.ones(DRAFT_HIDDEN),
        "midlayer.self_attn.q_proj.weight": rand(HEADS * head_dim, 2 * DRAFT_HIDDEN),
        "midlayer.self_attn.k_proj.weight": rand(KV_HEADS * head_dim, 2 * DRAFT_HIDDEN),
        "midlayer.self_attn.v_proj.weight": rand(KV_HEADS * head_dim, 2 * DRAFT_HIDDEN),
        "midlayer.self_attn.o_proj.weight": rand(DRAFT_HIDDEN, HEADS * head_dim),
        "midlayer.mlp.gate_proj.weight": rand(DRAFT_INTERMEDIATE, DRAFT_HIDDEN),
        "midlayer.mlp.up_proj.weight": rand(DRAFT_INTERMEDIATE, DRAFT_HIDDEN),
        "midlayer.mlp.down_proj.weight": rand(DRAFT_HIDDEN, DRAFT_INTERMEDIATE),
        "norm.weight": torch.ones(DRAFT_HIDDEN),
        "lm_head.weight": rand(vocab, DRAFT_HIDDEN),
        "d2t": torch.zeros(vocab, dtype=torch.int64),  # draft id + d2t = target id: identity
        "t2d": torch.ones(vocab, dtype=torch.bool),
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": DRAFT_HIDDEN,
        "intermediate_size": DRAFT_INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "target_hidden_size": HIDDEN,
        "tie_word_embeddings": False,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "torch_dtype": "float32",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYERS, "use_aux_hidden_state": True},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save_pretrained(out)


def make_bad_draft(out: Path, tokenizer) -> None:
    """Not an EAGLE head: a plain Llama with the target's shape (no fc, no midlayer, 4 layers),
    its config labelled as an EAGLE-3 head. Left as LlamaForCausalLM it would crash only on CPU
    (set_embed's torch.cuda.synchronize()); labelled, SGLang refuses it on every device:
    "EAGLE3 currently only supports 1 layer"."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED + 2)
    config = llama_config(len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out, safe_serialization=True)
    saved = json.loads((out / "config.json").read_text())
    saved["architectures"] = ["LlamaForCausalLMEagle3"]
    (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    tokenizer.save_pretrained(out)


def make_dataset(path: Path) -> None:
    """ShareGPT format: conversations with a human turn and a gpt turn."""
    rows = []
    for i, first in enumerate(SENTENCES * 3):
        second = SENTENCES[(i * 5 + 3) % len(SENTENCES)]
        rows.append({"id": f"tiny-{i}", "conversations": [
            {"from": "human", "value": f"{first} Please explain it again."},
            {"from": "gpt", "value": f"{second} {first}"},
        ]})
    path.write_text(json.dumps(rows, indent=1) + "\n")


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tokenizer = train_tokenizer(out / "tokenizer")
    vocab = make_target(out / "target", tokenizer)
    make_draft(out / "draft", vocab, tokenizer)
    make_bad_draft(out / "bad-draft", tokenizer)
    make_dataset(out / "sharegpt.json")
    shutil.rmtree(out / "tokenizer")
    (out / "vocab.txt").write_text(f"{vocab}\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT")
    main(Path(sys.argv[1]))
