"""CPU-only tests of the backward binding (csrc/python/binding_bwd.h): mha_bwd and mha_varlen_bwd keep AITER's Python
signatures (aiter/ops/mha.py), and reject invalid input (dtypes, shapes, strides, GQA ratio, masks, dropout seeds,
bias / dbias, sinks, sequence arrays) with a precise ValueError before any CUDA call: NumPy host arrays pass every
layout check and then fail the device check, so no GPU is needed. Skipped when the module is not built.
"""
import os
import re
import sys

import pytest

np = pytest.importorskip("numpy", reason="numpy is needed to make DLPack host arrays")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import REPO_ROOT, load_binding  # noqa: E402

PY_DIR = REPO_ROOT / "csrc" / "python"

# AITER HEAD's pybind (csrc/include/rocm_ops.hpp, MHA_BWD_PYBIND / MHA_VARLEN_BWD_PYBIND): the positional-or-keyword
# parameters, in order. mha_bwd ends with sink, d_sink after gen; mha_varlen_bwd with cu_seqlens_q_padded,
# cu_seqlens_k_padded, sink, d_sink.
AITER_MHA_BWD = ["dout", "q", "k", "v", "out", "softmax_lse", "dropout_p", "softmax_scale", "is_causal",
                 "window_size_left", "window_size_right", "deterministic", "dq", "dk", "dv", "dbias", "bias",
                 "alibi_slopes", "rng_state", "gen", "sink", "d_sink"]
AITER_MHA_VARLEN_BWD = ["dout", "q", "k", "v", "out", "softmax_lse", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                        "max_seqlen_k", "dropout_p", "softmax_scale", "zero_tensors", "is_causal", "window_size_left",
                        "window_size_right", "deterministic", "dq", "dk", "dv", "alibi_slopes", "rng_state", "gen",
                        "cu_seqlens_q_padded", "cu_seqlens_k_padded", "sink", "d_sink"]
KW_ONLY_BWD = ["sink_ptr", "mask", "seed", "offset", "stream", "use_asm_v3"]
KW_ONLY_VARLEN_BWD = ["bias", "dbias", "sink_ptr", "seqused_q", "seqused_k", "mask", "seed", "offset", "stream",
                      "use_asm_v3"]


# ------------------------------------------------------------------------------------------------ the module

aiter_mha, _reason = load_binding()
needs_module = pytest.mark.skipif(aiter_mha is None, reason=_reason)


def doc_params(fn):
    """The parameter names, in order, from pybind11's signature line; '*' marks where keyword-only ones start."""
    first = fn.__doc__.splitlines()[0]
    inner = first[first.index("(") + 1:first.rindex(")")]
    names = []
    for part in re.split(r",\s*(?![^\[]*\])", inner):
        part = part.strip()
        names.append("*" if part == "*" else part.split(":")[0].strip())
    return names


@needs_module
def test_signatures_follow_aiter():
    bwd = doc_params(aiter_mha.mha_bwd)
    assert bwd == AITER_MHA_BWD + ["*"] + KW_ONLY_BWD, bwd
    varlen = doc_params(aiter_mha.mha_varlen_bwd)
    assert varlen == AITER_MHA_VARLEN_BWD + ["*"] + KW_ONLY_VARLEN_BWD, varlen
    for fn in (aiter_mha.mha_bwd, aiter_mha.mha_varlen_bwd):
        doc = fn.__doc__
        assert "Returns (dq, dk, dv, softmax_d)" in doc
        for word in ("rng_state", "is_causal", "window_size_left", "deterministic", "dbias", "d_sink", "mask=",
                     "RuntimeError"):
            assert word in doc, f"{fn.__name__}.__doc__ does not mention {word}"


def bwd_arrays(b=2, sq=16, sk=24, h=4, hk=2, d=64, dv=None, dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    dv = d if dv is None else dv
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hk, dv)).astype(dtype)
    out = rng.standard_normal((b, sq, h, dv)).astype(dtype)
    dout = rng.standard_normal((b, sq, h, dv)).astype(dtype)
    lse = rng.standard_normal((b, h, sq)).astype(np.float32)
    return dict(dout=dout, q=q, k=k, v=v, out=out, softmax_lse=lse)


def call_bwd(arrays=None, **kw):
    """mha_bwd with AITER's positional arguments (dropout 0, default scale, no mask, not deterministic)."""
    t = dict(arrays or bwd_arrays())
    for name in ("dout", "q", "k", "v", "out", "softmax_lse"):
        if name in kw:
            t[name] = kw.pop(name)
    pos = dict(dropout_p=0.0, softmax_scale=None, is_causal=False, window_size_left=-1, window_size_right=-1,
               deterministic=False)
    for name in list(pos):
        if name in kw:
            pos[name] = kw.pop(name)
    return aiter_mha.mha_bwd(t["dout"], t["q"], t["k"], t["v"], t["out"], t["softmax_lse"], *pos.values(), **kw)


def reaches_device_check(**kw):
    with pytest.raises(ValueError, match=r"q is on cpu; expected a CUDA device array"):
        call_bwd(**kw)


@needs_module
def test_valid_arguments_reach_the_device_check():
    b, sq, sk, h, hk, d = 2, 16, 24, 4, 2, 64
    f16, f32 = np.float16, np.float32
    t = bwd_arrays()
    reaches_device_check()
    reaches_device_check(is_causal=True, deterministic=True, softmax_scale=0.1)
    reaches_device_check(window_size_left=8, window_size_right=0)
    reaches_device_check(window_size_left=8, window_size_right=-1)
    reaches_device_check(mask="causal_top_left")
    reaches_device_check(mask=3, window_size_left=4, window_size_right=4)
    reaches_device_check(dq=np.zeros_like(t["q"]), dk=np.zeros_like(t["k"]), dv=np.zeros_like(t["v"]))
    for shape in ((b, h, sq, sk), (1, 1, sq, sk), (1, h, sq, sk), (b, 1, 1, sk)):
        reaches_device_check(bias=np.zeros(shape, f16), dbias=np.zeros(shape, f16))
    reaches_device_check(bias=np.zeros((b, h, sq, sk), f16))  # no gradient asked for
    reaches_device_check(alibi_slopes=np.ones(h, f32), is_causal=True)
    reaches_device_check(alibi_slopes=np.ones((b, h), f32))
    reaches_device_check(dropout_p=0.3, seed=2**64 - 1, offset=np.uint64(5))
    reaches_device_check(dropout_p=0.3, rng_state=np.array([1, 2], np.int64))
    reaches_device_check(dropout_p=0.3, rng_state=np.array([1, 2], np.uint64))
    reaches_device_check(sink=np.zeros(h, f32), d_sink=np.zeros(h, f32))
    reaches_device_check(sink_ptr=np.zeros(h, f32), d_sink=np.zeros(h, f32))  # the earlier keyword
    reaches_device_check(sink_ptr=np.zeros(h, f32))
    reaches_device_check(stream=np.int64(0))  # NumPy integers, as the other integer arguments
    reaches_device_check(arrays=bwd_arrays(d=192, dv=128), use_asm_v3=True, stream=0)
    reaches_device_check(arrays=bwd_arrays(h=4, hk=1))  # MQA
    # AITER's positional form, every optional argument given positionally
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_bwd(t["dout"], t["q"], t["k"], t["v"], t["out"], t["softmax_lse"], 0.0, 0.125, True, -1, 0,
                          False, None, None, None, None, None, None, None, None, None, None)


@needs_module
@pytest.mark.parametrize("kw, msg", [
    (dict(q=bwd_arrays()["q"][0]), r"q must be 4-D \[batch, seqlen_q, nhead_q, hdim_q\], got 3-D"),
    (dict(q=bwd_arrays()["q"].astype(np.float32)), r"q has dtype float32; expected float16 or bfloat16"),
    (dict(k=bwd_arrays()["k"].astype(np.float32)), r"k has dtype float32 but q has float16"),
    (dict(dout=bwd_arrays()["dout"].astype(np.float32)), r"dout has dtype float32 but q has float16"),
    (dict(out=bwd_arrays()["out"][:, :, :, :32]), r"out has shape \[2, 16, 4, 32\]; expected .* = \[2, 16, 4, 64\]"),
    (dict(dout=bwd_arrays()["dout"][:, :8]), r"dout has shape \[2, 8, 4, 64\]; expected out's shape"),
    (dict(softmax_lse=np.zeros((2, 4, 16), np.float16)), r"softmax_lse has dtype float16 but expected float32"),
    (dict(softmax_lse=np.zeros((2, 16, 4), np.float32)), r"softmax_lse has shape \[2, 16, 4\]; expected"),
    (dict(softmax_lse=np.lib.stride_tricks.as_strided(np.zeros(16, np.float32), (2, 4, 16), (0, 0, 4))),
     r"softmax_lse: strides .* make elements overlap"),
    (dict(dout=np.zeros((2, 16, 4, 128), np.float16)[..., ::2]), r"dout: the last dimension must be contiguous"),
    (dict(k=np.zeros((2, 24, 3, 64), np.float16), v=np.zeros((2, 24, 3, 64), np.float16)),
     r"nhead_q = 4 .* not a multiple of nhead_k = 3"),
    (dict(v=np.zeros((2, 23, 2, 64), np.float16)), r"v seqlen \(dim 1\) is 23 but k's seqlen is 24"),
    (dict(k=np.zeros((1, 24, 2, 64), np.float16)), r"k batch \(dim 0\) is 1 but q's batch is 2"),
])
def test_bad_tensors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        call_bwd(**kw)


@needs_module
@pytest.mark.parametrize("kw, msg", [
    (dict(dq=np.zeros((2, 16, 4, 32), np.float16)), r"dq has shape \[2, 16, 4, 32\]; expected q's shape"),
    (dict(dk=np.zeros((2, 24, 4, 64), np.float16)), r"dk has shape \[2, 24, 4, 64\]; expected k's shape \[2, 24, 2, 64\]"),
    (dict(dv=np.zeros((2, 24, 2, 64), np.float32)), r"dv has dtype float32 but q has float16"),
    (dict(dq=np.zeros((2, 16, 4, 128), np.float16)[..., ::2]), r"dq: the last dimension must be contiguous"),
    (dict(dk=np.lib.stride_tricks.as_strided(np.zeros(64, np.float16), (2, 24, 2, 64), (0, 0, 0, 2))),
     r"dk: strides .* make elements overlap"),
])
def test_bad_gradient_outputs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        call_bwd(**kw)


@needs_module
@pytest.mark.parametrize("kw, msg", [
    (dict(dropout_p=1.0), r"dropout_p must be in \[0, 1\)"),
    (dict(dropout_p=-0.5), r"dropout_p must be in \[0, 1\)"),
    (dict(dropout_p=None), r"dropout_p must be a real number"),
    (dict(softmax_scale="x"), r"softmax_scale must be a real number"),
    (dict(softmax_scale=float("inf")), r"softmax_scale must be finite"),
    (dict(window_size_left=-2), r"window_size_left = -2 is out of range"),
    (dict(window_size_right="0"), r"window_size_right must be an int"),
    (dict(mask="diagonal"), r"mask='diagonal' is not one of"),
    (dict(mask=5), r"mask_type 5 is not 0"),
    (dict(mask="causal", is_causal=True), r"pass either is_causal=True or mask=\.\.\., not both"),
    (dict(gen=object()), r"gen must be None: this binding takes no torch.Generator"),
    (dict(seed=-1), r"seed must be an int in \[0, 2\*\*64\)"),
    (dict(offset=1.5), r"offset must be an int"),
    (dict(seed=1, rng_state=np.array([1, 2], np.uint64)), r"either seed/offset or rng_state"),
    (dict(rng_state=np.array([1, 2], np.int32)), r"rng_state has dtype int32; expected uint64"),
    (dict(rng_state=np.array([1, 2, 3], np.uint64)), r"rng_state length is 3 but \[seed, offset\]"),
    (dict(stream="0"), r"stream must be"),
    (dict(bias=np.zeros((2, 4, 16, 24), np.float16), alibi_slopes=np.ones(4, np.float32)),
     r"bias and alibi_slopes are mutually exclusive"),
    (dict(dbias=np.zeros((2, 4, 16, 24), np.float16)), r"dbias needs bias"),
    (dict(d_sink=np.zeros(4, np.float32)), r"d_sink needs sink"),
    (dict(sink=np.zeros(4, np.float32), sink_ptr=np.zeros(4, np.float32)), r"as sink \(AITER's name\) or sink_ptr"),
    (dict(softmax_scale=0.0), r"softmax_scale must be finite and > 0, got 0"),
    (dict(softmax_scale=-0.125), r"softmax_scale must be finite and > 0"),
    (dict(mask=0, window_size_left=8, window_size_right=0), r"mask_type 0 \(none\) takes no window"),
    (dict(stream=True), r"stream must be"),
])
def test_bad_scalars_and_combinations(kw, msg):
    with pytest.raises(ValueError, match=msg):
        call_bwd(**kw)


@needs_module
@pytest.mark.parametrize("kw, msg", [
    (dict(bias=np.zeros((2, 4, 16, 23), np.float16)), r"bias seqlen_k \(dim 3\) is 23 but k's seqlen is 24"),
    (dict(bias=np.zeros((2, 2, 16, 24), np.float16)), r"bias dim 1 \(nhead_q\) is 2; expected 4 or 1"),
    (dict(bias=np.zeros((2, 4, 16, 24), np.float32)), r"bias has dtype float32 but q has float16"),
    (dict(bias=np.zeros((1, 4, 16, 24), np.float16), dbias=np.zeros((2, 4, 16, 24), np.float16)),
     r"dbias has shape \[2, 4, 16, 24\]; expected bias's shape \[1, 4, 16, 24\]"),
    (dict(bias=np.zeros((2, 4, 16, 24), np.float16), dbias=np.zeros((2, 4, 16, 24), np.float32)),
     r"dbias has dtype float32 but q has float16"),
    (dict(bias=np.zeros((2, 4, 16, 24), np.float16),
          dbias=np.lib.stride_tricks.as_strided(np.zeros(24, np.float16), (2, 4, 16, 24), (0, 0, 0, 2))),
     r"dbias: strides .* make elements overlap"),
    (dict(alibi_slopes=np.ones(3, np.float32)), r"alibi_slopes nhead \(last dim\) is 3 but q's nhead is 4"),
    (dict(alibi_slopes=np.ones((3, 4), np.float32)), r"alibi_slopes dim 0 \(batch\) is 3; expected 2 or 1"),
    (dict(sink=np.zeros(4, np.float16)), r"sink has dtype float16 but expected float32"),
    (dict(sink_ptr=np.zeros(5, np.float32)), r"sink length is 5 but q's nhead is 4"),
    (dict(sink=np.zeros(4, np.float32), d_sink=np.zeros((1, 4), np.float32)), r"d_sink must be 1-D"),
])
def test_bad_feature_arrays(kw, msg):
    with pytest.raises(ValueError, match=msg):
        call_bwd(**kw)


@needs_module
def test_dbias_must_not_alias_bias():
    bias = np.zeros((2, 4, 16, 24), np.float16)
    with pytest.raises(ValueError, match=r"dbias must not alias bias"):
        call_bwd(bias=bias, dbias=bias)


@needs_module
def test_arrays_released_on_error_paths():
    t = bwd_arrays()
    bias = np.zeros((2, 4, 16, 24), np.float16)
    dq = np.zeros_like(t["q"])
    objs = list(t.values()) + [bias, dq]
    before = [sys.getrefcount(x) for x in objs]
    for _ in range(30):
        for bad in (dict(mask="bogus"), dict(), dict(dbias=bias), dict(dq=dq, bias=bias, dbias=bias[:1])):
            with pytest.raises(ValueError):
                call_bwd(t, **bad)
    del bad  # the last case holds bias and a view of it
    assert [sys.getrefcount(x) for x in objs] == before


# ------------------------------------------------------------------------------------------------ mha_varlen_bwd

def varlen_arrays(total_q=40, total_k=50, h=4, hk=2, d=64, dv=None, b=3, dtype=np.float16):
    rng = np.random.default_rng(1)
    dv = d if dv is None else dv
    t = dict(dout=rng.standard_normal((total_q, h, dv)).astype(dtype),
             q=rng.standard_normal((total_q, h, d)).astype(dtype),
             k=rng.standard_normal((total_k, hk, d)).astype(dtype),
             v=rng.standard_normal((total_k, hk, dv)).astype(dtype),
             out=rng.standard_normal((total_q, h, dv)).astype(dtype),
             softmax_lse=rng.standard_normal((h, total_q)).astype(np.float32),
             cu_seqlens_q=np.linspace(0, total_q, b + 1).astype(np.int32),
             cu_seqlens_k=np.linspace(0, total_k, b + 1).astype(np.int32))
    return t


VARLEN_ORDER = ["dout", "q", "k", "v", "out", "softmax_lse", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                "max_seqlen_k", "dropout_p", "softmax_scale", "zero_tensors", "is_causal", "window_size_left",
                "window_size_right", "deterministic"]


def call_varlen(**kw):
    args = dict(varlen_arrays(), max_seqlen_q=16, max_seqlen_k=20, dropout_p=0.0, softmax_scale=None,
                zero_tensors=False, is_causal=False, window_size_left=-1, window_size_right=-1, deterministic=False)
    for name in VARLEN_ORDER:
        if name in kw:
            args[name] = kw.pop(name)
    return aiter_mha.mha_varlen_bwd(*[args[n] for n in VARLEN_ORDER], **kw)


@needs_module
def test_varlen_valid_arguments_reach_the_device_check():
    h, total_q, total_k = 4, 40, 50
    for kw in (dict(), dict(is_causal=True, deterministic=True, zero_tensors=True),
               dict(seqused_q=np.array([3, 0, 5], np.int32), seqused_k=np.array([1, 2, 3], np.int32)),
               dict(bias=np.zeros((h, total_q, 20), np.float16), dbias=np.zeros((h, total_q, 20), np.float16)),
               dict(bias=np.zeros((1, 1, 20), np.float16), dbias=np.zeros((1, 1, 20), np.float16)),
               dict(alibi_slopes=np.ones((3, h), np.float32), mask="causal_top_left"),
               dict(dropout_p=0.2, rng_state=np.array([3, 4], np.uint64)),
               dict(sink_ptr=np.zeros(h, np.float32), d_sink=np.zeros(h, np.float32)),
               dict(dq=np.zeros((total_q, h, 64), np.float16), dk=np.zeros((total_k, 2, 64), np.float16),
                    dv=np.zeros((total_k, 2, 64), np.float16))):
        with pytest.raises(ValueError, match=r"q is on cpu"):
            call_varlen(**kw)


@needs_module
@pytest.mark.parametrize("kw, msg", [
    (dict(q=np.zeros((2, 40, 4, 64), np.float16)), r"q must be 3-D \[total_q, nhead_q, hdim_q\], got 4-D"),
    (dict(softmax_lse=np.zeros((40, 4), np.float32)), r"softmax_lse has shape \[40, 4\]; expected \[nhead_q, total_q\]"),
    (dict(out=np.zeros((40, 4, 32), np.float16)), r"out has shape \[40, 4, 32\]; expected \[total_q, nhead_q, hdim_v\]"),
    (dict(cu_seqlens_q=np.array([0, 40], np.int64)), r"cu_seqlens_q has dtype int64 but expected int32"),
    (dict(cu_seqlens_k=np.array([0, 50], np.int32)), r"cu_seqlens_k length is 2 but cu_seqlens_q's length is 4"),
    (dict(cu_seqlens_q=np.zeros(0, np.int32)), r"cu_seqlens_q must hold batch \+ 1 >= 1 entries"),
    (dict(max_seqlen_q=-1), r"max_seqlen_q = -1 is out of range"),
    (dict(max_seqlen_k=None), r"max_seqlen_k must be an int"),
    (dict(seqused_k=np.array([1, 2], np.int32)), r"seqused_k length is 2 but the batch .* is 3"),
    (dict(bias=np.zeros((4, 39, 8), np.float16)), r"bias dim 1 \(total_q\) is 39; expected 40 or 1"),
    (dict(bias=np.zeros((1, 1, 20), np.float16), dbias=np.zeros((4, 40, 20), np.float16)),
     r"dbias has shape \[4, 40, 20\]; expected bias's shape \[1, 1, 20\]"),
    (dict(dk=np.zeros((50, 4, 64), np.float16)), r"dk has shape \[50, 4, 64\]; expected k's shape \[50, 2, 64\]"),
    (dict(gen=1), r"gen must be None"),
    (dict(is_causal=True, mask=1), r"pass either is_causal=True or mask"),
    (dict(cu_seqlens_q_padded=np.array([0, 16, 32, 40], np.int32)), r"cu_seqlens_q_padded must be None: padded"),
    (dict(cu_seqlens_k_padded=np.array([0, 20, 40, 50], np.int32)), r"cu_seqlens_k_padded must be None"),
])
def test_varlen_invalid(kw, msg):
    with pytest.raises(ValueError, match=msg):
        call_varlen(**kw)


@needs_module
def test_varlen_keyword_only_extensions():
    """AITER HEAD's positional tail (gen, cu_seqlens_q_padded, cu_seqlens_k_padded, sink, d_sink) is accepted
    positionally; bias / dbias / seqused_* come after it and cannot be passed positionally."""
    t = varlen_arrays()
    pos = [t["dout"], t["q"], t["k"], t["v"], t["out"], t["softmax_lse"], t["cu_seqlens_q"], t["cu_seqlens_k"], 16, 20,
           0.0, None, False, False, -1, -1, False, None, None, None, None, None, None]
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_varlen_bwd(*pos)
    sink = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_varlen_bwd(*pos, None, None, sink, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"cu_seqlens_q_padded must be None"):
        aiter_mha.mha_varlen_bwd(*pos, t["cu_seqlens_q"])
    with pytest.raises(TypeError):
        aiter_mha.mha_varlen_bwd(*pos, None, None, sink, None, np.zeros((4, 40, 20), np.float16))

