"""Shared set-up: where the built libraries are, and whether a GPU is there.

Before collection (the binding tests import aiter_mha at module load), pytest_configure finds a build: MHA_BUILD_DIR
or the repository root when they already hold one (the GPU machine builds there with build_mha.sh); otherwise it
builds the `ci` preset for sm_90a into a temporary directory (no GPU needed, removed at the end) and points
MHA_BUILD_DIR at it. An existing build older than the sources stops the run (its ninja graph has work to do, or a
benchmark is older than its sources): rebuild it, or set MHA_ALLOW_STALE_BUILD=1. The `built` fixture
returns the build directory, or skips with the reason it could not be made.

MHA_REQUIRE_ALL_KERNELS=1 (the GPU machine's full-build runs) turns the GPU tests' "not in this build" skips into
failures, so a missing instance cannot hide a case.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_BUILD = {"dir": None, "why": ""}


def build_host_check(name, out_dir, flags=()):
    """Compiles tests/cpp/<name>.cpp (host-only C++ against csrc/) with g++ -Wall -Werror into out_dir and returns the
    executable; skips when g++ is missing."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found")
    exe = os.path.join(str(out_dir), name)
    r = subprocess.run([gxx, "-std=c++17", "-O2", "-Wall", "-Werror", *flags, "-I", os.path.join(ROOT, "csrc"),
                        os.path.join(ROOT, "tests", "cpp", name + ".cpp"), "-o", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _has_build(d):
    return all(os.path.exists(os.path.join(d, f)) for f in ("libmha_fwd.so", "libmha_bwd.so", "benchmark_mha_fwd"))


def stale_build(d):
    """Why the build in d is older than the sources, or "" when it is current (or cannot be judged)."""
    ninja = shutil.which("ninja")
    graph = os.path.join(d, "build")
    if ninja and os.path.exists(os.path.join(graph, "build.ninja")):
        r = subprocess.run([ninja, "-C", graph, "-n"], capture_output=True, text=True)
        if r.returncode != 0 or "no work to do" not in r.stdout:
            return f"its ninja graph ({graph}) has work to do"
    dirs = ("benchmark", "include", "csrc/reference", "csrc/common")  # the benchmarks' sources and headers
    newest = max(os.path.getmtime(os.path.join(ROOT, sub, f))
                 for sub in dirs for f in os.listdir(os.path.join(ROOT, sub)))
    for exe in ("benchmark_mha_fwd", "benchmark_mha_bwd"):
        path = os.path.join(d, exe)
        if os.path.exists(path) and os.path.getmtime(path) < newest:
            return f"{exe} is older than {', '.join(dirs)}"
    return ""


def asm_fwd_instance_tag(hdim_q, hdim_v):
    """The head-dim part of the name ("d64", "d192_dv128", ...) of the smallest asm forward instance that covers the
    head dims, the one mha_fwd picks (the least hdim + hdim_v among csrc/codegen/generate.py's ASM_FWD_TILES)."""
    sys.path.insert(0, os.path.join(ROOT, "csrc", "codegen"))
    import generate
    q, v = min((t for t in generate.ASM_FWD_TILES if t[0] >= hdim_q and t[1] >= hdim_v), key=sum)
    return f"d{q}" if q == v else f"d{q}_dv{v}"


# (mask_type, left, right) for the asm families' group-mode tests: none, causal of both corners, and sliding windows
# of both corners: narrower than a block (key or query), wider than several, a window without a right bound, the
# diagonal alone
ASM_MASKS = [(0, -1, -1), (1, -1, 0), (2, -1, 0), (2, 300, 0), (1, 40, 100), (2, 64, -1), (1, 0, 0)]


def varlen_asm_problem(table, name, mask_type):
    """One entry of a VARLEN_ASM table (test_gpu_fwd_features.py, test_gpu_bwd.py) as (lens, h, hk, d, dv, dtype name,
    the other Varlen options): d_v defaults to d; fp16 for top-left causal (mask_type 1), else bf16."""
    cfg = dict(table[name])
    d = cfg.pop("d")
    return cfg.pop("lens"), cfg.pop("h"), cfg.pop("hk"), d, cfg.pop("dv", d), "bf16" if mask_type != 1 else "fp16", cfg


def require_all_kernels():
    """True when "not in this build" must fail a GPU test instead of skipping it (MHA_REQUIRE_ALL_KERNELS=1)."""
    return os.environ.get("MHA_REQUIRE_ALL_KERNELS") == "1"


def gpu_available():
    """(True, "") when an NVIDIA GPU is usable, else (False, reason)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False, "no GPU on this machine (nvidia-smi not found)"
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    if r.returncode != 0 or "GPU" not in r.stdout:
        return False, "no GPU on this machine (nvidia-smi -L lists none)"
    return True, ""


def _ensure_build():
    for d in (os.environ.get("MHA_BUILD_DIR"), ROOT):
        if d and _has_build(d):
            why = stale_build(d) if os.environ.get("MHA_ALLOW_STALE_BUILD") != "1" else ""
            if why:
                raise pytest.UsageError(f"the build in {d} is older than the sources: {why}. Rebuild it (bash "
                                        f"build_mha.sh all, in {d}) or set MHA_ALLOW_STALE_BUILD=1")
            return d, ""
    if shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"):
        return None, "nvcc not found: cannot build the libraries"
    d = tempfile.mkdtemp(prefix="mha_ci_build_")
    env = dict(os.environ, MHA_COMPILE_ARGS="--preset ci --arch sm_90a",
               MHA_BENCH_GENCODE="-gencode=arch=compute_90a,code=sm_90a")
    env["PATH"] = env.get("PATH", "") + ":/usr/local/cuda/bin"
    r = subprocess.run(["bash", os.path.join(ROOT, "build_mha.sh"), "all"], cwd=d, env=env, capture_output=True,
                       text=True)
    if r.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        return None, f"ci-preset build failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    _BUILD["temporary"] = d
    return d, ""


def pytest_report_header(config):
    return f"mha build: {_BUILD['dir'] or 'none (' + _BUILD['why'].splitlines()[0] + ')'}"


def pytest_configure(config):
    _BUILD["dir"], _BUILD["why"] = _ensure_build()
    if _BUILD["dir"]:
        os.environ["MHA_BUILD_DIR"] = _BUILD["dir"]


def pytest_unconfigure(config):
    if _BUILD.get("temporary"):
        shutil.rmtree(_BUILD["temporary"], ignore_errors=True)


@pytest.fixture(scope="session")
def built():
    if _BUILD["dir"] is None:
        if "build failed" in _BUILD["why"]:
            pytest.fail(_BUILD["why"])
        pytest.skip(_BUILD["why"])
    return _BUILD["dir"]
