"""CPU-only tests of the aiter_mha binding (csrc/python): the module imports, rejects invalid input with a precise
ValueError (NumPy arrays reach every layout check, then fail the device check, so no GPU is needed), follows the
DLPack capsule protocol (consumes once, calls the deleter) and never imports torch. Skipped when it is not built.
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


def test_module_surface():
    assert aiter_mha.__version__ == "0.1.0"
    assert callable(aiter_mha.mha_fwd)
    assert isinstance(aiter_mha.last_kernel_name(), str)
    assert hasattr(aiter_mha, "DeviceBuffer")
    doc = aiter_mha.mha_fwd.__doc__
    for kw in ("scale", "mask", "window_left", "window_right", "return_lse", "out", "lse", "stream", "use_asm_v3"):
        assert kw in doc


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
    ("diagonal", -1, -1, r"mask='diagonal' is not one of"),
    ("causal", 16, -1, r"mask='causal' is \(window_left=-1, window_right=0\)"),
    ("none", -1, 4, r"mask='none' takes no window"),
    (7, -1, -1, r"mask_type 7 is not 0"),
    (True, -1, -1, r"mask must be a str or an int"),
    (2.0, -1, -1, r"mask must be a str or an int"),
    (1, -2, 0, r"window_left = -2 is out of range"),
    (1, 0, "x", r"window_right must be an int"),
])
def test_bad_mask(mask, left, right, msg):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=msg):
        aiter_mha.mha_fwd(q, k, v, mask=mask, window_left=left, window_right=right)


@pytest.mark.parametrize("stream", [-5, "0", 1.5])
def test_bad_stream(stream):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"stream must be"):
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
    assert r.stdout.split() == ["False", "0.1.0"], r.stdout + r.stderr
