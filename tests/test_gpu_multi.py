"""The Python binding on a machine with two or more GPUs. Each case runs in a fresh process, so that no CUDA context
exists beforehand:
- a call on cuda:1 from a thread that never used cuda:0 must leave cuda:0 without a primary context. The device guard
  puts back the caller's (absent) context; restoring "device 0" with cudaSetDevice would make cuda:0's context, a few
  hundred MB per process.
- the result must still match the same call made on cuda:0.
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
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), is_causal=True).transpose(1, 2)
    print("ERR", (out.float() - ref).abs().max().item())
    del out
    torch.cuda.synchronize(1)
    print("ACTIVE0_AFTER_FREE", active(0))
""")


def test_call_on_cuda1_makes_no_context_on_cuda0():
    code = CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    rows = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert rows["ACTIVE0"] == "0", r.stdout
    assert rows["ACTIVE0_AFTER_FREE"] == "0", r.stdout  # the returned buffer's release switches back the same way
    assert float(rows["ERR"]) < 2e-2, r.stdout
