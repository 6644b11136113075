"""NumPy golden model of decode attention, written as four stages the way the Ascend PTO tests decompose it, plus
gathers from vLLM's paged KV-cache layouts. Pure NumPy (no torch); float64 math unless noted.

Stages, for one query tile q [m, d] against one KV block k [n, d], v [n, dv]:
  qk_matmul        s = q k^T                                              [m, n]
  softmax_prepare  p = exp(scale * s - row_max), row_max, row_sum         (row_max of scale * s; -inf entries masked)
  pv_matmul        o_blk = p v                                            [m, dv]
  online_update    merge (o_blk, row_max, row_sum) into the running state; is_first starts it, is_last finishes it
                   into (O normalised, LSE natural log). A row that saw nothing gives O = 0 and LSE = -inf.
decode_attention composes the stages over KV blocks; plain_attention is the one-shot reference they must equal.
"""
from __future__ import annotations

import dataclasses

import numpy as np

NEG_INF = -np.inf


def qk_matmul(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Raw scores [m, n] = q [m, d] @ k [n, d]^T in float64."""
    return np.asarray(q, np.float64) @ np.asarray(k, np.float64).T


def softmax_prepare(s: np.ndarray, scale: float):
    """(p, row_max, row_sum) of one block: p = exp(scale*s - row_max) with -inf scores giving 0; a row whose scores are
    all -inf has row_max = -inf, p = 0 and row_sum = 0."""
    x = np.asarray(s, np.float64) * scale
    row_max = x.max(axis=1, initial=NEG_INF)
    shift = np.where(np.isfinite(row_max), row_max, 0.0)
    p = np.exp(x - shift[:, None])
    return p, row_max, p.sum(axis=1)


def pv_matmul(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Unnormalised block output [m, dv] = p [m, n] @ v [n, dv]."""
    return np.asarray(p, np.float64) @ np.asarray(v, np.float64)


@dataclasses.dataclass
class OnlineState:
    o: np.ndarray        # [m, dv] unnormalised output relative to row_max
    row_max: np.ndarray  # [m]
    row_sum: np.ndarray  # [m]


def _rescale(old_max: np.ndarray, new_max: np.ndarray) -> np.ndarray:
    """exp(old_max - new_max), with 0 where old_max is -inf (nothing seen yet) instead of NaN."""
    safe_new = np.where(np.isfinite(new_max), new_max, 0.0)
    return np.where(np.isfinite(old_max), np.exp(old_max - safe_new), 0.0)


def online_update(o_blk, row_max, row_sum, state: OnlineState | None, is_first: bool, is_last: bool):
    """Merge one block into the running state. Returns the new OnlineState, or (O, LSE) when is_last."""
    if is_first:
        state = OnlineState(np.array(o_blk, np.float64), np.array(row_max, np.float64), np.array(row_sum, np.float64))
    else:
        if state is None:
            raise ValueError("online_update: is_first=False needs the state of the previous blocks")
        new_max = np.maximum(state.row_max, row_max)
        a, b = _rescale(state.row_max, new_max), _rescale(row_max, new_max)
        state = OnlineState(state.o * a[:, None] + o_blk * b[:, None], new_max, state.row_sum * a + row_sum * b)
    if not is_last:
        return state
    seen = state.row_sum > 0
    inv = np.where(seen, 1.0 / np.where(seen, state.row_sum, 1.0), 0.0)
    lse = np.where(seen, state.row_max + np.log(np.where(seen, state.row_sum, 1.0)), NEG_INF)
    return state.o * inv[:, None], lse


def decode_attention(q, k, v, scale: float, block: int, mask=None):
    """softmax(scale * q k^T) v by the four stages over KV blocks of `block` keys. mask [m, n] (True = visible)."""
    n = k.shape[0]
    if n == 0:
        return np.zeros((q.shape[0], v.shape[1])), np.full(q.shape[0], NEG_INF)
    starts = list(range(0, n, block))
    state = None
    for idx, j in enumerate(starts):
        s = qk_matmul(q, k[j:j + block])
        if mask is not None:
            s = np.where(mask[:, j:j + block], s, NEG_INF)
        p, mx, sm = softmax_prepare(s, scale)
        state = online_update(pv_matmul(p, v[j:j + block]), mx, sm, state, idx == 0, idx == len(starts) - 1)
    return state


def plain_attention(q, k, v, scale: float, mask=None):
    """One-shot float64 softmax attention: (O [m, dv], LSE [m]); rows with nothing visible give O = 0, LSE = -inf."""
    s = qk_matmul(q, k) * scale
    if mask is not None:
        s = np.where(mask, s, NEG_INF)
    mx = s.max(axis=1, initial=NEG_INF)
    e = np.exp(s - np.where(np.isfinite(mx), mx, 0.0)[:, None])
    tot = e.sum(axis=1)
    seen = tot > 0
    o = (e @ np.asarray(v, np.float64)) / np.where(seen, tot, 1.0)[:, None]
    return np.where(seen[:, None], o, 0.0), np.where(seen, mx + np.log(np.where(seen, tot, 1.0)), NEG_INF)


# ---- vLLM paged KV-cache layouts (x = 16 // element size: 8 for fp16/bf16) ----
def gather_k_vllm(k_cache, block_table, context_len: int, kv_head: int) -> np.ndarray:
    """K [context_len, d] of one sequence from k_cache [num_blocks, h_k, d/x, block, x]."""
    _, _, dx, bs, x = k_cache.shape
    rows = []
    for t in range(context_len):
        blk = int(block_table[t // bs])
        rows.append(k_cache[blk, kv_head, :, t % bs, :].reshape(dx * x))
    return np.array(rows).reshape(context_len, dx * x)


def gather_v_vllm(v_cache, block_table, context_len: int, kv_head: int) -> np.ndarray:
    """V [context_len, d] of one sequence from v_cache [num_blocks, h_k, d, block]."""
    bs = v_cache.shape[3]
    return np.array([v_cache[int(block_table[t // bs]), kv_head, :, t % bs] for t in range(context_len)]
                    ).reshape(context_len, v_cache.shape[2])


def v_vllm_to_asm(v_cache: np.ndarray, x: int) -> np.ndarray:
    """[num_blocks, h_k, d, block] -> the asm layout [num_blocks, h_k, block/x, d, x] (AITER's asm_V_shuffle)."""
    nb, h, d, bs = v_cache.shape
    return v_cache.reshape(nb, h, d, bs // x, x).transpose(0, 1, 3, 2, 4).copy()


def gather_v_asm(v_asm, block_table, context_len: int, kv_head: int) -> np.ndarray:
    """V [context_len, d] of one sequence from the asm layout [num_blocks, h_k, block/x, d, x]."""
    _, _, bx, d, x = v_asm.shape
    bs = bx * x
    return np.array([v_asm[int(block_table[t // bs]), kv_head, (t % bs) // x, :, t % x] for t in range(context_len)]
                    ).reshape(context_len, d)
