"""The host reference (csrc/reference/host_reference.h, used by benchmark_mha_fwd -v=1) against an independent NumPy
golden model of the contract in include/mha_fwd.h, on random problems covering batch and group mode (padded K, empty
sequences), both layouts, GQA, every mask type with windows and sink tokens, elementwise bias of every broadcast rank,
ALiBi ([h] and [b, h]), soft-cap, sink logits and dropout from stored random values. No GPU needed."""
import math
import os
import subprocess

import numpy as np
import pytest

from conftest import build_host_check

CASES = 120


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_host_check("reference_driver", tmp_path_factory.mktemp("refdrv"), ("-pthread",))


def alibi_slopes(n):
    def geometric(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]
    pw = 1 << int(math.floor(math.log2(n)))
    s = geometric(pw) + (geometric(2 * pw)[0::2][: n - pw] if pw != n else [])
    return np.array(s, np.float32)


def golden_head(S, vis, V, sink, rand, thr, rp):
    """softmax(S) V over the visible entries with an optional sink logit and dropout; returns (O, LSE)."""
    n = S.shape[0]
    lse = np.full(n, -np.inf)
    for i in range(n):
        terms = list(S[i][vis[i]]) + ([sink] if sink is not None else [])
        if terms:
            m = max(terms)
            lse[i] = m + math.log(sum(math.exp(t - m) for t in terms))
    P = np.where(vis, np.exp(S - np.where(np.isfinite(lse), lse, 0)[:, None]), 0.0)
    if rand is not None:
        P = np.where(rand <= thr, P * rp, 0.0)
    return P @ V, lse


def run_case(rng, driver, work):
    group = bool(rng.integers(0, 2))
    B = int(rng.integers(1, 4)); Hk = int(rng.choice([1, 2])); H = Hk * int(rng.choice([1, 2, 3]))
    dq, dv = int(rng.choice([8, 16, 24])), int(rng.choice([8, 16, 40]))
    if group:
        sq = rng.integers(0, 40, B).astype(np.int32); sk = rng.integers(0, 40, B).astype(np.int32)
        kpad = sk + (rng.integers(0, 5, B).astype(np.int32) if rng.integers(0, 2) else 0)
    else:
        sq = np.full(B, rng.integers(0, 40), np.int32); sk = np.full(B, rng.integers(0, 40), np.int32); kpad = sk
    perm = int(rng.integers(0, 2))
    ssq = np.concatenate([[0], np.cumsum(sq)]).astype(np.int32)
    ssk = np.concatenate([[0], np.cumsum(kpad)]).astype(np.int32)
    nb = 1 if group else B
    Sq, Sk = (int(ssq[-1]), int(ssk[-1])) if group else (int(sq[0]), int(sk[0]))
    maxsk = max(1, int(sk.max()))

    def layout(h, s, d):  # (batch, head, row) strides and element count of bhsd (perm) or bshd
        return (h * s * d, s * d if perm else d, d if perm else h * d), nb * h * s * d
    (qs, qn), (ks, kn), (vs, vn) = layout(H, Sq, dq), layout(Hk, Sk, dq), layout(Hk, Sk, dv)
    q, k, v = (rng.standard_normal(n).astype(np.float32) for n in (qn, kn, vn))
    scale = float(rng.choice([0.3, 1 / math.sqrt(dq)])); cap = float(rng.choice([0.0, 0.0, 2.0]))
    mtype = int(rng.integers(0, 4)); left, right = int(rng.integers(-1, 8)), int(rng.integers(-1, 8))
    if mtype == 0:
        left = right = -1
    elif rng.integers(0, 4) == 0:
        left, right = -1, 0
    sink_size = int(rng.integers(0, 4)) if mtype else 0
    bias_type = int(rng.integers(0, 3)); rank = int(rng.integers(0, 3 if bias_type == 1 else 2))
    bstr, bias, alibi, alibi_bs = (0, 0, 0), np.zeros(1, np.float32), np.zeros(1, np.float32), 0
    if bias_type == 1:
        bstr = (H * Sq * maxsk if rank == 2 else 0, Sq * maxsk if rank >= 1 else 0, maxsk)
        count = (nb if rank == 2 else 1) * (H if rank >= 1 else 1) * max(1, Sq) * maxsk
        bias = rng.standard_normal(count).astype(np.float32)
    if bias_type == 2:
        alibi, alibi_bs = np.tile(alibi_slopes(H), B if rank == 1 else 1), (H if rank == 1 else 0)
    has_sink = bool(rng.integers(0, 2)); sink = rng.uniform(-2, 6, H).astype(np.float32)
    p_drop = float(rng.choice([0.0, 0.3]))
    rstr = (H * Sq * maxsk, Sq * maxsk, maxsk)
    rv = rng.integers(0, 256, max(1, nb * H * max(1, Sq) * maxsk)).astype(np.uint8)
    keep = np.float32(1) - np.float32(p_drop)
    thr, rp = int(math.floor(keep * np.float32(255))), float(np.float32(1) / keep)

    arrays = dict(seqlen_q=sq, seqlen_k=sk, seqstart_q=ssq, seqstart_k=ssk, out_start=ssq, q=q, k=k, v=v, bias=bias,
                  sink=sink, alibi=alibi, randval=rv)
    for name, a in arrays.items():
        a.tofile(os.path.join(work, name + ".bin"))
    cfg = [B, H, Hk, dq, dv, int(sq.max()), int(group), *qs, *ks, *vs, scale, cap, mtype, left, right, sink_size,
           bias_type, *bstr, alibi_bs, int(has_sink), int(p_drop > 0), *rstr, thr, rp]
    with open(os.path.join(work, "cfg.txt"), "w") as f:
        f.write(" ".join(repr(x) if isinstance(x, float) else str(int(x)) for x in cfg))
    subprocess.run([driver], cwd=work, check=True)
    o = np.fromfile(os.path.join(work, "o.bin"), np.float32)
    lse = np.fromfile(os.path.join(work, "lse.bin"), np.float32)

    def off(st, starts, b, h, i):
        return (int(starts[b]) * st[2] if group else b * st[0]) + h * st[1] + i * st[2]

    def rows(buf, st, starts, b, h, n, d):
        return np.array([buf[off(st, starts, b, h, i): off(st, starts, b, h, i) + d] for i in range(n)],
                        np.float64).reshape(n, d)

    worst = 0.0
    for b in range(B):
        for h in range(H):
            hk, n, m = h // (H // Hk), int(sq[b]), int(sk[b])
            Q, K, V = rows(q, qs, ssq, b, h, n, dq), rows(k, ks, ssk, b, hk, m, dq), rows(v, vs, ssk, b, hk, m, dv)
            S = scale * Q @ K.T
            if cap > 0:
                S = cap * np.tanh(S / cap)
            I, J = np.meshgrid(np.arange(n), np.arange(m), indexing="ij")
            if bias_type == 1:
                S = S + np.array([[bias[off(bstr, ssq, b, h, i) + j] for j in range(m)] for i in range(n)]).reshape(n, m)
            if bias_type == 2:
                slope = float(alibi[b * alibi_bs + h])
                if mtype != 0 and left < 0 and right == 0:
                    S = S + slope * J                                # causal: CK's vertical mode
                else:
                    shift = m - n if mtype in (0, 2) else 0          # bottom-right vs top-left / generic (CK)
                    S = S - slope * np.abs(I + shift - J)
            if mtype == 0:
                vis = np.ones((n, m), bool)
            else:
                diag = I + (0 if mtype == 1 else m - n)
                right_ok = (J <= diag + right) if right >= 0 else np.ones((n, m), bool)
                left_ok = (J >= diag - left) if left >= 0 else np.ones((n, m), bool)
                vis = right_ok & (left_ok | ((J < sink_size) & (I < m)))
            S = np.where(vis, S, -np.inf)
            rand = None
            if p_drop > 0:
                rand = np.array([[rv[off(rstr, ssq, b, h, i) + j] for j in range(m)] for i in range(n)]).reshape(n, m)
            O, L = golden_head(S, vis, V, float(sink[h]) if has_sink else None, rand, thr, rp)
            for i in range(n):
                r = H * int(ssq[b]) + h * n + i
                diff = np.abs(o[r * dv:(r + 1) * dv] - O[i])
                # a NaN anywhere is a failure (max(worst, nan) would keep worst)
                worst = max(worst, float(diff.max(initial=0)) if np.isfinite(diff).all() else math.inf)
                a, e = float(lse[r]), float(L[i])
                if not (a == e or abs(a - e) < 1e-4):
                    worst = max(worst, abs(a - e) if math.isfinite(a - e) else math.inf)
    return worst


def test_host_reference_matches_numpy_golden(driver, tmp_path):
    rng = np.random.default_rng(20261121)
    worst = max(run_case(rng, driver, str(tmp_path)) for _ in range(CASES))
    assert worst < 1e-4, f"host reference differs from the NumPy golden by {worst}"
