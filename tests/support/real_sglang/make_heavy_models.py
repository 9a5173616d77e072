"""Make a heavy model set from a tiny one (run with the runtime's python):

    <vllm runtime python> make_heavy_models.py TINY OUT [--hidden H] [--intermediate N] [--miss F]
    <sglang runtime python> make_heavy_models.py TINY OUT --wide-head [...]

TINY is make_vllm_models.py's output (its target and draft), or with --wide-head make_models.py's
(SGLang's tier: SGLang refuses a head narrower than its target, so the head is widened too). Speculation pays only where a
decode step costs reading the target's weights, not the engine's fixed overhead; the tiny
target (hidden 64, intermediate 128: 0.3 M parameters) costs nothing to read. So:

OUT/target      the tiny target zero-widened to hidden H and MLP intermediate N: every weight
                keeps the tiny values in its first 64 (128) rows/columns and zeros elsewhere
                (embeddings, q/k/v columns, o_proj rows, gate/up rows and columns, down rows and
                columns, lm_head columns). The residual stream's added dimensions stay exactly 0
                (each layer adds 0 there), each added MLP unit computes silu(0) * 0 = 0, so every
                logit is the tiny target's up to float rounding, while each forward reads and
                multiplies H x N sized matrices, as a real model of that shape does. The one
                place the width shows is RMSNorm, which averages x^2 over H: its weights are
                multiplied by sqrt(64/H) and its eps by 64/H, which gives the tiny norm exactly
                in real arithmetic (w s x / sqrt(m s^2 + e s^2) = w x / sqrt(m + e), s^2 = 64/H).
                Attention heads (2 x 32, one KV head) are the tiny model's, so the KV cache stays
                tiny. The build proves the tokens: the tiny target's greedy tokens for PROMPTS
                (transformers on this python, float32) and the heavy target's, run in each of
                --dtypes (float32; SGLang's set adds bfloat16, the dtype its routes run in),
                must be equal, or it fails.
OUT/draft       the tiny EAGLE-3 head, reading the wide target: its fc takes 3 x H inputs (the
                tiny columns in place, zeros elsewhere: the captured hidden states' added
                dimensions are 0), its own width stays 64 (vLLM keeps its own embed_tokens when
                the widths differ). Partial acceptance: the lm_head rows of a fixed set of tokens
                (those that make up a fraction F of the target's generated text) are swapped with
                rows of tokens the target never generates. Whenever the target's next token is in
                that set, the head drafts a token the target never emits, so the verify rejects it
                and the drafts after it; elsewhere it drafts as before.
                With --wide-head the head itself is zero-widened to H the same way (its
                embed_tokens and lm_head columns, fc to H x 3H block by block, q/k/v's two input
                blocks (embedding, hidden) each at its own offset, o_proj and down rows, gate/up
                columns, its norms compensated as the target's): its drafts are the tiny head's.
OUT/build.json  the widths, the parameter count and bytes, the identity proof, the swap's
                figures, one-thread forward times of both targets (transformers).

Standalone on purpose (no specops import): models.py hashes this file and the tiny set's
scripts for its cache key.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

#: widths: 4 layers x 3 x 2048 x 12288 MLP weights x 4 bytes = 1.2 GB of fp32 weights
HIDDEN = 2048
INTERMEDIATE = 12288
#: fraction of the target's generated tokens the head gets wrong
MISS = 0.15
SEED = 4321
#: the identity proof's prompts: the tier's, sentence-like ones and random words (as the bench
#: client sends), each continued greedily for PROOF_TOKENS
PROMPTS = ["Speculative decoding", "The quick brown fox", "A small model", "Hello there",
           "Please explain it again.", "zebra orbit candle seventy quietly lantern"]
PROOF_TOKENS = 32
#: the text the swap's frequencies are read from: the target's greedy continuations of these
#: and of random-word prompts (bench's random dataset is words), FREQ_TOKENS each
FREQ_PROMPTS = 24
FREQ_TOKENS = 64
WORDS = ["apple", "river", "stone", "orbit", "candle", "seventy", "quietly", "lantern", "zebra", "metal",
         "window", "garden", "signal", "paper", "cloud", "ember", "north", "violet", "copper", "sudden"]
TIMING_TOKENS = (1, 4, 16)


def _load(path: Path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def _pad(w, rows: int, cols: int | None = None):
    """`w` (rows0[, cols0]) in the top-left corner of zeros (rows[, cols])."""
    import torch

    if w.dim() == 1:
        out = torch.zeros(rows, dtype=w.dtype)
        out[:w.shape[0]] = w
        return out
    out = torch.zeros(rows, cols, dtype=w.dtype)
    out[:w.shape[0], :w.shape[1]] = w
    return out


def widen(weights: dict, hidden: int, intermediate: int, small_hidden: int) -> dict:
    """The target's weights zero-widened to `hidden` and `intermediate` (norms compensated)."""
    scale = (small_hidden / hidden) ** 0.5
    out = {}
    for name, w in weights.items():
        if name.endswith("norm.weight"):
            w = _pad(w * scale, hidden)
        elif name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
            w = _pad(w, intermediate, hidden)
        elif name.endswith("mlp.down_proj.weight"):
            w = _pad(w, hidden, intermediate)
        elif name.endswith("self_attn.o_proj.weight"):
            w = _pad(w, hidden, w.shape[1])
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "embed_tokens.weight",
                            "lm_head.weight")):
            w = _pad(w, w.shape[0], hidden)
        else:
            raise SystemExit(f"make_heavy_models: no widening rule for {name} {tuple(w.shape)}")
        out[name] = w.contiguous()
    return out


def widen_head(weights: dict, hidden: int, small: int) -> dict:
    """An EAGLE-3 head's weights zero-widened from `small` to `hidden` (norms compensated): each
    input block of fc (3 captured layers) and of q/k/v (embedding, hidden state) keeps its tiny
    columns at its own block's start."""
    import torch

    def blocks(w, parts: int, rows: int):
        return torch.cat([_pad(w[:, i * small:(i + 1) * small], rows, hidden) for i in range(parts)], 1)

    scale = (small / hidden) ** 0.5
    out = {}
    for name, w in weights.items():
        if name in ("d2t", "t2d"):
            pass
        elif name.endswith("norm.weight"):
            w = _pad(w * scale, hidden)
        elif name == "fc.weight":
            w = blocks(w, w.shape[1] // small, hidden)
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            w = blocks(w, 2, w.shape[0])
        elif name.endswith(("o_proj.weight", "mlp.down_proj.weight")):
            w = _pad(w, hidden, w.shape[1])
        elif name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight", "embed_tokens.weight", "lm_head.weight")):
            w = _pad(w, w.shape[0], hidden)
        else:
            raise SystemExit(f"make_heavy_models: no head widening rule for {name} {tuple(w.shape)}")
        out[name] = w.contiguous()
    return out


def make_target(tiny: Path, out: Path, hidden: int, intermediate: int) -> dict:
    from safetensors.torch import save_file

    config = json.loads((tiny / "config.json").read_text())
    small, small_hidden = config["intermediate_size"], config["hidden_size"]
    if intermediate < small or hidden < small_hidden:
        sys.exit(f"--hidden {hidden} --intermediate {intermediate}: narrower than the tiny target's "
                 f"{small_hidden}/{small}")
    shutil.copytree(tiny, out, ignore=shutil.ignore_patterns("model.safetensors", "config.json"))
    weights = widen(_load(tiny), hidden, intermediate, small_hidden)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.update(hidden_size=hidden, intermediate_size=intermediate,
                  rms_norm_eps=config["rms_norm_eps"] * small_hidden / hidden)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    params = sum(w.numel() for w in weights.values())
    return {"hidden": hidden, "intermediate": intermediate, "tiny_hidden": small_hidden, "tiny_intermediate": small,
            "params": params, "weight_bytes": sum(w.numel() * w.element_size() for w in weights.values())}


def _model(path: Path, dtype: str = "float32"):
    import torch
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).eval()


def greedy(model, tokenizer, prompts: list[str], tokens: int) -> list[list[int]]:
    """Greedy continuations, one prompt at a time (no padding), ids only."""
    import torch

    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([tokenizer.encode(prompt)])
            gen = model.generate(ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens,
                                 pad_token_id=tokenizer.pad_token_id)
            out.append(gen[0, ids.shape[1]:].tolist())
    return out


def prove_identity(tiny, heavy, tokenizer) -> dict:
    """The two targets' greedy tokens for PROMPTS; the build fails unless they are equal."""
    want = greedy(tiny, tokenizer, PROMPTS, PROOF_TOKENS)
    got = greedy(heavy, tokenizer, PROMPTS, PROOF_TOKENS)
    proof = {"prompts": len(PROMPTS), "tokens_each": PROOF_TOKENS, "identical": want == got,
             "first_difference": next(([i, j] for i, (a, b) in enumerate(zip(want, got, strict=True))
                                       for j, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)}
    return proof


def _freq_prompts() -> list[str]:
    rng = random.Random(SEED)
    return PROMPTS + [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24)))
                      for _ in range(FREQ_PROMPTS - len(PROMPTS))]


def make_draft(tiny_draft: Path, out: Path, tiny_model, tokenizer, miss: float, hidden: int,
               wide_head: bool = False) -> dict:
    """The tiny head reading the `hidden`-wide target (itself `hidden` wide with `wide_head`), the
    lm_head rows of a token set swapped (see the module's doc)."""
    import torch
    from safetensors.torch import save_file

    generated = [t for row in greedy(tiny_model, tokenizer, _freq_prompts(), FREQ_TOKENS) for t in row]
    counts: dict[int, int] = {}
    for t in generated:
        counts[t] = counts.get(t, 0) + 1
    vocab = json.loads((tiny_draft / "config.json").read_text())["vocab_size"]
    special = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    unused = [t for t in range(vocab) if t not in counts and t not in special]
    order = sorted(counts)
    random.Random(SEED + 1).shuffle(order)
    chosen, covered = [], 0
    for t in order:  # a seeded order of the generated tokens until they make up `miss` of the text
        if covered >= miss * len(generated):
            break
        if counts[t] + covered > (miss + 0.03) * len(generated):
            continue  # a token too frequent for what is left: the next one
        chosen.append(t)
        covered += counts[t]
    weights = _load(tiny_draft)
    lm = weights["lm_head.weight"].clone()
    for a, b in zip(chosen, unused, strict=False):
        lm[[a, b]] = lm[[b, a]]
    weights["lm_head.weight"] = lm.contiguous()
    config = json.loads((tiny_draft / "config.json").read_text())
    small = config["target_hidden_size"]
    if wide_head:
        weights = widen_head(weights, hidden, small)
        config.update(hidden_size=hidden, rms_norm_eps=config["rms_norm_eps"] * small / hidden)
    else:
        fc = weights["fc.weight"]  # (draft hidden, 3 x target hidden): each captured layer's block widened
        parts = fc.shape[1] // small
        weights["fc.weight"] = torch.cat([_pad(fc[:, i * small:(i + 1) * small], fc.shape[0], hidden)
                                          for i in range(parts)], 1).contiguous()
    config["target_hidden_size"] = hidden
    shutil.copytree(tiny_draft, out, ignore=shutil.ignore_patterns("model.safetensors", "config.json"))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    fraction = covered / len(generated)
    p = 1 - fraction
    return {"swapped_tokens": len(chosen), "missed_fraction": round(fraction, 4),
            "expected_accept_len_3_drafts": round(1 + p + p * p + p ** 3, 3), "generated_tokens": len(generated)}


def _forward_ms(model, tokens: int) -> float:
    import torch

    ids = torch.randint(3, 100, (1, tokens))
    best = float("inf")
    with torch.no_grad():
        for _ in range(5):
            start = time.perf_counter()
            model(input_ids=ids)
            best = min(best, time.perf_counter() - start)
    return round(best * 1000, 1)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tiny", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--intermediate", type=int, default=INTERMEDIATE)
    parser.add_argument("--miss", type=float, default=MISS)
    parser.add_argument("--wide-head", action="store_true", help="widen the EAGLE-3 head to --hidden too "
                        "(SGLang's tier)")
    parser.add_argument("--dtypes", type=lambda v: v.split(","), default=["float32"],
                        help="comma list: the dtypes the heavy target's tokens are proved and its forward timed "
                             "in (default float32)")
    parser.add_argument("--no-timing", action="store_true", help="skip the forward timings")
    parser.add_argument("--reference", type=Path, help="the set whose target's greedy tokens the heavy one "
                        "must give (default: TINY)")
    args = parser.parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    started = time.monotonic()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    report: dict = {"target": make_target(args.tiny / "target", args.out / "target", args.hidden,
                                             args.intermediate)}
    tokenizer = AutoTokenizer.from_pretrained(str(args.tiny / "target"))
    tiny = _model(args.tiny / "target")
    heavy = {dtype: _model(args.out / "target", dtype) for dtype in args.dtypes}
    reference = tiny if args.reference is None else _model(args.reference / "target")
    proofs = {dtype: prove_identity(reference, heavy[dtype], tokenizer) for dtype in args.dtypes}
    report["identity"] = {**proofs[args.dtypes[0]], "identical": all(p["identical"] for p in proofs.values()),
                          "by_dtype": proofs}
    report["draft"] = make_draft(args.tiny / "draft", args.out / "draft", tiny, tokenizer, args.miss,
                                  args.hidden, args.wide_head)
    if not args.no_timing:
        report["forward_ms_1_thread"] = {
            "tiny": {n: _forward_ms(tiny, n) for n in TIMING_TOKENS},
            **{"heavy" if dtype == "float32" else f"heavy_{dtype}": {n: _forward_ms(heavy[dtype], n) for n in TIMING_TOKENS}
               for dtype in args.dtypes}}
    report["total_s"] = round(time.monotonic() - started, 1)
    (args.out / "build.json").write_text(json.dumps(report) + "\n")
    print(json.dumps(report))
    if not report["identity"]["identical"]:
        sys.exit(f"the heavy target's greedy tokens differ from the tiny one's: {report['identity']}")
    for name in ("vocab.txt", "sharegpt.json"):  # the tiny set's files the tier reads beside the models
        if (args.tiny / name).is_file():
            shutil.copyfile(args.tiny / name, args.out / name)


if __name__ == "__main__":
    main(sys.argv[1:])
