"""CPU-only tests of the aiter_mha binding (csrc/python): the module imports, mha_fwd and mha_varlen_fwd reject invalid
input (q/k/v, bias, ALiBi, sinks, dropout, sequence arrays, outputs) with a precise ValueError (NumPy arrays reach every
layout check, then fail the device check, so no GPU is needed), the binding follows the DLPack capsule protocol
(consumes once, calls the deleter) and never imports torch. Skipped when the module is not built.
"""
import os
import subprocess
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy", reason="numpy is needed to make DLPack host arrays")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import binding_dirs, load_binding  # noqa: E402

aiter_mha, _reason = load_binding()
if aiter_mha is None:
    pytest.skip(_reason, allow_module_level=True)

INT32_MAX = 2**31 - 1


def qkv(b=2, sq=16, sk=24, h=4, hk=2, d=64, dv=None, dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    dv = d if dv is None else dv
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hk, dv)).astype(dtype)
    return q, k, v


VERSION = "0.2.0"
FEATURE_KWARGS = ("scale", "mask", "window_left", "window_right", "softcap", "bias", "alibi_slopes", "dropout_p",
                  "seed", "offset", "seed_offset", "return_randval", "sink", "sink_size", "return_lse", "out", "lse",
                  "stream", "use_asm_v3")


def test_module_surface():
    assert aiter_mha.__version__ == VERSION
    assert callable(aiter_mha.mha_fwd) and callable(aiter_mha.mha_varlen_fwd)
    assert isinstance(aiter_mha.last_kernel_name(), str)
    assert hasattr(aiter_mha, "DeviceBuffer")
    for fn, extra in ((aiter_mha.mha_fwd, ()),
                      (aiter_mha.mha_varlen_fwd, ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                                                  "seqused_q", "seqused_k", "min_seqlen_q", "check_seqlens"))):
        doc = fn.__doc__
        for kw in FEATURE_KWARGS + extra:
            assert kw in doc, f"{fn.__name__}.__doc__ does not mention {kw}"
        assert "then lse if return_lse" in doc and "then randval if return_randval" in doc


def test_host_arrays_rejected():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"q is on cpu; expected a CUDA device array"):
        aiter_mha.mha_fwd(q, k, v)


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_wrong_ndim(which):
    t = dict(zip("qkv", qkv()))
    t[which] = t[which][0]  # drop the batch dim
    with pytest.raises(ValueError, match=rf"{which} must be 4-D .* got 3-D shape"):
        aiter_mha.mha_fwd(t["q"], t["k"], t["v"])


def test_fp32_rejected():
    q, k, v = qkv(dtype=np.float32)
    with pytest.raises(ValueError, match=r"q has dtype float32; expected float16 or bfloat16"):
        aiter_mha.mha_fwd(q, k, v)


def test_dtype_mismatch():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"k has dtype float32 but q has float16"):
        aiter_mha.mha_fwd(q, k.astype(np.float32), v)


def test_head_ratio():
    q, k, v = qkv(h=4, hk=3)
    with pytest.raises(ValueError, match=r"nhead_q = 4 .* not a multiple of nhead_k = 3"):
        aiter_mha.mha_fwd(q, k, v)


def test_hdim_mismatch():
    q, _, _ = qkv(d=64)
    _, k, v = qkv(d=128)
    with pytest.raises(ValueError, match=r"k head dim \(dim 3\) is 128 but q's head dim is 64"):
        aiter_mha.mha_fwd(q, k, v)


def test_seqlen_and_batch_mismatch():
    q, k, v = qkv(sk=24)
    with pytest.raises(ValueError, match=r"v seqlen \(dim 1\) is 23 but k's seqlen is 24"):
        aiter_mha.mha_fwd(q, k, v[:, :23])
    with pytest.raises(ValueError, match=r"k batch \(dim 0\) is 1 but q's batch is 2"):
        aiter_mha.mha_fwd(q, k[:1], v)


def test_non_unit_last_stride():
    q, k, v = qkv(d=128)
    q = q[..., ::2]
    _, k, v = qkv(d=64)
    with pytest.raises(ValueError, match=r"q: the last dimension must be contiguous \(stride 1\)"):
        aiter_mha.mha_fwd(q, k, v)


def test_stride_beyond_int32():
    q, k, v = qkv()
    base = np.zeros(64, np.float16)
    item = base.itemsize
    # A view whose batch stride is 2^32 elements: never read, the binding must refuse it before any launch.
    q = np.lib.stride_tricks.as_strided(base, shape=(2, 16, 4, 64), strides=(2**32 * item, 0, 0, item))
    with pytest.raises(ValueError, match=r"q: stride 4294967296 of dim 0 .* does not fit int32"):
        aiter_mha.mha_fwd(q, k, v)


@pytest.mark.parametrize("mask, left, right, msg", [
    ("diagonal", -1, -1, r"mask='diagonal' is not one of .*'window_generic'"),
    ("causal", 16, -1, r"mask='causal' is \(window_left=-1, window_right=0\)"),
    ("causal_top_left", -1, 4, r"mask='causal_top_left' is \(window_left=-1, window_right=0\)"),
    ("none", -1, 4, r"mask='none' takes no window"),
    (7, -1, -1, r"mask_type 7 is not 0"),
    (True, -1, -1, r"mask must be a str or an int"),
    (2.0, -1, -1, r"mask must be a str or an int"),
    (1, -2, 0, r"window_left = -2 is out of range"),
    (1, 0, "x", r"window_right must be an int"),
    (0, 8, 0, r"mask_type 0 \(none\) takes no window \(got window_left=8, window_right=0\)"),
    (0, -1, 0, r"mask_type 0 \(none\) takes no window"),
])
def test_bad_mask(mask, left, right, msg):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=msg):
        aiter_mha.mha_fwd(q, k, v, mask=mask, window_left=left, window_right=right)


@pytest.mark.parametrize("stream", [-5, "0", 1.5, True, np.int64(-1)])
def test_bad_stream(stream):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"stream must be"):
        aiter_mha.mha_fwd(q, k, v, stream=stream)


@pytest.mark.parametrize("stream", [0, np.int64(0), np.uint64(0)])
def test_stream_takes_any_integer(stream):
    """NumPy integers pass as the other integer arguments do (the call then stops at the device check)."""
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_fwd(q, k, v, stream=stream)


def test_bad_scale():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"scale must be a real number"):
        aiter_mha.mha_fwd(q, k, v, scale="0.1")
    with pytest.raises(ValueError, match=r"scale must be finite"):
        aiter_mha.mha_fwd(q, k, v, scale=float("nan"))


def test_not_dlpack():
    _, k, v = qkv()
    with pytest.raises(ValueError, match=r"q: list is not a DLPack array"):
        aiter_mha.mha_fwd([[1.0]], k, v)
    with pytest.raises(ValueError, match=r"q is None"):
        aiter_mha.mha_fwd(None, k, v)


class _CudaClaimingProducer:
    """Says CUDA (without a device index, so no device is selected) and exports a NumPy array: what __dlpack__ is
    called with decides the outcome. `stream_error` is what a call with the stream keyword raises."""

    def __init__(self, arr, stream_error=None):
        self.arr, self.stream_error, self.calls = arr, stream_error, []

    def __dlpack_device__(self):
        return (2,)

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        if "stream" in kw and self.stream_error is not None:
            raise self.stream_error
        return self.arr.__dlpack__()


def test_stream_keyword_fallback():
    q, k, v = qkv()
    # a producer whose __dlpack__ predates the stream keyword is asked again without it (then q is on cpu)
    old = _CudaClaimingProducer(q, TypeError("__dlpack__() got an unexpected keyword argument 'stream'"))
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_fwd(old, k, v)
    assert old.calls == [{"stream": 1}, {}]
    # stream 0 and 2 are asked as the legacy stream (1): PyTorch exports for no per-thread stream
    plain = _CudaClaimingProducer(q)
    for stream in (0, 2, 12345):
        with pytest.raises(ValueError, match=r"q is on cpu"):
            aiter_mha.mha_fwd(plain, k, v, stream=stream)
    assert plain.calls == [{"stream": 1}, {"stream": 1}, {"stream": 12345}]
    # any other TypeError is the producer's answer: raised, not retried without the stream (which would drop the
    # ordering of its pending writes)
    picky = _CudaClaimingProducer(q, TypeError("stream must be an int on this device"))
    with pytest.raises(ValueError, match=r"q: __dlpack__\(\) failed: TypeError: stream must be an int"):
        aiter_mha.mha_fwd(picky, k, v)
    assert picky.calls == [{"stream": 1}]


def test_out_and_lse_validation():
    q, k, v = qkv(b=2, sq=16, h=4, d=64)
    with pytest.raises(ValueError, match=r"out has shape \[2, 16, 4, 32\]; expected .* = \[2, 16, 4, 64\]"):
        aiter_mha.mha_fwd(q, k, v, out=np.zeros((2, 16, 4, 32), np.float16))
    with pytest.raises(ValueError, match=r"out has dtype float32 but q has float16"):
        aiter_mha.mha_fwd(q, k, v, out=np.zeros((2, 16, 4, 64), np.float32))
    overlapping = np.lib.stride_tricks.as_strided(np.zeros(64, np.float16), shape=(2, 16, 4, 64),
                                                  strides=(0, 0, 0, 2))
    with pytest.raises(ValueError, match=r"out: strides .* make elements overlap"):
        aiter_mha.mha_fwd(q, k, v, out=overlapping)
    with pytest.raises(ValueError, match=r"lse has dtype float16 but expected float32"):
        aiter_mha.mha_fwd(q, k, v, lse=np.zeros((2, 4, 16), np.float16))
    with pytest.raises(ValueError, match=r"lse has shape \[2, 16, 4\]; expected .* = \[2, 4, 16\]"):
        aiter_mha.mha_fwd(q, k, v, lse=np.zeros((2, 16, 4), np.float32))
    # A well-formed host out passes the layout checks and then fails on the device, naming q first.
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_fwd(q, k, v, out=np.zeros((2, 16, 4, 64), np.float16), return_lse=True)


def test_capsule_consumed_once_and_released():
    q, k, v = qkv()
    refs_before = sys.getrefcount(q)
    cap = q.__dlpack__()
    assert sys.getrefcount(q) == refs_before + 1  # NumPy's DLManagedTensor holds a reference to q
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_fwd(cap, k, v)
    # The binding renamed the capsule and called the deleter although the call failed.
    assert sys.getrefcount(q) == refs_before
    with pytest.raises(ValueError, match=r"q: the DLPack capsule was already consumed"):
        aiter_mha.mha_fwd(cap, k, v)
    del cap
    assert sys.getrefcount(q) == refs_before


def test_arrays_released_on_every_error_path():
    q, k, v = qkv()
    before = [sys.getrefcount(x) for x in (q, k, v)]
    for _ in range(50):
        for bad in (dict(mask="bogus"), dict(), dict(out=np.zeros(3, np.float16))):
            with pytest.raises(ValueError):
                aiter_mha.mha_fwd(q, k, v, **bad)
    assert [sys.getrefcount(x) for x in (q, k, v)] == before


def test_does_not_import_torch():
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {binding_dirs()!r}
        import numpy
        import aiter_mha
        print("torch" in sys.modules, aiter_mha.__version__)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", VERSION], r.stdout + r.stderr


# ------------------------------------------------------------------------------------------------ features (mha_fwd)

def reaches_device_check(**kw):
    """A well-formed call with host arrays gets through every layout check and fails on q's device."""
    q, k, v = kw.pop("qkv", None) or qkv()
    with pytest.raises(ValueError, match=r"q is on cpu"):
        aiter_mha.mha_fwd(q, k, v, **kw)


def test_valid_feature_arguments_pass_layout_checks():
    b, sq, sk, h = 2, 16, 24, 4
    f16, f32 = np.float16, np.float32
    reaches_device_check(mask="window_generic", window_left=3, window_right=5)
    reaches_device_check(mask=3, window_left=0, window_right=0)
    reaches_device_check(softcap=30.0, scale=0.2)
    for shape in ((b, h, sq, sk), (1, 1, sq, sk), (1, h, sq, sk), (b, 1, 1, sk)):
        reaches_device_check(bias=np.zeros(shape, f16))
    row = np.zeros(sk, f16)
    expanded = np.lib.stride_tricks.as_strided(row, shape=(b, h, sq, sk), strides=(0, 0, 0, row.itemsize))
    reaches_device_check(bias=expanded)
    reaches_device_check(alibi_slopes=np.ones(h, f32), mask="causal")
    reaches_device_check(mask="causal", window_left=-1, window_right=0)  # the causal windows given explicitly
    # NumPy integers wherever an int is taken
    reaches_device_check(mask=np.int64(1), window_left=np.int32(4), window_right=np.int16(0), sink_size=np.int64(0))
    reaches_device_check(alibi_slopes=np.ones((b, h), f32))
    reaches_device_check(alibi_slopes=np.ones((1, h), f32))
    reaches_device_check(dropout_p=0.5, seed=2**64 - 1, offset=np.uint64(7), return_randval=True)
    reaches_device_check(dropout_p=0.1, seed_offset=np.array([1, 2], np.uint64))
    reaches_device_check(dropout_p=0.1, seed_offset=np.array([1, 2], np.int64))
    reaches_device_check(sink=np.zeros(h, f32), sink_size=4, mask=1, window_left=8, window_right=0)
    reaches_device_check(qkv=qkv(d=16, dv=128), return_lse=True)


@pytest.mark.parametrize("kw, msg", [
    (dict(softcap=-1.0), r"softcap must be >= 0"),
    (dict(softcap=float("inf")), r"softcap must be finite"),
    (dict(softcap="x"), r"softcap must be a real number"),
    (dict(dropout_p=1.0), r"dropout_p must be in \[0, 1\)"),
    (dict(dropout_p=-0.1), r"dropout_p must be in \[0, 1\)"),
    (dict(dropout_p=None), r"dropout_p must be a real number"),
    (dict(seed=-1), r"seed must be an int in \[0, 2\*\*64\)"),
    (dict(offset=2**64), r"offset must be an int in \[0, 2\*\*64\)"),
    (dict(seed=1.5), r"seed must be an int"),
    (dict(seed=True), r"seed must be an int"),
    (dict(sink_size=-1), r"sink_size = -1 is out of range"),
    (dict(sink_size="4"), r"sink_size must be an int"),
    (dict(bias=np.zeros((2, 4, 16, 24), np.float16), alibi_slopes=np.ones(4, np.float32)),
     r"bias and alibi_slopes are mutually exclusive"),
    (dict(seed=3, seed_offset=np.array([1, 2], np.uint64)), r"either seed/offset or seed_offset"),
])
def test_bad_feature_scalars(kw, msg):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=msg):
        aiter_mha.mha_fwd(q, k, v, **kw)


@pytest.mark.parametrize("bias, msg", [
    (np.zeros((2, 4, 16), np.float16), r"bias must be 4-D \[batch, nhead_q, seqlen_q, seqlen_k\], got 3-D"),
    (np.zeros((2, 4, 16, 24), np.float32), r"bias has dtype float32 but q has float16"),
    (np.zeros((2, 4, 16, 23), np.float16), r"bias seqlen_k \(dim 3\) is 23 but k's seqlen is 24"),
    (np.zeros((3, 4, 16, 24), np.float16), r"bias dim 0 \(batch\) is 3; expected 2 or 1"),
    (np.zeros((2, 2, 16, 24), np.float16), r"bias dim 1 \(nhead_q\) is 2; expected 4 or 1"),
    (np.zeros((2, 4, 8, 24), np.float16), r"bias dim 2 \(seqlen_q\) is 8; expected 16 or 1"),
    (np.zeros((2, 4, 16, 48), np.float16)[..., ::2], r"bias: the last dimension must be contiguous"),
])
def test_bad_bias(bias, msg):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=msg):
        aiter_mha.mha_fwd(q, k, v, bias=bias)


@pytest.mark.parametrize("kw, msg", [
    (dict(alibi_slopes=np.ones((2, 4, 1), np.float32)), r"alibi_slopes must be 1-D \[nhead_q\] or 2-D"),
    (dict(alibi_slopes=np.ones(4, np.float16)), r"alibi_slopes has dtype float16 but expected float32"),
    (dict(alibi_slopes=np.ones(3, np.float32)), r"alibi_slopes nhead \(last dim\) is 3 but q's nhead is 4"),
    (dict(alibi_slopes=np.ones((3, 4), np.float32)), r"alibi_slopes dim 0 \(batch\) is 3; expected 2 or 1"),
    (dict(alibi_slopes=np.ones((4, 2), np.float32).T), r"alibi_slopes: the last dimension must be contiguous"),
    (dict(sink=np.zeros(4, np.float16)), r"sink has dtype float16 but expected float32"),
    (dict(sink=np.zeros(5, np.float32)), r"sink length is 5 but q's nhead is 4"),
    (dict(sink=np.zeros((1, 4), np.float32)), r"sink must be 1-D \[nhead_q\] float32"),
    (dict(dropout_p=0.1, seed_offset=np.array([1, 2], np.int32)), r"seed_offset has dtype int32; expected uint64"),
    (dict(dropout_p=0.1, seed_offset=np.array([1, 2, 3], np.uint64)), r"seed_offset length is 3 but \[seed, offset\]"),
    (dict(dropout_p=0.1, seed_offset=np.array([[1, 2]], np.uint64)), r"seed_offset must be 1-D"),
])
def test_bad_alibi_sink_seed_offset(kw, msg):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=msg):
        aiter_mha.mha_fwd(q, k, v, **kw)


# ------------------------------------------------------------------------------------------------ mha_varlen_fwd

def varlen(total_q=40, total_k=50, h=4, hk=2, d=64, dv=None, b=3, dtype=np.float16):
    rng = np.random.default_rng(1)
    dv = d if dv is None else dv
    q = rng.standard_normal((total_q, h, d)).astype(dtype)
    k = rng.standard_normal((total_k, hk, d)).astype(dtype)
    v = rng.standard_normal((total_k, hk, dv)).astype(dtype)
    cu_q = np.linspace(0, total_q, b + 1).astype(np.int32)
    cu_k = np.linspace(0, total_k, b + 1).astype(np.int32)
    return q, k, v, cu_q, cu_k


def test_varlen_valid_arguments_reach_device_check():
    q, k, v, cu_q, cu_k = varlen()
    h, total_q = 4, 40
    for kw in (dict(), dict(return_lse=True, mask="causal"),
               dict(seqused_q=np.array([3, 0, 5], np.int32), seqused_k=np.array([1, 2, 3], np.int32)),
               dict(bias=np.zeros((h, total_q, 20), np.float16), max_seqlen_k=20),
               dict(bias=np.zeros((1, 1, 20), np.float16)),
               dict(alibi_slopes=np.ones((3, h), np.float32), sink=np.zeros(h, np.float32), softcap=5.0),
               dict(dropout_p=0.2, return_randval=True, max_seqlen_k=20, min_seqlen_q=2),
               dict(out=np.zeros((total_q, h, 64), np.float16), lse=np.zeros((h, total_q), np.float32))):
        with pytest.raises(ValueError, match=r"q is on cpu"):
            aiter_mha.mha_varlen_fwd(q, k, v, cu_q, cu_k, 16, **kw)


@pytest.mark.parametrize("change, msg", [
    (dict(q=np.zeros((2, 40, 4, 64), np.float16)), r"q must be 3-D \[total_q, nhead_q, hdim_q\], got 4-D"),
    (dict(k=np.zeros((50, 2, 32), np.float16)), r"k head dim \(dim 2\) is 32 but q's head dim is 64"),
    (dict(v=np.zeros((49, 2, 64), np.float16)), r"v total \(dim 0\) is 49 but k's total is 50"),
    (dict(cu_q=np.array([0, 40], np.int64)), r"cu_seqlens_q has dtype int64 but expected int32"),
    (dict(cu_q=np.zeros((2, 2), np.int32)), r"cu_seqlens_q must be 1-D \[batch \+ 1\] int32"),
    (dict(cu_q=np.zeros(0, np.int32)), r"cu_seqlens_q must hold batch \+ 1 >= 1 entries"),
    (dict(cu_k=np.array([0, 50], np.int32)), r"cu_seqlens_k length is 2 but cu_seqlens_q's length is 4"),
    (dict(cu_q=np.zeros(8, np.int32)[::2]), r"cu_seqlens_q: the last dimension must be contiguous"),
    (dict(max_seqlen_q=-1), r"max_seqlen_q = -1 is out of range"),
    (dict(max_seqlen_q=None), r"max_seqlen_q must be an int"),
    (dict(seqused_q=np.array([1, 2], np.int32)), r"seqused_q length is 2 but the batch .* is 3"),
    (dict(seqused_k=np.array([1, 2, 3], np.uint32)), r"seqused_k has dtype uint32 but expected int32"),
    (dict(max_seqlen_k=-2), r"max_seqlen_k = -2 is out of range"),
    (dict(min_seqlen_q=-1), r"min_seqlen_q = -1 is out of range"),
    (dict(bias=np.zeros((4, 40), np.float16)), r"bias must be 3-D \[nhead_q, total_q, max_seqlen_k\]"),
    (dict(bias=np.zeros((4, 39, 8), np.float16)), r"bias dim 1 \(total_q\) is 39; expected 40 or 1"),
    (dict(bias=np.zeros((3, 40, 8), np.float16)), r"bias dim 0 \(nhead_q\) is 3; expected 4 or 1"),
    (dict(alibi_slopes=np.ones((2, 4), np.float32)), r"alibi_slopes dim 0 \(batch\) is 2; expected 3 or 1"),
    (dict(out=np.zeros((40, 4, 32), np.float16)), r"out has shape \[40, 4, 32\]; expected \[total_q, nhead_q, hdim_v\]"),
    (dict(lse=np.zeros((40, 4), np.float32)), r"lse has shape \[40, 4\]; expected \[nhead_q, total_q\] float32"),
    (dict(mask="causal", window_left=2), r"mask='causal' is \(window_left=-1, window_right=0\)"),
])
def test_varlen_invalid(change, msg):
    q, k, v, cu_q, cu_k = varlen()
    args = dict(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, max_seqlen_q=16)
    kw = {}
    for key, val in change.items():
        (args if key in args else kw)[key] = val
    with pytest.raises(ValueError, match=msg):
        aiter_mha.mha_varlen_fwd(args["q"], args["k"], args["v"], args["cu_q"], args["cu_k"], args["max_seqlen_q"],
                                 **kw)


@pytest.mark.parametrize("check", [True, False])
def test_varlen_check_seqlens_keyword(check):
    # the keyword parses either way; host arrays are then refused before anything is read back
    q, k, v, cu_q, cu_k = varlen()
    with pytest.raises(ValueError, match=r"q is on cpu; expected a CUDA device array"):
        aiter_mha.mha_varlen_fwd(q, k, v, cu_q, cu_k, 16, check_seqlens=check)
    with pytest.raises(TypeError):
        aiter_mha.mha_varlen_fwd(q, k, v, cu_q, cu_k, 16, check_seqlens="yes")


def test_varlen_releases_arrays_on_error():
    q, k, v, cu_q, cu_k = varlen()
    bias = np.zeros((4, 40, 8), np.float16)
    before = [sys.getrefcount(x) for x in (q, k, v, cu_q, cu_k, bias)]
    for _ in range(20):
        with pytest.raises(ValueError):
            aiter_mha.mha_varlen_fwd(q, k, v, cu_q, cu_k, 16, bias=bias)
        with pytest.raises(ValueError):
            aiter_mha.mha_varlen_fwd(q, k, v, cu_q, cu_k[:2], 16, bias=bias)
    assert [sys.getrefcount(x) for x in (q, k, v, cu_q, cu_k, bias)] == before


# ------------------------------------------------------------------ paged attention (layout checks reach host arrays)

def paged_arrays(head=128, block=16, heads=8, kv=2, seqs=2, nblocks=10):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((seqs, heads, head)).astype(np.float16)
    k = rng.standard_normal((nblocks, kv, head // 8, block, 8)).astype(np.float16)
    v = rng.standard_normal((nblocks, kv, head, block)).astype(np.float16)
    tables = np.zeros((seqs, 4), np.int32)
    lens = np.full((seqs,), 20, np.int32)
    return q, k, v, tables, lens


def v1(out, ws, q, k, v, tables, lens, dtype="auto", layout="HND", **kw):
    return aiter_mha.paged_attention_v1_core(out, ws, q, k, v, 0.1, tables, None, lens, 64, None, dtype, layout, 0.0,
                                             None, None, **kw)


def test_paged_v1_argument_checks():
    q, k, v, tables, lens = paged_arrays()
    out, ws = np.zeros_like(q), np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="kv_cache_dtype must be 'auto'"):
        v1(out, ws, q, k, v, tables, lens, dtype="fp8")
    with pytest.raises(ValueError, match="kv_cache_layout must be 'HND' or 'NHD'"):
        v1(out, ws, q, k, v, tables, lens, layout="XYZ")
    with pytest.raises(ValueError, match="mtp = 2 is out of range"):
        v1(out, ws, q, k, v, tables, lens, mtp=2)
    # fp8 and multi-token decode: refused with their reasons before any array is read
    with pytest.raises(ValueError, match="q_scale must be None: fp8 queries"):
        v1(out, ws, q, k, v, tables, lens, q_scale=1.0)
    with pytest.raises(ValueError, match="fp8_out_scale must be None: fp8 output"):
        aiter_mha.paged_attention_v1_core(out, ws, q, k, v, 0.1, tables, None, lens, 64, None, "auto", "HND", 0.0,
                                          None, None, 1.0)
    with pytest.raises(ValueError, match="k_scale must be None or 1.0"):
        aiter_mha.paged_attention_v1_core(out, ws, q, k, v, 0.1, tables, None, lens, 64, None, "auto", "HND", 0.0,
                                          0.5, None)
    with pytest.raises(ValueError, match="cu_query_lens must be None: only mtp=1"):
        aiter_mha.paged_attention_v1_core(out, ws, q, k, v, 0.1, tables, lens, lens, 64, None, "auto", "HND", 0.0,
                                          None, None)
    with pytest.raises(ValueError, match="key_cache must be 5-D"):
        v1(out, ws, q, k[..., 0, 0], v, tables, lens)
    # 'HND' with 4-D caches is AITER's pa_v1 reading, [num_blocks, num_kv_heads, block_size, head_size]
    with pytest.raises(ValueError, match=r"key_cache head_size \(dim 3\) is 16 but query's head_size is 128"):
        v1(out, ws, q, np.ascontiguousarray(k[..., 0]), v, tables, lens)
    k4 = np.ascontiguousarray(k.transpose(0, 1, 3, 2, 4).reshape(10, 2, 16, 128))
    with pytest.raises(ValueError, match="value_cache must be 4-D"):
        v1(out, ws, q, k4, v[..., None], tables, lens)
    with pytest.raises(ValueError, match=r"value_cache block_size \(dim 2\) is 8 but key_cache's block_size is 16"):
        v1(out, ws, q, k4, k4[:, :, :8], tables, lens)
    with pytest.raises(ValueError, match="token stride of 0"):
        v1(out, ws, q, np.lib.stride_tricks.as_strided(k4, strides=k4.strides[:2] + (0, k4.strides[3])), k4, tables,
           lens)
    with pytest.raises(ValueError, match="query is on cpu"):
        v1(out, ws, q, k4, k4, tables, lens)
    with pytest.raises(ValueError, match=r"value_cache block_size \(dim 3\) is 8 but key_cache's block_size is 16"):
        v1(out, ws, q, k, v[..., :8], tables, lens)
    with pytest.raises(ValueError, match="context_lens"):
        v1(out, ws, q, k, v, tables, lens[:1])
    with pytest.raises(ValueError, match="query is on cpu"):
        v1(out, ws, q, k, v, tables, lens)
    assert aiter_mha.paged_attention_workspace_bytes(2, 8, 128, 256) == 0  # one partition needs none
    assert aiter_mha.paged_attention_workspace_bytes(1, 32, 128, 17) == 0
    assert aiter_mha.paged_attention_workspace_bytes(2, 8, 128, 600) == 2 * 8 * 3 * (128 * 2 + 8)


def test_pa_fwd_asm_argument_checks():
    q, k, v, tables, lens = paged_arrays(head=64)
    with pytest.raises(ValueError, match="ASM PA only supports head_size=128"):
        aiter_mha.pa_fwd_asm(q, k, v, tables, lens, 4)
    q, k, v, tables, lens = paged_arrays()
    va = np.ascontiguousarray(v.reshape(10, 2, 128, 2, 8).transpose(0, 1, 3, 2, 4))
    with pytest.raises(ValueError, match="max_qlen = 2 is out of range"):
        aiter_mha.pa_fwd_asm(q, k, va, tables, lens, 4, max_qlen=2)
    for name in ("K_QScale", "V_QScale"):
        with pytest.raises(ValueError, match=f"{name} must be None: fp8 / int8 KV caches"):
            aiter_mha.pa_fwd_asm(q, k, va, tables, lens, 4, **{name: np.ones(1, np.float32)})
    with pytest.raises(ValueError, match="qo_indptr must be None: only one query token"):
        aiter_mha.pa_fwd_asm(q, k, va, tables, lens, 4, qo_indptr=lens)
    with pytest.raises(ValueError, match="V must be 5-D"):
        aiter_mha.pa_fwd_asm(q, k, v, tables, lens, 4)
    with pytest.raises(ValueError, match="Q is on cpu"):
        aiter_mha.pa_fwd_asm(q, k, va, tables, lens, 4)
