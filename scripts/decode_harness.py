#!/usr/bin/env python3
"""Our decode step and cuDNN's in one PyTorch process, after the same pre-call kernels: CUDA-event time per call
(median of 20, decode_bench.event_time) under each pre-call sequence, and with --cupti the kernels' durations from
torch.profiler.

The pre-call sequence is the L2 sweep and a ~100 us wait before every timed call. --modes picks the sweep: `sweep`
(the library's own kernel, csrc/api/l2_flush.cu, as scripts/decode_bench.py runs it before SDPA) or `torch`
(torch.amax over a buffer four times the L2), then `+X` for each more kernel X in that order (pre_sequences below:
torch and CuPy reductions, a bf16 GEMM shaped like a decode step's QKV projection, global atomics, a fence, a memset,
a fill, a one-CTA kernel with 4 KB of parameters, a small shared-memory kernel, our own 64-key decode step), e.g.
`sweep+amax64k+gemm`. With --cupti, a sequence holding `+ourtiny` leaves our call's kernel out of the kernel list
(same name). Ours runs through scripts/decode_shim.cu (ctypes), built here against --lib's libmha_fwd.so, 32 query /
8 KV heads, d=128, bf16, dense bhsd, the library's split count.

--probe CTASxSMEM adds a table of first-load times after each sequence: that many one-warp CTAs with that much
dynamic shared memory each read 16 KB by ld.global, by one 1-D bulk copy or by tensor-map boxes (the decode ring's
path), each also after a local-memory round trip, and %globaltimer says when each CTA had its data (us after the
first CTA's start, p50 / max over the CTAs, median over the calls). The thirteenth session used it to rule out the
load paths behind our decode kernel's sensitivity to a preceding torch reduction (docs/decode_log.md: it was
instruction fetch).

  python3 scripts/decode_harness.py --lib DIR [--shapes 16x1024,1x8192] [--modes sweep,torch] [--cupti] [--probe]
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_bench import L2Sweep, event_time, load_shim  # noqa: E402


def pre_sequences(lib, stream, sweep, modes):
    """mode -> callable that enqueues its pre-call kernels on torch's current stream (modes: the ones asked for;
    `sweep+X` of every X is always there)"""
    import cupy
    import torch
    dev = "cuda"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    big = torch.ones(l2, dtype=torch.int32, device=dev)  # four times the L2
    m4 = torch.randn(1 << 20, device=dev)  # 4 MB
    k64 = torch.randn(1 << 14, device=dev)  # 64 KB
    rows = torch.randn(1024, 1024, device=dev)  # one CTA per row, no cross-CTA reduction
    x = torch.randn(16, 4096, device=dev, dtype=torch.bfloat16)  # 16 tokens x hidden 4096
    w = torch.randn(4096, 6144, device=dev, dtype=torch.bfloat16)  # QKV: (32 + 2 x 8) heads x 128
    counters = cupy.zeros(1 << 20, dtype=cupy.uint32)
    # our own decode step on a 64-key cache (b=1): the same kernel, almost no data
    tq = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.bfloat16)
    tk = torch.randn(1, 8, 64, 128, device=dev, dtype=torch.bfloat16)
    tv, to = torch.randn_like(tk), torch.empty_like(tq)
    t_lse, t_oacc = torch.empty(32 * 128, device=dev), torch.empty(32 * 128 * 128, device=dev)
    tiny_ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (tq, tk, tv, to, t_lse, t_oacc)]
    k64_cp = cupy.asarray(k64)
    src = r"""
    extern "C" __global__ void atomics(unsigned* c, int n) {
        atomicAdd(c + (blockIdx.x * blockDim.x + threadIdx.x) % n, 1u);
    }
    extern "C" __global__ void fence(unsigned* c) {
        c[blockIdx.x * blockDim.x + threadIdx.x] = 1u;
        __threadfence();
    }
    __device__ void smem4k_body(unsigned* c) {
        __shared__ unsigned s[1024];
        s[threadIdx.x % 1024] = c[blockIdx.x * blockDim.x + threadIdx.x];
        __syncthreads();
        if (s[(threadIdx.x + 1) % 1024] == 0x9e3779b9u) c[0] = 1u;
    }
    extern "C" __global__ void smem4k(unsigned* c) { smem4k_body(c); }
    extern "C" __global__ void smem4k_c0(unsigned* c) { smem4k_body(c); }
    """
    mod = cupy.RawModule(code=src)
    k_atomics, k_fence = mod.get_function("atomics"), mod.get_function("fence")
    k_smem4k = cupy.RawKernel(src, "smem4k")  # 4 KB of static shared memory, the default carveout preference
    k_smem4k_c0 = cupy.RawKernel(src, "smem4k_c0")  # the same, asking for the least shared memory
    k_smem4k_c0.preferred_shared_memory_carveout = 0

    def on_torch_stream(f):
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            f()

    extra = {
        "amax4m": lambda: torch.amax(m4),
        "amax64k": lambda: torch.amax(k64),
        "cupysum": lambda: on_torch_stream(lambda: k64_cp.sum()),  # CuPy's reduction (CUB or its own)
        "sumrows": lambda: rows.sum(dim=1),
        "gemm": lambda: x @ w,
        "atomics": lambda: on_torch_stream(lambda: k_atomics((1024,), (256,), (counters, cupy.int32(4096)))),
        "fence": lambda: on_torch_stream(lambda: k_fence((1024,), (256,), (counters,))),
        "memset": lambda: cupy.cuda.runtime.memsetAsync(counters.data.ptr, 0, counters.nbytes,
                                                        torch.cuda.current_stream().cuda_stream),
        "fill": lambda: m4.fill_(1.0),
        "params": lambda: lib.params_kernel(ctypes.c_void_p(stream)),
        "smem4k": lambda: on_torch_stream(lambda: k_smem4k((1024,), (512,), (counters,))),
        "smem4k_c0": lambda: on_torch_stream(lambda: k_smem4k_c0((1024,), (512,), (counters,))),
        "sweep": sweep,
        "ourtiny": lambda keep=(tq, tk, tv, to, t_lse, t_oacc): lib.decode_step(*tiny_ptrs, 1, 32, 8, 64, 128, 0,
                                                                               ctypes.c_void_p(stream)),
    }
    base = {"sweep": sweep, "torch": lambda: torch.amax(big)}
    names = set(modes) | {"sweep+" + name for name in extra}
    seqs = {}
    for mode in names:
        first, *rest = mode.split("+")
        if first not in base or any(r not in extra for r in rest):
            sys.exit(f"unknown mode {mode}: sweep or torch, then any of +{', +'.join(extra)}")
        fs = [base[first]] + [extra[r] for r in rest]
        seqs[mode] = (lambda fs: lambda: [f() for f in fs])(fs)
    for f in seqs.values():  # compile / load / allocate outside any timed loop
        f()
    torch.cuda.synchronize()
    return seqs


def probe_table(lib, seqs, modes, stream, ctas, smem, rep=20):
    """first-load times after each pre-call sequence, per load path (the --probe table)"""
    import torch
    buf = torch.randn(ctas * 8192, device="cuda", dtype=torch.bfloat16)  # 16 KB per CTA
    times = torch.zeros(rep, ctas, 2, dtype=torch.int64, device="cuda")
    kinds = ("ldg", "bulk", "tensor", "lmem+ldg", "lmem+bulk", "lmem+tensor")
    print(f"# first loads, {ctas} one-warp CTAs x 16 KB ({smem} B of shared memory each): us after the first CTA "
          f"start, p50 / max over CTAs (median of {rep} calls); start spread = last CTA start - first")
    print(f"{'pre-call':<16}" + "".join(f" | {k:>6} p50    max  spread" for k in kinds))
    for mode in modes:
        line = f"{mode:<16}"
        for kind, name in enumerate(kinds):
            for i in range(rep + 3):  # three warm-up calls first (their times are overwritten)
                seqs[mode]()
                torch.cuda._sleep(200_000)
                if lib.probe(kind, ctypes.c_void_p(buf.data_ptr()), ctas,
                             ctypes.c_void_p(times[max(i - 3, 0)].data_ptr()), smem, ctypes.c_void_p(stream)) != 0:
                    sys.exit(f"probe {name} failed")
            torch.cuda.synchronize()
            t = times.cpu().double()
            start = t[:, :, 0].min(dim=1).values[:, None]
            done = (t[:, :, 1] - start) / 1e3
            spread = (t[:, :, 0].max(dim=1).values[:, None] - start) / 1e3
            line += (f" | {done.median(dim=1).values.median().item():10.2f} "
                     f"{done.max(dim=1).values.median().item():6.2f} {spread.median().item():6.2f}")
        print(line, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="directory holding libmha_fwd.so")
    ap.add_argument("--shapes", default="16x1024,1x8192,64x1024,16x8192", help="BATCHxKEYS list")
    ap.add_argument("--modes", default="sweep,torch")
    ap.add_argument("--cupti", action="store_true", help="also the kernels' durations (torch.profiler)")
    ap.add_argument("--probe", default="", help="CTASxSMEM list (e.g. 512x17416,792x37888): also the first-load "
                    "table of each --modes sequence with that many CTAs of that much dynamic shared memory")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    lib = load_shim(a.lib)
    stream = torch.cuda.current_stream().cuda_stream
    modes = a.modes.split(",")
    pre = pre_sequences(lib, stream, L2Sweep(), modes)
    rep = 20
    for spec in filter(None, a.probe.split(",")):
        ctas, smem = map(int, spec.split("x"))
        probe_table(lib, pre, modes, stream, ctas, smem)

    def trace(f, n):
        """the CUDA kernels of n rounds of f, in start order"""
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                f()
            torch.cuda.synchronize()
        path = tempfile.mktemp(suffix=".json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            ev = sorted((e for e in json.load(fh)["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        os.unlink(path)
        return ev

    def kernel_us(f, before):
        """median duration of each kernel the call launches (the kernels after each wait kernel, less those of the
        pre-call sequence, whose names a trace of that sequence alone gives)"""
        pre_names = {e["name"] for e in trace(before, 3)}

        def one():
            before()
            torch.cuda._sleep(200_000)
            f()

        calls, cur = [], None
        for e in trace(one, rep):
            if "sleep" in e["name"] or "spin" in e["name"]:
                cur = []
                calls.append(cur)
            elif cur is not None and e["name"] not in pre_names:
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
        for mode in modes:
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
