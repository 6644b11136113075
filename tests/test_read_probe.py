"""scripts/read_probe.cu (the pure-read probe of the decode cache's load methods): it builds with nvcc for sm_90a,
refuses bad arguments with its usage and exit status 2, and on an sm_90 GPU reports a positive bandwidth for each of
its methods (the six load methods, then the bulk-copy orders)."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, gpu_available

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found: cannot build scripts/read_probe.cu")
    exe = str(tmp_path_factory.mktemp("probe") / "read_probe")
    r = subprocess.run([NVCC, "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-cudart", "static",
                        "-o", exe, os.path.join(ROOT, "scripts", "read_probe.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def test_read_probe_refuses_bad_arguments(probe):
    # checked before any CUDA call, so this runs without a GPU too
    for args in (["100", "5"], ["64", "0"], ["0"], ["32", "6", "4"], ["32", "8", "7"], ["32", "1", "1", "extra"]):
        r = subprocess.run([probe, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "usage: read_probe" in r.stderr, (args, r.returncode, r.stderr)


def test_read_probe_reports_every_method(probe):
    ok, why = gpu_available()
    if not ok:
        pytest.skip(why)
    r = subprocess.run([probe, "2048", "264", "2"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0 and "no kernel image" in r.stderr:
        pytest.skip("not an sm_90 GPU: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    assert re.search(r"\d+ SMs, L2 \d+ MB, driver \d+, -?\d+ clusters of 4", r.stdout), r.stdout
    rates = dict(re.findall(r"^(\w+)\s+([\d.]+) GB/s", r.stdout, re.M))
    # 64 blocks per region, 264 regions: the static groups of 1 / 4 / 8 and the per-CTA counters (dyn4) divide them
    copies = ("bulk", "row256", "tmaef", "tmarow")
    expect = {"tma_ef", "tma", "tma_row", "cpasync", "cpasync_half", "ldg", "bulk", "bulk_dyn", "bulk_dyn_nmaj",
              "dyn4"} | {f"g{g}_{c}" for g in (1, 4, 8) for c in copies} | \
             {f"chunk{c}{t}" for c in (1, 2, 4, 8, 16, 32) for t in ("", "_tmaef")} | \
             {f"paced{k}W" for k in (2, 3, 4, 8)}
    assert set(rates) == expect, r.stdout
    # every method read the same bytes: the folded words agree (ldg folds all it loaded, so its word differs)
    words = dict(re.findall(r"^(\w+)\s+[\d.]+ GB/s.*xor ([0-9a-f]{8})", r.stdout, re.M))
    assert len({words[m] for m in expect - {"ldg"}}) == 1, r.stdout
    assert all(float(v) > 0 for v in rates.values()), r.stdout
