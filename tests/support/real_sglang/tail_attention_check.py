"""The eagle-torch-native sets' tail attention (`eagle_tail_extend`) against torch_native's own
extend and decode, on random caches, in a real SGLang runtime with a patched tree's python/ on
PYTHONPATH (tests/real_sglang/test_eagle_tail_attention.py):

    python tail_attention_check.py

Batches shaped as a verify (4 chain tokens a request), a draft extend (1-3 accepted tokens) and a
one-token verify (a drafting-off step), over prefixes of different lengths in a shuffled pool.
Prints one JSON object: per batch, whether the tail path took it and its largest difference
from torch_native's extend (a full seq_len x seq_len attention per request), and for the
one-token batch whether it equals the decode's attention exactly; and whether a prefill was
left to the extend.
"""

import json
import types

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.model_executor.forward_batch_info import ForwardMode

torch.manual_seed(0)
HEADS, KV_HEADS, DIM, POOL = 4, 2, 8, 256
k_cache = torch.randn(POOL, KV_HEADS, DIM)
v_cache = torch.randn(POOL, KV_HEADS, DIM)
req_to_token = torch.randperm(POOL)[: 4 * 64].reshape(4, 64).to(torch.int32)
pool = types.SimpleNamespace(get_key_buffer=lambda i: k_cache, get_value_buffer=lambda i: v_cache)
layer = types.SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=KV_HEADS, qk_head_dim=DIM,
                              v_head_dim=DIM, scaling=DIM ** -0.5, sliding_window_size=-1,
                              is_cross_attention=False)
backend = object.__new__(TorchNativeAttnBackend)
draft_mode = getattr(ForwardMode, "DRAFT_EXTEND", None) or ForwardMode.DRAFT_EXTEND_V2

def batch(mode, seq_lens, q_lens):
    seq = torch.tensor(seq_lens)
    q = torch.tensor(q_lens)
    return types.SimpleNamespace(forward_mode=mode, seq_lens=seq, extend_seq_lens=q, extend_prefix_lens=seq - q,
                                 req_pool_indices=torch.tensor([2, 0, 3][: len(seq_lens)]), encoder_lens=None)

out = {}
for name, mode, seq_lens, q_lens in (("verify", ForwardMode.TARGET_VERIFY, [9, 23, 40], [4, 4, 4]),
                                     ("draft-extend", draft_mode, [7, 30, 12], [1, 3, 2]),
                                     ("one-token", ForwardMode.TARGET_VERIFY, [5, 17, 33], [1, 1, 1])):
    fb = batch(mode, seq_lens, q_lens)
    q = torch.randn(sum(q_lens), HEADS, DIM)
    tail = torch.full_like(q, float("nan"))
    taken = backend.eagle_tail_extend(q, tail, pool, req_to_token, layer, fb, True)
    ref = torch.full_like(q, float("nan"))
    backend._run_sdpa_forward_extend(q, ref, k_cache, v_cache, req_to_token, fb.req_pool_indices, fb.seq_lens,
                                     fb.extend_prefix_lens, fb.extend_seq_lens, scaling=layer.scaling,
                                     enable_gqa=True, causal=True)
    row = {"taken": taken, "max_abs_diff": float((tail - ref).abs().max())}
    if name == "one-token":
        dec = torch.full_like(q, float("nan"))
        backend._run_sdpa_forward_decode(q, dec, k_cache, v_cache, req_to_token, fb.req_pool_indices, fb.seq_lens,
                                         scaling=layer.scaling, enable_gqa=True, causal=False)
        row["equal_to_decode"] = bool(torch.equal(tail, dec))
    out[name] = row
prefill = batch(ForwardMode.EXTEND, [6, 8], [6, 8])
out["prefill-left-alone"] = not backend.eagle_tail_extend(torch.zeros(14, HEADS, DIM), torch.zeros(14, HEADS, DIM),
                                                          pool, req_to_token, layer, prefill, True)
print(json.dumps(out))
