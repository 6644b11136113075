#!/usr/bin/env python3
"""Split-count sweep of one benchmark_mha_fwd build: KV GB/s of a decode step (one query, bf16, --hq query heads on 8
KV heads) at each batch size, cache length and -num_splits value, the L2 swept before every call (-flush_cache=1),
every pass over the whole grid so run-to-run noise shows next to the differences. Splits 0 is the library's heuristic
(its count is printed as hN); each cell reads min-max over the passes and the mean's change from the heuristic's.

  python3 scripts/split_sweep.py --exe build/benchmark_mha_fwd --hdim 64 --batches 9,10,12 --lengths 8192,32768 \\
      --splits 0,2,3,4,6,8 [--page 16] [--layout bshd] [--hq 32] [--passes 2]
"""
import argparse
import re
import statistics
import subprocess


def kv_gbs(exe, b, L, d, hq, page, layout, splits):
    """K + V bytes over the call's time (the benchmark's own GB/s counts Q, K, V and O with hq heads) and the split
    count the call used."""
    perm = "1" if layout == "bhsd" else "0"
    cmd = [exe, "-prec=bf16", f"-b={b}", f"-h={hq}", "-h_k=8", f"-d={d}", "-s=1", f"-s_k={L}",
           f"-num_splits={splits}", "-v=0", "-warmup=5", "-repeat=20", f"-iperm={perm}", f"-operm={perm}",
           "-flush_cache=1"]
    if page:
        cmd.append(f"-page_block_size={page}")
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    gbs = re.search(r"([\d.]+) GB/s", out)
    used = re.search(r"num_splits:(\d+)", out)
    if not gbs:
        return 0.0, -1
    bench_bytes = b * hq * 2 * (d + 2 * L * d + d)
    kv_bytes = b * 8 * 2 * L * d * 2
    return float(gbs.group(1)) * kv_bytes / bench_bytes, (int(used.group(1)) if used else 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", required=True)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--hq", type=int, default=32, help="query heads (8 KV heads)")
    ap.add_argument("--batches", default="8,12,16,20,24,32")
    ap.add_argument("--lengths", default="8192,32768")
    ap.add_argument("--splits", default="0,1,2,3,4,6,8")
    ap.add_argument("--page", type=int, default=0, help="page_block_size (0: dense)")
    ap.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd")
    ap.add_argument("--passes", type=int, default=2)
    a = ap.parse_args()
    batches = [int(x) for x in a.batches.split(",")]
    lengths = [int(x) for x in a.lengths.split(",")]
    splits = [int(x) for x in a.splits.split(",")]
    if 0 not in splits:
        splits = [0] + splits
    res, used = {}, {}
    for _ in range(a.passes):
        for b in batches:
            for L in lengths:
                for s in splits:
                    g, u = kv_gbs(a.exe, b, L, a.hdim, a.hq, a.page, a.layout, s)
                    res.setdefault((b, L, s), []).append(g)
                    if s == 0:
                        used[(b, L)] = u
    print(f"# d={a.hdim} hq={a.hq} page={a.page} layout={a.layout}", flush=True)
    for b in batches:
        for L in lengths:
            base = statistics.mean(res[(b, L, 0)]) or 1.0
            cells = []
            for s in splits:
                v = res[(b, L, s)]
                name = f"h{used[(b, L)]}" if s == 0 else str(s)
                cells.append(f"{name}:{min(v):.0f}-{max(v):.0f}({statistics.mean(v) / base - 1:+.1%})")
            best = max((s for s in splits if s), key=lambda s: statistics.mean(res[(b, L, s)]), default=0)
            print(f"b={b:<3} L={L:<6} best={best:<3} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
