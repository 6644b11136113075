"""The dropout counter layout (csrc/common/philox.h) that forward, backward and the host references share: 16
elements per Philox call with distinct bytes, one call for the 16 elements a backward fragment thread holds in 16 rows,
the kernel's byte pick, distinct streams per (batch, head) / offset / seed, and the kept fraction
(tests/cpp/philox_check.cpp). No GPU needed."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT


def test_dropout_counter_layout(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    exe = str(tmp_path / "philox_check")
    r = subprocess.run([gxx, "-std=c++17", "-O2", "-Wall", "-Werror", "-I", os.path.join(ROOT, "csrc"),
                        os.path.join(ROOT, "tests", "cpp", "philox_check.cpp"), "-o", exe],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "philox_check: ok" in r.stdout
