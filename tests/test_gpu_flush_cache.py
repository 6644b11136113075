"""stream_config::flush_cache_ through the benchmarks' -flush_cache=1 (csrc/api/launch.h, l2_flush.cu): every timed
pass follows a read sweep of four times the L2 and is timed alone. The results stay valid, and a decode call whose
whole cache (16 MB) fits in the L2 gets slower than back-to-back timing, where the cache stays in the L2 between
passes (a sweep that did nothing would leave the two alike). Skipped with the reason without a GPU or the
executables.
"""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_smoke_gpu import benchmark_exe, gpu_reason  # noqa: E402

DECODE = ["-prec=bf16", "-b=1", "-h=8", "-h_k=2", "-s=1", "-s_k=16384", "-d=128", "-num_splits=0"]


def exe_or_skip(name):
    why = gpu_reason()
    if why:
        pytest.skip(why)
    exe = benchmark_exe(name)
    if exe is None:
        pytest.skip(f"{name} not found in $MHA_BUILD_DIR or the repository root")
    return exe


def run(exe, args):
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    return out


def gbs(out):
    m = re.findall(r"([\d.]+) GB/s", out)
    assert m, out
    return float(m[-1])


def test_fwd_decode_flush_cache_valid_and_colder():
    exe = exe_or_skip("benchmark_mha_fwd")
    out = run(exe, DECODE + ["-v=1", "-warmup=2", "-repeat=5", "-flush_cache=1"])
    assert "valid:y" in out, out
    warm = gbs(run(exe, DECODE + ["-v=0", "-warmup=5", "-repeat=50"]))
    cold = gbs(run(exe, DECODE + ["-v=0", "-warmup=5", "-repeat=50", "-flush_cache=1"]))
    assert cold < warm / 1.1, f"an L2-resident decode read {cold} GB/s after sweeps vs {warm} back to back"


@pytest.mark.parametrize("timer", ["gpu", "cpu"])
def test_fwd_prefill_flush_cache_valid(timer):
    exe = exe_or_skip("benchmark_mha_fwd")
    out = run(exe, ["-prec=fp16", "-b=2", "-h=4", "-s=300", "-d=64", "-mask=1", "-v=1", "-warmup=1", "-repeat=3",
                    "-flush_cache=1", f"-timer={timer}"])
    assert "valid:y" in out and gbs(out) > 0, out


def test_bwd_flush_cache_valid():
    exe = exe_or_skip("benchmark_mha_bwd")
    out = run(exe, ["-prec=bf16", "-b=1", "-h=2", "-s=256", "-d=64", "-v=1", "-warmup=1", "-repeat=3",
                    "-flush_cache=1"])
    assert "valid:y" in out and gbs(out) > 0, out
