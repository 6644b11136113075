#!/usr/bin/env python3
"""Our decode step and cuDNN's in one PyTorch process, after the same pre-call kernels: CUDA-event time per call
(median of 20, decode_bench.event_time) under each pre-call sequence, and with --cupti the kernels' durations from
torch.profiler.

The pre-call sequence is the L2 sweep and a ~100 us wait before every timed call. --modes picks the sweep: `sweep`
(the library's own kernel, csrc/api/l2_flush.cu, as scripts/decode_bench.py runs it before SDPA) or `torch`
(torch.amax over a buffer four times the L2) or `sweep+params` (the sweep, then a one-CTA kernel that reads 4 KB
of kernel parameters). Ours runs through scripts/decode_shim.cu (ctypes), built here against
--lib's libmha_fwd.so, 32 query / 8 KV heads, d=128, bf16, dense bhsd, the library's split count.

  python3 scripts/decode_harness.py --lib DIR [--shapes 16x1024,1x8192] [--modes sweep,torch] [--cupti]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_bench import L2Sweep, event_time  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_shim(lib_dir):
    """ctypes handle of decode_shim.cu built against lib_dir/libmha_fwd.so (built once into lib_dir)."""
    so = os.path.join(lib_dir, "decode_shim.so")
    if not os.path.exists(so):
        subprocess.run(["nvcc", "-std=c++17", "-O2", "-arch=native", "-shared", "-Xcompiler", "-fPIC",
                        "-I" + os.path.join(ROOT, "include"), os.path.join(ROOT, "scripts", "decode_shim.cu"),
                        "-L" + lib_dir, "-lmha_fwd", "-Xlinker", "-rpath," + os.path.abspath(lib_dir), "-o", so],
                       check=True)
    lib = ctypes.CDLL(so)
    lib.decode_step.restype = ctypes.c_float
    return lib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="directory holding libmha_fwd.so")
    ap.add_argument("--shapes", default="16x1024,1x8192,64x1024,16x8192", help="BATCHxKEYS list")
    ap.add_argument("--modes", default="sweep,torch")
    ap.add_argument("--cupti", action="store_true", help="also the kernels' durations (torch.profiler)")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    lib = load_shim(a.lib)
    stream = torch.cuda.current_stream().cuda_stream
    ours_sweep = L2Sweep()
    torch_buf = torch.ones(torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int32, device="cuda")
    pre = {"sweep": ours_sweep, "torch": lambda: torch.amax(torch_buf),
           "sweep+params": lambda: (ours_sweep(), lib.params_kernel(ctypes.c_void_p(stream)))}
    rep = 20

    def kernel_us(f, before):
        """median duration of each kernel the call launches (the kernels after each wait kernel)"""
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(rep):
                before()
                torch.cuda._sleep(200_000)
                f()
            torch.cuda.synchronize()
        path = tempfile.mktemp(suffix=".json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            ev = sorted((e for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        os.unlink(path)
        calls, cur = [], None
        for e in ev:
            if "sleep" in e["name"] or "spin" in e["name"]:
                cur = []
                calls.append(cur)
            elif cur is not None and not any(x in e["name"] for x in ("l2_sweep", "reduce_kernel", "read_params")):
                cur.append(e["dur"])
        n = max(len(c) for c in calls)
        return [statistics.median(c[i] for c in calls if len(c) > i) for i in range(n)]

    print(f"# {torch.cuda.get_device_name(0)}; us per call (median of {rep}), KV GB/s in brackets; 32 q / 8 KV heads, "
          f"d=128, bf16, bhsd")
    for shape in a.shapes.split(","):
        b, keys = map(int, shape.split("x"))
        q = torch.randn(b, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, 8, keys, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        o = torch.full_like(q, float("nan"))
        lse_acc = torch.empty(b * 32 * 128, device="cuda", dtype=torch.float32)
        o_acc = torch.empty(b * 32 * 128 * 128, device="cuda", dtype=torch.float32)
        nbytes = 2 * b * 8 * keys * 128 * 2
        ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (q, k, v, o, lse_acc, o_acc)]
        ours = lambda: lib.decode_step(*ptrs, b, 32, 8, keys, 128, 0, ctypes.c_void_p(stream))  # noqa: E731
        if ours() != 0:
            sys.exit("decode_step failed")
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
        err = (o.float() - ref).abs().max().item()
        if not err < 2e-2:  # NaN fails too
            sys.exit(f"b={b} keys={keys}: max |ours - fp32 SDPA| = {err}")
        cudnn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
        line = f"b={b:<3} keys={keys:<7} splits={lib.decode_splits(b, 32, 8, keys):<3}"
        for mode in a.modes.split(","):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                tc = event_time(cudnn, rep=rep, sweep=pre[mode], median=True) * 1e3
                kc = kernel_us(cudnn, pre[mode]) if a.cupti else None
            to = event_time(ours, rep=rep, sweep=pre[mode], median=True) * 1e3
            ko = kernel_us(ours, pre[mode]) if a.cupti else None
            line += f" | {mode}: cudnn {tc:6.2f} ({nbytes / tc / 1e3:4.0f}) ours {to:6.2f} ({nbytes / to / 1e3:4.0f})"
            if a.cupti:
                line += (" kernels cudnn " + "+".join(f"{x:.2f}" for x in kc) +
                         " ours " + "+".join(f"{x:.2f}" for x in ko))
        print(line, flush=True)
        del q, k, v, o, lse_acc, o_acc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
