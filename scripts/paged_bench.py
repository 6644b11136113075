#!/usr/bin/env python3
"""Throughput of the two paged-attention decode implementations (aiter_mha.paged_attention_v1_core, the generic one,
and aiter_mha.pa_fwd_asm, the tuned one) on vLLM's block-16 caches: one query per sequence, 32 query / 8 KV heads,
d=128, bf16, every sequence at the full length, blocks shuffled over the pool (--ordered: in order). GB/s of K + V read (2 * b * h_k * L *
d * 2 bytes over the GPU kernel time of one call). Each call runs after a read of a 512 MiB buffer (the L2 swept; a
write sweep would leave the L2 full of dirty lines, whose write-back then slows the call) and is timed on the device
under torch.profiler (its paged-attention kernels only, first start to last end, the sweep excluded), the median of
--iters calls.
`scripts/decode_bench.py`'s page16 column is mha_fwd_splitkv on the same shapes (timed with CUDA events).

  python3 scripts/paged_bench.py [--batches 1,16,64] [--lengths 1024,8192,32768] [--partition 256]
Needs torch and the built aiter_mha module (MHA_BUILD_DIR or the repo root).
"""
import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from _mha_paths import load_binding  # noqa: E402
from _paged_common import X, asm_v_shuffle  # noqa: E402


def device_us(fn, sweep, iters, only=None):
    """Median GPU time (us) of fn's paged-attention kernels per call, from the first one's start to the last one's end
    (only: the summed times of those whose name has it), each call after a sweep of the L2."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            sweep.sum()
            fn()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and
                      ("pa_v1_" in e.name or "pa_asm_" in e.name)), key=lambda e: e.time_range.start)
    per = len(kernels) // iters
    if per < 1 or per * iters != len(kernels):
        raise RuntimeError(f"{len(kernels)} paged-attention kernels recorded for {iters} calls")
    def call_us(ks):
        if only is None: # first start to last end: a combine launched as a programmatic dependent overlaps the
            return max(e.time_range.end for e in ks) - min(e.time_range.start for e in ks)  # partition kernel
        return sum(e.time_range.elapsed_us() for e in ks if only in e.name)
    return statistics.median(call_us(kernels[i * per:(i + 1) * per]) for i in range(iters))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--lengths", default="1024,8192,32768")
    ap.add_argument("--partition", type=int, default=256, help="paged_attention_v1_core's partition size")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--ordered", action="store_true", help="block tables in pool order (default: shuffled)")
    args = ap.parse_args()
    m, why = load_binding()
    if m is None:
        sys.exit(why)
    hq, hk, d, bs = 32, 8, 128, 16
    sweep = torch.ones(128 << 20, dtype=torch.float32, device="cuda")
    print(f"# {torch.cuda.get_device_name()}; 32 q / 8 KV heads, d128, bf16, block 16, L2 swept; v1 partition "
          f"{args.partition}; GB/s of K + V over the median kernel time of {args.iters} calls")
    print(f"{'b':>3} {'L':>7} {'v1 us':>9} {'v1 GB/s':>8} {'(combine us)':>12} {'asm us':>9} {'asm GB/s':>9}")
    g = torch.Generator(device="cuda").manual_seed(0)
    for b in map(int, args.batches.split(",")):
        for L in map(int, args.lengths.split(",")):
            nb = b * L // bs
            k5 = torch.rand(nb, hk, d // X, bs, X, device="cuda", generator=g).sub_(0.5).bfloat16()
            v4 = torch.rand(nb, hk, d, bs, device="cuda", generator=g).sub_(0.5).bfloat16()
            va = asm_v_shuffle(v4)
            q = torch.rand(b, hq, d, device="cuda", generator=g).sub_(0.5).bfloat16()
            order = torch.arange(nb, device="cuda") if args.ordered else torch.randperm(nb, device="cuda", generator=g)
            tables = order.int().view(b, L // bs).contiguous()
            lens = torch.full((b,), L, dtype=torch.int32, device="cuda")
            out1, out2 = torch.empty_like(q), torch.empty_like(q)
            ws = torch.empty(max(m.paged_attention_workspace_bytes(b, hq, d, L, args.partition), 16),
                             dtype=torch.uint8, device="cuda")

            def v1():
                m.paged_attention_v1_core(out1, ws, q, k5, v4, d ** -0.5, tables, None, lens, L, None, "auto", "HND",
                                          0.0, None, None, partition_size=args.partition)

            def asm():
                m.pa_fwd_asm(q, k5, va, tables, lens, tables.stride(0), out_=out2)

            t1, t2 = device_us(v1, sweep, args.iters), device_us(asm, sweep, args.iters)
            tr = device_us(v1, sweep, args.iters, "reduce")
            err = float((out1.float() - out2.float()).abs().max())
            gb = 2 * b * hk * L * d * 2 / 1e3
            print(f"{b:>3} {L:>7} {t1:>9.1f} {gb / t1:>8.0f} {tr:>12.1f} {t2:>9.1f} {gb / t2:>9.0f}   (max |v1 - asm| {err:.2g})",
                  flush=True)
            del k5, v4, va, ws


if __name__ == "__main__":
    main()
