#!/usr/bin/env python3
"""Decode benchmark (issue 4): one query token, 32 query heads on 8 KV heads, d=128, bf16, against PyTorch SDPA.

For b in {1, 16, 64} and KV length in {1k, 8k, 32k, 128k}: GB/s of K+V read (2 * b * h_k * L * d * 2 bytes / time) for
our mha_fwd_splitkv (the library's split heuristic), dense and paged with pages of 16 and 128 tokens, next to every
SDPA backend on the dense case (enable_gqa) and the device's copy bandwidth ((read + write) / time of a 1 GiB copy).
--seqlen-q N times a speculative-decode step of N queries per sequence instead (no mask on either side; SDPA's
is_causal would align the mask top-left), still counting K + V alone.
Every call is timed alone between CUDA events after a read sweep over four times the L2 size and a 100 us wait (so
the call is queued before its start event): every call reads its cache from DRAM, as it would inside a model.

`dense` is ours inside this process on the very tensors SDPA reads (scripts/decode_shim.cu through ctypes, built
here with nvcc against --lib's libmha_fwd.so), timed by the same function as SDPA: 5 warm-up calls, then the median
of 20 (--stat mean: their mean). Same tensors, so the same physical memory: an H100 read our b=64 8k cache 2% slower
from a process started while another one held 2 GiB of the GPU (3000 against 3051-3071 GB/s; twentieth session),
which is what this script's own process did to ours until then. The median, because one late host call in 20 (a
~200 us stall, past the 100 us wait) moved cuDNN's b=1 1k mean from 11.0 to 16.2 us. `exe dense`, `page16` and
`page128` are benchmark_mha_fwd runs (-flush_cache=1: the same sweep and wait, the mean of 20 calls, as AITER's
benchmark reports it); `p16 / dense` compares two of those. --warm-l2 times 20 back-to-back calls instead (no sweep:
caches up to the L2 size then partly stay in it between calls; `dense` is then their mean too).

The sweep before an SDPA call or our in-process call is the library's own sweep kernel (csrc/api/l2_flush.cu's
source, compiled here with CuPy and run on torch's stream), so both sides see the same kernel before their call.
Which kernel that is matters: until the thirteenth session a torch reduction (torch.amax over a buffer of four times
the L2, this script's sweep until the twelfth session) before the call made our decode calls 3.5-8.5 us slower,
because it displaced our decode kernel's code from the instruction caches and the warp then fetched it behind the
grid's first K / V copies; the transposed decode step now has its own compact instance (csrc/ck/fwd_kernel.cuh,
kDecodeT) and the penalty is under 1 us (docs/decode_log.md; scripts/decode_harness.py measures it).

--rounds N is the margin mode, for the question "is ours at least as fast as the best SDPA backend" where the two
are within the ~1% that one table moves from run to run: at each (b, L) the best backend is chosen once, then N rounds
time sdpa / ours / ours / sdpa (each the median of 20 swept calls, on the same tensors), and the line gives the median
of the 2N ratios, their spread, how many are >= 1 and a bootstrap 95% interval of the median; --num-splits 0,2,4
repeats that with those split counts (0: the library's heuristic). A few ratios per hundred are far off (0.1 or 8:
one side's whole median of 20 hit by a stall); the median and its interval are not moved by them.

  python3 scripts/decode_bench.py --exe ./benchmark_mha_fwd [--lib DIR_OF_libmha_fwd.so]
  python3 scripts/decode_bench.py --exe ./benchmark_mha_fwd --rounds 50 --batches 16 --lengths 1024 [--layout bshd]
"""
import argparse
import ctypes
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ours(exe, b, L, page, layout, cold, splits=0, env=None, hdim=128, sq=1):
    """ms per call, the split count used and the output; splits 0: the library's heuristic; env: the process's; sq
    queries per sequence (no mask)."""
    perm = "1" if layout == "bhsd" else "0"
    cmd = [exe, "-prec=bf16", f"-b={b}", "-h=32", "-h_k=8", f"-d={hdim}", f"-s={sq}", f"-s_k={L}",
           f"-num_splits={splits}",
           "-v=0", "-warmup=5", "-repeat=20", f"-iperm={perm}", f"-operm={perm}", f"-flush_cache={int(cold)}"]
    if page:
        cmd.append(f"-page_block_size={page}")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
    # the time from the GB/s field (two decimals of a large number) rather than "x.xxx ms", which rounds a 20 us
    # call by up to 2.5%: the benchmark counts Q, K, V and O once with all 32 heads (AITER's convention)
    gbs = re.search(r"([\d.]+) GB/s", out)
    splits = re.search(r"num_splits:(\d+)", out)
    bench_bytes = b * 32 * 2 * (sq * hdim + 2 * L * hdim + sq * hdim)
    ms = bench_bytes / 1e6 / float(gbs.group(1)) if gbs and float(gbs.group(1)) > 0 else None
    return ms, (int(splits.group(1)) if splits else 1), out.strip()


def load_shim(lib_dir):
    """ctypes handle of decode_shim.cu built against lib_dir/libmha_fwd.so (built once into lib_dir)."""
    so = os.path.join(lib_dir, "decode_shim.so")
    src = os.path.join(ROOT, "scripts", "decode_shim.cu")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        subprocess.run(["nvcc", "-std=c++17", "-O2", "-arch=native", "-shared", "-Xcompiler", "-fPIC",
                        "-I" + os.path.join(ROOT, "include"), src, "-L" + lib_dir, "-lmha_fwd",
                        "-Xlinker", "-rpath," + os.path.abspath(lib_dir), "-o", so], check=True)
    lib = ctypes.CDLL(so)
    lib.decode_step.restype = ctypes.c_float
    lib.decode_step_layout.restype = ctypes.c_float
    lib.decode_step_q.restype = ctypes.c_float
    return lib


def sweep_source():
    """csrc/api/l2_flush.cu's l2_sweep_kernel as an extern "C" kernel for NVRTC (its text; no standard headers)."""
    import pathlib
    text = (pathlib.Path(__file__).resolve().parent.parent / "csrc/api/l2_flush.cu").read_text()
    begin = text.index("__global__ void l2_sweep_kernel")
    body = text[begin:text.index("\n}\n", begin) + 3]
    return ("typedef unsigned int uint32_t;\ntypedef unsigned long long sz_t;\nextern \"C\" " +
            body.replace("size_t", "sz_t"))


class L2Sweep:
    """csrc/api/l2_flush.cu's sweep on torch's current stream, launched as the library launches it: a zeroed buffer of
    four times the L2 plus a 16-byte sink, four CTAs of 512 threads per SM."""

    def __init__(self):
        import cupy
        import torch
        props = torch.cuda.get_device_properties(0)
        self.torch, self.cupy = torch, cupy
        self.buf = torch.zeros(4 * props.L2_cache_size + 16, dtype=torch.uint8, device="cuda")
        self.arr = cupy.asarray(self.buf)
        self.n = cupy.uint64(self.buf.numel() // 16 - 1)
        self.grid = props.multi_processor_count * 4
        self.kernel = cupy.RawKernel(sweep_source(), "l2_sweep_kernel")
        # compile and load it now: a first call inside a timed loop stalls the host (NVRTC) while the GPU drains, and
        # the next timed call then includes its own launch from the host
        self()
        torch.cuda.synchronize()

    def __call__(self):
        with self.cupy.cuda.ExternalStream(self.torch.cuda.current_stream().cuda_stream):
            self.kernel((self.grid,), (512,), (self.arr, self.n, self.arr[-16:]))


def event_time(f, warmup=5, rep=20, sweep=None, median=False):
    """Mean ms per call of f: back-to-back between two events, or (sweep: an L2Sweep or any callable) each call after
    the sweep and a ~100 us wait, timed alone (median: the median of those calls instead of their mean)."""
    import torch
    for _ in range(warmup):
        f()
    if sweep is None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(rep):
            f()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / rep
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rep)]
    for s, e in ev:
        sweep()
        torch.cuda._sleep(200_000)  # ~100 us: the call is queued before its start event fires (host time excluded)
        s.record()
        f()
        e.record()
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in ev]
    return sorted(times)[rep // 2] if median else sum(times) / rep


def decode_tensors(b, L, sq, layout):
    """Q / K / V / O (NaN) of a decode step, 32 query heads on 8 KV heads, d128, bf16: bhsd contiguous, or (b, s, h, d)
    memory seen as (b, h, s, d)."""
    import torch
    kw = dict(device="cuda", dtype=torch.bfloat16)
    if layout == "bhsd":
        q, k, v = torch.randn(b, 32, sq, 128, **kw), torch.randn(b, 8, L, 128, **kw), torch.randn(b, 8, L, 128, **kw)
        return q, k, v, torch.full_like(q, float("nan"))
    q = torch.randn(b, sq, 32, 128, **kw).transpose(1, 2)
    k, v = (torch.randn(b, L, 8, 128, **kw).transpose(1, 2) for _ in range(2))
    return q, k, v, torch.full((b, sq, 32, 128), float("nan"), **kw).transpose(1, 2)


def best_sdpa(q, k, v, nbytes, backends, sweep, median, skip_math=False):
    """(GB/s, name, backend, output) of the fastest SDPA backend on these tensors; (0, '-', None, None) if none ran."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    best = (0.0, "-", None, None)
    for name, be in backends.items():
        if name == "math" and skip_math:
            continue
        try:
            with sdpa_kernel([be]):
                call = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
                gbs = nbytes / event_time(call, sweep=sweep, median=median) / 1e6
                if gbs > best[0]:
                    best = (gbs, name, be, call())
        except Exception:  # a backend that refuses the shape
            pass
    return best


def shim_step(lib, q, k, v, o, b, sq, L, splits, layout, stream):
    """Our decode step on these tensors through decode_shim.cu (lse_acc / o_acc for its 128 splits): a callable
    returning the API's value, and the partial buffers to keep alive with it."""
    import torch
    acc = (torch.empty(b * 32 * sq * 128, device="cuda", dtype=torch.float32),
           torch.empty(b * 32 * sq * 128 * 128, device="cuda", dtype=torch.float32))
    ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (q, k, v, o, *acc)]
    bshd = int(layout == "bshd")
    return (lambda: lib.decode_step_q(*ptrs, b, 32, 8, sq, L, 128, splits, bshd, ctypes.c_void_p(stream))), acc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default="./benchmark_mha_fwd")
    ap.add_argument("--lib", default=None, help="directory of libmha_fwd.so for the in-process dense column "
                    "(default: --exe's directory)")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--lengths", default="1024,8192,32768,131072")
    ap.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd",
                    help="dense Q/K/V/O layout of both sides: bhsd (SDPA's contiguous tensors; ours -iperm=1) or "
                         "bshd (ours -iperm=0; SDPA gets the same memory through transposed views)")
    ap.add_argument("--stat", choices=["median", "mean"], default="median",
                    help="of the 20 timed calls of SDPA and of our in-process call")
    ap.add_argument("--seqlen-q", type=int, default=1,
                    help="queries per sequence (a speculative-decode step for more than 1), no mask on either side: "
                         "the GB/s count K + V only")
    ap.add_argument("--warm-l2", action="store_true",
                    help="time back-to-back calls with no L2 sweep between them (small caches partly stay in L2)")
    ap.add_argument("--rounds", type=int, default=0,
                    help="the margin mode: for each (b, L) only ours (dense, in process) against the best SDPA backend "
                         "(chosen once), N rounds in the order sdpa / ours / ours / sdpa, each side the median of 20 "
                         "calls; prints every ratio and their median, spread and a bootstrap 95%% interval of the median")
    ap.add_argument("--num-splits", default="0",
                    help="the margin mode: ours with these split counts (a comma list; 0: the library's heuristic), "
                         "each against the peer in its own rounds")
    a = ap.parse_args()
    import torch
    from torch.nn.attention import SDPBackend

    lib = load_shim(a.lib or os.path.dirname(os.path.abspath(a.exe)))
    stream = torch.cuda.current_stream().cuda_stream
    median = a.stat == "median"
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    copy = 2 * 2**30 / event_time(lambda: y.copy_(x)) / 1e6
    del x, y
    torch.cuda.empty_cache()
    sweep = None if a.warm_l2 else L2Sweep()
    print(f"# {torch.cuda.get_device_name(0)}; copy bandwidth (read + write) {copy:.0f} GB/s; dense layout {a.layout}; "
          f"{'warm L2 (back-to-back calls)' if a.warm_l2 else 'L2 swept before every call'}; {a.seqlen_q} "
          f"{'query' if a.seqlen_q == 1 else 'queries (no mask)'} per sequence; "
          f"SDPA and dense: {a.stat} of 20 calls on the same tensors; exe columns: benchmark_mha_fwd's mean")
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    if a.rounds:
        return margin(a, lib, sweep, backends, stream)
    print(f"{'b':>3} {'L':>7} {'splits':>6} {'dense':>7} {'exe dense':>9} {'page16':>7} {'page128':>7} "
          f"{'best sdpa':>16} {'dense/sdpa':>10} {'p16/dense':>9} {'dense/copy':>10}")
    for b in map(int, a.batches.split(",")):
        for L in map(int, a.lengths.split(",")):
            nbytes = 2 * b * 8 * L * 128 * 2
            sq = a.seqlen_q
            q, k, v, o = decode_tensors(b, L, sq, a.layout)
            gbs, name, _, best_out = best_sdpa(q, k, v, nbytes, backends, sweep, median, skip_math=nbytes > 2**30)
            best = (gbs, name)
            step, acc = shim_step(lib, q, k, v, o, b, sq, L, 0, a.layout, stream)
            if step() != 0:
                raise SystemExit(f"b={b} L={L}: decode_step_q failed")
            err = (o.float() - best_out.float()).abs().max().item() if best_out is not None else 0.0
            if not err < 2e-2:  # NaN fails too
                raise SystemExit(f"b={b} L={L}: max |ours - SDPA {best[1]}| = {err}")
            dense = nbytes / event_time(step, sweep=sweep, median=median) / 1e6
            del q, k, v, o, best_out, acc
            torch.cuda.empty_cache()
            res = {}
            splits = 1
            for page in (0, 16, 128):
                ms, sp, _ = ours(a.exe, b, L, page, a.layout, not a.warm_l2, sq=sq)
                res[page] = nbytes / ms / 1e6 if ms else 0.0
                if page == 0:
                    splits = sp
            print(f"{b:>3} {L:>7} {splits:>6} {dense:>7.0f} {res[0]:>9.0f} {res[16]:>7.0f} {res[128]:>7.0f} "
                  f"{best[0]:>8.0f} ({best[1]:>5}) {dense / best[0] if best[0] else 0:>10.2f} "
                  f"{res[16] / res[0] if res[0] else 0:>9.2f} {dense / copy:>10.2f}", flush=True)


def margin(a, lib, sweep, backends, stream):
    """--rounds N: ours / best SDPA at each (b, L), N rounds of sdpa / ours / ours / sdpa on the same tensors (bhsd or
    bshd as --layout), each side the median (or mean) of 20 swept calls: 2N ratios per shape and split count."""
    import random
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    median = a.stat == "median"

    def med(x):
        x = sorted(x)
        return x[len(x) // 2] if len(x) % 2 else (x[len(x) // 2 - 1] + x[len(x) // 2]) / 2

    print(f"{'b':>3} {'L':>7} {'splits':>6} {'peer':>6} {'rounds':>6} {'ours GB/s':>9} {'peer GB/s':>9} {'median':>7} "
          f"{'min':>6} {'max':>6} {'>=1':>7} {'95% CI of median':>17}")
    for b in map(int, a.batches.split(",")):
        for L in map(int, a.lengths.split(",")):
            nbytes = 2 * b * 8 * L * 128 * 2
            q, k, v, o = decode_tensors(b, L, 1, a.layout)
            _, peer_name, peer, ref = best_sdpa(q, k, v, nbytes, backends, sweep, median, skip_math=True)
            if peer is None:
                raise SystemExit(f"b={b} L={L}: no SDPA backend ran this shape")
            with sdpa_kernel([peer]):
                sdpa = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
                for ns in map(int, a.num_splits.split(",")):
                    step, acc = shim_step(lib, q, k, v, o, b, 1, L, ns, a.layout, stream)
                    o.fill_(float("nan"))
                    if step() != 0:
                        raise SystemExit(f"b={b} L={L} splits={ns}: decode_step_q failed")
                    err = (o.float() - ref.float()).abs().max().item()
                    if not err < 2e-2:  # NaN fails too
                        raise SystemExit(f"b={b} L={L} splits={ns}: max |ours - SDPA {peer_name}| = {err}")
                    ratios, gb_ours, gb_peer = [], [], []
                    for _ in range(a.rounds):
                        t1 = event_time(sdpa, sweep=sweep, median=median)
                        u1 = event_time(step, sweep=sweep, median=median)
                        u2 = event_time(step, sweep=sweep, median=median)
                        t2 = event_time(sdpa, sweep=sweep, median=median)
                        ratios += [t1 / u1, t2 / u2]
                        gb_ours += [nbytes / u1 / 1e6, nbytes / u2 / 1e6]
                        gb_peer += [nbytes / t1 / 1e6, nbytes / t2 / 1e6]
                    rng = random.Random(0)
                    boots = sorted(med([rng.choice(ratios) for _ in ratios]) for _ in range(2000))
                    print(f"{b:>3} {L:>7} {ns if ns else 'h':>6} {peer_name:>6} {a.rounds:>6} {med(gb_ours):>9.0f} "
                          f"{med(gb_peer):>9.0f} {med(ratios):>7.3f} {min(ratios):>6.3f} {max(ratios):>6.3f} "
                          f"{sum(r >= 1 for r in ratios):>3}/{len(ratios):<3} {boots[50]:>8.3f}-{boots[1949]:.3f}",
                          flush=True)
                    print("   ratios: " + " ".join(f"{r:.3f}" for r in ratios), flush=True)
            del q, k, v, o, acc, ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
