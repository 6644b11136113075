"""GPU correctness of every optional forward feature of aiter_mha.mha_fwd / mha_varlen_fwd against a torch fp64
reference written from the contract above aiter::mha_fwd_args (include/mha_fwd.h): head dims 8..256 (d != d_v),
windows and generic masks, bias (broadcast) and ALiBi, soft-cap, sink logits and sink tokens, dropout (reproduced from
the returned randval), group mode (empty / padded sequences, GQA), and combinations, with FlashAttention's bar
(design.md). Fresh random inputs, NaN-poisoned outputs. Skipped without torch.cuda or the built module.
"""
import dataclasses
import math
import os
import random
import sys
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import gpu_test_modules  # noqa: E402
from conftest import ASM_MASKS, asm_fwd_instance_tag, require_all_kernels, varlen_asm_problem  # noqa: E402

torch, aiter_mha = gpu_test_modules("GPU feature tests")

DEV = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
LSE_ABS_TOL, LSE_REL_TOL = 1e-3, 1e-5
NAN = math.nan


# ------------------------------------------------------------------------------------------------ reference

@dataclasses.dataclass
class Feat:
    """One call's features, in the binding's terms. Batch mode: bias broadcastable to [b, h, sq, sk], alibi fp32 [h] or
    [b, h]; group mode: bias [h|1, total_q|1, max_seqlen_k], alibi [h] or [num_seqs, h]. sink: fp32 [h]."""
    scale: float
    mask_type: int = 0
    left: int = -1
    right: int = -1
    softcap: float = 0.0
    bias: object = None
    alibi: object = None
    sink: object = None
    sink_size: int = 0
    p_drop: float = 0.0

    def kwargs(self):
        return dict(scale=self.scale, mask=self.mask_type, window_left=self.left, window_right=self.right,
                    softcap=self.softcap, bias=self.bias, alibi_slopes=self.alibi, sink=self.sink,
                    sink_size=self.sink_size, dropout_p=self.p_drop)


def alibi_mode(mask_type, left, right):
    """CK's ALiBi position: 0 -|i + sk - sq - j| (no mask, bottom-right windows), 1 -|i - j| (top-left and
    window_generic windows: CK's make_alibi_from_lr_mask casts mask type 3 to an AlibiMode without the bottom-right
    shift), 2 +j (causal)."""
    if mask_type == 0:
        return 0
    if left < 0 and right == 0:
        return 2
    return 0 if mask_type == 2 else 1


def visible(sq, sk, mask_type, left, right, sink_size=0, device=DEV):
    """[sq, sk] bool per the contract: diag = i (top-left, type 1) or i + sk - sq (types 2, 3); sink keys j < sink_size
    stay visible left of a finite window when j <= diag + right and i < sk."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if mask_type == 0:
        return vis
    diag = i + (0 if mask_type == 1 else sk - sq)
    if right >= 0:
        vis = vis & (j <= diag + right)
    if left >= 0:
        in_window = j >= diag - left
        if sink_size > 0:
            in_window = in_window | ((j < sink_size) & (i < sk))
        vis = vis & in_window
    return vis


def keep_threshold(p_drop):
    """floor((1 - p) * 255) in fp32, as the library computes it."""
    return int(torch.floor((1 - torch.tensor(p_drop, dtype=torch.float32)) * 255).item())


def reference(q, k, v, f, keep=None, cd=torch.float64):
    """The contract on bshd q [b, sq, h, d], k / v [b, sk, hk, d | dv], every step in cd (fp64: the reference; q's
    dtype: the naive same-precision baseline). keep: bool [b, h, sq, sk] dropout mask. Returns out [b, sq, h, dv] in cd
    and lse [b, h, sq] in fp64 (-inf, or the sink logit, on rows that see no key; their out is 0)."""
    b, sq, h, _ = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    sink = None if f.sink is None else f.sink.to(cd).view(1, h, 1, 1)
    if sq == 0 or sk == 0:
        lse = torch.full((b, h, sq), -math.inf, dtype=torch.float64, device=q.device)
        if sink is not None:
            lse[:] = sink.double().view(1, h, 1)
        return torch.zeros(b, sq, h, dv, dtype=cd, device=q.device), lse
    g = h // hk
    qc = q.to(cd).transpose(1, 2)  # [b, h, sq, d]
    kc = k.to(cd).transpose(1, 2).repeat_interleave(g, dim=1)
    vc = v.to(cd).transpose(1, 2).repeat_interleave(g, dim=1)
    s = torch.matmul(qc, kc.transpose(-1, -2)) * f.scale  # [b, h, sq, sk]
    if f.alibi is not None and cd != torch.float64:
        # The baseline adds ALiBi's position term and takes the softmax in fp32, as the kernels do: slope x position
        # reaches ~100 (vertical mode), where a bf16 logit is off by up to 0.25 and the bar would let ~40% errors of
        # O pass. The matmuls stay in q's dtype.
        s = s.float()
        sink = None if sink is None else sink.float()
    if f.softcap > 0:
        s = f.softcap * torch.tanh(s / f.softcap)
    if f.bias is not None:
        s = s + f.bias.to(cd)
    if f.alibi is not None:
        slopes = f.alibi.to(s.dtype).reshape(-1, h)[:, :, None, None]  # [b | 1, h, 1, 1]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mode = alibi_mode(f.mask_type, f.left, f.right)
        pos = j.expand(sq, sk) if mode == 2 else -(i - j).abs() if mode == 1 else -(i + sk - sq - j).abs()
        s = s + slopes * pos.to(s.dtype)
    s = s.masked_fill(~visible(sq, sk, f.mask_type, f.left, f.right, f.sink_size, q.device), -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    if sink is not None:
        m = torch.maximum(m, sink.expand_as(m))
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # a row that sees nothing: exp() stays 0, not NaN
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    if sink is not None:
        l = l + torch.exp(sink - m)
    lse = (torch.log(l.double()) + m.double()).squeeze(-1)
    p = (p / torch.where(l > 0, l, torch.ones_like(l))).to(cd)
    if keep is not None:
        p = p * keep.to(cd) * (1.0 / (1.0 - f.p_drop))
    return torch.matmul(p, vc).transpose(1, 2), lse


# ------------------------------------------------------------------------------------------------ checks

def max_err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def assert_bar(err, naive_err, what):
    assert err <= 2 * naive_err + 1e-5, (
        f"{what}: max|out - ref| = {err:.3e} > 2 * max|naive - ref| + 1e-5 = {2 * naive_err + 1e-5:.3e}")


def assert_lse(lse, ref_lse, what):
    assert not torch.isnan(lse).any(), f"{what}: lse has NaN: some row was never written"
    ref_inf, got_inf = torch.isneginf(ref_lse), torch.isneginf(lse)
    assert torch.equal(ref_inf, got_inf), (
        f"{what}: lse is -inf on {int(got_inf.sum())} rows, the reference on {int(ref_inf.sum())}")
    fin = ~ref_inf
    if fin.any():
        diff = (lse.double() - ref_lse)[fin].abs()
        tol = LSE_ABS_TOL + LSE_REL_TOL * ref_lse[fin].abs()
        assert (diff <= tol).all(), f"{what}: max|lse - ref_lse| = {diff.max().item():.3e}"


def assert_keep_rate(keeps, p_drop, what):
    """The kept fraction over visible elements matches (threshold + 1) / 256, and randval is not constant."""
    kept = torch.cat([k.flatten() for k in keeps]) if keeps else torch.zeros(0)
    if kept.numel() < 20000:
        return
    want = (keep_threshold(p_drop) + 1) / 256
    rate = kept.float().mean().item()
    assert abs(rate - want) < 0.02, f"{what}: kept fraction {rate:.4f}, expected {want:.4f} for p={p_drop}"


def call(fn, *args, **kw):
    """fn(*args, **kw), skipping (with the library's reason) when the kernel it needs is not in this build."""
    try:
        return fn(*args, **kw)
    except ValueError as e:
        if "is not in this build" in str(e) and not require_all_kernels():
            pytest.skip(f"kernel not built: {e}")
        raise


def seed_of(*params):
    return zlib.crc32(repr(params).encode())


def gen(seed):
    return torch.Generator(device=DEV).manual_seed(seed)


def randn(*shape, dtype, g, scale=1.0):
    return (torch.randn(*shape, device=DEV, dtype=torch.float32, generator=g) * scale).to(dtype)


def make_qkv(b, sq, sk, h, hk, d, dv, dtype, seed):
    g = gen(seed)
    return (randn(b, sq, h, d, dtype=dtype, g=g), randn(b, sk, hk, d, dtype=dtype, g=g),
            randn(b, sk, hk, dv, dtype=dtype, g=g))


def alibi_slopes(h, b=None):
    """The ALiBi paper's geometric slopes; [b, h] varies them per batch."""
    s = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=torch.float32, device=DEV)
    return s if b is None else torch.stack([s * (1 + 0.5 * i) for i in range(b)])


def run_batch(q, k, v, f, what, **extra):
    """mha_fwd into NaN-poisoned out / lse (plus randval with dropout), then checks against the reference."""
    b, sq, h, _ = q.shape
    out = torch.full((b, sq, h, v.shape[3]), NAN, device=DEV, dtype=q.dtype)
    lse = torch.full((b, h, sq), NAN, device=DEV, dtype=torch.float32)
    want_rv = f.p_drop > 0
    res = call(aiter_mha.mha_fwd, q, k, v, out=out, lse=lse, return_randval=want_rv, **f.kwargs(), **extra)
    assert res[0] is out and res[1] is lse
    rv = torch.from_dlpack(res[2]) if want_rv else None
    torch.cuda.synchronize()
    assert not torch.isnan(out).any(), f"{what}: out has NaN: some element was never written"
    keep = None if rv is None else rv <= keep_threshold(f.p_drop)
    ref, ref_lse = reference(q, k, v, f, keep)
    naive, _ = reference(q, k, v, f, keep, cd=q.dtype)
    assert_bar(max_err(out, ref), max_err(naive, ref), what)
    assert_lse(lse, ref_lse, what)
    if keep is not None:
        vis = visible(q.shape[1], k.shape[1], f.mask_type, f.left, f.right, f.sink_size)
        assert_keep_rate([keep[:, :, vis]], f.p_drop, what)
    return out, lse, rv


# ------------------------------------------------------------------------------------------------ group mode

PACKED_MAX_ROWS = 256 # csrc/api/mha_fwd.cpp, kPackedFwdMaxRows


def check_asm_fwd_ran(d, dv, h, hk, max_q, f):
    """With every kernel built (MHA_REQUIRE_ALL_KERNELS=1, or MHA_REQUIRE_ASM=1 for a build with the asm instances)
    on an sm_90 GPU, a use_asm_v3 group-mode call the asm forward covers (head dims up to 256, any mask without sink
    tokens, no bias / ALiBi / soft-cap / sink logits / dropout, not a GQA call of at most 256 packed rows per KV head)
    must have run on its smallest instance that covers the head dims, not fallen back to ck."""
    pack = h // hk if h > hk else 1
    dd = max(d, dv)
    covered = (torch.cuda.get_device_capability() == (9, 0) and dd <= 256 and
               f.bias is None and f.alibi is None and f.softcap == 0 and f.sink is None and f.sink_size == 0 and
               f.p_drop == 0 and not (pack > 1 and max_q * pack <= PACKED_MAX_ROWS))
    if covered and "1" in (os.environ.get("MHA_REQUIRE_ALL_KERNELS"), os.environ.get("MHA_REQUIRE_ASM")):
        name = aiter_mha.last_kernel_name()
        want = f"_asm_v3_{'bf16' if '_bf16_' in name else 'fp16'}_{asm_fwd_instance_tag(d, dv)}_"
        assert want in name, f"use_asm_v3 group-mode call ran {name}, not the smallest asm instance ({want})"


class Varlen:
    """A packed group-mode problem: sequence i has logical lengths lens[i] = (lq, lk) inside physical segments that
    are longer when padded (then seqused_q / seqused_k carry the logical lengths). nan_pad: the padding rows of q, k
    and v hold NaN, which must never reach an output row; max_slack: max_seqlen_q that much above the longest
    sequence."""

    def __init__(self, lens, h, hk, d, dv, dtype, seed, pad_q=False, pad_k=False, packed=False, nan_pad=False,
                 max_slack=0):
        r = random.Random(seed)
        self.lens, self.h, self.dtype = lens, h, dtype
        self.phys_q = [lq + (r.randint(1, 9) if pad_q else 0) for lq, _ in lens]
        self.phys_k = [lk + (r.randint(1, 9) if pad_k else 0) for _, lk in lens]
        self.start_q = [sum(self.phys_q[:i]) for i in range(len(lens) + 1)]
        self.start_k = [sum(self.phys_k[:i]) for i in range(len(lens) + 1)]
        self.total_q, self.total_k = self.start_q[-1], self.start_k[-1]
        g = gen(seed)
        if packed:  # q, k, v are views of one [total, 3, h, d] tensor: row stride 3*h*d
            assert h == hk and d == dv and self.total_q == self.total_k
            qkv = randn(self.total_q, 3, h, d, dtype=dtype, g=g)
            self.q, self.k, self.v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        else:
            self.q = randn(self.total_q, h, d, dtype=dtype, g=g)
            self.k = randn(self.total_k, hk, d, dtype=dtype, g=g)
            self.v = randn(self.total_k, hk, dv, dtype=dtype, g=g)
        i32 = dict(dtype=torch.int32, device=DEV)
        self.cu_q, self.cu_k = torch.tensor(self.start_q, **i32), torch.tensor(self.start_k, **i32)
        self.used_q = torch.tensor([lq for lq, _ in lens], **i32) if pad_q else None
        self.used_k = torch.tensor([lk for _, lk in lens], **i32) if pad_k else None
        self.max_q = max([lq for lq, _ in lens], default=0) + max_slack
        self.max_k = max([lk for _, lk in lens], default=0)
        if nan_pad:
            for i, (lq, lk) in enumerate(lens):
                self.q[self.start_q[i] + lq:self.start_q[i + 1]] = NAN
                self.k[self.start_k[i] + lk:self.start_k[i + 1]] = NAN
                self.v[self.start_k[i] + lk:self.start_k[i + 1]] = NAN

    def run(self, f, what, min_seqlen_q=0, use_asm_v3=False, **extra):
        dv = self.v.shape[-1]
        out = torch.full((self.total_q, self.h, dv), NAN, device=DEV, dtype=self.dtype)
        lse = torch.full((self.h, self.total_q), NAN, device=DEV, dtype=torch.float32)
        want_rv = f.p_drop > 0
        res = call(aiter_mha.mha_varlen_fwd, self.q, self.k, self.v, self.cu_q, self.cu_k, self.max_q,
                   seqused_q=self.used_q, seqused_k=self.used_k, min_seqlen_q=min_seqlen_q, out=out, lse=lse,
                   return_randval=want_rv, use_asm_v3=use_asm_v3, **f.kwargs(), **extra)
        if use_asm_v3:
            check_asm_fwd_ran(self.q.shape[-1], dv, self.h, self.k.shape[1], self.max_q, f)
        assert res[0] is out and res[1] is lse
        rv = torch.from_dlpack(res[2]) if want_rv else None
        torch.cuda.synchronize()
        self.check(out, lse, f, rv, what, min_seqlen_q)
        return out, lse, rv

    def check(self, out, lse, f, rv, what, min_seqlen_q=0):
        err = naive_err = 0.0
        keeps = []
        for i, (lq, lk) in enumerate(self.lens):
            q0, k0, w = self.start_q[i], self.start_k[i], f"{what} seq {i} (lq={lq}, lk={lk})"
            skipped = 0 < min_seqlen_q and lq <= min_seqlen_q
            live = 0 if skipped else lq
            # Rows past the logical length (padding) and rows of skipped sequences are never written.
            assert torch.isnan(out[q0 + live:q0 + self.phys_q[i]]).all(), f"{w}: a padding / skipped row was written"
            assert torch.isnan(lse[:, q0 + live:q0 + self.phys_q[i]]).all(), f"{w}: padding / skipped lse written"
            if live == 0:
                continue
            fs = dataclasses.replace(f, bias=self.seq_bias(f.bias, q0, lq, lk), alibi=self.seq_alibi(f.alibi, i))
            qb, kb, vb = self.q[q0:q0 + lq][None], self.k[k0:k0 + lk][None], self.v[k0:k0 + lk][None]
            keep = None
            if rv is not None:
                keep = (rv[:, q0:q0 + lq, :lk] <= keep_threshold(f.p_drop))[None]
                keeps.append(keep[0][:, visible(lq, lk, f.mask_type, f.left, f.right, f.sink_size)])
            ob = out[q0:q0 + lq][None]
            assert not torch.isnan(ob).any(), f"{w}: out has NaN: some element was never written"
            ref, ref_lse = reference(qb, kb, vb, fs, keep)
            naive, _ = reference(qb, kb, vb, fs, keep, cd=self.dtype)
            err, naive_err = max(err, max_err(ob, ref)), max(naive_err, max_err(naive, ref))
            assert_lse(lse[:, q0:q0 + lq][None], ref_lse, w)
        assert_bar(err, naive_err, what)
        if rv is not None:
            assert_keep_rate(keeps, f.p_drop, what)

    @staticmethod
    def seq_bias(bias, q0, lq, lk):
        if bias is None:
            return None
        rows = bias[:, q0:q0 + lq] if bias.shape[1] > 1 else bias
        return rows[:, :, :lk][None]  # [1, h | 1, lq | 1, lk]

    @staticmethod
    def seq_alibi(alibi, i):
        if alibi is None or alibi.dim() == 1:
            return alibi
        return alibi[i if alibi.shape[0] > 1 else 0]


# ------------------------------------------------------------------------------------------------ head dims

HDIMS = [(8, 8), (16, 16), (24, 24), (32, 32), (40, 40), (64, 64), (72, 72), (96, 96), (128, 128), (136, 136),
         (160, 160), (192, 128), (192, 192), (200, 200), (256, 256), (16, 128), (128, 24), (8, 256), (256, 64)]


@pytest.mark.parametrize("d, dv", HDIMS)
@pytest.mark.parametrize("dt", list(DTYPES))
def test_head_dims(d, dv, dt):
    mask_type = HDIMS.index((d, dv)) % 3
    q, k, v = make_qkv(2, 173, 291, 4, 2, d, dv, DTYPES[dt], seed_of("hdim", d, dv, dt))
    run_batch(q, k, v, Feat(scale=d ** -0.5, mask_type=mask_type, right=0 if mask_type else -1),
              f"{dt} d={d} dv={dv} mask={mask_type}")


@pytest.mark.parametrize("d, dv", HDIMS)
def test_head_dims_full_variant(d, dv):
    """Every head dim through the kernels with features (bias + soft-cap + window)."""
    dt = "bf16" if HDIMS.index((d, dv)) % 2 else "fp16"
    dtype, sq, sk, h = DTYPES[dt], 150, 211, 4
    q, k, v = make_qkv(1, sq, sk, h, 1, d, dv, dtype, seed_of("hdim-full", d, dv))
    bias = randn(1, h, 1, sk, dtype=dtype, g=gen(seed_of("hdim-bias", d)))
    run_batch(q, k, v, Feat(scale=d ** -0.5, mask_type=2, left=64, right=8, softcap=10.0, bias=bias),
              f"{dt} d={d} dv={dv} full")


# ------------------------------------------------------------------------------------------------ masks

WINDOWS = [(1, 0, 0), (2, 0, 0), (3, 0, 0), (1, 16, 8), (2, 16, 8), (1, -1, 7), (2, 7, -1), (3, 32, 4), (3, -1, -1),
           (3, -1, 0), (3, 5, -1), (1, 100, 0)]


@pytest.mark.parametrize("mask_type, left, right", WINDOWS)
@pytest.mark.parametrize("sq, sk", [(200, 300), (300, 200), (1, 257)])
def test_windows(mask_type, left, right, sq, sk):
    dt = "fp16" if (sq + left) % 2 else "bf16"
    q, k, v = make_qkv(2, sq, sk, 4, 2, 64, 64, DTYPES[dt], seed_of("win", mask_type, left, right, sq, sk))
    run_batch(q, k, v, Feat(scale=0.125, mask_type=mask_type, left=left, right=right),
              f"{dt} mask={mask_type} ({left},{right}) sq={sq} sk={sk}")


def test_window_generic_name_is_mask_3():
    q, k, v = make_qkv(2, 100, 180, 4, 4, 64, 64, torch.float16, seed_of("wg"))
    a = torch.from_dlpack(call(aiter_mha.mha_fwd, q, k, v, mask="window_generic", window_left=20, window_right=3))
    b = torch.from_dlpack(call(aiter_mha.mha_fwd, q, k, v, mask=3, window_left=20, window_right=3))
    torch.cuda.synchronize()
    assert torch.equal(a, b)
    ref, _ = reference(q, k, v, Feat(scale=0.125, mask_type=3, left=20, right=3))
    naive, _ = reference(q, k, v, Feat(scale=0.125, mask_type=3, left=20, right=3), cd=q.dtype)
    assert_bar(max_err(a, ref), max_err(naive, ref), "window_generic")


# ------------------------------------------------------------------------------------------------ bias and ALiBi

def make_bias(kind, b, h, sq, sk, dtype, seed):
    g = gen(seed)
    if kind == "expanded":  # stride-0 dims of a full-size view
        return randn(1, 1, 1, sk, dtype=dtype, g=g, scale=2.0).expand(b, h, sq, sk)
    if kind == "strided":  # row stride sk + 24, 5 elements past the allocation's start
        return randn(b, h, sq, sk + 24, dtype=dtype, g=g, scale=2.0)[..., 5:5 + sk]
    shape = [dict(b=b, h=h, sq=sq, sk=sk, one=1)[x] for x in kind.split(",")]
    return randn(*shape, dtype=dtype, g=g, scale=2.0)


@pytest.mark.parametrize("kind", ["one,one,sq,sk", "one,h,sq,sk", "b,h,sq,sk", "b,one,one,sk", "expanded", "strided"])
@pytest.mark.parametrize("mask_type", [0, 2])
def test_bias(kind, mask_type):
    dt = "bf16" if mask_type else "fp16"
    b, sq, sk, h, hk = 2, 190, 260, 4, 2
    q, k, v = make_qkv(b, sq, sk, h, hk, 64, 64, DTYPES[dt], seed_of("bias", kind, mask_type))
    bias = make_bias(kind, b, h, sq, sk, DTYPES[dt], seed_of("bias-t", kind))
    run_batch(q, k, v, Feat(scale=0.125, mask_type=mask_type, right=0 if mask_type else -1, bias=bias),
              f"bias {kind} mask={mask_type}")


ALIBI_MASKS = [(0, -1, -1), (1, -1, 0), (2, -1, 0), (1, 40, 10), (2, 40, 10), (3, 30, 30), (3, -1, 0)]


@pytest.mark.parametrize("mask_type, left, right", ALIBI_MASKS)
@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("sq, sk", [(150, 230), (230, 150)])
def test_alibi(mask_type, left, right, per_batch, sq, sk):
    dt = "bf16" if per_batch else "fp16"
    b, h = 2, 4
    q, k, v = make_qkv(b, sq, sk, h, h, 64, 64, DTYPES[dt], seed_of("alibi", mask_type, left, right, sq, sk))
    f = Feat(scale=0.125, mask_type=mask_type, left=left, right=right, alibi=alibi_slopes(h, b if per_batch else None))
    run_batch(q, k, v, f, f"alibi per_batch={per_batch} mask={mask_type} ({left},{right}) sq={sq} sk={sk}")


def test_alibi_broadcast_batch_row():
    q, k, v = make_qkv(3, 100, 120, 4, 4, 64, 64, torch.float16, seed_of("alibi-1h"))
    run_batch(q, k, v, Feat(scale=0.125, mask_type=2, right=0, alibi=alibi_slopes(4)[None]), "alibi [1, h]")


# ------------------------------------------------------------------------------------------------ soft-cap and sinks

@pytest.mark.parametrize("cap", [1.0, 5.0, 50.0])
@pytest.mark.parametrize("mask_type", [0, 2])
def test_softcap(cap, mask_type):
    dt = "bf16" if mask_type else "fp16"
    d = 128
    q, k, v = make_qkv(2, 211, 333, 4, 2, d, d, DTYPES[dt], seed_of("cap", cap, mask_type))
    run_batch(q, k, v, Feat(scale=3.0 / math.sqrt(d), mask_type=mask_type, right=0 if mask_type else -1, softcap=cap),
              f"softcap={cap} mask={mask_type}")


@pytest.mark.parametrize("dt, d, sq, sk, mask_type", [("bf16", 128, 1, 700, 0), ("fp16", 128, 3, 1000, 2),
                                                       ("bf16", 128, 2, 33, 0), ("fp16", 64, 1, 900, 0),
                                                       ("bf16", 256, 4, 500, 2)])
def test_decode_calls_take_the_plain_split_instance_without_features(dt, d, sq, sk, mask_type):
    """A GQA decode step (4 query heads per KV head, up to 16 rows) runs on the split-KV decode tile: the "plain" one
    (generate.py SPLIT_PLAIN_DIMS: d64, d128, d256) when the call has no feature, the full one with soft-cap, both
    against the reference (checked by name with every kernel built, MHA_REQUIRE_ALL_KERNELS=1)."""
    q, k, v = make_qkv(3, sq, sk, 32, 8, d, d, DTYPES[dt], seed_of("plain split", dt, d, sq, sk, mask_type))
    right = 0 if mask_type else -1
    run_batch(q, k, v, Feat(scale=d ** -0.5, mask_type=mask_type, right=right), f"plain decode {dt} d{d} {sq}x{sk}")
    plain = aiter_mha.last_kernel_name()
    run_batch(q, k, v, Feat(scale=d ** -0.5, mask_type=mask_type, right=right, softcap=20.0),
              f"soft-cap decode {dt} d{d} {sq}x{sk}")
    capped = aiter_mha.last_kernel_name()
    if require_all_kernels():
        tile = f"fmha_fwd_splitkv_ck_{dt}_d{d}_b16x{16 if d == 256 else 32}_w1"
        assert plain == f"{tile}_plain", plain
        assert capped == f"{tile}_full", capped


@pytest.mark.parametrize("mask_type, left, right, sq, sk", [
    (0, -1, -1, 150, 200),
    (2, -1, 0, 300, 200),  # the first 100 rows see no key: O = 0, LSE = sink
    (1, 24, 0, 180, 180),
])
@pytest.mark.parametrize("dt", list(DTYPES))
def test_sink_logits(mask_type, left, right, sq, sk, dt):
    h = 4
    q, k, v = make_qkv(2, sq, sk, h, 2, 64, 64, DTYPES[dt], seed_of("sink", mask_type, sq, dt))
    sink = torch.tensor([-2.0, 0.0, 3.0, 8.0], device=DEV)
    run_batch(q, k, v, Feat(scale=0.125, mask_type=mask_type, left=left, right=right, sink=sink),
              f"{dt} sink logits mask={mask_type} ({left},{right}) sq={sq} sk={sk}")


@pytest.mark.parametrize("mask_type, left, right, sink_size, sq, sk", [
    (1, 16, 0, 4, 200, 200),
    (2, 32, 0, 8, 150, 300),
    (2, 20, 0, 8, 300, 150),   # rows i >= sk keep no sink keys
    (1, 16, 0, 64, 256, 128),  # ... also where a key block holds sinks only (64 x 64 tiles; d64 is 128 x 64)
    (2, 16, 0, 96, 256, 128),
    (3, 16, -1, 64, 256, 128),
    (3, 8, 8, 3, 128, 128),
    (1, 0, 0, 1, 64, 100),
    (2, 64, -1, 16, 100, 500),
    (2, 100, 0, 130, 257, 257),  # sinks overlap the window
    (1, -1, 0, 4, 100, 100),   # no left bound: sinks change nothing
    (0, -1, -1, 4, 50, 60),    # no mask: sinks change nothing
])
def test_sink_size(mask_type, left, right, sink_size, sq, sk):
    dt = "bf16" if sink_size % 2 else "fp16"
    q, k, v = make_qkv(2, sq, sk, 4, 2, 64, 64, DTYPES[dt], seed_of("sinksz", mask_type, left, right, sink_size))
    run_batch(q, k, v, Feat(scale=0.125, mask_type=mask_type, left=left, right=right, sink_size=sink_size),
              f"sink_size={sink_size} mask={mask_type} ({left},{right}) sq={sq} sk={sk}")


# ------------------------------------------------------------------------------------------------ dropout

def seed_offset_array(seed, offset, dtype=torch.int64):
    return torch.tensor([seed, offset], dtype=dtype, device=DEV)


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("device_seed", [False, True])
@pytest.mark.parametrize("mask_type", [0, 2])
def test_dropout(p, device_seed, mask_type):
    dt = "bf16" if mask_type else "fp16"
    q, k, v = make_qkv(2, 200, 333, 4, 2, 128, 128, DTYPES[dt], seed_of("drop", p, device_seed, mask_type))
    seed, offset = 1234 + mask_type, 77
    extra = dict(seed_offset=seed_offset_array(seed, offset)) if device_seed else dict(seed=seed, offset=offset)
    run_batch(q, k, v, Feat(scale=0.09, mask_type=mask_type, right=0 if mask_type else -1, p_drop=p),
              f"dropout p={p} device_seed={device_seed} mask={mask_type}", **extra)


def dropout_run(q, k, v, p, **seeding):
    out, lse, rv = call(aiter_mha.mha_fwd, q, k, v, mask="causal", dropout_p=p, return_lse=True,
                        return_randval=True, **seeding)
    torch.cuda.synchronize()
    return torch.from_dlpack(out), torch.from_dlpack(lse), torch.from_dlpack(rv)


@pytest.mark.parametrize("seed, offset", [(0, 0), (123, 456), (2**40 + 7, 2**35 + 3)])
def test_dropout_device_seed_equals_host_seed(seed, offset):
    q, k, v = make_qkv(2, 130, 170, 4, 4, 64, 64, torch.float16, seed_of("drop-dev", seed))
    host = dropout_run(q, k, v, 0.3, seed=seed, offset=offset)
    variants = [seed_offset_array(seed, offset, torch.int64)]
    try:
        variants.append(seed_offset_array(seed, offset, torch.uint64))
    except (RuntimeError, TypeError):  # a torch without uint64 on CUDA: the int64 variant still runs
        pass
    for arr in variants:
        dev = dropout_run(q, k, v, 0.3, seed_offset=arr)
        for name, a, b in zip(("out", "lse", "randval"), host, dev):
            assert torch.equal(a, b), f"{name} differs between seed/offset {seed}/{offset} on host and device ({arr.dtype})"


def test_dropout_deterministic():
    q, k, v = make_qkv(2, 150, 150, 4, 2, 64, 64, torch.bfloat16, seed_of("drop-det"))
    first = dropout_run(q, k, v, 0.2, seed=42, offset=10)
    again = dropout_run(q, k, v, 0.2, seed=42, offset=10)
    for name, a, b in zip(("out", "lse", "randval"), first, again):
        assert torch.equal(a, b), f"{name} differs between two runs with the same seed/offset"
    vis = visible(150, 150, 2, -1, 0)
    for other in (dict(seed=42, offset=11), dict(seed=43, offset=10)):
        out, _, rv = dropout_run(q, k, v, 0.2, **other)
        same = (rv[:, :, vis] == first[2][:, :, vis]).float().mean().item()
        assert same < 0.05, f"{other}: randval matches the (42, 10) one on {same:.1%} of the visible elements"
        assert not torch.equal(out, first[0]), f"{other}: the output equals the (42, 10) one"


def test_dropout_only_calls_take_the_lean_instance_at_its_head_dims():
    """generate.py builds a dropout-only forward instance at d128 only (FWD_VARIANT_DIMS). A dropout-only d128 call
    (or d112, which d128 serves zero-padded either way) runs it when it is built; a call with dropout and ALiBi runs
    "full", and so does a d64 dropout call, never the d128 dropout instance zero-padded (checked with every kernel
    built, MHA_REQUIRE_ALL_KERNELS=1). The two d128 instances draw the same randval and agree on out and lse (ALiBi
    slopes of 0 add nothing)."""
    q, k, v = make_qkv(2, 190, 260, 4, 2, 128, 128, torch.bfloat16, seed_of("drop-lean"))
    lean = dropout_run(q, k, v, 0.25, seed=5, offset=3)
    lean_name = aiter_mha.last_kernel_name()
    zero_slopes = torch.zeros(4, device=DEV, dtype=torch.float32)
    full = dropout_run(q, k, v, 0.25, seed=5, offset=3, alibi_slopes=zero_slopes)
    full_name = aiter_mha.last_kernel_name()
    assert torch.equal(lean[2], full[2]), f"randval differs between {lean_name} and {full_name}"
    torch.testing.assert_close(lean[0].float(), full[0].float(), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lean[1], full[1], atol=1e-4, rtol=1e-5)
    assert full_name.endswith("_full"), full_name
    q112, k112, v112 = make_qkv(1, 70, 90, 2, 2, 112, 112, torch.bfloat16, seed_of("drop-lean-112"))
    dropout_run(q112, k112, v112, 0.25, seed=5, offset=3)
    name112 = aiter_mha.last_kernel_name()
    q64, k64, v64 = make_qkv(1, 70, 90, 2, 2, 64, 64, torch.bfloat16, seed_of("drop-lean-64"))
    dropout_run(q64, k64, v64, 0.25, seed=5, offset=3)
    name64 = aiter_mha.last_kernel_name()
    if require_all_kernels(): # a build without d64 instances runs the d64 call on a d128 one, rightly
        assert lean_name.endswith("_dropout") and "_d128_" in lean_name, lean_name
        assert name112.endswith("_dropout") and "_d128_" in name112, name112
        assert name64.endswith("_full") and "_d64_" in name64, name64


# The forward draws a call's dropout values two ways: the general path when it stores randval (every other test here
# asks for randval, since the references take their keep mask from it) and the layout's fast path without it
# (fwd_features.cuh: the byte of each element from where the tile's rows and columns start; at d64 applied to
# P's converted 16-bit pairs, apply_pairs). Both must keep the same elements: out and lse bit-identical. Tiles of 32
# keys (d128's full and dropout instances: one Philox group per block), 64 (d64, d256: two), 32-column atoms (d96),
# d != d_v, masks and windows, group mode, both 16-bit types on the pairs.
@pytest.mark.parametrize("dt, d, dv, mask_type, left, right, sq, sk", [
    ("bf16", 64, 64, 0, -1, -1, 300, 517),
    ("fp16", 64, 64, 2, -1, 0, 200, 333),
    ("fp16", 128, 128, 2, -1, 0, 333, 1000),
    ("bf16", 128, 128, 0, -1, -1, 129, 77),
    ("bf16", 256, 256, 1, 50, 20, 200, 250),
    ("fp16", 192, 128, 0, -1, -1, 100, 300),
    ("bf16", 96, 96, 2, -1, 0, 90, 400),
])
def test_dropout_without_randval_keeps_the_same(dt, d, dv, mask_type, left, right, sq, sk):
    q, k, v = make_qkv(2, sq, sk, 4, 2, d, dv, DTYPES[dt], seed_of("drop paths", dt, d, mask_type, sq))
    f = Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right, p_drop=0.3)
    outs = []
    for want_rv in (True, False):
        out = torch.full((2, sq, 4, dv), NAN, device=DEV, dtype=q.dtype)
        lse = torch.full((2, 4, sq), NAN, device=DEV, dtype=torch.float32)
        res = call(aiter_mha.mha_fwd, q, k, v, out=out, lse=lse, return_randval=want_rv, seed=11, offset=5,
                   **f.kwargs())
        assert res[0] is out and res[1] is lse
        torch.cuda.synchronize()
        outs.append((out, lse))
    what = f"dropout {dt} d={d}/{dv} mask={mask_type} ({left},{right}) sq={sq} sk={sk}"
    assert not torch.isnan(outs[1][0]).any(), f"{what}: out has NaN without randval"
    assert torch.equal(outs[0][0], outs[1][0]), f"{what}: out differs with and without randval"
    assert torch.equal(outs[0][1], outs[1][1]), f"{what}: lse differs with and without randval"
    # group mode through the same kernels
    V = Varlen([(sq, sk), (37, 90), (1, 200)], 4, 2, d, dv, DTYPES[dt], seed_of("drop paths varlen", dt, d))
    got = []
    for want_rv in (True, False):
        out = torch.full((V.total_q, 4, dv), NAN, device=DEV, dtype=V.dtype)
        lse = torch.full((4, V.total_q), NAN, device=DEV, dtype=torch.float32)
        call(aiter_mha.mha_varlen_fwd, V.q, V.k, V.v, V.cu_q, V.cu_k, V.max_q, seqused_q=V.used_q,
             seqused_k=V.used_k, out=out, lse=lse, return_randval=want_rv, seed=11, offset=5, **f.kwargs())
        torch.cuda.synchronize()
        got.append((out, lse))
    assert torch.equal(got[0][0], got[1][0]) and torch.equal(got[0][1], got[1][1]), f"{what}: group mode differs"


# ------------------------------------------------------------------------------------------------ group mode

VARLEN = {
    "basic": dict(lens=[(100, 120), (1, 57), (300, 300), (64, 1)], h=4, hk=4),
    "empty": dict(lens=[(0, 10), (50, 0), (0, 0), (77, 130), (1, 1)], h=4, hk=2),
    "pad_k": dict(lens=[(40, 0), (100, 200), (33, 17), (8, 300)], h=4, hk=2, pad_k=True),
    "pad_qk": dict(lens=[(40, 60), (0, 20), (129, 65), (250, 250)], h=4, hk=1, pad_q=True, pad_k=True),
    "gqa": dict(lens=[(200, 180), (17, 333), (64, 64)], h=8, hk=2),
    "packed": dict(lens=[(90, 90), (130, 130), (1, 1)], h=4, hk=4, packed=True),
}
VARLEN_MASKS = [(0, -1, -1), (1, -1, 0), (2, -1, 0), (2, 30, 0), (3, 16, 16)]


@pytest.mark.parametrize("name", list(VARLEN))
@pytest.mark.parametrize("mask_type, left, right", VARLEN_MASKS)
@pytest.mark.parametrize("family", ["ck", "asm"])
def test_varlen(name, mask_type, left, right, family):
    cfg = dict(VARLEN[name])
    dt = "bf16" if (mask_type + len(name)) % 2 else "fp16"
    d = 64 if mask_type % 2 else 128
    V = Varlen(cfg.pop("lens"), cfg.pop("h"), cfg.pop("hk"), d, d, DTYPES[dt], seed_of("varlen", name, mask_type),
               **cfg)
    V.run(Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right),
          f"varlen {name} {dt} mask={mask_type} {family}", use_asm_v3=family == "asm")


# Longer sequences for the asm forward's group mode (both families run them): several 128-row query blocks and
# 128 / 176 / 80 / 64-key blocks per sequence, lengths on, just before and just after the block sizes (a last block copied
# from further back, a sequence shorter than a block copied by cp.async), one sequence much longer than the rest,
# causal with more queries than keys (rows that see no key), max_seqlen_q above the longest sequence, NaN in every
# padding row of q / k / v (no copy may reach past a sequence), d != d_v, the padded head dims of the d256 instance,
# q / k / v as views of one packed tensor, and the wide (176-key) causal kernel (d128: max_seqlen_q of 4096 or more).
VARLEN_ASM = {
    "long": dict(lens=[(1000, 1000), (37, 600), (513, 129), (1, 1), (300, 2049)], h=4, hk=2, d=128),
    "blocks": dict(lens=[(128, 176), (127, 175), (129, 177), (256, 352), (255, 81)], h=2, hk=2, d=128,
                   pad_q=True, pad_k=True, nan_pad=True),
    "d64_nan": dict(lens=[(700, 333), (0, 64), (128, 128), (129, 127), (90, 0)], h=2, hk=1, d=64, pad_q=True,
                    pad_k=True, nan_pad=True),
    "d256": dict(lens=[(333, 400), (80, 79), (161, 81)], h=2, hk=2, d=256, pad_k=True, nan_pad=True),
    # masked: d256's 64-key blocks (without a mask, 80)
    "d256_64": dict(lens=[(65, 64), (63, 65), (64, 130), (200, 63)], h=2, hk=1, d=256, pad_k=True, nan_pad=True),
    "d192_128": dict(lens=[(300, 500), (129, 1), (64, 200)], h=4, hk=4, d=192, dv=128, pad_q=True, nan_pad=True),
    "d96": dict(lens=[(250, 250), (65, 400)], h=3, hk=3, d=96),
    "slack": dict(lens=[(200, 333), (513, 64), (0, 7)], h=2, hk=2, d=128, pad_q=True, pad_k=True, nan_pad=True,
                  max_slack=77),
    "packed": dict(lens=[(333, 333), (64, 64), (700, 700)], h=4, hk=4, d=64, packed=True),
    "wide_causal": dict(lens=[(4200, 4200), (150, 5000), (4096, 1000)], h=2, hk=1, d=128, pad_k=True,
                        nan_pad=True),
    # one KV head of 512-byte rows: the tensor map's made-up stride for the single head (rows x row stride) must
    # stay under the encoder's 2^40 bytes
    "mqa_d256": dict(lens=[(300, 400), (90, 81), (129, 7)], h=4, hk=1, d=256, pad_k=True, nan_pad=True),
    "d192_dv128_long": dict(lens=[(700, 900), (128, 129), (1, 300), (257, 127)], h=4, hk=2, d=192, dv=128,
                            pad_q=True, pad_k=True, nan_pad=True),
}


@pytest.mark.parametrize("name", list(VARLEN_ASM))
@pytest.mark.parametrize("mask_type, left, right", ASM_MASKS)
@pytest.mark.parametrize("family", ["ck", "asm"])
def test_varlen_asm(name, mask_type, left, right, family):
    lens, h, hk, d, dv, dt, opts = varlen_asm_problem(VARLEN_ASM, name, mask_type)
    V = Varlen(lens, h, hk, d, dv, DTYPES[dt], seed_of("varlen asm", name, mask_type, left, right), **opts)
    V.run(Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right),
          f"varlen asm {name} {dt} mask={mask_type} ({left},{right}) {family}", use_asm_v3=family == "asm")


@pytest.mark.parametrize("family", ["ck", "asm"])
def test_varlen_min_seqlen_q_families(family):
    """min_seqlen_q skips the sequences of at most that many queries (their rows stay NaN), on both families."""
    V = Varlen([(300, 300), (40, 500), (90, 90), (7, 3)], 2, 2, 128, 128, torch.bfloat16, seed_of("minq asm"),
               pad_q=True, pad_k=True, nan_pad=True)
    V.run(Feat(scale=128 ** -0.5, mask_type=2, right=0), f"varlen min_seqlen_q {family}", min_seqlen_q=40,
          use_asm_v3=family == "asm")


def test_varlen_head_dims_differ():
    V = Varlen([(70, 90), (0, 5), (200, 111)], 4, 2, 192, 128, torch.bfloat16, seed_of("varlen-dv"), pad_k=True)
    V.run(Feat(scale=192 ** -0.5, mask_type=2, right=0), "varlen 192/128")


def test_varlen_min_seqlen_q():
    V = Varlen([(10, 50), (40, 40), (11, 30), (3, 3), (100, 80)], 4, 2, 64, 64, torch.float16, seed_of("minq"))
    V.run(Feat(scale=0.125), "min_seqlen_q=11", min_seqlen_q=11)  # sequences with lq <= 11 stay NaN


def test_varlen_bias_width_and_allocation():
    V = Varlen([(30, 40), (50, 70), (20, 0)], 4, 2, 64, 64, torch.float16, seed_of("varlen-alloc"), pad_k=True)
    bias = randn(4, V.total_q, V.max_k + 6, dtype=torch.float16, g=gen(1))
    with pytest.raises(ValueError, match=r"max_seqlen_k = 69 is less than the longest logical seqlen_k \(70\)"):
        aiter_mha.mha_varlen_fwd(V.q, V.k, V.v, V.cu_q, V.cu_k, V.max_q, seqused_k=V.used_k, return_randval=True,
                                 dropout_p=0.1, max_seqlen_k=69)
    with pytest.raises(ValueError, match=r"bias width \(dim 2\) is 76 but max_seqlen_k is 70"):
        aiter_mha.mha_varlen_fwd(V.q, V.k, V.v, V.cu_q, V.cu_k, V.max_q, seqused_k=V.used_k, bias=bias,
                                 max_seqlen_k=70)
    # Allocated outputs: out [total_q, h, dv], lse [h, total_q], randval [h, total_q, width] (width = bias width).
    out, lse, rv = call(aiter_mha.mha_varlen_fwd, V.q, V.k, V.v, V.cu_q, V.cu_k, V.max_q, seqused_k=V.used_k,
                        bias=bias, dropout_p=0.25, seed=5, return_lse=True, return_randval=True)
    assert out.shape == (V.total_q, 4, 64) and lse.shape == (4, V.total_q) and rv.shape == (4, V.total_q, 76)
    assert rv.dtype == "uint8" and lse.dtype == "float32"
    f = Feat(scale=0.125, bias=bias, p_drop=0.25)
    V.check(torch.from_dlpack(out), torch.from_dlpack(lse), f, torch.from_dlpack(rv), "varlen allocated")


def test_varlen_sequence_arrays_are_checked():
    """mha_varlen_fwd and mha_varlen_bwd read cu_seqlens_* / seqused_* back and refuse arrays that would index
    outside q / k or leave rows unwritten (a short max_seqlen_q); check_seqlens=False trusts valid ones."""
    V = Varlen([(30, 40), (50, 70), (20, 10)], 4, 2, 64, 64, torch.float16, seed_of("varlen-arrays"), pad_q=True,
               pad_k=True)

    def with_item(t, i, value):
        t = t.clone()
        t[i] = value
        return t

    good = dict(cu_q=V.cu_q, cu_k=V.cu_k, max_q=V.max_q, used_q=V.used_q, used_k=V.used_k)
    cases = [
        (dict(cu_q=with_item(V.cu_q, -1, V.total_q + 1)),
         rf"cu_seqlens_q\[-1\] = {V.total_q + 1} is past total_q \(q dim 0\) = {V.total_q}"),
        (dict(cu_k=with_item(V.cu_k, 0, -1)), r"cu_seqlens_k\[0\] = -1 is negative"),
        (dict(cu_k=with_item(V.cu_k, 2, V.start_k[1] - 1)), r"cu_seqlens_k decreases at index 2"),
        (dict(used_q=with_item(V.used_q, 1, V.phys_q[1] + 1)),
         rf"seqused_q\[1\] = {V.phys_q[1] + 1} is outside \[0, {V.phys_q[1]}\]"),
        (dict(used_k=with_item(V.used_k, 2, -1)), r"seqused_k\[2\] = -1 is outside"),
        (dict(max_q=V.max_q - 1), rf"max_seqlen_q = {V.max_q - 1} is less than the longest logical seqlen_q"),
    ]
    for bad, message in cases:
        a = dict(good, **bad)
        with pytest.raises(ValueError, match=message):
            aiter_mha.mha_varlen_fwd(V.q, V.k, V.v, a["cu_q"], a["cu_k"], a["max_q"], seqused_q=a["used_q"],
                                     seqused_k=a["used_k"])
        if "max_q" in bad:
            continue  # the backward takes max_seqlen_q from the caller as well: checked the same way, not repeated
        out = torch.zeros(V.total_q, 4, 64, device=DEV, dtype=V.dtype)
        lse = torch.zeros(4, V.total_q, device=DEV, dtype=torch.float32)
        with pytest.raises(ValueError, match=message):
            aiter_mha.mha_varlen_bwd(torch.ones_like(out), V.q, V.k, V.v, out, lse, a["cu_q"], a["cu_k"], a["max_q"],
                                     V.max_k, 0.0, 0.125, False, False, -1, -1, False, seqused_q=a["used_q"],
                                     seqused_k=a["used_k"])
    # the same valid arrays, trusted: the results still match the reference
    V.run(Feat(scale=0.125, mask_type=2, right=0), "varlen check_seqlens=False", check_seqlens=False)


# ------------------------------------------------------------------------------------------------ combinations

@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("bias_kind", ["full", "broadcast"])
def test_combo_group_gqa_window_dropout_bias(dt, bias_kind):
    dtype, h = DTYPES[dt], 8
    V = Varlen([(120, 200), (0, 30), (77, 0), (256, 256), (1, 90)], h, 2, 128, 128, dtype,
               seed_of("combo1", dt, bias_kind), pad_k=True, pad_q=bias_kind == "full")
    width = V.max_k + (3 if bias_kind == "full" else 0)
    bias = randn(h if bias_kind == "full" else 1, V.total_q if bias_kind == "full" else 1, width, dtype=dtype,
                 g=gen(seed_of("combo1-bias", dt)), scale=1.5)
    f = Feat(scale=128 ** -0.5, mask_type=2, left=48, right=16, bias=bias, p_drop=0.2)
    V.run(f, f"group+gqa+window+dropout+bias({bias_kind}) {dt}", seed=99, offset=3,
          max_seqlen_k=width if bias_kind == "full" else None)


@pytest.mark.parametrize("mask_type", [1, 2])
@pytest.mark.parametrize("sq, sk", [(160, 240), (240, 160)])
def test_combo_alibi_softcap_sink_causal(mask_type, sq, sk):
    b, h = 2, 4
    q, k, v = make_qkv(b, sq, sk, h, 2, 64, 64, torch.bfloat16, seed_of("combo2", mask_type, sq))
    f = Feat(scale=0.25, mask_type=mask_type, right=0, softcap=8.0, alibi=alibi_slopes(h, b),
             sink=torch.tensor([1.0, -1.0, 4.0, 0.5], device=DEV))
    run_batch(q, k, v, f, f"alibi+softcap+sink causal mask={mask_type} sq={sq} sk={sk}")


def test_combo_alibi_softcap_sink_causal_group():
    V = Varlen([(100, 150), (0, 9), (60, 20), (33, 33)], 4, 4, 96, 96, torch.float16, seed_of("combo2g"))
    f = Feat(scale=0.2, mask_type=2, right=0, softcap=6.0, alibi=alibi_slopes(4, 4),
             sink=torch.tensor([2.0, 0.0, -3.0, 5.0], device=DEV))
    V.run(f, "group alibi+softcap+sink causal")


def test_combo_everything_group():
    """Bias, soft-cap, sink logits, sink tokens, window, dropout (device seed), GQA, padding, d != d_v."""
    h = 8
    V = Varlen([(150, 300), (0, 40), (64, 0), (200, 170)], h, 4, 128, 64, torch.bfloat16, seed_of("combo3"),
               pad_q=True, pad_k=True)
    bias = randn(h, V.total_q, V.max_k, dtype=torch.bfloat16, g=gen(7))
    f = Feat(scale=0.1, mask_type=1, left=32, right=4, softcap=12.0, bias=bias, sink=torch.linspace(-2, 3, h,
             device=DEV), sink_size=6, p_drop=0.15)
    V.run(f, "group everything", seed_offset=seed_offset_array(2**33 + 1, 17), max_seqlen_k=V.max_k)


def test_combo_batch_sink_size_window_dropout_bias_asm_flag():
    """use_asm_v3 with features falls back to the ck kernels and stays correct."""
    b, sq, sk, h = 2, 300, 280, 4
    q, k, v = make_qkv(b, sq, sk, h, 1, 64, 64, torch.float16, seed_of("combo4"))
    bias = make_bias("strided", b, h, sq, sk, torch.float16, seed_of("combo4-b"))
    f = Feat(scale=0.125, mask_type=2, left=40, right=0, sink_size=5, bias=bias, p_drop=0.1)
    run_batch(q, k, v, f, "batch sink_size+window+dropout+bias asm flag", seed=8, offset=1, use_asm_v3=True)


# ------------------------------------------------------------------------------------------------ API surface

def test_return_order():
    q, k, v = make_qkv(2, 64, 80, 4, 2, 64, 64, torch.float16, seed_of("order"))
    out = call(aiter_mha.mha_fwd, q, k, v)
    assert isinstance(out, aiter_mha.DeviceBuffer) and out.shape == (2, 64, 4, 64)
    o, l = call(aiter_mha.mha_fwd, q, k, v, return_lse=True)
    assert l.shape == (2, 4, 64) and l.dtype == "float32"
    o, rv = call(aiter_mha.mha_fwd, q, k, v, dropout_p=0.3, return_randval=True) # a "full" instance
    assert rv.shape == (2, 4, 64, 80) and rv.dtype == "uint8"
    o, l, rv = aiter_mha.mha_fwd(q, k, v, dropout_p=0.3, return_lse=True, return_randval=True)
    assert (o.shape, l.shape, rv.shape) == ((2, 64, 4, 64), (2, 4, 64), (2, 4, 64, 80))
    # Without dropout randval stays 0: every element is kept.
    o, rv = aiter_mha.mha_fwd(q, k, v, return_randval=True)
    torch.cuda.synchronize()
    assert not torch.from_dlpack(rv).any()


def test_feature_arrays_on_wrong_device_and_library_reasons():
    q, k, v = make_qkv(2, 32, 32, 4, 2, 64, 64, torch.float16, seed_of("bad"))
    cases = [
        (dict(dropout_p=0.1, seed_offset=torch.tensor([1, 2])), r"seed_offset is on cpu"),
        (dict(bias=torch.zeros(2, 4, 32, 32, dtype=torch.float16)), r"bias is on cpu"),
        (dict(alibi_slopes=torch.ones(4)), r"alibi_slopes is on cpu"),
        (dict(sink=torch.zeros(4)), r"sink is on cpu"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            aiter_mha.mha_fwd(q, k, v, **kw)
    for d, dv, msg in ((12, 12, r"hdim_q must be a multiple of 8"), (64, 264, r"hdim_v must be a multiple of 8")):
        qb, kb, vb = make_qkv(1, 16, 16, 2, 2, d, dv, torch.float16, 3)
        with pytest.raises(ValueError, match=msg):
            aiter_mha.mha_fwd(qb, kb, vb)
    run_batch(q, k, v, Feat(scale=0.125, softcap=4.0), "after rejected calls")
