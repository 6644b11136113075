#!/usr/bin/env python3
"""Forward (or, with --bwd, backward) TFLOP/s of benchmark_mha_fwd / benchmark_mha_bwd on the standard grid next to
PyTorch SDPA (flash = FlashAttention-2, cuDNN), measured in the same process run on the same GPU. Grid
(FlashAttention-3 paper): 16k tokens (b = 16384 // s), hidden 2048 (h = 2048 // d), bf16, causal and not. Both sides
count 4*b*h*s*s*d FLOPs forward and 2.5x that backward, halved for causal (ours computed here from the ms).

  python3 scripts/perf_grid.py --exe ./benchmark_mha_fwd --peer .carry/peer_sdpa.py [--hdims 64,128,256]
  python3 scripts/perf_grid.py --bwd --exe ./benchmark_mha_bwd [--extra "-deterministic=1"]
"""
import argparse
import json
import re
import subprocess
import sys


def ours(exe, d, s, causal, extra, bwd=False):
    b, h = max(1, 16384 // s), 2048 // d
    cmd = [exe, "-prec=bf16", f"-b={b}", f"-h={h}", f"-s={s}", f"-d={d}", f"-mask={2 if causal else 0}", "-v=0",
           "-warmup=5", "-repeat=20", "-kname=1"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    if not bwd: # the forward's TFlops already halve for causal, and carry more digits than its ms
        m = re.search(r"([\d.]+) TFlops", out)
        return (float(m.group(1)) if m else None), out.strip()
    m = re.search(r"([\d.]+) ms", out)
    if not m or float(m.group(1)) <= 0:
        return None, out.strip()
    flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
    return flops / float(m.group(1)) / 1e9, out.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default="./benchmark_mha_fwd")
    ap.add_argument("--peer", default=".carry/peer_sdpa.py")
    ap.add_argument("--hdims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--extra", default="", help="extra benchmark flags, space separated")
    ap.add_argument("--bwd", action="store_true", help="backward: benchmark_mha_bwd against SDPA's backward")
    a = ap.parse_args()
    if a.bwd and a.exe == "./benchmark_mha_fwd":
        a.exe = "./benchmark_mha_bwd"
    key = "bwd_tflops" if a.bwd else "fwd_tflops"
    peer = subprocess.run([sys.executable, a.peer, "--hdims", a.hdims, "--seqlens", a.seqlens, "--causal", a.causal,
                           "--backends", "flash,cudnn", "--decode", ""] + ([] if a.bwd else ["--no-bwd"]), capture_output=True, text=True)
    ref = {}
    for line in peer.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            if key in r:
                ref[(r["backend"], r["d"], r["s"], r["causal"])] = r[key]
            elif "gpu" in r:
                print("# peer:", line)
    print(f"{'d':>4} {'s':>6} {'causal':>6} {'ours':>8} {'flash':>8} {'cudnn':>8} {'vs flash':>9} {'vs cudnn':>9}")
    worst = None
    for d in map(int, a.hdims.split(",")):
        for s in map(int, a.seqlens.split(",")):
            for c in map(int, a.causal.split(",")):
                t, _ = ours(a.exe, d, s, c, a.extra.split(), a.bwd)
                f, cd = ref.get(("flash", d, s, c)), ref.get(("cudnn", d, s, c))
                rf = t / f if t and f else None
                rc = t / cd if t and cd else None
                if rf and s >= 1024 and (worst is None or rf < worst[0]):
                    worst = (rf, d, s, c)
                print(f"{d:>4} {s:>6} {c:>6} {t or 0:>8.1f} {f or 0:>8.1f} {cd or 0:>8.1f} {rf or 0:>9.2f} {rc or 0:>9.2f}",
                      flush=True)
    if worst:
        print(f"worst ratio vs flash (s >= 1024): {worst[0]:.2f} at d={worst[1]} s={worst[2]} causal={worst[3]}")


if __name__ == "__main__":
    main()
