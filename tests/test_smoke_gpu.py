"""Runs the forward smoke sweep, smoke_tests/smoke_test_fwd.sh -j 16 <build>/benchmark_mha_fwd (options first: the
script parses them with getopts), on the GPU; asserts it exits 0 and prints its summary line. Marked `smoke` (pytest.ini):
deselect with -m "not smoke". Skipped with the reason when the script, the benchmark executable or the GPU is absent.
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

SCRIPT = REPO_ROOT / "smoke_tests" / "smoke_test_fwd.sh"
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


def benchmark_exe():
    """benchmark_mha_fwd from $MHA_BUILD_DIR or the repository root (where build_mha.sh leaves it), or None."""
    for d in (os.environ.get("MHA_BUILD_DIR"), str(REPO_ROOT)):
        if d:
            exe = os.path.join(os.path.abspath(d), "benchmark_mha_fwd")
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


def test_smoke_fwd(capsys):
    if not SCRIPT.is_file():
        pytest.skip(f"{SCRIPT.relative_to(REPO_ROOT)} is absent")
    why = gpu_reason()
    if why:
        pytest.skip(why)
    exe = benchmark_exe()
    if exe is None:
        pytest.skip("benchmark_mha_fwd not found in $MHA_BUILD_DIR or the repository root; build it with "
                    "`bash build_mha.sh fwd`")
    r = subprocess.run(["bash", str(SCRIPT), "-j", str(JOBS), exe], cwd=REPO_ROOT, capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    out = r.stdout + r.stderr
    summary = summary_line(out)
    with capsys.disabled():
        print(f"\n[smoke_test_fwd.sh] {summary}")
    assert r.returncode == 0, f"smoke_test_fwd.sh exited {r.returncode}: {summary}\n{out[-6000:]}"
