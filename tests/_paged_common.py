"""Shared pieces of the paged-attention GPU tests: cache builders in vLLM's layouts (torch, on the GPU) and the float64
reference from csrc/reference/decode_golden.py (the four-stage decode model) applied per sequence and KV head."""
import math
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "csrc", "reference"))
import decode_golden as dg  # noqa: E402

X = 8  # 16 bytes of 2-byte elements


def asm_v_shuffle(v4):
    """[B, H, D, BS] -> [B, H, BS/x, D, x] (AITER's asm_V_shuffle), contiguous."""
    b, h, d, bs = v4.shape
    return v4.view(b, h, d, bs // X, X).permute(0, 1, 3, 2, 4).contiguous()


class Ref(np.ndarray):
    """A float64 reference with .naive: the same attention computed as a same-precision kernel would (softmax in
    float64, P rounded to the element type, O = P V rounded to it): FlashAttention's bar compares against its error."""


def _round(x, dtype):
    import torch
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).double().numpy()


def reference(q, k5, v4, tables, lens, scale, alibi=None, softcap=0.0, window=0, block=16, alibi_first=True):
    """float64 O [num_seqs, num_heads, d] from the HND caches (K [nb, hk, d/x, bs, x], V [nb, hk, d, bs]) via the
    four-stage golden model (score modifiers applied to the raw scores before it). alibi_first: AITER's pa_v1 order
    (ALiBi inside the soft-cap); False adds it after the cap, for tests that must tell the two apart."""
    qn = q.float().cpu().numpy().astype(np.float64)
    kn, vn = k5.float().cpu().numpy(), v4.float().cpu().numpy()
    tn, ln = tables.cpu().numpy(), lens.cpu().numpy()
    al = None if alibi is None else alibi.cpu().numpy()
    s_n, h, d = qn.shape
    hk = kn.shape[1]
    out, naive = np.zeros((s_n, h, d)), np.zeros((s_n, h, d))
    for s in range(s_n):
        ctx = int(ln[s])
        if ctx == 0:
            continue
        for kvh in range(hk):
            kk = dg.gather_k_vllm(kn, tn[s], ctx, kvh).astype(np.float64)
            vv = dg.gather_v_vllm(vn, tn[s], ctx, kvh).astype(np.float64)
            heads = range(kvh * (h // hk), (kvh + 1) * (h // hk))
            for hq in heads:
                # AITER's pa_v1 order: scale, ALiBi, then the cap
                sc = dg.qk_matmul(qn[s, hq][None], kk)[0] * scale
                ali = 0.0 if al is None else al[hq] * (np.arange(ctx) - ctx + 1)
                if alibi_first:
                    sc = sc + ali
                if softcap > 0:
                    sc = softcap * np.tanh(sc / softcap)
                if not alibi_first:
                    sc = sc + ali
                if window > 0:
                    sc[: max(0, ctx - window)] = -np.inf
                # the golden model's stages over blocks of keys, on the modified scores (scale 1)
                starts = list(range(0, ctx, block))
                state = None
                for i, j in enumerate(starts):
                    p, mx, sm = dg.softmax_prepare(sc[None, j:j + block], 1.0)
                    state = dg.online_update(dg.pv_matmul(p, vv[j:j + block]), mx, sm, state, i == 0,
                                             i == len(starts) - 1)
                out[s, hq] = state[0][0]
                prob = np.exp(sc - sc.max())
                naive[s, hq] = _round(_round(prob / prob.sum(), q.dtype) @ vv, q.dtype)
    ref = out.view(Ref)
    ref.naive = naive
    return ref


def max_err(out, ref):
    return float(np.max(np.abs(out.float().cpu().numpy().astype(np.float64) - ref))) if ref.size else 0.0


BAR_FACTOR = 3.0  # measured (H100, session 38): ours / naive error 0.84-1.79 over 20 shapes (bf16 partials in tmp_out)


def within_bar(out, ref):
    """FlashAttention's bar with a factor for the partition partials' rounding: no NaN, and max|out - ref| <=
    BAR_FACTOR * max|naive - ref| + 1e-5 (ref from reference(), carrying .naive)."""
    if bool(out.isnan().any()):
        return False
    naive_err = float(np.max(np.abs(ref.naive - np.asarray(ref)))) if ref.size else 0.0
    return max_err(out, ref) <= BAR_FACTOR * naive_err + 1e-5


def workspace_bytes(num_seqs, num_heads, head, max_ctx, partition):
    parts = math.ceil(max_ctx / partition)
    return 0 if parts <= 1 else num_seqs * num_heads * parts * (head * 2 + 8)
