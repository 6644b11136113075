"""GPU correctness of the backward binding (aiter_mha.mha_bwd / mha_varlen_bwd): our forward (aiter_mha.mha_fwd /
mha_varlen_fwd, which gives out, lse and the dropout randval) then our backward, against fp32 torch autograd of the
attention contract (include/mha_fwd.h) on fresh random inputs, with FlashAttention's bar from design.md
(max|ours - ref| <= 2 * max|naive - ref| + 1e-5, naive = the same autograd in the input dtype). Covers fp16 / bf16,
head dims 32..256 with d != d_v and d = 40, batch and group mode (empty and padded sequences), MHA / GQA / MQA, every
mask kind, elementwise bias with dbias (broadcast shapes), ALiBi, sink logits, dropout (the mask rebuilt from the
forward's randval), deterministic dQ, s = 1 and odd lengths. Gradient outputs passed in are NaN-poisoned. Skipped
without torch.cuda or the built module; a case whose kernel is not in the build skips with the library's reason.
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
from conftest import ASM_MASKS, require_all_kernels, varlen_asm_problem  # noqa: E402

torch, aiter_mha = gpu_test_modules("GPU backward tests")

DEV = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
NAN = math.nan
D_REL_TOL = 1e-4  # softmax_d is an fp32 row sum of products of fp16 / bf16 values: only the summation order differs


# ------------------------------------------------------------------------------------------------ reference

@dataclasses.dataclass
class Feat:
    """One problem's features in the forward binding's terms (mask_type 0 none, 1 top-left, 2 bottom-right,
    3 generic window). bias broadcastable to [b, h, sq, sk]; alibi fp32 [h] or [b, h]; sink fp32 [h]."""
    scale: float
    mask_type: int = 0
    left: int = -1
    right: int = -1
    bias: object = None
    alibi: object = None
    sink: object = None
    p_drop: float = 0.0

    def fwd_kwargs(self):
        return dict(scale=self.scale, mask=self.mask_type, window_left=self.left, window_right=self.right,
                    bias=self.bias, alibi_slopes=self.alibi, sink=self.sink, dropout_p=self.p_drop)

    def bwd_mask_kwargs(self):
        """AITER's (is_causal, window_size_left, window_size_right) where they express the mask (types 0 and 2),
        else the keyword-only mask=, so both spellings are exercised."""
        if self.mask_type == 0:
            return dict(is_causal=False, window_size_left=-1, window_size_right=-1)
        if self.mask_type == 2:
            causal = self.right == 0
            return dict(is_causal=causal, window_size_left=self.left, window_size_right=self.right)
        return dict(is_causal=False, window_size_left=self.left, window_size_right=self.right,
                    mask=self.mask_type)


def alibi_mode(mask_type, left, right):
    """CK's ALiBi position: 0 -|i + sk - sq - j| (no mask, bottom-right windows), 1 -|i - j| (top-left and
    window_generic windows: CK's make_alibi_from_lr_mask casts mask type 3 to an AlibiMode without the bottom-right
    shift), 2 +j (causal)."""
    if mask_type == 0:
        return 0
    if left < 0 and right == 0:
        return 2
    return 0 if mask_type == 2 else 1


def visible(sq, sk, mask_type, left, right):
    """[sq, sk] bool: diag = i (type 1) or i + sk - sq (types 2, 3); j visible iff within (left, right) of diag."""
    i = torch.arange(sq, device=DEV)[:, None]
    j = torch.arange(sk, device=DEV)[None, :]
    vis = torch.ones(sq, sk, dtype=torch.bool, device=DEV)
    if mask_type == 0:
        return vis
    diag = i + (0 if mask_type == 1 else sk - sq)
    if right >= 0:
        vis = vis & (j <= diag + right)
    if left >= 0:
        vis = vis & (j >= diag - left)
    return vis


def keep_threshold(p_drop):
    """floor((1 - p) * 255) in fp32, as the library computes it."""
    return int(torch.floor((1 - torch.tensor(p_drop, dtype=torch.float32)) * 255).item())


def attention(q, k, v, f, bias=None, sink=None, keep=None):
    """The forward contract on bshd q [b, sq, h, d], k / v [b, sk, hk, d | dv] in their dtype (autograd-friendly:
    fully masked rows give 0 without NaN). bias / sink: the (leaf-derived) tensors to use; keep: bool [b, h, sq, sk]."""
    b, sq, h, _ = q.shape
    sk, hk = k.shape[1], k.shape[2]
    cd = q.dtype
    g = h // hk
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * f.scale
    if bias is not None:
        s = s + bias
    if f.alibi is not None:
        slopes = f.alibi.to(cd).reshape(-1, h)[:, :, None, None]
        i = torch.arange(sq, device=DEV)[:, None]
        j = torch.arange(sk, device=DEV)[None, :]
        mode = alibi_mode(f.mask_type, f.left, f.right)
        pos = j.expand(sq, sk) if mode == 2 else -(i - j).abs() if mode == 1 else -(i + sk - sq - j).abs()
        s = s + slopes * pos.to(cd)
    s = s.masked_fill(~visible(sq, sk, f.mask_type, f.left, f.right), -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    if sink is not None:
        m = torch.maximum(m, sink.view(1, h, 1, 1).expand_as(m))
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m).detach()  # softmax is invariant to m
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    if sink is not None:
        l = l + torch.exp(sink.view(1, h, 1, 1) - m)
    p = p / torch.where(l > 0, l, torch.ones_like(l))
    if keep is not None:
        p = p * keep.to(cd) * (1.0 / (1.0 - f.p_drop))
    return torch.matmul(p, vh).transpose(1, 2)


def leaf(x, cd):
    return None if x is None else x.detach().to(cd).clone().requires_grad_()


def grads(loss, leaves):
    got = torch.autograd.grad(loss, [x for x in leaves if x is not None], allow_unused=True)
    it = iter(got)
    return [None if x is None else next(it) for x in leaves]


def reference_batch(q, k, v, dout, f, keep, cd):
    """(dq, dk, dv, dbias, dsink) of sum(out * dout), every step in cd."""
    leaves = [leaf(q, cd), leaf(k, cd), leaf(v, cd), leaf(f.bias, cd), leaf(f.sink, cd)]
    out = attention(*leaves[:3], f, bias=leaves[3], sink=leaves[4], keep=keep)
    return grads((out * dout.to(cd)).sum(), leaves)


# ------------------------------------------------------------------------------------------------ checks

def max_err(a, b):
    if a is None or b is None or a.numel() == 0:
        return 0.0
    return (a.double() - b.double()).abs().max().item()


def assert_bar(got, ref, naive, what):
    assert not torch.isnan(got).any(), f"{what}: NaN: some element was never written"
    err, naive_err = max_err(got, ref), max_err(naive, ref)
    assert err <= 2 * naive_err + 1e-5, (
        f"{what}: max|ours - ref| = {err:.3e} > 2 * max|naive - ref| + 1e-5 = {2 * naive_err + 1e-5:.3e}")


def assert_softmax_d(d, dout, out, what, p_drop=0.0):
    """D = rowsum(dout * out) * (1 - p_drop) in fp32 (CK's softmax_d, scaled by p_undrop), [b, h, sq] (out / dout
    [b, sq, h, dv])."""
    ref = (dout.float() * out.float()).sum(-1).transpose(1, 2) * (1.0 - p_drop)
    err = (d.float() - ref).abs()
    assert (err <= D_REL_TOL * (1 + ref.abs())).all(), (
        f"{what}: max|softmax_d - rowsum(dout * out) * (1 - p_drop)| = {err.max():.3e}")


def call(fn, *args, **kw):
    """fn(*args, **kw), skipping (with the library's reason) when a kernel it needs is not in this build."""
    try:
        return fn(*args, **kw)
    except (ValueError, RuntimeError) as e:
        if ("not in this build" in str(e) or "not built yet" in str(e)) and not require_all_kernels():
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
            randn(b, sk, hk, dv, dtype=dtype, g=g), randn(b, sq, h, dv, dtype=dtype, g=g))


def alibi_slopes(h, b=None):
    s = torch.tensor([2.0 ** (-8.0 * (i + 1) / h) for i in range(h)], dtype=torch.float32, device=DEV)
    return s if b is None else torch.stack([s * (1 + 0.5 * i) for i in range(b)])


def forward(q, k, v, f, **seeding):
    """Our forward: out, lse (and the dropout keep mask from randval)."""
    res = call(aiter_mha.mha_fwd, q, k, v, return_lse=True, return_randval=f.p_drop > 0, **f.fwd_kwargs(),
               **seeding)
    out, lse = torch.from_dlpack(res[0]), torch.from_dlpack(res[1])
    keep = torch.from_dlpack(res[2]) <= keep_threshold(f.p_drop) if f.p_drop > 0 else None
    return out, lse, keep


def run_batch(q, k, v, dout, f, what, preallocated=True, want_dbias=True, deterministic=False, seeding=None,
              bwd_seeding=None, use_asm_v3=False):
    """Forward + backward through the binding (NaN-poisoned gradient outputs when preallocated), checked against the
    fp32 autograd reference. Returns our (dq, dk, dv). use_asm_v3: the backward tries the asm family first (and,
    where asm_bwd_covers says it must, ran on it: check_asm_bwd_ran)."""
    seeding = seeding or {}
    out, lse, keep = forward(q, k, v, f, **seeding)
    b, sq, h, _ = q.shape
    kw = dict(f.bwd_mask_kwargs())
    if preallocated:
        kw.update(dq=torch.full_like(q, NAN), dk=torch.full_like(k, NAN), dv=torch.full_like(v, NAN))
    dbias = None
    if f.bias is not None:
        kw.update(bias=f.bias)
        if want_dbias:
            dbias = torch.full(f.bias.shape, NAN, device=DEV, dtype=q.dtype)
            kw.update(dbias=dbias)
    d_sink = None
    if f.sink is not None:
        d_sink = torch.full((h,), NAN, device=DEV, dtype=torch.float32)
        kw.update(sink_ptr=f.sink, d_sink=d_sink)
    res = call(aiter_mha.mha_bwd, dout, q, k, v, out, lse, f.p_drop, f.scale, deterministic=deterministic,
               alibi_slopes=f.alibi, use_asm_v3=use_asm_v3, **kw,
               **(bwd_seeding if bwd_seeding is not None else seeding))
    if use_asm_v3:
        check_asm_bwd_ran(q, k, v, f, deterministic)
    assert isinstance(res, tuple) and len(res) == 4
    if preallocated:
        assert res[0] is kw["dq"] and res[1] is kw["dk"] and res[2] is kw["dv"]
    dq, dk, dv, d = (torch.from_dlpack(x) if not isinstance(x, torch.Tensor) else x for x in res)
    torch.cuda.synchronize()
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape and d.shape == (b, h, sq)
    ref = reference_batch(q, k, v, dout, f, keep, torch.float32)
    naive = reference_batch(q, k, v, dout, f, keep, q.dtype)
    for name, got, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_bar(got, r, n, f"{what}: {name}")
    if dbias is not None:
        assert_bar(dbias, ref[3], naive[3], f"{what}: dbias {tuple(dbias.shape)}")
    if d_sink is not None:
        assert_bar(d_sink, ref[4], naive[4], f"{what}: d_sink")
    assert_softmax_d(d, dout, out, what, f.p_drop)
    return dq, dk, dv


def asm_bwd_covers(q, k, v, f, deterministic):
    """Whether the asm backward (csrc/api/mha_bwd.cpp, asm_instance) covers a batch-mode call without seqused_* or a
    group-mode call: an sm_90 GPU, head dims up to 128, any mask (none, causal, sliding window), deterministic or not,
    no bias / ALiBi / dropout / sink logits."""
    d = max(q.shape[-1], v.shape[-1])
    return (torch.cuda.get_device_capability() == (9, 0) and d <= 128 and
            f.bias is None and f.alibi is None and f.sink is None and f.p_drop == 0)


def check_asm_bwd_ran(q, k, v, f, deterministic):
    """With every kernel built (MHA_REQUIRE_ALL_KERNELS=1, or MHA_REQUIRE_ASM=1 for a build with the asm instances),
    a use_asm_v3 call the asm backward covers must have run on its smallest instance that covers the head dims."""
    if asm_bwd_covers(q, k, v, f, deterministic) and "1" in (os.environ.get("MHA_REQUIRE_ALL_KERNELS"),
                                                             os.environ.get("MHA_REQUIRE_ASM")):
        name = aiter_mha.last_kernel_name()
        d = max(q.shape[-1], v.shape[-1])
        want = f"fmha_bwd_asm_v3_{'bf16' if q.dtype == torch.bfloat16 else 'fp16'}_d{64 if d <= 64 else 128}_"
        assert name.startswith(want), f"use_asm_v3 backward ran {name}, not the smallest asm instance ({want})"


FAMILIES = {"ck": False, "asm": True} # use_asm_v3


# ------------------------------------------------------------------------------------------------ batch mode

HDIMS = [(32, 32), (64, 64), (96, 96), (128, 128), (160, 160), (192, 192), (256, 256), (192, 128), (40, 40)]


@pytest.mark.parametrize("d, dv", HDIMS)
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_head_dims(d, dv, dt, family):
    mask_type = HDIMS.index((d, dv)) % 3
    q, k, v, do = make_qkv(2, 113, 257, 4, 2, d, dv, DTYPES[dt], seed_of("hdim", d, dv, dt))
    run_batch(q, k, v, do, Feat(scale=d ** -0.5, mask_type=mask_type, right=0 if mask_type else -1),
              f"{dt} d={d} dv={dv} mask={mask_type}", preallocated=(d + (dt == "bf16")) % 2 == 0,
              use_asm_v3=FAMILIES[family])


MASKS = [
    (0, -1, -1),   # none
    (1, -1, 0),    # causal, top-left
    (2, -1, 0),    # causal, bottom-right (is_causal=True)
    (2, 32, 16),   # sliding window (left, right)
    (2, 24, -1),   # left-only window
    (1, 30, 5),    # top-left window
    (3, 20, 20),   # generic window
    (2, 2147483647, 2147483647),  # windows past every key: unbounded (mask_params)
    (1, 2147483647, 0),
]


@pytest.mark.parametrize("mask_type, left, right", MASKS)
@pytest.mark.parametrize("sq, sk", [(150, 230), (230, 150)])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_masks(mask_type, left, right, sq, sk, family):
    dt = "bf16" if (mask_type + sq) % 2 else "fp16"
    q, k, v, do = make_qkv(2, sq, sk, 4, 2, 64, 64, DTYPES[dt], seed_of("mask", mask_type, left, right, sq))
    run_batch(q, k, v, do, Feat(scale=0.125, mask_type=mask_type, left=left, right=right),
              f"{dt} mask={mask_type} ({left},{right}) sq={sq} sk={sk}", use_asm_v3=FAMILIES[family])


@pytest.mark.parametrize("h, hk", [(4, 4), (8, 2), (6, 1)])
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_mha_gqa_mqa(h, hk, dt, family):
    q, k, v, do = make_qkv(2, 140, 170, h, hk, 64, 64, DTYPES[dt], seed_of("heads", h, hk, dt))
    run_batch(q, k, v, do, Feat(scale=0.125, mask_type=2, right=0), f"{dt} h={h} hk={hk} causal",
              preallocated=dt == "fp16", use_asm_v3=FAMILIES[family])


@pytest.mark.parametrize("sq, sk", [(1, 1), (1, 257), (257, 1), (113, 257), (257, 113), (64, 64)])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_lengths(sq, sk, family):
    q, k, v, do = make_qkv(3, sq, sk, 4, 2, 128, 128, torch.bfloat16, seed_of("len", sq, sk))
    for mask_type in (0, 2):
        run_batch(q, k, v, do, Feat(scale=128 ** -0.5, mask_type=mask_type, right=0 if mask_type else -1),
                  f"sq={sq} sk={sk} mask={mask_type}", use_asm_v3=FAMILIES[family])


def make_bias(shape, dtype, seed):
    return randn(*shape, dtype=dtype, g=gen(seed), scale=2.0)


@pytest.mark.parametrize("kind", ["b,h,sq,sk", "one,h,sq,sk", "one,one,sq,sk", "b,one,one,sk", "b,h,one,sk"])
@pytest.mark.parametrize("mask_type", [0, 2])
def test_bias_and_dbias(kind, mask_type):
    dt = "bf16" if mask_type else "fp16"
    b, sq, sk, h, hk = 2, 130, 190, 4, 2
    q, k, v, do = make_qkv(b, sq, sk, h, hk, 64, 64, DTYPES[dt], seed_of("bias", kind, mask_type))
    shape = [dict(b=b, h=h, sq=sq, sk=sk, one=1)[x] for x in kind.split(",")]
    f = Feat(scale=0.125, mask_type=mask_type, right=0 if mask_type else -1,
             bias=make_bias(shape, DTYPES[dt], seed_of("bias-t", kind)))
    run_batch(q, k, v, do, f, f"bias [{kind}] mask={mask_type}")


def test_bias_without_dbias():
    q, k, v, do = make_qkv(2, 100, 120, 4, 4, 64, 64, torch.float16, seed_of("bias-nod"))
    f = Feat(scale=0.125, bias=make_bias((2, 4, 100, 120), torch.float16, 3))
    run_batch(q, k, v, do, f, "bias without dbias", want_dbias=False)


@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("mask_type, left, right", [(0, -1, -1), (2, -1, 0), (1, 40, 10)])
def test_alibi(per_batch, mask_type, left, right):
    b, h = 2, 4
    q, k, v, do = make_qkv(b, 150, 200, h, 2, 64, 64, torch.bfloat16 if per_batch else torch.float16,
                           seed_of("alibi", per_batch, mask_type))
    f = Feat(scale=0.125, mask_type=mask_type, left=left, right=right, alibi=alibi_slopes(h, b if per_batch else None))
    run_batch(q, k, v, do, f, f"alibi per_batch={per_batch} mask={mask_type} ({left},{right})")


def test_sink_logits():
    q, k, v, do = make_qkv(2, 160, 120, 4, 2, 64, 64, torch.float16, seed_of("sink"))
    f = Feat(scale=0.125, mask_type=2, right=0, sink=torch.tensor([-2.0, 0.0, 3.0, 8.0], device=DEV))
    run_batch(q, k, v, do, f, "sink logits causal (rows without keys)")


@pytest.mark.parametrize("p", [0.17, 0.5])
@pytest.mark.parametrize("device_seed", [False, True])
def test_dropout(p, device_seed):
    dt = "bf16" if device_seed else "fp16"
    q, k, v, do = make_qkv(2, 170, 230, 4, 2, 128, 128, DTYPES[dt], seed_of("drop", p, device_seed))
    seed, offset = 4321, 99
    if device_seed:
        arr = torch.tensor([seed, offset], dtype=torch.int64, device=DEV)
        fwd_seed, bwd_seed = dict(seed_offset=arr), dict(rng_state=arr)
    else:
        fwd_seed = bwd_seed = dict(seed=seed, offset=offset)
    run_batch(q, k, v, do, Feat(scale=0.09, mask_type=2, right=0, p_drop=p),
              f"dropout p={p} device_seed={device_seed}", seeding=fwd_seed, bwd_seeding=bwd_seed)


# The dropout-only backward at d <= 64 runs on the 128 x 128 tile (generate.py bwd_tiles), "full" on 64 x 128: both
# against the reference, with more than one 128-row query block and a partial one, no mask and causal, MHA and GQA.
@pytest.mark.parametrize("d, mask_type, hk, dt", [(64, 0, 4, "bf16"), (64, 2, 2, "fp16"), (32, 0, 2, "bf16")])
def test_dropout_small_head_dims(d, mask_type, hk, dt):
    q, k, v, do = make_qkv(2, 300, 277, 4, hk, d, d, DTYPES[dt], seed_of("drop small", d, mask_type, hk))
    run_batch(q, k, v, do, Feat(scale=d ** -0.5, mask_type=mask_type, right=0 if mask_type else -1, p_drop=0.2),
              f"dropout d={d} mask={mask_type} hk={hk}", seeding=dict(seed=77, offset=5))


# Deterministic mode on both families: many key blocks per query block (the asm backward's CTAs take turns per query
# block, highest key block first), MHA / GQA / MQA, no mask, causal and windows of both corners, sq != sk.
DETERMINISTIC = [  # (family, d, mask_type, left, right, b, h, hk, sq, sk)
    ("asm", 64, 0, -1, -1, 2, 8, 2, 1500, 1500),
    ("asm", 64, 2, -1, 0, 2, 4, 4, 1000, 1300),
    ("asm", 64, 1, 100, 50, 2, 4, 2, 700, 1100),
    ("asm", 128, 0, -1, -1, 2, 8, 2, 1500, 1500),
    ("asm", 128, 1, -1, 0, 1, 4, 1, 900, 700),
    ("asm", 128, 2, 200, 0, 2, 4, 2, 1200, 1200),
    ("ck", 128, 2, 200, 0, 2, 4, 2, 1200, 1200),
]


@pytest.mark.parametrize("family, d, mask_type, left, right, b, h, hk, sq, sk", DETERMINISTIC)
def test_deterministic_bit_identical(family, d, mask_type, left, right, b, h, hk, sq, sk):
    """deterministic=True: three runs give bit-identical dQ / dK / dV that meet the bar (the asm family must have
    run where it covers the call)."""
    q, k, v, do = make_qkv(b, sq, sk, h, hk, d, d, torch.bfloat16, seed_of("det", family, d, mask_type, left, sq))
    f = Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right)
    what = f"deterministic {family} d={d} mask={mask_type} ({left},{right}) h={h}/{hk} sq={sq} sk={sk}"
    runs = [[x.clone() for x in run_batch(q, k, v, do, f, what, deterministic=True, use_asm_v3=family == "asm")]
            for _ in range(3)]
    for name, i in (("dq", 0), ("dk", 1), ("dv", 2)):
        for r in runs[1:]:
            assert torch.equal(r[i], runs[0][i]), f"{what}: {name} differs between runs"


def test_deterministic_dq_bit_identical():
    q, k, v, do = make_qkv(2, 333, 333, 8, 2, 64, 64, torch.bfloat16, seed_of("det"))
    f = Feat(scale=0.125, mask_type=2, right=0)
    out, lse, _ = forward(q, k, v, f)
    runs = []
    for _ in range(3):
        res = call(aiter_mha.mha_bwd, do, q, k, v, out, lse, 0.0, f.scale, True, -1, 0, True)
        runs.append([torch.from_dlpack(x).clone() for x in res[:3]])
    torch.cuda.synchronize()
    for name, i in (("dq", 0), ("dk", 1), ("dv", 2)):
        for r in runs[1:]:
            assert torch.equal(r[i], runs[0][i]), f"deterministic=True: {name} differs between runs"
    ref = reference_batch(q, k, v, do, f, None, torch.float32)
    naive = reference_batch(q, k, v, do, f, None, q.dtype)
    assert_bar(runs[0][0], ref[0], naive[0], "deterministic dq")


DETERMINISTIC_STRESS = [  # (d, mask_type, left, right, b, h, hk, sq, sk): 20-133 key blocks per head; the masks'
    # descending order and, without a mask, the rotated one (several cooperative launches of whole heads)
    (64, 0, -1, -1, 2, 8, 8, 4096, 4096),
    (128, 0, -1, -1, 2, 8, 2, 4096, 4096),
    (128, 2, -1, 0, 2, 8, 8, 4096, 4096),
    (64, 3, -1, 0, 1, 8, 8, 3000, 5000),
    (128, 2, 700, 0, 1, 8, 8, 5000, 5000),
    (128, 0, -1, -1, 1, 4, 4, 17000, 17000),  # 133 key blocks, more than rotate (and than an H100's SMs): descending
    (128, 0, -1, -1, 2, 8, 4, 300, 2500),     # rotated with fewer query blocks than key blocks (tied starts)
]


@pytest.mark.parametrize("d, mask_type, left, right, b, h, hk, sq, sk", DETERMINISTIC_STRESS)
def test_deterministic_asm_stress(d, mask_type, left, right, b, h, hk, sq, sk):
    """The asm backward's deterministic mode on longer problems: 12 runs bit-identical, and within rounding of the
    non-deterministic run (the same parts added in another order)."""
    q, k, v, do = make_qkv(b, sq, sk, h, hk, d, d, torch.bfloat16, seed_of("det stress", d, mask_type, sq))
    f = Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right)
    out, lse, _ = forward(q, k, v, f)

    def run(deterministic):
        res = call(aiter_mha.mha_bwd, do, q, k, v, out, lse, 0.0, f.scale, deterministic=deterministic,
                   use_asm_v3=True, **f.bwd_mask_kwargs())
        got = [torch.from_dlpack(x).clone() for x in res[:3]]
        torch.cuda.synchronize()
        check_asm_bwd_ran(q, k, v, f, deterministic)
        return got

    first = run(True)
    for r in range(11):
        got = run(True)
        for name, i in (("dq", 0), ("dk", 1), ("dv", 2)):
            assert torch.equal(got[i].view(torch.int16), first[i].view(torch.int16)), f"run {r + 1}: {name} differs"
    loose = run(False)
    for name, i in (("dq", 0), ("dk", 1), ("dv", 2)):
        x, y = first[i].float(), loose[i].float()
        assert torch.isfinite(x).all(), f"{name}: not finite"
        err = (x - y).abs().max().item()
        assert err <= 2e-2 * y.abs().max().item(), f"{name}: deterministic differs from the atomic run by {err}"


def test_aiter_positional_call_and_allocated_outputs():
    q, k, v, do = make_qkv(2, 96, 80, 4, 2, 64, 64, torch.float16, seed_of("positional"))
    f = Feat(scale=0.125, mask_type=2, left=16, right=0)
    out, lse, _ = forward(q, k, v, f)
    # AITER's order: dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, is_causal, window_size_left,
    # window_size_right, deterministic, dq, dk, dv, dbias, bias, alibi_slopes, rng_state, gen, sink_ptr, d_sink
    dq, dk, dv, d = call(aiter_mha.mha_bwd, do, q, k, v, out, lse, 0.0, 0.125, True, 16, -1, False, None, None,
                         None, None, None, None, None, None, None, None)
    for x, shape in ((dq, q.shape), (dk, k.shape), (dv, v.shape), (d, (2, 4, 96))):
        assert isinstance(x, aiter_mha.DeviceBuffer) and x.shape == tuple(shape)
    torch.cuda.synchronize()
    ref = reference_batch(q, k, v, do, f, None, torch.float32)
    naive = reference_batch(q, k, v, do, f, None, q.dtype)
    for name, got, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_bar(torch.from_dlpack(got), r, n, f"positional call {name}")


def asm_random_cases(n=16, seed=11):
    r = random.Random(seed)
    cases = []
    for _ in range(n):
        hk = r.choice([1, 2, 4])
        d = r.choice([32, 40, 64, 96, 128])
        cases.append(dict(b=r.randint(1, 3), h=hk * r.randint(1, 3), hk=hk, sq=r.randint(1, 700),
                          sk=r.randint(1, 700), d=d, dv=r.choice([d, d, 64 if d > 64 else 128]),
                          mask=r.choice([0, 1, 2]), dt=r.choice(list(DTYPES)),
                          left=r.choice([-1, -1, 0, 17, 200]), right=r.choice([-1, 0, 0, 9, 150])))
    return cases


@pytest.mark.parametrize("c", asm_random_cases(), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_asm_random_shapes(c):
    """The asm backward (use_asm_v3) on random batch-mode shapes: odd lengths on both sides, MHA / GQA / MQA, head
    dims up to 128 with d != d_v, no mask and windows of both corners (sq > sk leaves rows without keys; (-1, 0) is
    causal, a bound of 0 the diagonal itself)."""
    q, k, v, do = make_qkv(c["b"], c["sq"], c["sk"], c["h"], c["hk"], c["d"], c["dv"], DTYPES[c["dt"]],
                           seed_of("asm random", *c.values()))
    f = Feat(scale=c["d"] ** -0.5, mask_type=c["mask"], left=c["left"] if c["mask"] else -1,
             right=c["right"] if c["mask"] else -1)
    run_batch(q, k, v, do, f, f"asm {c}", use_asm_v3=True)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_strided_inputs_and_outputs(family):
    """bhsd views in, transposed views out (the binding passes every stride through)."""
    b, sq, sk, h, hk, d = 2, 100, 140, 4, 2, 64
    g = gen(seed_of("strided"))
    q = randn(b, h, sq, d, dtype=torch.float16, g=g).transpose(1, 2)
    k = randn(b, hk, sk, d, dtype=torch.float16, g=g).transpose(1, 2)
    v = randn(b, hk, sk, d, dtype=torch.float16, g=g).transpose(1, 2)
    do = randn(b, h, sq, d, dtype=torch.float16, g=g).transpose(1, 2)
    run_batch(q, k, v, do, Feat(scale=0.125, mask_type=1, right=0), "bhsd views", use_asm_v3=FAMILIES[family])


def bwd_into_padded_views(b, sq, sk, h, hk, d, pads, f, what, use_asm_v3=False):
    """The backward into dQ / dK / dV views of NaN buffers whose last dim is d + pad (pads: dq, dk, dv), checked
    against the fp32 reference; the padding columns must stay NaN. Returns the three views."""
    q, k, v, do = make_qkv(b, sq, sk, h, hk, d, d, torch.bfloat16, seed_of(what))
    out, lse, keep = forward(q, k, v, f)
    bufs = [torch.full((b, n, hh, d + pad), NAN, device=DEV, dtype=q.dtype)
            for (n, hh), pad in zip(((sq, h), (sk, hk), (sk, hk)), pads)]
    dq, dk, dv = (x[..., :d] for x in bufs)
    res = call(aiter_mha.mha_bwd, do, q, k, v, out, lse, 0.0, f.scale, deterministic=False, dq=dq, dk=dk, dv=dv,
               use_asm_v3=use_asm_v3, **f.bwd_mask_kwargs())
    if use_asm_v3:
        check_asm_bwd_ran(q, k, v, f, False)
    assert res[0] is dq and res[1] is dk and res[2] is dv
    torch.cuda.synchronize()
    ref = reference_batch(q, k, v, do, f, keep, torch.float32)
    naive = reference_batch(q, k, v, do, f, keep, q.dtype)
    for name, got, r, n in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, naive):
        assert_bar(got, r, n, f"{what}: {name}")
    assert all(torch.isnan(x[..., d:]).all() for x in bufs)
    return dq, dk, dv


@pytest.mark.parametrize("dq_pad", [4, 1])
def test_gradient_outputs_not_16_byte_aligned(dq_pad):
    """dK / dV rows that are not 16-byte aligned take the kernel's element-pair epilogue (aligned ones go through
    shared memory as 16-byte chunks): views with a head stride of d + 4 elements put every other head 8 bytes off.
    dQ's view has a head stride of d + dq_pad: bwd_convert_dq writes its rows as 4-byte words (d + 4) or as elements
    (d + 1: every other head 2 bytes off) instead of 16-byte chunks. MHA, so the kernel writes the caller's views
    itself; the padding columns must stay NaN."""
    d = 128
    dq, dk, _ = bwd_into_padded_views(2, 100, 140, 4, 4, d, (dq_pad, 4, 4), Feat(scale=d ** -0.5, mask_type=1, right=0),
                                      f"unaligned views, dq pad {dq_pad}")
    assert dk.stride(2) % 8 != 0 and dq.stride(2) % 8 != 0


@pytest.mark.parametrize("hk", [4, 2])
@pytest.mark.parametrize("d", [64, 128])
def test_asm_gradient_views_not_16_byte_aligned(d, hk):
    """The asm backward (use_asm_v3) into dQ / dK / dV views with a head stride of d + 4 elements (every other head 8
    bytes off 16-byte alignment): sm90_bwd_convert then writes dQ's rows, and with MHA (the kernel writes the caller's
    dK / dV views; GQA goes through the binding's per-query-head buffers) the main kernel dK / dV's, as 4-byte pairs
    instead of 16-byte chunks. Causal, a row count that is not a multiple of the query block; the padding stays NaN."""
    dq, _, _ = bwd_into_padded_views(2, 150, 190, 4, hk, d, (4, 4, 4), Feat(scale=d ** -0.5, mask_type=2, right=0),
                                     f"asm unaligned views d{d} hk{hk}", use_asm_v3=True)
    assert dq.stride(2) % 8 != 0


def test_library_rejection_leaves_the_callers_buffers():
    """A call the library refuses raises ValueError (aiter::mha_bwd_check's reason) before the binding zero-fills
    dbias or the given gradients: they keep the caller's values. d = 12 passes the binding's layout checks (any head
    dim) and is refused by the library (a multiple of 8); a negative scale is refused by the binding itself."""
    q, k, v, do = make_qkv(1, 16, 16, 2, 2, 12, 12, torch.float16, 5)
    out = do.clone()
    lse = torch.zeros(1, 2, 16, dtype=torch.float32, device=DEV)
    bias = torch.zeros(1, 2, 16, 16, dtype=torch.float16, device=DEV)
    dbias, dq = torch.full_like(bias, 7.0), torch.full_like(q, 7.0)
    with pytest.raises(ValueError, match=r"mha_bwd: invalid argument"):
        aiter_mha.mha_bwd(do, q, k, v, out, lse, 0.0, 0.125, False, -1, -1, False, dq=dq, dbias=dbias, bias=bias)
    torch.cuda.synchronize()
    assert (dbias == 7).all() and (dq == 7).all()
    q, k, v, do = make_qkv(1, 16, 16, 2, 2, 64, 64, torch.float16, 5)
    out, lse, _ = forward(q, k, v, Feat(scale=0.125))
    with pytest.raises(ValueError, match=r"softmax_scale must be finite and > 0"):
        aiter_mha.mha_bwd(do, q, k, v, out, lse, 0.0, -1.0, False, -1, -1, False)
    with pytest.raises(ValueError, match=r"bias is on cpu"):
        aiter_mha.mha_bwd(do, q, k, v, out, lse, 0.0, 0.125, False, -1, -1, False,
                          bias=torch.zeros(1, 2, 16, 16, dtype=torch.float16))


# ------------------------------------------------------------------------------------------------ group mode

class Varlen:
    """A packed group-mode problem: sequence i has logical lengths lens[i] = (lq, lk) inside physical segments that
    are longer when padded (then seqused_q / seqused_k carry the logical lengths)."""

    def __init__(self, lens, h, hk, d, dv, dtype, seed, pad_q=False, pad_k=False, packed_qkv=False, max_slack=0):
        r = random.Random(seed)
        self.lens, self.h, self.hk, self.dtype = lens, h, hk, dtype
        self.phys_q = [lq + (r.randint(1, 9) if pad_q else 0) for lq, _ in lens]
        self.phys_k = [lk + (r.randint(1, 9) if pad_k else 0) for _, lk in lens]
        self.start_q = [sum(self.phys_q[:i]) for i in range(len(lens) + 1)]
        self.start_k = [sum(self.phys_k[:i]) for i in range(len(lens) + 1)]
        self.total_q, self.total_k = self.start_q[-1], self.start_k[-1]
        g = gen(seed)
        if packed_qkv:  # q, k, v as head slices of one [total, h + 2 hk, d] tensor: row strides (h + 2 hk) d
            assert self.total_q == self.total_k and d == dv
            qkv = randn(self.total_q, h + 2 * hk, d, dtype=dtype, g=g)
            self.q, self.k, self.v = qkv[:, :h], qkv[:, h:h + hk], qkv[:, h + hk:]
        else:
            self.q = randn(self.total_q, h, d, dtype=dtype, g=g)
            self.k = randn(self.total_k, hk, d, dtype=dtype, g=g)
            self.v = randn(self.total_k, hk, dv, dtype=dtype, g=g)
        self.do = randn(self.total_q, h, dv, dtype=dtype, g=g)
        i32 = dict(dtype=torch.int32, device=DEV)
        self.cu_q, self.cu_k = torch.tensor(self.start_q, **i32), torch.tensor(self.start_k, **i32)
        self.used_q = torch.tensor([lq for lq, _ in lens], **i32) if pad_q else None
        self.used_k = torch.tensor([lk for _, lk in lens], **i32) if pad_k else None
        # max_slack: maxima above the longest sequences (an upper bound is all the API asks for)
        self.max_q = max([lq for lq, _ in lens], default=0) + max_slack
        self.max_k = max([lk for _, lk in lens], default=0) + max_slack

    def seq_feat(self, f, i, bias, sink):
        """Sequence i's bias slice [1, h | 1, lq | 1, lk] and ALiBi row."""
        lq, lk = self.lens[i]
        q0 = self.start_q[i]
        b = None
        if bias is not None:
            rows = bias[:, q0:q0 + lq] if bias.shape[1] > 1 else bias
            b = rows[:, :, :lk][None]
        alibi = f.alibi if f.alibi is None or f.alibi.dim() == 1 else f.alibi[i if f.alibi.shape[0] > 1 else 0]
        return dataclasses.replace(f, alibi=alibi), b

    def reference(self, f, keep, cd):
        """(dq, dk, dv, dbias, dsink) of sum over sequences of sum(out_i * dout_i), every step in cd."""
        leaves = [leaf(self.q, cd), leaf(self.k, cd), leaf(self.v, cd), leaf(f.bias, cd), leaf(f.sink, cd)]
        loss = torch.zeros((), device=DEV, dtype=cd)
        for i, (lq, lk) in enumerate(self.lens):
            if lq == 0 or lk == 0:  # no query or no key: out = 0 whatever the inputs, so no gradient
                continue
            q0, k0 = self.start_q[i], self.start_k[i]
            fs, bias = self.seq_feat(f, i, leaves[3], leaves[4])
            kp = None if keep is None else keep[:, q0:q0 + lq, :lk][None]
            o = attention(leaves[0][q0:q0 + lq][None], leaves[1][k0:k0 + lk][None], leaves[2][k0:k0 + lk][None], fs,
                          bias=bias, sink=leaves[4], keep=kp)
            loss = loss + (o * self.do[q0:q0 + lq][None].to(cd)).sum()
        return grads(loss, leaves)

    def run(self, f, what, zero_tensors=False, deterministic=False, use_asm_v3=False, **seeding):
        dv = self.v.shape[-1]
        out = torch.full((self.total_q, self.h, dv), NAN, device=DEV, dtype=self.dtype)
        lse = torch.full((self.h, self.total_q), NAN, device=DEV, dtype=torch.float32)
        width = f.bias.shape[2] if f.bias is not None else None
        res = call(aiter_mha.mha_varlen_fwd, self.q, self.k, self.v, self.cu_q, self.cu_k, self.max_q,
                   seqused_q=self.used_q, seqused_k=self.used_k, out=out, lse=lse, return_randval=f.p_drop > 0,
                   max_seqlen_k=width, **f.fwd_kwargs(), **seeding)
        keep = torch.from_dlpack(res[2]) <= keep_threshold(f.p_drop) if f.p_drop > 0 else None
        dq, dk, dvv = (torch.full_like(x, NAN) for x in (self.q, self.k, self.v))
        kw = dict(f.bwd_mask_kwargs())
        is_causal, wl, wr = kw.pop("is_causal"), kw.pop("window_size_left"), kw.pop("window_size_right")
        dbias = d_sink = None
        if f.bias is not None:
            dbias = torch.full(f.bias.shape, NAN, device=DEV, dtype=self.dtype)
            kw.update(bias=f.bias, dbias=dbias)
        if f.sink is not None:
            d_sink = torch.full((self.h,), NAN, device=DEV, dtype=torch.float32)
            kw.update(sink_ptr=f.sink, d_sink=d_sink)
        seeds = dict(seeding)
        rng_state = seeds.pop("seed_offset", None)  # the forward's device [seed, offset] is AITER's rng_state
        res = call(aiter_mha.mha_varlen_bwd, self.do, self.q, self.k, self.v, out, lse, self.cu_q, self.cu_k,
                   self.max_q, self.max_k, f.p_drop, f.scale, zero_tensors, is_causal, wl, wr, deterministic, dq, dk,
                   dvv, f.alibi, rng_state, None, seqused_q=self.used_q, seqused_k=self.used_k, **kw, **seeds,
                   use_asm_v3=use_asm_v3)
        if use_asm_v3:
            check_asm_bwd_ran(self.q, self.k, self.v, f, deterministic)
        assert res[0] is dq and res[1] is dk and res[2] is dvv
        d = torch.from_dlpack(res[3])
        torch.cuda.synchronize()
        ref = self.reference(f, keep, torch.float32)
        naive = self.reference(f, keep, self.dtype)
        self.check_rows(dq, dk, dvv, d, out, ref, naive, what, zero_tensors, f.p_drop)
        if dbias is not None:
            assert_bar(dbias, ref[3], naive[3], f"{what}: dbias {tuple(dbias.shape)}")
        if d_sink is not None:
            assert_bar(d_sink, ref[4], naive[4], f"{what}: d_sink")
        return dq, dk, dvv

    def check_rows(self, dq, dk, dv, d, out, ref, naive, what, zero_tensors, p_drop=0.0):
        """Logical rows against the reference; rows outside them untouched (NaN), or 0 where documented."""
        q_rows = torch.zeros(self.total_q, dtype=torch.bool, device=DEV)
        k_rows = torch.zeros(self.total_k, dtype=torch.bool, device=DEV)
        for i, (lq, lk) in enumerate(self.lens):
            q_rows[self.start_q[i]:self.start_q[i] + lq] = True
            k_rows[self.start_k[i]:self.start_k[i] + lk] = True
        for name, got, r, n, rows in (("dq", dq, ref[0], naive[0], q_rows), ("dk", dk, ref[1], naive[1], k_rows),
                                      ("dv", dv, ref[2], naive[2], k_rows)):
            assert_bar(got[rows], r[rows], n[rows], f"{what}: {name}")
            pad = got[~rows]
            # group mode writes logical rows only; zero_tensors zeroes the rest, and the GQA sum writes 0 there
            if zero_tensors or (name != "dq" and self.h != self.hk):
                assert (pad == 0).all(), f"{what}: {name} rows outside the sequences are not 0"
            else:
                assert torch.isnan(pad).all(), f"{what}: {name} rows outside the sequences were written"
        for i, (lq, _) in enumerate(self.lens):
            if lq:
                q0 = self.start_q[i]
                assert_softmax_d(d[:, q0:q0 + lq][None], self.do[q0:q0 + lq][None], out[q0:q0 + lq][None],
                                 f"{what} seq {i}", p_drop)
        assert (d[:, ~q_rows] == 0).all(), f"{what}: softmax_d is not 0 outside the sequences"


VARLEN = {
    "basic": dict(lens=[(100, 120), (1, 57), (211, 211), (64, 1)], h=4, hk=4),
    "empty": dict(lens=[(0, 10), (50, 0), (0, 0), (77, 130), (1, 1)], h=4, hk=2),
    "gqa": dict(lens=[(150, 180), (17, 233), (64, 64)], h=8, hk=2),
    "mqa_padded": dict(lens=[(40, 60), (0, 20), (129, 65), (200, 200)], h=4, hk=1, pad_q=True, pad_k=True),
}


@pytest.mark.parametrize("name", list(VARLEN))
@pytest.mark.parametrize("mask_type, left, right", [(0, -1, -1), (1, -1, 0), (2, -1, 0), (2, 30, 8)])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_varlen(name, mask_type, left, right, family):
    cfg = dict(VARLEN[name])
    dt = "bf16" if (mask_type + len(name)) % 2 else "fp16"
    d = 64 if mask_type % 2 else 128
    V = Varlen(cfg.pop("lens"), cfg.pop("h"), cfg.pop("hk"), d, d, DTYPES[dt], seed_of("varlen", name, mask_type),
               **cfg)
    V.run(Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right),
          f"varlen {name} {dt} mask={mask_type} {family}", use_asm_v3=FAMILIES[family])


# Longer sequences on the asm backward in group mode: several 64 / 128-row blocks per sequence, lengths off the block
# sizes, one sequence much longer than the rest (max_seqlen sizes the grid), causal with more queries than keys;
# d != d_v, padded segments at d128, maxima above the longest sequences, q / k / v sliced from one packed tensor.
VARLEN_ASM = {
    "long": dict(lens=[(1000, 1000), (37, 600), (513, 129), (1, 1), (300, 2049)], h=4, hk=2, d=128),
    "d64": dict(lens=[(700, 333), (0, 64), (128, 128), (129, 127)], h=2, hk=1, d=64, pad_q=True, pad_k=True),
    "d96": dict(lens=[(250, 250), (65, 400)], h=3, hk=3, d=96),
    "dv_differs": dict(lens=[(300, 500), (129, 1), (64, 200)], h=4, hk=4, d=128, dv=64),
    "padded_slack": dict(lens=[(200, 333), (513, 64), (0, 7)], h=2, hk=2, d=128, pad_q=True, pad_k=True,
                         max_slack=77),
    "packed_qkv": dict(lens=[(333, 333), (64, 64), (700, 700)], h=4, hk=2, d=64, packed_qkv=True),
}


@pytest.mark.parametrize("name", list(VARLEN_ASM))
@pytest.mark.parametrize("mask_type, left, right", ASM_MASKS)
def test_varlen_asm(name, mask_type, left, right):
    lens, h, hk, d, dv, dt, opts = varlen_asm_problem(VARLEN_ASM, name, mask_type)
    V = Varlen(lens, h, hk, d, dv, DTYPES[dt], seed_of("varlen asm", name, mask_type, left, right), **opts)
    V.run(Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right),
          f"varlen asm {name} {dt} mask={mask_type} ({left},{right})", use_asm_v3=True)


def test_varlen_zero_tensors_and_dv_differs():
    V = Varlen([(70, 90), (0, 5), (150, 111)], 4, 2, 192, 128, torch.bfloat16, seed_of("varlen-zt"), pad_q=True,
               pad_k=True)
    V.run(Feat(scale=192 ** -0.5, mask_type=2, right=0), "varlen zero_tensors d=192 dv=128", zero_tensors=True)


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("bias_kind", ["full", "broadcast"])
def test_combo_group_gqa_window_dropout_bias(dt, bias_kind):
    dtype, h = DTYPES[dt], 8
    V = Varlen([(120, 200), (0, 30), (77, 0), (256, 256), (1, 90)], h, 2, 128, 128, dtype,
               seed_of("combo", dt, bias_kind), pad_k=True, pad_q=bias_kind == "full")
    width = V.max_k + (3 if bias_kind == "full" else 0)
    bias = randn(h if bias_kind == "full" else 1, V.total_q if bias_kind == "full" else 1, width, dtype=dtype,
                 g=gen(seed_of("combo-bias", dt)), scale=1.5)
    f = Feat(scale=128 ** -0.5, mask_type=2, left=48, right=16, bias=bias, p_drop=0.2)
    seeding = dict(seed_offset=torch.tensor([99, 3], dtype=torch.int64, device=DEV)) if dt == "bf16" else \
        dict(seed=99, offset=3)
    V.run(f, f"group+gqa+window+dropout+bias({bias_kind}) {dt}", **seeding)


@pytest.mark.parametrize("name", ["long", "d64", "padded_slack"])
@pytest.mark.parametrize("mask_type, left, right", [(0, -1, -1), (2, -1, 0), (1, 40, 100)])
def test_varlen_asm_deterministic(name, mask_type, left, right):
    """Group mode, deterministic, on the asm backward: meets the bar, twice with bit-identical gradients."""
    lens, h, hk, d, dv, dt, opts = varlen_asm_problem(VARLEN_ASM, name, mask_type)
    f = Feat(scale=d ** -0.5, mask_type=mask_type, left=left, right=right)
    got = []
    for _ in range(2):
        V = Varlen(lens, h, hk, d, dv, DTYPES[dt], seed_of("varlen asm det", name, mask_type, left), **opts)
        got.append([x.clone() for x in V.run(f, f"varlen asm det {name} mask={mask_type} ({left},{right})",
                                             deterministic=True, use_asm_v3=True)])
    for name_, i in (("dq", 0), ("dk", 1), ("dv", 2)): # bit patterns: rows outside the sequences stay NaN
        assert torch.equal(got[1][i].view(torch.int16), got[0][i].view(torch.int16)), (
            f"varlen asm deterministic {name}: {name_} differs between runs")


def test_varlen_deterministic_sinks_alibi():
    V = Varlen([(100, 150), (0, 9), (60, 20), (33, 33)], 4, 2, 64, 64, torch.float16, seed_of("varlen-det"))
    f = Feat(scale=0.2, mask_type=2, right=0, alibi=alibi_slopes(4, 4),
             sink=torch.tensor([2.0, 0.0, -3.0, 5.0], device=DEV))
    V.run(f, "group alibi+sink causal deterministic", deterministic=True)
