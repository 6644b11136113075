"""Runs the smoke sweeps on the GPU: smoke_tests/smoke_test_fwd.sh -j 16 <build>/benchmark_mha_fwd and
smoke_tests/smoke_test_bwd.sh -j 16 <build>/benchmark_mha_bwd (options first: the scripts parse them with getopts);
asserts each exits 0 and prints its summary line. Marked `smoke` (pytest.ini): deselect with -m "not smoke". Skipped
with the reason when a script, its benchmark executable or the GPU is absent.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _mha_paths import REPO_ROOT  # noqa: E402

pytestmark = pytest.mark.smoke

JOBS = 16
TIMEOUT_S = 3600


def gpu_reason():
    """"" when an NVIDIA GPU is usable, else why not."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no GPU on this machine (nvidia-smi not found)"
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    if r.returncode != 0 or "GPU" not in r.stdout:
        return "no GPU on this machine (nvidia-smi -L lists none)"
    return ""


def benchmark_exe(name="benchmark_mha_fwd"):
    """`name` from $MHA_BUILD_DIR or the repository root (where build_mha.sh leaves it), or None."""
    for d in (os.environ.get("MHA_BUILD_DIR"), str(REPO_ROOT)):
        if d:
            exe = os.path.join(os.path.abspath(d), name)
            if os.path.isfile(exe) and os.access(exe, os.X_OK):
                return exe
    return None


def summary_line(output):
    """The script's summary: the last line that reports passes, else the last non-empty line."""
    lines = [l for l in output.splitlines() if l.strip()]
    for l in reversed(lines):
        if re.search(r"\bpassed\b", l):
            return l
    return lines[-1] if lines else "(no output)"


def run_smoke(direction, capsys):
    """smoke_test_<direction>.sh against benchmark_mha_<direction>; skips with the reason when it cannot run."""
    script = REPO_ROOT / "smoke_tests" / f"smoke_test_{direction}.sh"
    if not script.is_file():
        pytest.skip(f"{script.relative_to(REPO_ROOT)} is absent")
    why = gpu_reason()
    if why:
        pytest.skip(why)
    exe = benchmark_exe(f"benchmark_mha_{direction}")
    if exe is None:
        pytest.skip(f"benchmark_mha_{direction} not found in $MHA_BUILD_DIR or the repository root; build it with "
                    f"`bash build_mha.sh {direction}`")
    r = subprocess.run(["bash", str(script), "-j", str(JOBS), exe], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    out = r.stdout + r.stderr
    summary = summary_line(out)
    with capsys.disabled():
        print(f"\n[smoke_test_{direction}.sh] {summary}")
    assert r.returncode == 0, f"smoke_test_{direction}.sh exited {r.returncode}: {summary}\n{out[-6000:]}"


def test_smoke_fwd(capsys):
    run_smoke("fwd", capsys)


def test_smoke_bwd(capsys):
    run_smoke("bwd", capsys)
