#!/usr/bin/env python3
"""Same-call A/B of decode builds (scripts/decode_build.sh): KV GB/s of each build at each shape, the L2 swept before
every call (-flush_cache=1), 32 query / 8 KV heads, one query, d=128, bf16. Each pass repeats the whole sweep, so
run-to-run noise shows next to the differences.

  python3 scripts/decode_ab.py --specs "a=/tmp/base b=/tmp/exp b_env=/tmp/exp:MHA_SPLITKV_MERGE=combine" \\
      --shapes 1x8192,16x1024 [--splits 0,4] [--page 16] [--layout bshd]

A spec is NAME=DIR[:ENV=VALUE...]. Builds only, no peer: scripts/decode_bench.py times PyTorch SDPA next to ours.
"""
import argparse
import os
import re
import subprocess


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", required=True)
    ap.add_argument("--shapes", default="1x1024,1x8192,1x32768,16x1024,16x8192,64x1024")
    ap.add_argument("--splits", default="0", help="comma list of -num_splits values (0: the heuristic)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd")
    ap.add_argument("--page", type=int, default=0, help="page_block_size (0: dense)")
    a = ap.parse_args()
    specs = []
    for spec in a.specs.split():
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in parts[1:])
        specs.append((name, os.path.join(parts[0], "benchmark_mha_fwd"), env))
    shapes = [tuple(map(int, s.split("x"))) for s in a.shapes.split(",")]

    def kv_bytes(b, n):
        return 2 * b * 8 * n * 128 * 2

    def ours(exe, env, b, n, splits):
        perm = "1" if a.layout == "bhsd" else "0"
        cmd = [exe, "-prec=bf16", f"-b={b}", "-h=32", "-h_k=8", "-d=128", "-s=1", f"-s_k={n}", f"-num_splits={splits}",
               "-v=0", "-warmup=5", "-repeat=20", f"-iperm={perm}", f"-operm={perm}", "-flush_cache=1"]
        if a.page:
            cmd.append(f"-page_block_size={a.page}")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
        gbs, used = re.search(r"([\d.]+) GB/s", out), re.search(r"num_splits:(\d+)", out)
        if not gbs or float(gbs.group(1)) <= 0:
            return 0.0, "?"
        # the benchmark counts Q, K, V and O with all 32 heads; the time from its GB/s field
        ms = b * 32 * 2 * (128 + 2 * n * 128 + 128) / 1e6 / float(gbs.group(1))
        return kv_bytes(b, n) / ms / 1e6, used.group(1) if used else "?"

    for splits in a.splits.split(","):
        for p in range(a.passes):
            for b, n in shapes:
                row = [f"splits={splits} pass {p} b={b:<3} keys={n:<7}"]
                for name, exe, env in specs:
                    gbs, used = ours(exe, env, b, n, splits)
                    row.append(f"{name}={gbs:7.0f} ({used})")
                print("  ".join(row), flush=True)


if __name__ == "__main__":
    main()
