"""Unit tests of the four-stage NumPy decode golden model (csrc/reference/decode_golden.py): each stage, all four
(is_first, is_last) combinations of online_update, composition over KV blocks equal to plain softmax attention
(masked rows, GQA-style multi-row queries, ragged last blocks), and the paged-cache gathers. No GPU needed."""
import os
import sys

import numpy as np
import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "csrc", "reference"))
import decode_golden as dg  # noqa: E402


def rand(rng, *shape):
    return rng.standard_normal(shape)


def test_stages_on_one_block():
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 4, 16), rand(rng, 7, 16), rand(rng, 7, 8)
    s = dg.qk_matmul(q, k)
    np.testing.assert_allclose(s, q @ k.T)
    p, mx, sm = dg.softmax_prepare(s, 0.25)
    np.testing.assert_allclose(mx, (0.25 * s).max(1))
    np.testing.assert_allclose(p, np.exp(0.25 * s - mx[:, None]))
    np.testing.assert_allclose(sm, p.sum(1))
    np.testing.assert_allclose(dg.pv_matmul(p, v), p @ v)


def test_softmax_prepare_fully_masked_row():
    s = np.array([[1.0, -np.inf], [-np.inf, -np.inf]])
    p, mx, sm = dg.softmax_prepare(s, 1.0)
    assert mx[1] == -np.inf and sm[1] == 0 and not p[1].any()
    assert np.isfinite(p).all()


@pytest.mark.parametrize("is_first, is_last", [(True, True), (True, False), (False, False), (False, True)])
def test_online_update_flag_combinations(is_first, is_last):
    rng = np.random.default_rng(2)
    q, v = rand(rng, 3, 8), rand(rng, 12, 4)
    k = rand(rng, 12, 8)
    blocks = [slice(0, 4), slice(4, 8), slice(8, 12)]
    parts = []
    for b in blocks:
        p, mx, sm = dg.softmax_prepare(dg.qk_matmul(q, k[b]), 0.5)
        parts.append((dg.pv_matmul(p, v[b]), mx, sm))
    prior = None
    if not is_first:  # a state built from the first block
        prior = dg.online_update(*parts[0], None, True, False)
        assert isinstance(prior, dg.OnlineState)
    used = [parts[1]] if not is_first else [parts[0]]
    out = dg.online_update(*used[0], prior, is_first, is_last)
    seen = blocks[:2] if not is_first else blocks[:1]
    if is_last:
        o, lse = out
        kk, vv = np.concatenate([k[b] for b in seen]), np.concatenate([v[b] for b in seen])
        ref_o, ref_lse = dg.plain_attention(q, kk, vv, 0.5)
        np.testing.assert_allclose(o, ref_o, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse, ref_lse, rtol=1e-12)
    else:
        assert isinstance(out, dg.OnlineState)
        # the unnormalised state divided by its sum is the attention over the blocks seen so far
        kk, vv = np.concatenate([k[b] for b in seen]), np.concatenate([v[b] for b in seen])
        ref_o, _ = dg.plain_attention(q, kk, vv, 0.5)
        np.testing.assert_allclose(out.o / out.row_sum[:, None], ref_o, rtol=1e-12, atol=1e-12)


def test_online_update_needs_state_after_first():
    with pytest.raises(ValueError):
        dg.online_update(np.zeros((1, 1)), np.zeros(1), np.ones(1), None, False, True)


@pytest.mark.parametrize("n, block", [(1, 16), (16, 16), (17, 16), (100, 7), (257, 64), (0, 16)])
def test_composition_equals_plain_attention(n, block):
    rng = np.random.default_rng(n * 31 + block)
    m, d, dv = 8, 32, 24  # m rows: e.g. the 8 query heads of one KV head in GQA decode
    q, k, v = rand(rng, m, d), rand(rng, n, d), rand(rng, n, dv)
    mask = rng.random((m, n)) > 0.3
    mask[0, :] = False  # a row that sees nothing
    for msk in (None, mask):
        o, lse = dg.decode_attention(q, k, v, 0.125, block, msk)
        ref_o, ref_lse = dg.plain_attention(q, k, v, 0.125, msk)
        np.testing.assert_allclose(o, ref_o, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(np.isinf(lse), np.isinf(ref_lse))
        fin = np.isfinite(ref_lse)
        np.testing.assert_allclose(lse[fin], ref_lse[fin], rtol=1e-12)
    if n:
        o, lse = dg.decode_attention(q, k, v, 0.125, block, mask)
        assert not o[0].any() and lse[0] == -np.inf


@pytest.mark.parametrize("block", [4, 16])
def test_composition_with_leading_masked_blocks(block):
    # rows whose first blocks are fully masked (a sliding window, a row that sees only the tail) and later ones
    # visible: the first online_update sees max -inf and sum 0, and the later blocks must still give plain attention;
    # large logits too (scaled x400), where an unstable update overflows
    rng = np.random.default_rng(block)
    m, n, d, dv = 5, 40, 16, 8
    q, k, v = rand(rng, m, d), rand(rng, n, d), rand(rng, n, dv)
    mask = np.zeros((m, n), bool)
    for i, lo in enumerate((block, 2 * block + 1, n - 1, 0, n - block)):
        mask[i, lo:] = True
    for scale in (0.125, 50.0):
        o, lse = dg.decode_attention(q, k, v, scale, block, mask)
        ref_o, ref_lse = dg.plain_attention(q, k, v, scale, mask)
        assert np.isfinite(o).all() and np.isfinite(lse).all()
        np.testing.assert_allclose(o, ref_o, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(lse, ref_lse, rtol=1e-12)


def test_paged_gathers_roundtrip():
    rng = np.random.default_rng(3)
    nb, hk, d, bs, x = 11, 2, 16, 16, 8
    k_cache = rand(rng, nb, hk, d // x, bs, x)
    v_cache = rand(rng, nb, hk, d, bs)
    table = rng.permutation(nb)[:4]
    ctx = 3 * bs + 5
    for h in range(hk):
        kk = dg.gather_k_vllm(k_cache, table, ctx, h)
        vv = dg.gather_v_vllm(v_cache, table, ctx, h)
        for t in (0, bs - 1, bs, ctx - 1):
            blk, off = table[t // bs], t % bs
            np.testing.assert_array_equal(kk[t], k_cache[blk, h, :, off, :].reshape(d))
            np.testing.assert_array_equal(vv[t], v_cache[blk, h, :, off])
        np.testing.assert_array_equal(dg.gather_v_asm(dg.v_vllm_to_asm(v_cache, x), table, ctx, h), vv)
