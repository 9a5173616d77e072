"""CPU stand-ins, in plain torch, for the EAGLE kernels SGLang only has for CUDA/HIP/NPU/XPU.

Test tier only (specops real_sglang): `sitecustomize` installs them into SGLang's modules
in the test server's process. They follow sgl-kernel's CUDA kernels (`build_tree_efficient`,
`VerifyTreeGreedy`) and SGLang 0.5.23's Triton ports of them
(`sglang/kernels/ops/speculative/spec_tree.py`) element for element, including what is left
unwritten. Trees are a few tokens per request, so Python loops over `.tolist()` are cheap.
"""

from __future__ import annotations

import os

import torch

FULL_MASK, QLEN_ONLY, QLEN_ONLY_BITPACKING = 0, 1, 2


def _parent_slot(sel: list[int], parents: list[int], idx: int, topk: int, n: int) -> int | None:
    """Tree position of the parent of draft token `idx` (0: the root, p + 1: draft token p),
    or None where the tree is invalid (CUDA prints "ERROR: invalid eagle tree!!!")."""
    parent_tb_idx = sel[idx] // topk
    if parent_tb_idx == 0:
        return 0
    token = parents[parent_tb_idx]
    for p in range(n - 1):
        if sel[p] == token:
            return p + 1
    return None


def build_tree_kernel_efficient(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,  # mutable
    positions: torch.Tensor,  # mutable
    retrive_index: torch.Tensor,  # mutable
    retrive_next_token: torch.Tensor,  # mutable
    retrive_next_sibling: torch.Tensor,  # mutable
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int = FULL_MASK,
) -> None:
    """Stand-in for `sgl_kernel.build_tree_kernel_efficient` (same arguments, same writes).

    retrive_next_token/sibling arrive filled with -1; tree_mask arrives filled (True)."""
    mode = int(tree_mask_mode)
    if mode not in (FULL_MASK, QLEN_ONLY):  # QLEN_ONLY_BITPACKING: no SGLang CPU path asks for it
        raise NotImplementedError(f"CPU stand-in build_tree_kernel_efficient: tree mask mode {mode}")
    n, bs = draft_token_num, verified_seq_len.numel()
    seq_lens = [int(x) for x in verified_seq_len.tolist()]
    parents = parent_list.reshape(bs, -1).tolist() if parent_list.numel() else [[] for _ in range(bs)]
    selected = selected_index.reshape(bs, -1).tolist()
    mask = tree_mask.view(-1)
    r_index, next_token = retrive_index.view(bs, n), retrive_next_token.view(bs, n)
    next_sibling, pos = retrive_next_sibling.view(bs, n), positions.view(bs, n)
    prefix = 0  # sum of the earlier requests' seq_lens
    for b, seq_len in enumerate(seq_lens):
        sel, par = selected[b], parents[b]
        # Retrieval structure (CUDA: thread 0): children pushed to the front, last first.
        r_index[b, 0] = b * n
        for i in range(n - 1, 0, -1):
            r_index[b, i] = b * n + i
            slot = _parent_slot(sel, par, i - 1, topk, n)
            if slot is None:
                continue
            first_child = int(next_token[b, slot])
            next_token[b, slot] = i
            if first_child != -1:
                next_sibling[b, i] = first_child
        # Each token's mask row and position (CUDA: thread tid): itself and its ancestors.
        for tid in range(n):
            row = (n * n * b + prefix * n + (seq_len + n) * tid + seq_len + 1 if mode == FULL_MASK
                   else n * n * b + n * tid + 1)
            mask[row - 1] = True
            mask[row:row + n - 1] = False
            cur, position = tid - 1, 0
            for _ in range(depth if tid else 0):  # a path is at most `depth` long
                position += 1
                mask[row + cur] = True
                slot = _parent_slot(sel, par, cur, topk, n)
                if not slot:  # the root (0) or an invalid tree (None)
                    break
                cur = slot - 1
            pos[b, tid] = position + seq_len
        prefix += seq_len


#: a file whose presence makes `verify_tree_greedy` commit the first drafted token it accepts
#: as another token: the broken accept path the tier's verify test must catch (issue 37). The
#: tier gives each arm its own file, so one test can break one arm and leave the others be.
BREAK_ACCEPT_ENV = "SPECOPS_STANDIN_BREAK_ACCEPT"


def _accept_path_broken() -> bool:
    flag = os.environ.get(BREAK_ACCEPT_ENV)
    return bool(flag) and os.path.exists(flag)


def verify_tree_greedy(
    predicts: torch.Tensor,  # mutable, flat (bs * num_draft_tokens)
    accept_index: torch.Tensor,  # mutable, (bs, num_speculative_tokens)
    accept_token_num: torch.Tensor,  # mutable, (bs,)
    candidates: torch.Tensor,  # (bs, num_draft_tokens)
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,  # (bs, num_draft_tokens)
) -> None:
    """Stand-in for `sgl_kernel.verify_tree_greedy`: walk each request's tree from the root,
    accepting the child whose draft token equals the target's greedy token, then write the
    target's token after the last accepted one (the bonus token)."""
    bs, n = candidates.shape
    steps = accept_index.shape[1]
    broken = _accept_path_broken()
    cand = candidates.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sibling = retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    flat_predicts = predicts.view(-1)
    for b in range(bs):
        last = r_index[b][0]
        accept_index[b, 0] = last
        accepted = 0
        cur = 0
        for _ in range(1, steps):
            cur = r_next[b][cur]
            while cur != -1:
                if cand[b][cur] == target[last]:
                    flat_predicts[last] = target[last]
                    accepted += 1
                    accept_index[b, accepted] = r_index[b][cur]
                    last = r_index[b][cur]
                    break
                cur = r_sibling[b][cur]
            if cur == -1:
                break
        accept_token_num[b] = accepted
        flat_predicts[last] = target[last]
        if accepted and broken:  # the first accepted drafted token, committed as another one
            first = int(accept_index[b, 0])
            flat_predicts[first] = target[first] - 1 if target[first] > 0 else 1


def assign_extend_cache_locs(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
    device: torch.device | str,
) -> torch.Tensor:
    """Stand-in for EAGLE v2's `assign_extend_cache_locs_func` on CPU (it returns None there):
    the KV-cache slots req_to_token[req, start:end] of each request, concatenated, as the
    Triton kernel `assign_extend_cache_locs` writes them."""
    rows = req_pool_indices.tolist()
    starts, ends = start_offset.tolist(), end_offset.tolist()
    parts = [req_to_token[rows[i], starts[i]:ends[i]] for i in range(batch_size)]
    out = torch.cat(parts) if parts else torch.empty((0,), dtype=torch.int64, device=device)
    return out.to(device=device, dtype=torch.int64)
