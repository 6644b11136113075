#!/usr/bin/env python3
"""Same-call A/B of decode builds (scripts/decode_build.sh): KV GB/s of each build at each shape, the L2 swept before
every call (-flush_cache=1), 32 query / 8 KV heads, one query, d=128 (--hdim), bf16. Each pass repeats the whole
sweep, so run-to-run noise shows next to the differences.

  python3 scripts/decode_ab.py --specs "a=/tmp/base b=/tmp/exp b_env=/tmp/exp:MHA_SPLITKV_MERGE=combine" \\
      --shapes 1x8192,16x1024 [--splits 0,4] [--page 16] [--layout bshd]

A spec is NAME=DIR[:ENV=VALUE...]. Builds only, no peer: scripts/decode_bench.py times PyTorch SDPA next to ours.
"""
import argparse
import os

from decode_bench import ours


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", required=True)
    ap.add_argument("--shapes", default="1x1024,1x8192,1x32768,16x1024,16x8192,64x1024")
    ap.add_argument("--splits", default="0", help="comma list of -num_splits values (0: the heuristic)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd")
    ap.add_argument("--page", type=int, default=0, help="page_block_size (0: dense)")
    ap.add_argument("--hdim", type=int, default=128, help="head dim (the builds must have it)")
    a = ap.parse_args()
    specs = []
    for spec in a.specs.split():
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in parts[1:])
        specs.append((name, os.path.join(parts[0], "benchmark_mha_fwd"), env))
    shapes = [tuple(map(int, s.split("x"))) for s in a.shapes.split(",")]

    for splits in a.splits.split(","):
        for p in range(a.passes):
            for b, n in shapes:
                row = [f"splits={splits} pass {p} b={b:<3} keys={n:<7}"]
                for name, exe, env in specs:
                    ms, used, _ = ours(exe, b, n, a.page, a.layout, True, splits, env, a.hdim)
                    gbs = 2 * b * 8 * n * a.hdim * 2 / ms / 1e6 if ms else 0.0  # K + V bytes
                    row.append(f"{name}={gbs:7.0f} ({used})")
                print("  ".join(row), flush=True)


if __name__ == "__main__":
    main()
