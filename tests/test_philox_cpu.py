"""Philox4x32-10 against Random123's known answers, and the dropout counter layout (csrc/common/philox.h) that
forward, backward and the host references share: 16 elements per Philox call with distinct bytes, one call for the 16
elements a backward fragment thread holds in 16 rows, the kernel's byte pick, two calls per 16 rows of a forward key
block, distinct streams per (batch, head) / offset / seed, and the kept fraction (tests/cpp/philox_check.cpp). No GPU
needed."""
import subprocess

from conftest import build_host_check


def test_dropout_counter_layout(tmp_path):
    exe = build_host_check("philox_check", tmp_path)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "philox_check: ok" in r.stdout
