"""mha::FastDiv (csrc/common/fwd_params.h), the split kernel's division by run-time divisors (num_splits,
pack_ratio) as a multiply-high, an add and a shift: equal to the hardware division and remainder over every divisor
1..4096 and large ones, numerators up to 2^31 - 1 (tests/cpp/fastdiv_check.cpp). No GPU needed."""
import subprocess

from conftest import build_host_check


def test_fastdiv_matches_division(tmp_path):
    exe = build_host_check("fastdiv_check", tmp_path)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fastdiv_check: ok" in r.stdout
