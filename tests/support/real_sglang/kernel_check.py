"""Check the CPU stand-ins for SGLang's EAGLE kernels against SGLang's own Triton ports of
the CUDA kernels (0.5.23's `sglang/kernels/ops/speculative/spec_tree.py`, run by Triton's
interpreter), on random draft trees made by SGLang's own code. Run with the runtime's
python, SGLANG_USE_CPU_ENGINE=1, TRITON_INTERPRET=1 and PYTHONPATH=<standins>:<tree>/python:

    python kernel_check.py SPEC_TREE_PY TRIALS

The tree's `eagle_utils.build_tree_kernel_efficient` is called as SGLang calls it, so the
stand-in is reached through the import hook (sitecustomize), not called directly. Prints
one JSON line of counts; exits 1 on the first mismatch, printing both results.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import random
import sys
import tempfile
from pathlib import Path

REFERENCE_NAMES = ("TreeMaskMode", "sgl_build_tree_kernel_efficient_triton", "verify_tree_greedy_kernel_triton",
                   "sgl_build_tree_kernel_triton", "verify_tree_greedy_triton")


def load_reference(spec_tree: Path):
    """The Triton kernels and their launchers, lifted out of spec_tree.py by name (the file's
    own imports need the rest of SGLang 0.5.23); written to a file, as triton.jit reads the
    source of what it compiles."""
    tree = ast.parse(spec_tree.read_text())
    keep = [node for node in tree.body if getattr(node, "name", None) in REFERENCE_NAMES]
    missing = set(REFERENCE_NAMES) - {node.name for node in keep}  # type: ignore[attr-defined]
    if missing:
        sys.exit(f"{spec_tree}: no {sorted(missing)}")
    header = "from enum import IntEnum\nimport torch\nimport triton\nimport triton.language as tl\n\n"
    out = Path(tempfile.mkdtemp()) / "spec_tree_reference.py"
    out.write_text(header + "\n\n".join(ast.unparse(node) for node in keep) + "\n")
    spec = importlib.util.spec_from_file_location("spec_tree_reference", out)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draft_tree(bs: int, topk: int, steps: int, num_draft: int, vocab: int, gen):
    """parent_list, top_scores_index and draft_tokens as EAGLE's draft loop makes them."""
    import torch
    from sglang.srt.speculative.eagle_utils import organize_draft_results
    from sglang.srt.speculative.spec_utils import select_top_k_tokens

    score_list, token_list, parents_list = [], [], []
    scores = hidden = None
    topk_p = torch.rand(bs, topk, generator=gen)
    topk_index = torch.randint(0, vocab, (bs, topk), generator=gen)
    for i in range(steps):
        _ids, hidden, scores, (s, t, p) = select_top_k_tokens(
            i, topk_p, topk_index, hidden if hidden is not None else torch.zeros(bs, 1), scores, topk)
        score_list.append(s)
        token_list.append(t)
        parents_list.append(p)
        topk_p = torch.rand(bs * topk, topk, generator=gen).softmax(-1)
        topk_index = torch.randint(0, vocab, (bs * topk, topk), generator=gen)
    return organize_draft_results(score_list, token_list, parents_list, num_draft)


def build(eagle_utils, kernel, args: dict):
    eagle_utils.sgl_build_tree_kernel_efficient = kernel
    return eagle_utils.build_tree_kernel_efficient(**args)


def check_verify(standin, ref, tree_out, bs: int, topk: int, steps: int, num_draft: int, gen, rng) -> int:
    """Greedy verification of the built tree against targets that follow a random branch
    for a random number of levels (so every acceptance length occurs). Returns accepted tokens."""
    import torch

    _mask, _pos, r_index, r_next, r_sibling, draft_tokens = tree_out
    candidates = draft_tokens.reshape(bs, num_draft)
    target = torch.randint(0, 10**6, (bs, num_draft), generator=gen)  # mismatches by default
    next_l, sib_l = r_next.tolist(), r_sibling.tolist()
    for b in range(bs):  # walk a random path, making the target agree for `depth` levels
        node, depth = 0, rng.randint(0, steps)
        for _ in range(depth):
            child = next_l[b][node]
            options = []
            while child != -1:
                options.append(child)
                child = sib_l[b][child]
            if not options:
                break
            pick = rng.choice(options)
            target[b, node] = candidates[b, pick]
            node = pick
    results = []
    for fn in (standin.verify_tree_greedy, ref.verify_tree_greedy_triton):
        predicts = torch.full((bs * num_draft,), -7, dtype=torch.int32)
        accept_index = torch.full((bs, steps + 1), -1, dtype=torch.int32)
        accept_num = torch.full((bs,), -3, dtype=torch.int32)
        fn(predicts, accept_index, accept_num, candidates, r_index, r_next, r_sibling, target)
        results.append((predicts, accept_index, accept_num))
    for got, want in zip(results[0], results[1], strict=True):
        if not torch.equal(got, want):
            print(json.dumps({"mismatch": "verify_tree_greedy", "bs": bs, "topk": topk, "steps": steps,
                              "num_draft": num_draft, "standin": [t.tolist() for t in results[0]],
                              "reference": [t.tolist() for t in results[1]]}))
            sys.exit(1)
    return int(results[0][2].sum())


def main(spec_tree: Path, trials: int) -> None:
    import specops_cpu_spec_kernels as standin
    import torch
    from sglang.srt.speculative import eagle_utils

    ref = load_reference(spec_tree)
    if eagle_utils.sgl_build_tree_kernel_efficient is not standin.build_tree_kernel_efficient:
        sys.exit("the import hook did not install the build_tree stand-in into eagle_utils")
    if eagle_utils.verify_tree_greedy_func.__module__ != "sitecustomize":
        sys.exit("the import hook did not install the verify_tree_greedy stand-in into eagle_utils")
    rng, gen = random.Random(7), torch.Generator().manual_seed(7)
    counts = {"trees": 0, "topk>1": 0, "accepted_tokens": 0}
    for _ in range(trials):
        bs, topk, steps = rng.randint(1, 3), rng.choice([1, 1, 2, 3]), rng.randint(1, 3)
        num_draft = rng.randint(2, topk + (steps - 1) * topk * topk + 1)
        mode = rng.choice([eagle_utils.TreeMaskMode.FULL_MASK, eagle_utils.TreeMaskMode.QLEN_ONLY])
        parent_list, top_scores_index, draft_tokens = draft_tree(bs, topk, steps, num_draft, 500, gen)
        seq_lens = torch.randint(1, 20, (bs,), generator=gen)
        args = dict(verified_id=torch.randint(0, 500, (bs,), generator=gen), parent_list=parent_list,
                    top_scores_index=top_scores_index, draft_tokens=draft_tokens, seq_lens=seq_lens,
                    seq_lens_sum=int(seq_lens.sum()), topk=topk, spec_steps=steps, num_verify_tokens=num_draft,
                    tree_mask_mode=mode)
        got = build(eagle_utils, standin.build_tree_kernel_efficient, args)
        want = build(eagle_utils, ref.sgl_build_tree_kernel_triton, args)
        names = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
        for name, g, w in zip(names, got[:5], want[:5], strict=True):
            if not torch.equal(g, w):
                print(json.dumps({"mismatch": f"build_tree_kernel_efficient {name}", "bs": bs, "topk": topk,
                                  "steps": steps, "num_draft": num_draft, "mode": int(mode),
                                  "standin": g.tolist(), "reference": w.tolist()}))
                sys.exit(1)
        counts["trees"] += 1
        counts["topk>1"] += topk > 1
        counts["accepted_tokens"] += check_verify(standin, ref, got, bs, topk, steps, num_draft, gen, rng)
    print(json.dumps(counts))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
