"""Make the real_sglang tier's tiny models offline (run with the runtime's python, which has
torch, tokenizers and transformers):

    <runtime python> make_models.py OUT

OUT/target      tiny Llama (fp32, fixed seeds) trained to continue SENTENCES, with a byte-level
                BPE tokenizer
OUT/draft       EAGLE-3 draft head for it (LlamaForCausalLMEagle3, one layer, target-wide),
                trained on the target's hidden states: its drafts are accepted
OUT/bad-draft   not an EAGLE head: a plain 4-layer Llama labelled LlamaForCausalLMEagle3, for
                crash tests (SGLang refuses it while building the draft model, on any device)
OUT/sharegpt.json  a ShareGPT-format dataset for bench_serving (sharegpt or random)
OUT/build.json  the build's figures (losses, the head's accuracies, a simulated accept length,
                the target's smallest top-1/top-2 logit gap, seconds)

How acceptance comes about: the target is trained for TARGET_STEPS steps to continue the
sentences' cyclic text from any window (after a few random tokens too), so its greedy output
is a memorised continuation that its context picks (attention matters: which sentence, where
in it) with a wide logit margin. Then the target greedily continues HEAD_PROMPTS (the tier's
prompts among them), every sentence's first words and random windows; the head is trained on
those sequences from the target's own captured hidden states (layers 1..3's inputs, as SGLang
captures them for eagle_aux_hidden_state_layer_ids [0, 1, 2]) with both draft steps unrolled
("training-time test": step 2 reads step 1's pre-norm hidden state and attends to step 1's
keys), in a plain-torch copy of SGLang 0.5.10.post1's LlamaForCausalLMEagle3 forward (_Head).
Its drafts are then the target's next tokens, so a verify accepts both (accept length up to 3
with num_steps 2, topk 1, 3 draft tokens). Away from the text (a prompt it never saw), the
target soon falls into one of the sentences, and the drafts follow it there.

Standalone on purpose (no specops import): models.py hashes this file for its cache key.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
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
    # two sentences alike for a long stretch: their last word (and the sentence after them)
    # depends on a token ~15 back, so the target must attend far (a corrupted KV entry shows)
    "On Monday the first server reads the log, counts the errors and sends the report to Alice.",
    "On Friday the second server reads the log, counts the errors and sends the report to Bob.",
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


#: The target is trained, not random: it learns to continue the cyclic text
#: " ".join(SENTENCES * n) from any window of it, with up to NOISE_MAX random tokens before
#: the window (their own next tokens are not learnt), so an unknown prompt soon falls into
#: one of the sentences. Which sentence and where in it come from the context, so attention
#: matters; a memorised continuation has a wide top-1/top-2 logit gap, so greedy tokens do not
#: hang on float32 rounding (measured in main()'s report).
TARGET_INIT_STD = 0.02
TARGET_STEPS, TARGET_BATCH, TARGET_WINDOW, TARGET_LR = 200, 32, 48, 3e-3
NOISE_MAX = 6
#: The head is trained on the target's own greedy continuations of HEAD_PROMPTS, of every
#: sentence's first words and of random windows of the text (noise prefixes included), each
#: continued for HEAD_CONTINUE tokens.
HEAD_STEPS, HEAD_LR, HEAD_CONTINUE, HEAD_WINDOWS = 150, 1e-2, 24, 80
#: the tier's prompts (adaptive_check.PROMPTS) and a few sentence-like ones; copied, not
#: imported: this script is standalone
HEAD_PROMPTS = ["Speculative decoding", "The quick brown fox", "A small model", "Hello there", "Once upon a time",
                "The server", "Benchmarks", "A draft", "Numbers like", "Every day the model", "Patch the",
                "Greedy decoding", "The target model", "A tree", "Hello world!", "Please explain it again."]
ROPE_THETA = 10000.0
SHORT_CONTEXT = 3
EPS = 1e-5


def llama_config(vocab: int, bos: int, eos: int, pad: int, layers: int = LAYERS):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                       num_hidden_layers=layers, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                       max_position_embeddings=MAX_POSITIONS, initializer_range=TARGET_INIT_STD, rms_norm_eps=EPS,
                       rope_theta=ROPE_THETA, tie_word_embeddings=False, bos_token_id=bos, eos_token_id=eos,
                       pad_token_id=pad, torch_dtype="float32", architectures=["LlamaForCausalLM"])


def text_streams(tokenizer) -> list[list[int]]:
    """The cyclic sentence text, once starting at each sentence (so a prompt that opens a
    sentence without a leading space is seen too), each long enough for any window."""
    n = len(SENTENCES)
    return [tokenizer.encode(" ".join(SENTENCES[i:] + SENTENCES[:i] + SENTENCES[i:] + SENTENCES[:i]))
            for i in range(n)]


def _sample(streams: list[list[int]], gen, vocab: int, window: int, noise: bool) -> tuple[list[int], int]:
    """A window of a stream (from its start a third of the time), after 0..NOISE_MAX random
    non-special tokens when `noise` (half the time); returns the tokens and how many noise
    tokens lead them."""
    import torch

    stream = streams[int(torch.randint(len(streams), (1,), generator=gen))]
    start = 0
    if float(torch.rand(1, generator=gen)) >= 1 / 3:
        start = int(torch.randint(len(stream) - window, (1,), generator=gen))
    k = 0
    if noise and float(torch.rand(1, generator=gen)) < 0.5:
        k = int(torch.randint(1, NOISE_MAX + 1, (1,), generator=gen))
    prefix = [int(t) for t in torch.randint(3, vocab, (k,), generator=gen)]  # ids 0..2: special tokens
    return prefix + stream[start:start + window], k


def train_target(tokenizer):
    """A LlamaForCausalLM trained (TARGET_STEPS of AdamW) to continue the sentence text."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    vocab = len(tokenizer)
    config = llama_config(vocab, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    model = LlamaForCausalLM(config).to(torch.float32)
    streams = text_streams(tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=TARGET_LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, TARGET_LR, total_steps=TARGET_STEPS, pct_start=0.1)
    model.train()
    for _ in range(TARGET_STEPS):
        rows, labels = [], []
        for _ in range(TARGET_BATCH):
            ids, k = _sample(streams, gen, vocab, TARGET_WINDOW, noise=True)
            lab = list(ids)
            if k:  # not learnt: the noise tokens, and the window's first token (unknowable after noise)
                lab[:k + 1] = [-100] * (k + 1)
            rows.append(ids[:TARGET_WINDOW])
            labels.append(lab[:TARGET_WINDOW])
        out = model(input_ids=torch.tensor(rows), labels=torch.tensor(labels))
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    return model, float(out.loss.detach())


def make_target(out: Path, tokenizer, model) -> int:
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return len(tokenizer)


# ---- the EAGLE-3 head: SGLang 0.5.10.post1's LlamaForCausalLMEagle3 forward, in plain torch ----
#
# Checked against the release's srt/models/llama_eagle3.py and llama.py:
# - the target captures, for eagle_aux_hidden_state_layer_ids [0, 1, 2], the INPUT of layers
#   1, 2, 3 (set_eagle3_layers_to_capture adds 1; the tensor is hidden + residual), i.e.
#   transformers' hidden_states[1..3]; concatenated in that order (3 x HIDDEN);
# - draft step 1 (draft extend, over the target's hidden states): at position p the head reads
#   the next token x[p+1] (input ids shifted left by one) and fc(aux[p]); it predicts x[p+2];
# - midlayer: residual = hidden; cat([input_layernorm(embed), hidden_norm(hidden)]) -> q/k/v
#   (2 x HIDDEN wide), rope (neox style, theta 10000, head_dim 16) at the position, causal
#   attention, o_proj; post_attention_layernorm fused: residual += attn, h = norm(residual);
#   mlp(h); final norm fused: pre = mlp + residual, logits = lm_head(norm(pre));
# - draft step 2 (draft decode, position n = seq_len): reads the drafted token and the head's
#   own pre-norm `pre` of step 1 (fc skipped: it is already HIDDEN wide), attending to the
#   step-1 keys of positions < n (the draft KV cache, rebuilt by draft extend after every
#   verify from the target's hidden states) and its own key;
# - embed_tokens is replaced by the target's (set_embed); lm_head is the head's own (draft
#   vocab = vocab, d2t all zeros: draft id = target id).


def _rms(x, w):
    import torch

    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def _rope(x, pos):
    """Neox-style rotary embedding of x (B, heads, T, D) at positions pos (T,)."""
    import torch

    d = x.shape[-1]
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = pos.to(torch.float32)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos(), emb.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class _Head:
    """The head's parameters (SGLang's weight names) and its two-step forward."""

    def __init__(self, embed, gen):
        import torch

        head_dim = DRAFT_HIDDEN // HEADS

        def rand(*shape: int):
            return (torch.randn(*shape, generator=gen) * 0.05).requires_grad_()

        self.embed = embed.detach()
        self.p = {
            "fc.weight": rand(DRAFT_HIDDEN, 3 * HIDDEN),
            "midlayer.input_layernorm.weight": torch.ones(DRAFT_HIDDEN, requires_grad=True),
            "midlayer.hidden_norm.weight": torch.ones(DRAFT_HIDDEN, requires_grad=True),
            "midlayer.post_attention_layernorm.weight": torch.ones(DRAFT_HIDDEN, requires_grad=True),
            "midlayer.self_attn.q_proj.weight": rand(HEADS * head_dim, 2 * DRAFT_HIDDEN),
            "midlayer.self_attn.k_proj.weight": rand(KV_HEADS * head_dim, 2 * DRAFT_HIDDEN),
            "midlayer.self_attn.v_proj.weight": rand(KV_HEADS * head_dim, 2 * DRAFT_HIDDEN),
            "midlayer.self_attn.o_proj.weight": rand(DRAFT_HIDDEN, HEADS * head_dim),
            "midlayer.mlp.gate_proj.weight": rand(DRAFT_INTERMEDIATE, DRAFT_HIDDEN),
            "midlayer.mlp.up_proj.weight": rand(DRAFT_INTERMEDIATE, DRAFT_HIDDEN),
            "midlayer.mlp.down_proj.weight": rand(DRAFT_HIDDEN, DRAFT_INTERMEDIATE),
            "norm.weight": torch.ones(DRAFT_HIDDEN, requires_grad=True),
            "lm_head.weight": rand(len(embed), DRAFT_HIDDEN),
        }

    def _qkv(self, tokens, hidden, pos):
        """q (B,H,T,D), k and v (B,KV,T,D) for token ids and HIDDEN-wide hidden states."""
        import torch

        p, b, t = self.p, tokens.shape[0], tokens.shape[1]
        d = DRAFT_HIDDEN // HEADS
        x = torch.cat([_rms(self.embed[tokens], p["midlayer.input_layernorm.weight"]),
                       _rms(hidden, p["midlayer.hidden_norm.weight"])], -1)
        q = (x @ p["midlayer.self_attn.q_proj.weight"].T).view(b, t, HEADS, d).transpose(1, 2)
        k = (x @ p["midlayer.self_attn.k_proj.weight"].T).view(b, t, KV_HEADS, d).transpose(1, 2)
        v = (x @ p["midlayer.self_attn.v_proj.weight"].T).view(b, t, KV_HEADS, d).transpose(1, 2)
        return _rope(q, pos), _rope(k, pos), v

    def _rest(self, attn, residual):
        """o_proj, the fused norms and the mlp: (logits, pre-norm hidden)."""
        import torch

        p = self.p
        b, h, t, d = attn.shape
        residual = attn.transpose(1, 2).reshape(b, t, h * d) @ p["midlayer.self_attn.o_proj.weight"].T + residual
        x = _rms(residual, p["midlayer.post_attention_layernorm.weight"])
        x = (torch.nn.functional.silu(x @ p["midlayer.mlp.gate_proj.weight"].T) * (x @ p["midlayer.mlp.up_proj.weight"].T)
             ) @ p["midlayer.mlp.down_proj.weight"].T
        pre = x + residual
        return _rms(pre, p["norm.weight"]) @ p["lm_head.weight"].T, pre

    def forward(self, tokens, aux, blind: bool = False):
        """Both draft steps over whole sequences. tokens (B,T), aux (B,T,3H): step-1 logits at
        p (predicting x[p+2]) and step-2 logits at p (reading x[p+2] at position p+1,
        predicting x[p+3]), each (B,T-2,V). `blind`: no draft KV cache of earlier positions
        (each step-1 query sees only its own key), to measure how much the head relies on it."""
        import torch

        b, t = tokens.shape
        n = t - 2
        pos = torch.arange(n)
        rep = HEADS // KV_HEADS
        h1 = aux[:, :n] @ self.p["fc.weight"].T
        q1, k1, v1 = self._qkv(tokens[:, 1:n + 1], h1, pos)
        k1r, v1r = k1.repeat_interleave(rep, 1), v1.repeat_interleave(rep, 1)
        scale = (DRAFT_HIDDEN // HEADS) ** -0.5
        causal = torch.eye(n, dtype=torch.bool) if blind else torch.ones(n, n, dtype=torch.bool).tril()
        s1 = (q1 @ k1r.transpose(-1, -2)) * scale
        s1 = s1.masked_fill(~causal, float("-inf"))
        logits1, pre1 = self._rest(s1.softmax(-1) @ v1r, h1)
        # step 2: query at position p+1 sees step-1 keys 0..p and its own key
        q2, k2, v2 = self._qkv(tokens[:, 2:n + 2], pre1, pos + 1)
        k2r, v2r = k2.repeat_interleave(rep, 1), v2.repeat_interleave(rep, 1)
        s_old = ((q2 @ k1r.transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf"))
        s_own = (q2 * k2r).sum(-1, keepdim=True) * scale
        w = torch.cat([s_old, s_own], -1).softmax(-1)
        attn2 = w[..., :n] @ v1r + w[..., n:] * v2r
        logits2, _ = self._rest(attn2, pre1)
        return logits1, logits2


def head_data(model, tokenizer):
    """Sequences the target continues greedily (HEAD_PROMPTS, sentence openings, windows),
    with the target's aux hidden states and its greedy next token at every position."""
    import torch

    gen = torch.Generator().manual_seed(SEED + 3)
    prompts = [tokenizer.encode(p) for p in HEAD_PROMPTS]
    for sentence in SENTENCES:
        words = sentence.split()
        prompts += [tokenizer.encode(" ".join(words[:k])) for k in (1, 2, 4)]
    streams = text_streams(tokenizer)
    for _ in range(HEAD_WINDOWS):
        length = int(torch.randint(3, 24, (1,), generator=gen))
        prompts.append(_sample(streams, gen, len(tokenizer), length, noise=True)[0])
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        by_length.setdefault(len(ids), []).append(i)
    seqs: list[list[int]] = [[] for _ in prompts]
    with torch.no_grad():
        for group in by_length.values():  # prompts of one length continue together, unpadded
            batch = torch.tensor([prompts[i] for i in group])
            for _ in range(HEAD_CONTINUE):
                batch = torch.cat([batch, model(input_ids=batch).logits[:, -1].argmax(-1, keepdim=True)], 1)
            for i, seq in zip(group, batch.tolist(), strict=True):
                seqs[i] = seq
        width = max(map(len, seqs))
        pad = [s + [0] * (width - len(s)) for s in seqs]
        out = model(input_ids=torch.tensor(pad), output_hidden_states=True)
        aux = torch.cat([out.hidden_states[i] for i in (1, 2, 3)], -1)
        greedy = out.logits.argmax(-1)
        top2 = out.logits.topk(2, -1).values
        gap = top2[..., 0] - top2[..., 1]
    lengths = torch.tensor([len(s) for s in seqs])
    return torch.tensor(pad), aux, greedy, lengths, gap, [len(p) for p in prompts]


def train_head(model, tokenizer):
    """The head trained with both draft steps unrolled ("training-time test"): step 1 at p
    learns the target's greedy token after x[..p+1]; step 2 learns the one after that, where
    x[p+2] is that greedy token (a drafted token that is accepted). Returns the head and its
    figures on the training data (step accuracies, a simulated accept length, the target's
    smallest top-1/top-2 logit gap on the generated tokens)."""
    import torch

    tokens, aux, greedy, lengths, gap, plens = head_data(model, tokenizer)
    b, t = tokens.shape
    n = t - 2
    idx = torch.arange(n)[None, :]
    valid1 = (idx + 2 < lengths[:, None])  # label: greedy[p+1], the token after x[..p+1]
    label1 = greedy[:, 1:n + 1]
    # step 2 reads x[p+2]; it stands for an accepted draft only where x[p+2] is greedy[p+1]
    valid2 = valid1 & (idx + 3 < lengths[:, None]) & (tokens[:, 2:n + 2] == greedy[:, 1:n + 1])
    label2 = greedy[:, 2:n + 2]
    gen = torch.Generator().manual_seed(SEED + 1)
    head = _Head(model.get_input_embeddings().weight, gen)
    opt = torch.optim.AdamW(list(head.p.values()), lr=HEAD_LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, HEAD_LR, total_steps=HEAD_STEPS, pct_start=0.1)
    ce = torch.nn.functional.cross_entropy
    for _ in range(HEAD_STEPS):
        logits1, logits2 = head.forward(tokens, aux)
        loss = ce(logits1[valid1], label1[valid1]) + ce(logits2[valid2], label2[valid2])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        logits1, logits2 = head.forward(tokens, aux)
        ok1 = logits1.argmax(-1) == label1
        ok2 = logits2.argmax(-1) == label2
        # accept length of greedy decoding with 2 draft tokens: the verify at sequence length m
        # (x[m-1] just produced) checks d1 (step 1 at m-2) and d2 (step 2 at m-2)
        accepts = []
        for row, plen in enumerate(plens):
            m = plen + 1  # the prefill produced one token
            while m < int(lengths[row]) - 1:
                a = 1 + int(ok1[row, m - 2]) + int(ok1[row, m - 2] and ok2[row, m - 2])
                accepts.append(a)
                m += a
        gen_mask = idx + 2 >= torch.tensor(plens)[:, None]
        blind1, blind2 = head.forward(tokens, aux, blind=True)
        # how much the target's context matters: its greedy token with only the last
        # SHORT_CONTEXT tokens of context, against the full context's
        short = [int(model(input_ids=tokens[r:r + 1, j - SHORT_CONTEXT + 1:j + 1]).logits[0, -1].argmax() != greedy[r, j])
                 for r in range(0, b, 4) for j in range(SHORT_CONTEXT, int(lengths[r]))]
        figures = {"loss": round(float(loss), 4), "acc1": round(float(ok1[valid1].float().mean()), 4),
                   "acc2": round(float(ok2[valid2].float().mean()), 4),
                   "acc1_without_draft_kv": round(float((blind1.argmax(-1) == label1)[valid1].float().mean()), 4),
                   "simulated_accept_len": round(sum(accepts) / len(accepts), 3),
                   "min_gap_generated": round(float(gap[:, 2:][gen_mask & valid1].min()), 3),
                   f"target_changed_with_{SHORT_CONTEXT}_token_context": round(sum(short) / len(short), 4)}
    return head, figures


def make_draft(out: Path, vocab: int, tokenizer, head) -> None:
    """The trained EAGLE-3 head in the layout SGLang's LlamaForCausalLMEagle3.load_weights reads."""
    import torch
    from safetensors.torch import save_file

    head_dim = DRAFT_HIDDEN // HEADS
    weights = {"embed_tokens.weight": head.embed.clone().contiguous()}  # the target's (set_embed shares it anyway)
    weights.update({name: p.detach().clone().contiguous() for name, p in head.p.items()})
    weights["d2t"] = torch.zeros(vocab, dtype=torch.int64)  # draft id + d2t = target id: identity
    weights["t2d"] = torch.ones(vocab, dtype=torch.bool)
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
        "rms_norm_eps": EPS,
        "rope_theta": ROPE_THETA,
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
    import torch

    torch.set_num_threads(1)  # tiny ops: a second thread buys little on 2 shared cores
    started = time.monotonic()
    tokenizer = train_tokenizer(out / "tokenizer")
    model, target_loss = train_target(tokenizer)
    vocab = make_target(out / "target", tokenizer, model)
    target_s = time.monotonic() - started
    head, figures = train_head(model, tokenizer)
    make_draft(out / "draft", vocab, tokenizer, head)
    make_bad_draft(out / "bad-draft", tokenizer)
    make_dataset(out / "sharegpt.json")
    shutil.rmtree(out / "tokenizer")
    report = {"target_loss": round(target_loss, 4), "target_s": round(target_s, 1), **figures,
              "total_s": round(time.monotonic() - started, 1)}
    (out / "build.json").write_text(json.dumps(report) + "\n")
    print(json.dumps(report))
    (out / "vocab.txt").write_text(f"{vocab}\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT")
    main(Path(sys.argv[1]))
