"""benchmark_mha_bwd and smoke_tests/smoke_test_bwd.sh without a GPU:
- the smoke script's run list (`-n` dry run): AITER's 768-run ck matrix plus our extra cases, sharding;
- the built benchmark: `-?`, bad flags and precisions, and every smoke invocation parsing up to the GPU query;
- the whole benchmark flow (layouts, uploads, workspace callbacks, rebuilt dropout mask, host references, comparison)
  linked with g++ against tests/cpp/fake_bwd_runtime.cpp, a host stand-in for the CUDA runtime and libmha_bwd.so.
"""
import concurrent.futures
import itertools
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, gpu_available

SCRIPT = os.path.join(ROOT, "smoke_tests", "smoke_test_bwd.sh")
CUDA_INC = "/usr/local/cuda/include"
COMMON = "-kname=1 -v=1 -warmup=0 -repeat=1"
MATRIX_RUNS = 2 * 2 * 4 * 2 * 2 * 2 * 6  # prec x perm x hdim x mode x bias x p_drop x shapes
EXTRA_RUNS = 210
EXIT_BAD_ARGS, EXIT_FAILED, EXIT_UNKNOWN_PREC = 255, 254, 253  # -1, -2, -3


def smoke_list(*options, env=None):
    r = subprocess.run(["bash", SCRIPT, "-n", *options, "benchmark_mha_bwd"], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def flags(line):
    """{flag: value} of one invocation (the executable dropped)."""
    return dict(tok[1:].split("=", 1) for tok in line.split()[1:])


def test_smoke_list_counts_and_common_flags():
    runs = smoke_list()
    assert len(runs) == MATRIX_RUNS + EXTRA_RUNS == 978
    assert len(smoke_list("-m", "matrix")) == MATRIX_RUNS
    assert len(smoke_list("-m", "extra")) == EXTRA_RUNS
    assert len(set(runs)) == len(runs), "duplicate invocations"
    for line in runs:
        assert line.startswith("benchmark_mha_bwd -")
        for tok in COMMON.split():
            assert f" {tok}" in line, f"{tok} missing from: {line}"


def test_smoke_matrix_is_aiters_product():
    shapes = {("1", "4", "2", "259", None, None), ("2", "2", None, "516", "253", None),
              ("1", "4", "1", "500", "251", "1"), ("1", "2", None, "900", "258", "2"),
              ("2", "1", None, "987", "219", "t:128,30"), ("2", "3", "1", "244", "499", "b:4,35")}
    seen = set()
    for line in smoke_list("-m", "matrix"):
        f = flags(line)
        assert f["iperm"] == f["operm"] and f["dbias"] == "0" and f["deterministic"] == "0"
        key = (f["prec"], f["iperm"], f["d"], f["mode"], f["bias"], f["p_drop"],
               (f["b"], f["h"], f.get("h_k"), f["s"], f.get("s_k"), f.get("mask")))
        seen.add(key)
    expected = set(itertools.product(["fp16", "bf16"], ["0", "1"], ["32", "64", "128", "256"], ["0", "1"],
                                     ["n", "a"], ["0.0", "0.2"], shapes))
    assert seen == expected


def test_smoke_extra_covers_the_hard_cases():
    extra = smoke_list("-m", "extra")
    fl = [flags(l) for l in extra]

    def some(pred):
        return any(pred(f) for f in fl)

    for prec in ("fp16", "bf16"):
        for bias in ("e", "e:1", "e:2"):
            assert some(lambda f: f["prec"] == prec and f.get("bias") == bias and f.get("dbias") == "1")
        for d in ("8", "16", "24", "40", "72", "96", "160", "192"):
            assert some(lambda f: f["prec"] == prec and f.get("d") == d and "d_v" not in f)
        assert some(lambda f: f["prec"] == prec and f.get("d") == "192" and f.get("d_v") == "128")
        assert some(lambda f: f["prec"] == prec and f.get("d") == "16" and f.get("d_v") == "128")
        for mask in ("t:16,4", "b:16,4", "xt:64", "xb:31", "g:16,8"):
            assert some(lambda f: f["prec"] == prec and f.get("mask") == mask)
        # GQA in group mode with a window, dropout and bias at once
        assert some(lambda f: f["prec"] == prec and f["mode"] == "1" and f["h"] != f.get("h_k", f["h"])
                    and f.get("mask", "0").startswith(("t:", "b:")) and float(f.get("p_drop", 0)) > 0
                    and f.get("bias", "n") != "n")
        assert some(lambda f: f["prec"] == prec and f.get("deterministic") == "1" and f["mode"] == "0")
        assert some(lambda f: f["prec"] == prec and f.get("deterministic") == "1" and f["mode"] == "1")
        assert some(lambda f: f["prec"] == prec and f["mode"] == "1" and "0" in f["s"].split(","))
        assert some(lambda f: f["prec"] == prec and f["mode"] == "1" and "0" in f.get("s_k", "").split(","))
        assert some(lambda f: f["prec"] == prec and f["mode"] == "0" and f.get("s_k") == "0")
        assert some(lambda f: f["prec"] == prec and f["s"] == "1")
        assert some(lambda f: f["prec"] == prec and f.get("drop_prefs") == "1")
        # the asm backward: both causal masks, windows in both modes, d64 and d128 instances, GQA / MQA, bshd, d !=
        # d_v; and its fallbacks
        v3 = [f for f in fl if f["prec"] == prec and f.get("bwd_v3") == "1"]
        assert {f.get("mask", "0") for f in v3 if f["mode"] == "0"} >= {"0", "1", "2"}
        assert {f["mode"] for f in v3 if f.get("mask", "0").startswith(("t:", "b:"))} == {"0", "1"}
        assert {f.get("d", "128") for f in v3} >= {"40", "64", "96", "128"}
        assert any(f.get("h_k", f["h"]) != f["h"] for f in v3) and any(f.get("iperm") == "0" for f in v3)
        assert any(f.get("deterministic") == "1" for f in v3) and any(f["mode"] == "1" for f in v3)


def test_smoke_shards_partition_the_list():
    runs = smoke_list()
    shards = [smoke_list(env={"SMOKE_SHARD": f"{i}/7"}) for i in range(1, 8)]
    assert sorted(itertools.chain(*shards)) == sorted(runs)
    assert shards[0][0] == runs[0] and shards[1][0] == runs[1]


@pytest.fixture(scope="module")
def bwd_exe(built):
    exe = os.path.join(built, "benchmark_mha_bwd")
    if not os.path.isfile(exe):
        pytest.skip(f"benchmark_mha_bwd is not in {built}; build it with `bash build_mha.sh bwd`")
    return exe


def run(exe, *args, env=None):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))


def test_help_lists_aiters_flags(bwd_exe):
    r = run(bwd_exe, "-?")
    assert r.returncode == EXIT_BAD_ARGS  # main returns -1, as AITER's
    defaults = {"v": "1", "mode": "0", "b": "2", "h": "8", "h_k": "-1", "s": "3328", "s_k": "-1", "d": "128",
                "d_v": "-1", "scale": "0", "iperm": "1", "operm": "1", "bias": "n", "dbias": "0", "prec": "fp16",
                "mask": "0", "kname": "0", "init": "1", "seed": "11939", "p_drop": "0", "drop_seed": "1",
                "drop_offset": "0", "drop_prefs": "0", "timer": "gpu", "warmup": "10", "repeat": "10",
                "deterministic": "0", "bwd_v3": "0", "v3_atomic_fp32": "1", "v3_bf16_cvt": "1", "v3_api_check": "0",
                "flush_cache": "0"}  # the last one is ours (stream_config::flush_cache_), after AITER's
    keys = re.findall(r"^\s*-(\w+)\s{4}.*\(default:([^)]*)\)", r.stdout, re.M)
    assert keys == list(defaults.items())


def test_bad_flags_and_precisions(bwd_exe):
    r = run(bwd_exe, "-nosuch=1")
    assert r.returncode != 0 and "no such arg" in r.stdout + r.stderr
    r = run(bwd_exe, "-b")
    assert r.returncode != 0 and "[key]=[value]" in r.stdout
    for prec in ("fp32", "fp8bf16", "fp8"):
        assert run(bwd_exe, f"-prec={prec}").returncode == EXIT_UNKNOWN_PREC
    r = run(bwd_exe, "-mask=zz")
    assert r.returncode == EXIT_BAD_ARGS and "not supported mask" in r.stderr
    r = run(bwd_exe, "-init=uf")
    assert r.returncode == EXIT_BAD_ARGS and "not supported init method" in r.stderr
    r = run(bwd_exe, "-bias=a", "-dbias=1")
    assert r.returncode == EXIT_FAILED and "dbias only exists when bias type is elementwise" in r.stderr
    r = run(bwd_exe, "-h=3", "-h_k=2")
    assert r.returncode == EXIT_FAILED and "must be multiple of nhead_k" in r.stderr
    r = run(bwd_exe, "-mask=t:4,0,2", "-s=16")  # sink tokens: mha_bwd_args has no sink_size
    assert r.returncode == EXIT_FAILED and r.stdout.splitlines()[-1] == "not supported yet"


def test_every_smoke_invocation_parses(bwd_exe):
    """Without a GPU each well-formed invocation gets as far as the device query; a flag the parser or the config
    rejects would exit differently."""
    has_gpu, _ = gpu_available()
    if has_gpu:
        pytest.skip("a GPU is present: the invocations would run; smoke_test_bwd.sh covers them there")
    runs = smoke_list()

    def check(line):
        r = run(bwd_exe, *line.split()[1:])
        ok = r.returncode == EXIT_FAILED and "no CUDA GPU visible" in r.stderr
        return None if ok else f"{line}: rc={r.returncode} {r.stdout[-300:]} {r.stderr[-300:]}"

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        bad = [m for m in pool.map(check, runs) if m]
    assert not bad, "\n".join(bad[:10])


# ---- the full flow on the host stand-in of the CUDA runtime and mha_bwd ----------------------------------------

@pytest.fixture(scope="module")
def fake_exe(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None or not os.path.isdir(CUDA_INC):
        pytest.skip("g++ or the CUDA runtime headers are missing")
    exe = str(tmp_path_factory.mktemp("bwd_fake") / "benchmark_mha_bwd")
    cmd = [gxx, "-std=c++17", "-O2", "-Wall", "-Werror", "-pthread", "-I", os.path.join(ROOT, "include"), "-I",
           os.path.join(ROOT, "csrc"), "-I", os.path.join(ROOT, "benchmark"), "-I", CUDA_INC,
           os.path.join(ROOT, "benchmark", "benchmark_mha_bwd.cpp"),
           os.path.join(ROOT, "tests", "cpp", "fake_bwd_runtime.cpp"), "-o", exe]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"benchmark_mha_bwd + fake runtime failed to build:\n{r.stderr[-4000:]}"
    return exe


FAKE_CASES = [
    "-b=1 -h=4 -h_k=2 -s=259 -d=64",
    "-b=2 -h=2 -s=130 -s_k=77 -d=32 -iperm=0 -operm=0 -bias=a -p_drop=0.2",
    "-b=1 -h=4 -h_k=1 -s=100 -s_k=51 -d=32 -mask=1 -bias=e -dbias=1 -prec=bf16",
    "-mode=1 -b=3 -h=4 -h_k=2 -s=0,17,55 -s_k=64,0,33 -d=40 -d_v=24 -mask=b:8,4 -bias=e:1 -dbias=1 -p_drop=0.3",
    "-mode=1 -b=3 -h=2 -s=40 -s_k=70 -d=16 -d_v=64 -mask=g:16,8 -bias=a:1 -p_drop=0.2 -drop_prefs=1 -drop_offset=9",
    "-mode=0 -b=2 -h=6 -h_k=3 -s=1 -s_k=33 -d=24 -mask=xt:8 -bias=e:2 -dbias=1 -iperm=1 -operm=0 -init=0",
    "-mode=0 -b=1 -h=2 -h_k=1 -s=33 -s_k=0 -mask=2 -deterministic=1 -init=2",
    "-mode=0 -b=2 -h=2 -s=10 -s_k=1 -bias=e -dbias=1",  # one key per row: dS cancels to noise (the relative floor)
    "-mode=0 -b=2 -h=3 -h_k=1 -s=64 -s_k=64 -mask=t:0,0 -prec=bf16",  # the diagonal alone, likewise
]


@pytest.mark.parametrize("case", FAKE_CASES)
def test_flow_validates_on_the_fake_runtime(fake_exe, case):
    r = run(fake_exe, *case.split(), *"-warmup=0 -repeat=1 -kname=1".split())
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stdout + r.stderr
    assert lines[0].startswith("[") and ", deterministic:" in lines[0] and ", mask:" in lines[0]
    assert re.fullmatch(r", fake_bwd_kernel, \d+\.\d{3} ms, \d+\.\d{2} TFlops, \d+\.\d{2} GB/s, valid:y", lines[1]), lines


def test_flow_reports_a_missing_gradient(fake_exe):
    r = run(fake_exe, *"-b=2 -h=2 -s=33 -d=16 -warmup=0 -repeat=1".split(), env={"FAKE_MHA_BWD": "skip_dk"})
    assert r.returncode == EXIT_FAILED
    assert ", valid:n" in r.stdout and "Error: KGrad Incorrect results!" in r.stdout
    assert "mismatch found at batch: 0" in r.stdout


def test_flow_reports_a_gradient_off_by_10_percent(fake_exe):
    """AITER's elementwise check (atol = rtol = 1e-2) passes 0.9 dQ on this unmasked shape (dQ is about as small as
    its atol); the relative bar on top (max error <= 5% of max |ref|) catches it."""
    r = run(fake_exe, *"-b=1 -h=4 -s=259 -d=128 -warmup=0 -repeat=1".split(), env={"FAKE_MHA_BWD": "scale_dq"})
    assert r.returncode == EXIT_FAILED, r.stdout
    assert ", valid:n" in r.stdout and "Error: QGrad Incorrect results!" in r.stdout
    assert "x max |ref|" in r.stdout and "number of errors" not in r.stdout, r.stdout  # the relative bar caught it


@pytest.mark.parametrize("case", ["-b=2 -h=2 -s=40 -s_k=70 -d=16 -p_drop=0.2",
                                  "-mode=1 -b=3 -h=2 -s=40 -s_k=70 -d=16 -p_drop=0.2 -drop_prefs=1"])
def test_flow_checks_the_stored_random_values(fake_exe, case):
    """With dropout, -v=1 asks mha_bwd for its random values (is_store_randval, as AITER) and compares every one
    with philox.h's: the fake's stored values validate, and one wrong value fails."""
    good = run(fake_exe, *case.split(), "-warmup=0", "-repeat=1")
    assert good.returncode == 0 and ", valid:y" in good.stdout and ", s_randval:1" in good.stdout, good.stdout
    bad = run(fake_exe, *case.split(), "-warmup=0", "-repeat=1", env={"FAKE_MHA_BWD": "bad_randval"})
    assert bad.returncode == EXIT_FAILED and ", valid:n" in bad.stdout, bad.stdout
    assert "Error: RandVal Incorrect results!" in bad.stdout and "number of errors: 1" in bad.stdout, bad.stdout


def test_v3_api_check_runs_the_ck_backward(fake_exe):
    """AITER HEAD's mha_bwd falls back to ck even with v3_api_check: the benchmark runs and validates."""
    r = run(fake_exe, *"-b=1 -h=2 -s=33 -d=16 -v3_api_check=1 -warmup=0 -repeat=1".split())
    assert r.returncode == 0 and ", valid:y" in r.stdout, r.stdout + r.stderr


def test_v3_api_check_answers_when_the_asm_backward_covers_the_call(fake_exe):
    """With -bwd_v3=1 and an asm backward that covers the call, -v3_api_check=1 prints 'v3 supported' and exits 0
    without timing or validating anything; without -bwd_v3 the ck backward runs as above."""
    r = run(fake_exe, *"-b=1 -h=2 -s=33 -d=16 -bwd_v3=1 -v3_api_check=1".split(), env={"FAKE_MHA_BWD": "asm"})
    assert r.returncode == 0 and r.stdout.rstrip().endswith(", v3 supported"), r.stdout + r.stderr
    assert "valid:" not in r.stdout and "TFlops" not in r.stdout, r.stdout
    r = run(fake_exe, *"-b=1 -h=2 -s=33 -d=16 -v3_api_check=1 -warmup=0 -repeat=1".split(), env={"FAKE_MHA_BWD": "asm"})
    assert r.returncode == 0 and ", valid:y" in r.stdout, r.stdout + r.stderr


def test_flow_reports_unsupported(fake_exe):
    r = run(fake_exe, *"-b=2 -h=2 -s=33 -d=16".split(), env={"FAKE_MHA_BWD": "unsupported"})
    assert r.returncode == EXIT_FAILED
    assert r.stdout.splitlines()[1:] == ["not supported yet"]
    assert "reason: fake mha_bwd: unsupported on request" in r.stderr


def test_timing_only_run_and_flops(fake_exe):
    """-v=0 fills on the device and prints no verdict; FLOPs are AITER's count, halved under a mask as the forward
    benchmark does: fake time 0.25 ms, b=1 h=1 s=s_k=64 d=d_v=128 -> (3*2 + 2*2) * 64*64*128 = 5.24 MFLOP."""
    full = run(fake_exe, *"-v=0 -b=1 -h=1 -s=64 -d=128".split())
    assert full.returncode == 0 and full.stdout.splitlines()[1] == ", 0.250 ms, 0.02 TFlops, 0.53 GB/s"
    masked = run(fake_exe, *"-v=0 -b=1 -h=1 -s=640 -d=128 -mask=1".split())
    unmasked = run(fake_exe, *"-v=0 -b=1 -h=1 -s=640 -d=128".split())
    tf = [float(re.search(r"([\d.]+) TFlops", x.stdout).group(1)) for x in (masked, unmasked)]
    assert tf[1] == pytest.approx(2 * tf[0], rel=0.01)
