"""GPU correctness of aiter_mha.mha_fwd (the DLPack binding of aiter::mha_fwd) against an fp64 reference, with
FlashAttention's bar: max|out - ref| <= 2 * max|naive_same_precision - ref| + 1e-5 (design.md). Covers dtype x hdim x
mask x awkward shapes x MQA/GQA, bhsd views, LSE, NaN-poisoned and strided outputs, DLPack interop, streams and
invalid input. torch is only the test's reference and tensor factory; the module under test never imports it.
"""
import math
import os
import random
import sys
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import gpu_test_modules  # noqa: E402
from conftest import asm_fwd_instance_tag  # noqa: E402

torch, _module = gpu_test_modules("GPU correctness tests")


class _SkipMissingKernels:
    """The binding module, whose functions skip the test (with the library's reason) when a kernel the call needs is
    not in this build, unless MHA_REQUIRE_ALL_KERNELS=1 (full-build runs), where that stays a failure."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if not callable(attr) or isinstance(attr, type): # constants and classes (DeviceBuffer) as they are
            return attr

        def call(*args, **kw):
            try:
                return attr(*args, **kw)
            except (ValueError, RuntimeError) as e:
                if "is not in this build" in str(e) and os.environ.get("MHA_REQUIRE_ALL_KERNELS") != "1":
                    pytest.skip(f"kernel not built: {e}")
                raise
        return call


aiter_mha = _SkipMissingKernels(_module) if _module is not None else None

DEV = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
MASKS = {"none": 0, "causal_top_left": 1, "causal_bottom_right": 2}
MASK_WINDOWS = {0: (-1, -1), 1: (-1, 0), 2: (-1, 0)}
SHAPES = [(1, 1), (1, 10), (55, 256), (128, 128), (1024, 256), (256, 1024), (33, 0), (113, 203), (1000, 1000)]
LSE_TOL = 1e-3
SENTINEL = -7.25  # exact in fp16, bf16 and fp32


# ------------------------------------------------------------------------------------------------ reference

def visible(sq, sk, mask_type, left, right, device=DEV):
    """[sq, sk] bool: key j is visible to query i. The diagonal sits at j = i (top-left, type 1) or i + sk - sq
    (bottom-right, types 2 and 3: window_generic's window is bottom-right, csrc/api mask_params)."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    diag = i + (sk - sq if mask_type in (2, 3) else 0)
    vis = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        vis &= j >= diag - left
    if right >= 0:
        vis &= j <= diag + right
    return vis


def attention_ref(q, k, v, scale, mask_type, left, right, compute_dtype=torch.float64):
    """Plain attention on bshd q/k/v, every step in compute_dtype (fp64: the reference; fp16/bf16: the naive
    same-precision baseline). Returns out [b, sq, h, dv] and lse [b, h, sq] (fp64; -inf on fully masked rows, whose
    output is 0)."""
    b, sq, h, _ = q.shape
    sk, hk, dv = k.shape[1], k.shape[2], v.shape[3]
    if sk == 0 or sq == 0:
        return (torch.zeros(b, sq, h, dv, dtype=compute_dtype, device=q.device),
                torch.full((b, h, sq), -math.inf, dtype=torch.float64, device=q.device))
    g = h // hk
    qc = q.to(compute_dtype).transpose(1, 2)  # [b, h, sq, d]
    kc = k.to(compute_dtype).transpose(1, 2).repeat_interleave(g, dim=1)
    vc = v.to(compute_dtype).transpose(1, 2).repeat_interleave(g, dim=1)
    s = torch.matmul(qc, kc.transpose(-1, -2)) * scale  # [b, h, sq, sk]
    s = s.masked_fill(~visible(sq, sk, mask_type, left, right, q.device), -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)  # fully masked row: keep exp() at 0, not NaN
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(l > 0, l, torch.ones_like(l))
    out = torch.matmul(p, vc).transpose(1, 2)
    lse = torch.log(l.double()).squeeze(-1) + m.double().squeeze(-1)
    return out, lse


def max_err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def check_out(out, q, k, v, scale, mask_type, left, right, what=""):
    """FlashAttention's bar against the fp64 reference; returns the fp64 reference LSE for check_lse."""
    assert not torch.isnan(out).any(), f"{what}: out has NaN: some element was never written"
    ref, ref_lse = attention_ref(q, k, v, scale, mask_type, left, right)
    naive, _ = attention_ref(q, k, v, scale, mask_type, left, right, compute_dtype=q.dtype)
    err, naive_err = max_err(out, ref), max_err(naive, ref)
    assert err <= 2 * naive_err + 1e-5, (
        f"{what}: max|out - ref| = {err:.3e} > 2 * max|naive - ref| + 1e-5 = {2 * naive_err + 1e-5:.3e}")
    return ref_lse


def check_lse(lse, ref_lse, what=""):
    assert not torch.isnan(lse).any(), f"{what}: lse has NaN: some row was never written"
    assert not torch.isposinf(lse).any(), f"{what}: lse has +inf"
    ref_masked = torch.isneginf(ref_lse)
    got_masked = torch.isneginf(lse)
    assert torch.equal(got_masked, ref_masked), (
        f"{what}: lse is -inf on {int(got_masked.sum())} rows, the reference on {int(ref_masked.sum())} "
        f"(fully masked rows); first mismatch at {torch.nonzero(got_masked != ref_masked)[0].tolist()}")
    if (~ref_masked).any():
        err = (lse.double() - ref_lse)[~ref_masked].abs().max().item()
        assert err <= LSE_TOL, f"{what}: max|lse - ref_lse| = {err:.3e} > {LSE_TOL}"


# ------------------------------------------------------------------------------------------------ helpers

def seed_of(*params):
    return zlib.crc32(repr(params).encode())


def make_qkv(b, sq, sk, h, hk, d, dtype, seed, dv=None, bhsd=False):
    """Fresh randn q/k/v (bshd indexing). bhsd=True returns transposed views of [b, h, s, d] storage."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    dv = d if dv is None else dv

    def rnd(s, n, dd):
        if bhsd:
            return torch.randn(b, n, s, dd, device=DEV, dtype=dtype, generator=g).transpose(1, 2)
        return torch.randn(b, s, n, dd, device=DEV, dtype=dtype, generator=g)

    return rnd(sq, h, d), rnd(sk, hk, d), rnd(sk, hk, dv)


def poisoned_outputs(b, sq, h, dv, dtype):
    return (torch.full((b, sq, h, dv), math.nan, device=DEV, dtype=dtype),
            torch.full((b, h, sq), math.nan, device=DEV, dtype=torch.float32))


def run_and_check(dtype, d, mask, sq, sk, hk, b=2, h=4, seed=None, use_asm_v3=False, dv=None):
    mask_type = MASKS[mask]
    left, right = MASK_WINDOWS[mask_type]
    dv = d if dv is None else dv
    seed = seed_of(dtype, d, mask, sq, sk, hk, b, h, dv) if seed is None else seed
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed, dv=dv)
    out, lse = poisoned_outputs(b, sq, h, dv, dtype)
    res = aiter_mha.mha_fwd(q, k, v, mask=mask, return_lse=True, out=out, lse=lse, use_asm_v3=use_asm_v3)
    assert res[0] is out and res[1] is lse
    torch.cuda.synchronize()
    what = f"{dtype} d={d}/{dv} {mask} b={b} h={h} h_k={hk} sq={sq} sk={sk}"
    ref_lse = check_out(out, q, k, v, 1.0 / math.sqrt(d), mask_type, left, right, what)
    check_lse(lse, ref_lse, what)
    if use_asm_v3:
        check_asm_ran(mask, sq, sk, d, h, hk, dv)


PACKED_MAX_ROWS = 256 # csrc/api/mha_fwd.cpp, kPackedFwdMaxRows


def check_asm_ran(mask, sq, sk, d, h, hk, dv=None):
    """With every kernel built (MHA_REQUIRE_ALL_KERNELS=1, or MHA_REQUIRE_ASM=1 for a build with the asm instances)
    on an sm_90 GPU, a use_asm_v3 call the asm family covers (head dims up to 256, any mask without sink tokens,
    not a GQA call of at most 256 packed rows per KV head) must have run on its smallest instance that
    covers the head dims (hdim_q d, hdim_v dv, default d), not fallen back to ck. MHA_REQUIRE_ASM=1 asks for a build
    with every asm instance of the dtypes it runs."""
    dv = d if dv is None else dv
    pack = h // hk if h > hk else 1
    covered = (torch.cuda.get_device_capability() == (9, 0) and max(d, dv) <= 256 and sq > 0 and
               not (pack > 1 and sq * pack <= PACKED_MAX_ROWS))
    if covered and "1" in (os.environ.get("MHA_REQUIRE_ALL_KERNELS"), os.environ.get("MHA_REQUIRE_ASM")):
        name = aiter_mha.last_kernel_name()
        want = f"_asm_v3_{'bf16' if '_bf16_' in name else 'fp16'}_{asm_fwd_instance_tag(d, dv)}_"
        assert want in name, f"use_asm_v3 call ran {name}, not the smallest asm instance ({want})"


# ------------------------------------------------------------------------------------------------ correctness grid

FULL_SHAPES = {(1, 10), (128, 128), (113, 203), (33, 0)}  # every dtype x hdim x mask x h_k: 144 cases
SAMPLED = 60  # cases drawn (fixed seed) from the other 180 combinations of the remaining shapes


def grid_cases():
    every = [(dt, d, m, sq, sk, hk) for dt in DTYPES for d in (64, 128) for m in MASKS
             for (sq, sk) in SHAPES for hk in (4, 2, 1)]
    full = [c for c in every if (c[3], c[4]) in FULL_SHAPES]
    rest = [c for c in every if (c[3], c[4]) not in FULL_SHAPES]
    return full + random.Random(20240611).sample(rest, SAMPLED)


FAMILIES = {"ck": False, "asm": True} # use_asm_v3


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("dt, d, mask, sq, sk, hk", grid_cases())
def test_fwd_grid(dt, d, mask, sq, sk, hk, family):
    run_and_check(DTYPES[dt], d, mask, sq, sk, hk, use_asm_v3=FAMILIES[family])


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("sq, sk", [(113, 203), (256, 256), (300, 77)])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_bhsd_views(dt, mask, sq, sk, family):
    """q/k/v and out are transposed views of [b, h, s, d] storage: strides, not layout, must drive the kernel."""
    dtype, b, h, hk, d = DTYPES[dt], 2, 4, 2, 64
    mask_type = MASKS[mask]
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("bhsd", dt, mask, sq, sk), bhsd=True)
    assert q.stride(-1) == 1 and not q.is_contiguous()
    out = torch.full((b, h, sq, d), math.nan, device=DEV, dtype=dtype).transpose(1, 2)
    _, lse = poisoned_outputs(b, sq, h, d, dtype)
    aiter_mha.mha_fwd(q, k, v, mask=mask, out=out, lse=lse, use_asm_v3=FAMILIES[family])  # lse given: written
    torch.cuda.synchronize()
    ref_lse = check_out(out, q, k, v, 1 / math.sqrt(d), mask_type, *MASK_WINDOWS[mask_type], f"bhsd {dt} {mask}")
    check_lse(lse, ref_lse, f"bhsd {dt} {mask}")
    if FAMILIES[family]:
        check_asm_ran(mask, sq, sk, d, h, hk)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_size_one_dims_with_any_stride(family):
    """PyTorch up to 2.9 exports the stride of a size-1 dim as 1 through DLPack: a decode step (batch 1, one query)
    over MQA reaches the library with such strides; it never steps along those dims, so they must not matter."""
    dtype, d = torch.bfloat16, 128
    hk = 1 if family == "ck" else 8 # MQA one-query calls run on ck's packed tile: the asm case has 8 KV heads
    q, k, v = make_qkv(1, 1, 300, 8, hk, d, dtype, seed_of("size-1 strides"))

    def ones(t):  # stride 1 on every size-1 dim
        return t.as_strided(t.shape, tuple(1 if n == 1 else s for n, s in zip(t.shape, t.stride())))

    q, k, v = ones(q), ones(k), ones(v)
    out, lse = poisoned_outputs(1, 1, 8, d, dtype)
    out, lse = ones(out), ones(lse)
    aiter_mha.mha_fwd(q, k, v, out=out, lse=lse, use_asm_v3=FAMILIES[family])
    torch.cuda.synchronize()
    ref_lse = check_out(out, q, k, v, 1 / math.sqrt(d), 0, -1, -1, "size-1 strides")
    check_lse(lse, ref_lse, "size-1 strides")
    if FAMILIES[family]:
        check_asm_ran("none", 1, 300, d, 8, hk)


def random_configs(n=20, seed=7):
    r = random.Random(seed)
    cfgs = []
    for _ in range(n):
        hk = r.randint(1, 4)
        cfgs.append(dict(b=r.randint(1, 3), hk=hk, h=hk * r.randint(1, 4), sq=r.randint(0, 700),
                         sk=r.randint(0, 700), d=r.choice([64, 128]), dt=r.choice(list(DTYPES)),
                         mask=r.choice(list(MASKS))))
    return cfgs


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("cfg", random_configs(), ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_random_shapes(cfg, family):
    run_and_check(DTYPES[cfg["dt"]], cfg["d"], cfg["mask"], cfg["sq"], cfg["sk"], cfg["hk"], b=cfg["b"], h=cfg["h"],
                  use_asm_v3=FAMILIES[family])


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("sq, sk, d", [(5, 300, 128), (8, 1000, 64), (16, 77, 128), (8, 3, 128), (40, 500, 128),
                                       (64, 64, 64)])
def test_spec_decode_packed(dt, mask, sq, sk, d):
    """5 to 64 queries of 4 query heads per KV head (17 to 256 rows per KV head): the four heads packed into the
    64 x 64 split-KV tile (a CTA per 64 rows) with one split, K and V read once per KV head."""
    run_and_check(DTYPES[dt], d, mask, sq, sk, 8, b=3, h=32)
    name = aiter_mha.last_kernel_name()
    if "splitkv" not in name and os.environ.get("MHA_REQUIRE_ALL_KERNELS") != "1":
        # a build without the split-KV prefill tile (--preset ci has the d128 decode tile alone) runs the prefill
        # instances instead
        pytest.skip(f"the split-KV instances are not in this build (ran {name}); the result was checked")
    assert "splitkv" in name and "b64x64" in name, name


@pytest.mark.parametrize("mask_type, left, right, sq, sk", [
    (1, 32, 16, 200, 300),
    (2, 64, 0, 300, 200),   # bottom-right with sq > sk: the first rows see nothing
    (2, 0, 48, 128, 500),
    (1, 100, 0, 257, 257),
    # windows past every key (INT_MAX): the same as unbounded; the kernels' 32-bit bounds get -1 for them
    (1, 2147483647, 2147483647, 200, 300),
    (2, 2147483647, 0, 300, 200),
    (2, 3, 2147483647, 128, 500),
    (1, 2147483647, 5, 64, 64),
])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_sliding_window(mask_type, left, right, sq, sk, family):
    """Windows on both families (asm: GQA calls of more than 256 packed rows per KV head)."""
    dtype, b, h, hk, d = torch.bfloat16, 2, 4, 2, 128
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("swa", mask_type, left, right, sq, sk))
    out, lse = poisoned_outputs(b, sq, h, d, dtype)
    aiter_mha.mha_fwd(q, k, v, mask=mask_type, window_left=left, window_right=right, out=out, lse=lse,
                      return_lse=True, use_asm_v3=FAMILIES[family])
    torch.cuda.synchronize()
    what = f"window mask_type={mask_type} ({left},{right}) sq={sq} sk={sk}"
    check_lse(lse, check_out(out, q, k, v, 1 / math.sqrt(d), mask_type, left, right, what), what)
    if FAMILIES[family]:
        check_asm_ran("window", sq, sk, d, h, hk)


# The asm forward's windows: many tiles per CTA (persistent grid), windows narrower than a key block and wider than
# several (first and last key blocks masked on either side, blocks skipped before the window), both corners, sq != sk
# (top-left rows past every key's window, bottom-right rows before the first key), the diagonal alone, one side
# unbounded (left-only, and right-only which pairs row blocks as causal does), 128-key blocks (windows under 2048 keys,
# and shorter calls) and the wide 176-key kernel, and every head-dim instance; d256's 64-key blocks (masked calls under
# 2048 rows, windows under 512 keys) and its 80-key kernel with a window (2048 rows or more, a window of 512 or more).
@pytest.mark.parametrize("dt, d, dv, mask_type, left, right, b, h, hk, sq, sk", [
    ("bf16", 128, 128, 2, 256, 0, 2, 40, 8, 2100, 2100),
    ("fp16", 128, 128, 1, 100, 37, 1, 16, 4, 4200, 4200),
    ("bf16", 128, 128, 2, 1000, -1, 2, 24, 24, 1500, 1500),
    ("bf16", 128, 128, 1, -1, 300, 2, 40, 8, 2100, 2100),
    ("fp16", 128, 128, 1, 0, 0, 2, 8, 8, 700, 700),
    ("bf16", 128, 128, 1, 50, 10, 2, 16, 16, 1500, 400),
    ("bf16", 128, 128, 2, 20, 5, 2, 16, 16, 1500, 400),
    ("bf16", 128, 128, 3, 64, 64, 2, 8, 8, 333, 1000),
    ("bf16", 64, 64, 2, 512, 0, 2, 40, 8, 2100, 2100),
    ("fp16", 64, 64, 1, 7, 200, 3, 32, 32, 700, 900),
    ("bf16", 256, 256, 2, 300, 0, 2, 16, 16, 1000, 1000),
    ("fp16", 256, 256, 1, 79, 81, 2, 8, 8, 500, 700),
    ("bf16", 192, 128, 2, 128, 0, 2, 16, 16, 1000, 1000),
    ("bf16", 96, 96, 1, 33, 33, 2, 8, 4, 400, 300),
    # windows of at least 2048 keys (or without a right bound) on the wide kernel (from 4096 rows)
    ("bf16", 128, 128, 2, 3000, 0, 1, 16, 16, 4200, 4200),
    ("fp16", 64, 64, 1, 2500, 20, 1, 16, 16, 4200, 4200),
    ("bf16", 64, 64, 2, 300, -1, 1, 16, 8, 4200, 4200),
    ("bf16", 256, 256, 2, 700, 0, 1, 4, 4, 2100, 2100),   # d256's 80-key kernel
    ("fp16", 256, 256, 1, 100, 60, 1, 4, 2, 2200, 2300),  # d256, 64-key blocks from the window alone
    # bottom-right, one side unbounded, sq > sk: rows whose diagonal is left of the first key (negative) still see
    # keys [0, diagonal + right + 1) (right-only) or [0, sk) (left-only). The row bounds against an unbounded side
    # (INT_MAX) and a negative diagonal must not wrap: written as selects, the compiler folded them into a max / min
    # of wrapped differences and these rows lost every key (found by these cases; fixed in the forward's mask())
    ("bf16", 128, 128, 2, -1, 100, 2, 16, 16, 1500, 400),
    ("fp16", 64, 64, 2, -1, 200, 2, 16, 8, 1200, 300),
    ("bf16", 64, 64, 2, -1, 150, 1, 16, 16, 4300, 1000),
    ("bf16", 256, 256, 2, -1, 50, 1, 8, 8, 700, 200),
    ("bf16", 128, 128, 2, 1000, -1, 2, 16, 16, 1500, 400),
    ("fp16", 256, 256, 2, 300, -1, 1, 8, 8, 700, 200),
    ("bf16", 192, 128, 2, -1, 64, 1, 16, 16, 900, 300),
])
def test_asm_windows(dt, d, dv, mask_type, left, right, b, h, hk, sq, sk):
    dtype = DTYPES[dt]
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("asm window", dt, d, dv, mask_type, left, right, sq, sk),
                       dv=dv)
    out, lse = poisoned_outputs(b, sq, h, dv, dtype)
    aiter_mha.mha_fwd(q, k, v, mask=mask_type, window_left=left, window_right=right, out=out, lse=lse,
                      return_lse=True, use_asm_v3=True)
    torch.cuda.synchronize()
    what = f"asm window {dt} d={d}/{dv} mask_type={mask_type} ({left},{right}) b={b} h={h}/{hk} sq={sq} sk={sk}"
    check_lse(lse, check_out(out, q, k, v, 1 / math.sqrt(d), mask_type, left, right, what), what)
    check_asm_ran("window", sq, sk, d, h, hk, dv)


@pytest.mark.parametrize("mask", ["none", "causal_bottom_right"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_use_asm_v3(mask, d):
    """use_asm_v3 asks for the Hopper family first; whichever family runs, the result must meet the bar."""
    run_and_check(torch.bfloat16, d, mask, 512, 512, 2, use_asm_v3=True)
    run_and_check(torch.bfloat16, d, mask, 333, 1000, 4, use_asm_v3=True)


@pytest.mark.parametrize("dt, d, dv, mask, b, h, hk, sq, sk", [
    # persistent grid (more tiles than SMs), causal row blocks in pairs: an odd count (17), both corners, the wide
    # (176-key) causal kernel (sq >= 4096) and the 128-key one below it
    ("bf16", 128, 128, "causal_top_left", 2, 40, 8, 2100, 2100),
    ("bf16", 128, 128, "causal_bottom_right", 1, 16, 4, 4200, 4200),
    ("fp16", 128, 128, "causal_bottom_right", 2, 40, 40, 2100, 2100),
    ("bf16", 64, 64, "causal_bottom_right", 2, 40, 8, 2100, 2100),
    ("fp16", 64, 64, "causal_top_left", 1, 24, 8, 4200, 4200),
    # ~11 tiles per CTA, row blocks per head and heads not powers of two (the schedule's multiply-high divisions)
    ("bf16", 64, 64, "none", 24, 7, 7, 1100, 1100),
    ("bf16", 128, 128, "causal_bottom_right", 24, 7, 7, 1100, 900),
    # top-left with sq != sk (the diagonal at row 0's key 0): more keys than rows, and rows past the last key that see
    # every key
    ("bf16", 128, 128, "causal_top_left", 2, 16, 16, 700, 1500),
    ("fp16", 64, 64, "causal_top_left", 2, 16, 8, 1500, 600),
    ("bf16", 256, 256, "causal_top_left", 2, 8, 8, 300, 1000),
    # bottom-right with sq > sk: CTAs mixing tiles without keys and tiles with keys
    ("bf16", 128, 128, "causal_bottom_right", 4, 40, 40, 3000, 700),
    ("fp16", 64, 64, "causal_bottom_right", 3, 64, 64, 640, 300),
    # non-causal, several tiles per CTA: d64's three-stage ring wrapping across tiles, no keys at all
    ("bf16", 64, 64, "none", 4, 40, 40, 1000, 1000),
    ("fp16", 64, 64, "none", 3, 48, 16, 700, 1500),
    ("bf16", 128, 128, "none", 2, 80, 80, 1000, 0),
    # head dims below the instance's (zero-filled columns, masked O stores), hdim_q != hdim_v
    ("bf16", 96, 96, "none", 2, 8, 8, 300, 500),
    ("fp16", 40, 40, "causal_bottom_right", 2, 8, 8, 300, 500),
    ("bf16", 64, 128, "none", 2, 8, 8, 300, 500),
    ("bf16", 128, 64, "causal_bottom_right", 2, 8, 8, 500, 300),
    # d256 (80-key blocks, 64 under a mask below 2048 rows; four column atoms) and the head dims it pads: 192, 160;
    # d192 / d_v 128 (128-key blocks, three Q / K atoms, two V atoms) and the head dims it pads (136..192 / up to 128)
    ("bf16", 256, 256, "none", 2, 40, 8, 1000, 1000),
    ("fp16", 256, 256, "causal_bottom_right", 2, 40, 40, 2100, 2100),
    ("bf16", 256, 256, "causal_top_left", 1, 4, 4, 333, 333),
    ("bf16", 192, 192, "none", 2, 8, 8, 300, 700),
    ("fp16", 192, 128, "causal_bottom_right", 2, 16, 16, 700, 900),
    ("bf16", 192, 128, "none", 2, 40, 8, 1000, 1000),
    ("bf16", 192, 128, "causal_top_left", 1, 4, 4, 333, 333),
    ("fp16", 192, 128, "causal_bottom_right", 3, 8, 8, 900, 200),
    ("bf16", 160, 96, "none", 2, 8, 2, 300, 77),
    ("bf16", 192, 64, "causal_bottom_right", 2, 40, 40, 2100, 2100),
    ("bf16", 160, 160, "none", 1, 8, 2, 500, 77),
    ("bf16", 256, 256, "causal_bottom_right", 3, 8, 8, 900, 200), # rows that see no key
    ("fp16", 256, 256, "none", 2, 140, 140, 300, 0),
    ("bf16", 256, 256, "none", 2, 8, 8, 1, 3000),
    ("bf16", 128, 256, "causal_bottom_right", 2, 8, 4, 700, 700),
])
def test_asm_schedules(dt, d, dv, mask, b, h, hk, sq, sk):
    """The asm forward's tile schedules, ring and head-dim padding against the reference."""
    run_and_check(DTYPES[dt], d, mask, sq, sk, hk, b=b, h=h, use_asm_v3=True, dv=dv)


def test_scale_and_causal_alias():
    dtype, b, sq, sk, h, hk, d = torch.float16, 2, 150, 190, 4, 4, 64
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("scale"))
    out = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, scale=0.3, mask="causal"))  # "causal" is bottom-right
    torch.cuda.synchronize()
    check_out(out, q, k, v, 0.3, 2, -1, 0, "scale=0.3 causal")


# ------------------------------------------------------------------------------------------------ outputs

# (family, d, sq, sk, hk): ck's GQA tile (h 4 on 2 KV heads), and the asm forward's 16-byte O stores per head dim
STRIDED_OUT = [("ck", 64, 77, 129, 2)] + [("asm", d, 300, 333, 4) for d in (64, 128, 256)]


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("family, d, sq, sk, hk", STRIDED_OUT)
def test_strided_out_keeps_surroundings(dt, family, d, sq, sk, hk):
    """out and lse are views into larger sentinel-filled buffers: the kernel must follow their strides and write
    nothing outside them."""
    dtype, b, h = DTYPES[dt], 2, 4
    asm = family == "asm"
    seed = seed_of("asm strided", dt, d) if asm else seed_of("strided", dt)
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed)
    big = torch.full((b, sq + 3, h + 2, d + 24), SENTINEL, device=DEV, dtype=dtype)
    region = (slice(None), slice(2, 2 + sq), slice(1, 1 + h), slice(16, 16 + d))  # 16-element offset keeps 32 B
    out = big[region]
    lse_big = torch.full((b, h + 1, sq + 9), SENTINEL, device=DEV, dtype=torch.float32)
    lse_region = (slice(None), slice(1, 1 + h), slice(4, 4 + sq))
    lse = lse_big[lse_region]
    out.fill_(math.nan)
    lse.fill_(math.nan)
    aiter_mha.mha_fwd(q, k, v, mask="causal_top_left", out=out, lse=lse, return_lse=True, use_asm_v3=asm)
    torch.cuda.synchronize()

    inside = torch.zeros_like(big, dtype=torch.bool)
    inside[region] = True
    assert (big[~inside] == SENTINEL).all(), "mha_fwd wrote outside the out view"
    lse_inside = torch.zeros_like(lse_big, dtype=torch.bool)
    lse_inside[lse_region] = True
    assert (lse_big[~lse_inside] == SENTINEL).all(), "mha_fwd wrote outside the lse view"
    what = f"strided out {family} {dt} d={d}"
    check_lse(lse, check_out(out, q, k, v, 1 / math.sqrt(d), 1, -1, 0, what), what)
    if asm:
        check_asm_ran("causal_top_left", sq, sk, d, h, hk)


def test_allocated_outputs_are_dlpack_buffers():
    dtype, b, sq, sk, h, hk, d = torch.bfloat16, 2, 100, 140, 4, 1, 128
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("alloc"))
    out_buf, lse_buf = aiter_mha.mha_fwd(q, k, v, mask="causal_bottom_right", return_lse=True)
    assert isinstance(out_buf, aiter_mha.DeviceBuffer)
    assert out_buf.shape == (b, sq, h, d) and out_buf.dtype == "bfloat16"
    assert lse_buf.shape == (b, h, sq) and lse_buf.strides == (h * sq, sq, 1) and lse_buf.dtype == "float32"
    assert out_buf.__dlpack_device__() == (2, q.device.index)
    assert aiter_mha.last_kernel_name() != ""

    out = torch.from_dlpack(out_buf)
    lse = torch.from_dlpack(lse_buf)
    assert out.is_contiguous() and out.dtype == dtype and out.data_ptr() == out_buf.data_ptr
    assert torch.from_dlpack(out_buf).data_ptr() == out.data_ptr()  # exported twice, one memory
    ref_lse = check_out(out, q, k, v, 1 / math.sqrt(d), 2, -1, 0, "allocated out")
    check_lse(lse, ref_lse, "allocated lse")

    # The torch tensors keep the memory alive after the DeviceBuffer objects die.
    expected = out.clone()
    del out_buf, lse_buf
    scratch = [torch.randn(1 << 20, device=DEV) for _ in range(8)]  # reuse of freed memory would show here
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
    del scratch


def test_output_memory_released_by_last_owner():
    """An allocated out (1 GiB here) lives while the DeviceBuffer or any DLPack consumer holds it, and is freed
    when the last of them goes: shared ownership, no leak, no early free."""
    dtype, b, sq, sk, h, hk, d = torch.float16, 1, 1 << 18, 1, 16, 1, 128
    nbytes = b * sq * h * d * 2
    q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("memory"))
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    buf = aiter_mha.mha_fwd(q, k, v)
    assert torch.cuda.mem_get_info()[0] <= free0 - nbytes // 2, "out was not allocated"
    t = torch.from_dlpack(buf)
    del buf
    torch.cuda.synchronize()
    assert torch.cuda.mem_get_info()[0] <= free0 - nbytes // 2, "out was freed while torch still holds it"
    # one key (one KV head): every row of every head is that key's value row exactly (a softmax of one element is
    # 1); compared in 64 MB slices so that torch's cache keeps little of the memory the last check measures
    for r0 in range(0, sq, 1 << 15):
        assert bool((t[:, r0:r0 + (1 << 15)] == v[:, :1]).all()), f"1 GiB out: a row in {r0}.. is not v"
    check_out(t[:, :4096], q[:, :4096], k, v, 1 / math.sqrt(d), 0, -1, -1, "1 GiB out")
    del t
    torch.cuda.synchronize()
    assert torch.cuda.mem_get_info()[0] >= free0 - nbytes // 2, "out was not freed after its last owner died"


def test_cupy_consumes_output():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    q, k, v = make_qkv(1, 64, 64, 2, 2, 64, torch.float16, seed_of("cupy"))
    out_buf = aiter_mha.mha_fwd(q, k, v)
    c = cupy.from_dlpack(out_buf)
    assert c.shape == (1, 64, 2, 64) and c.dtype == cupy.float16
    torch.cuda.synchronize()
    expected = torch.from_dlpack(out_buf).cpu().numpy()
    assert (cupy.asnumpy(c) == expected).all()


def test_cupy_inputs():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    q, k, v = make_qkv(2, 50, 70, 4, 2, 64, torch.float16, seed_of("cupy-in"))
    cq, ck, cv = (cupy.asarray(t) for t in (q, k, v))
    torch.cuda.synchronize()
    out = torch.from_dlpack(aiter_mha.mha_fwd(cq, ck, cv, mask="causal_top_left"))
    torch.cuda.synchronize()
    check_out(out, q, k, v, 1 / 8, 1, -1, 0, "cupy inputs")


def test_side_stream():
    s = torch.cuda.Stream()
    dtype, b, sq, sk, h, hk, d = torch.float16, 2, 257, 257, 4, 2, 128
    with torch.cuda.stream(s):
        q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("stream"))
        out_a = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, mask="causal", stream=s.cuda_stream))
        out_b = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, mask="causal", stream=s))  # a stream object
    # Consumed on the default stream: the binding orders it after the side-stream kernel.
    out_c = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, mask="causal", stream=s.cuda_stream))
    torch.cuda.synchronize()
    for out in (out_a, out_b, out_c):
        check_out(out, q, k, v, 1 / math.sqrt(d), 2, -1, 0, "side stream")


def test_per_thread_default_stream():
    """stream=2 (cudaStreamPerThread): PyTorch exports for no per-thread stream, so the binding asks it to order its
    writes (here on a side stream) before the legacy stream, which the per-thread one waits for."""
    s = torch.cuda.Stream()
    dtype, b, sq, sk, h, hk, d = torch.bfloat16, 2, 300, 300, 8, 2, 128
    with torch.cuda.stream(s):
        q, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("per-thread stream"))
        out = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, mask="causal", stream=2))
    torch.cuda.synchronize()
    check_out(out, q, k, v, 1 / math.sqrt(d), 2, -1, 0, "per-thread default stream")


# ------------------------------------------------------------------------------------------------ invalid input

def test_invalid_inputs_raise_value_error():
    f16 = torch.float16
    q, k, v = make_qkv(2, 32, 32, 4, 2, 64, f16, seed_of("invalid"))
    _, k3, v3 = make_qkv(2, 32, 32, 4, 3, 64, f16, 1)
    _, k128, v128 = make_qkv(2, 32, 32, 4, 2, 128, f16, 2)
    cases = [
        ((q, k3, v3), {}, r"nhead_q = 4 .* not a multiple of nhead_k = 3"),
        ((q, k128, v128), {}, r"k head dim \(dim 3\) is 128 but q's head dim is 64"),
        ((q.float(), k.float(), v.float()), {}, r"q has dtype float32; expected float16 or bfloat16"),
        ((q, k.float(), v), {}, r"k has dtype float32 but q has float16"),
        ((q.cpu(), k, v), {}, r"q is on cpu; expected a CUDA device array"),
        ((q, k.cpu(), v), {}, r"k is on cpu"),
        ((torch.cat([q, q], dim=-1)[..., ::2], k, v), {}, r"q: the last dimension must be contiguous"),
        ((q[0], k, v), {}, r"q must be 4-D"),
        ((q, k, v), dict(out=torch.empty(2, 32, 4, 32, device=DEV, dtype=f16)), r"out has shape"),
        ((q, k, v), dict(lse=torch.empty(2, 4, 32, device=DEV, dtype=f16)), r"lse has dtype float16"),
        ((q, k, v), dict(mask="sideways"), r"mask='sideways' is not one of"),
    ]
    for args, kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            aiter_mha.mha_fwd(*args, **kw)
    # A head dim the library has no kernel for is refused with its reason, and nothing is left broken behind it.
    qb, kb, vb = make_qkv(1, 16, 16, 2, 2, 512, f16, 3)
    with pytest.raises(ValueError) as info:
        aiter_mha.mha_fwd(qb, kb, vb)
    assert str(info.value).strip(), "the library's rejection carries no reason"
    run_and_check(f16, 64, "none", 64, 64, 2)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_misaligned_views_are_safe(family):
    """q 2 bytes past an aligned address with odd row and head strides: the library either computes the right answer
    or refuses with a reason; it never faults (the CUDA context stays usable for the next call), with use_asm_v3
    too (the asm family's tensor copies need 16-byte alignment)."""
    dtype, b, sq, sk, h, hk, d = torch.float16, 2, 100, 150, 4, 2, 64
    q0, k, v = make_qkv(b, sq, sk, h, hk, d, dtype, seed_of("misaligned"))
    q = torch.empty(b, sq, h, d + 1, device=DEV, dtype=dtype)[..., 1:]
    q.copy_(q0)
    try:
        out = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, use_asm_v3=FAMILIES[family]))
    except ValueError as e:
        assert str(e).strip(), "the rejection carries no reason"
    else:
        torch.cuda.synchronize()
        check_out(out, q, k, v, 1 / math.sqrt(d), 0, -1, -1, "misaligned q")
    run_and_check(dtype, 64, "none", 64, 64, 2)
