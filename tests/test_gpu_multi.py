"""The Python binding on a machine with two or more GPUs. Each case runs in a fresh process, so that no CUDA context
exists beforehand:
- a call on cuda:1 from a thread that never used cuda:0 must leave cuda:0 without a primary context. The device guard
  puts back the caller's (absent) context; restoring "device 0" with cudaSetDevice would make cuda:0's context, a few
  hundred MB per process.
- the forward's result must match an fp32 reference, and so must the backward's gradients (same conditions).
- PyTorch exports a CUDA tensor with a stream only while its device is current: the binding makes the array's device
  current around __dlpack__ (the calls here run while the thread's current device is still 0).
- a stream of another device than the arrays' is refused with ValueError.
Skipped (with the reason) with fewer than two GPUs.
"""
import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import gpu_test_modules  # noqa: E402

torch, aiter_mha = gpu_test_modules("multi-GPU binding tests")
if torch.cuda.device_count() < 2:
    pytest.skip("needs two GPUs (this machine has fewer)", allow_module_level=True)

CHILD = textwrap.dedent("""
    import ctypes, sys
    sys.path.insert(0, {tests!r})
    from _mha_paths import load_binding
    import torch
    aiter_mha, why = load_binding()
    assert aiter_mha is not None, why
    cuda = ctypes.CDLL("libcuda.so.1")

    def active(dev):
        flags, state = ctypes.c_uint(), ctypes.c_int()
        assert cuda.cuInit(0) == 0
        assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(state)) == 0
        return state.value

    g = torch.Generator(device="cuda:1").manual_seed(7)
    q, k, v = (torch.randn(2, 96, 4, 128, device="cuda:1", dtype=torch.bfloat16, generator=g) for _ in range(3))
    torch.cuda.synchronize(1)
    if active(0):
        print("SKIP torch itself made cuda:0's context")
        sys.exit(0)
    out = torch.from_dlpack(aiter_mha.mha_fwd(q, k, v, mask="causal"))
    torch.cuda.synchronize(1)
    print("ACTIVE0", active(0))
    out_ref = out.float()
    del out
    torch.cuda.synchronize(1)
    print("ACTIVE0_AFTER_FREE", active(0))  # the returned buffer's release switches back the same way
    # the backward on cuda:1 from the forward's out / lse
    out, lse = (torch.from_dlpack(x) for x in aiter_mha.mha_fwd(q, k, v, mask="causal", return_lse=True))
    do = torch.randn(out.shape, device="cuda:1", dtype=torch.bfloat16, generator=g)
    grads = [torch.from_dlpack(x).float() for x in aiter_mha.mha_bwd(do, q, k, v, out, lse, 0.0, 128 ** -0.5, True,
                                                                      -1, 0, False)[:3]]
    torch.cuda.synchronize(1)
    print("ACTIVE0_BWD", active(0))
    # fp32 references last (whatever contexts PyTorch makes for them cannot blame the calls above)
    qf, kf, vf = (x.detach().float().transpose(1, 2).requires_grad_() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=True)
    print("ERR", (out_ref - ref.transpose(1, 2)).abs().max().item())
    ref.backward(do.float().transpose(1, 2))
    print("BWD_REL", max((got - r.grad.transpose(1, 2)).abs().max().item() / r.grad.abs().max().item()
                         for got, r in zip(grads, (qf, kf, vf))))
    # a stream of cuda:0 with arrays on cuda:1: refused before anything runs (this makes cuda:0's context, so last)
    s0 = torch.cuda.Stream(device="cuda:0")
    try:
        aiter_mha.mha_fwd(q, k, v, stream=s0)
        print("STREAM0 accepted")
    except ValueError as e:
        print("STREAM0", str(e).replace(chr(10), " "))
""")


def test_call_on_cuda1_makes_no_context_on_cuda0():
    code = CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    rows = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert rows["ACTIVE0"] == "0", r.stdout
    assert rows["ACTIVE0_AFTER_FREE"] == "0", r.stdout
    assert float(rows["ERR"]) < 2e-2, r.stdout
    assert rows["ACTIVE0_BWD"] == "0", r.stdout
    assert float(rows["BWD_REL"]) < 2e-2, r.stdout  # bf16 gradients, relative to the largest reference gradient
    assert "stream is a stream of cuda:0 but q is on cuda:1" in rows["STREAM0"], r.stdout
