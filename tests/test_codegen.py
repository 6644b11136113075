"""The generator and compile.py without a GPU: instance list, filters, generated tables, --list and error messages."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "csrc", "codegen"))
import generate as gen  # noqa: E402


def run_compile(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, "compile.py"), *args], cwd=cwd, capture_output=True,
                          text=True, env=env)


def test_instance_names_are_unique_and_complete():
    inst = gen.all_instances()
    names = [i.name for i in inst]
    assert len(names) == len(set(names))
    dims = {(32, 32), (64, 64), (96, 96), (128, 128), (160, 160), (192, 128), (192, 192), (256, 256)}
    # forward: plain, alibi and full per head-dim pair and dtype, dropout at d128 only (FWD_VARIANT_DIMS)
    assert {(i.dtype, i.hdim, i.hdim_v, i.variant) for i in inst if i.api == "fwd"} == {
        (d, q, v, var) for d in ("fp16", "bf16") for (q, v) in dims for var in ("plain", "alibi", "full")} | {
        (d, 128, 128, "dropout") for d in ("fp16", "bf16")}
    # the d128 dropout instance on the full instance's tile
    assert [(i.block_m, i.block_n, i.warps) for i in inst if i.api == "fwd" and i.variant == "dropout"] == [
        (128, 32, 4)] * 2
    # split-KV: a decode (16-row, one warp) and a prefill (64-row) tile per head-dim pair, full variant; a plain
    # decode tile at d64, d128 and d256 (SPLIT_PLAIN_DIMS)
    assert {(i.dtype, i.hdim, i.hdim_v, i.block_m) for i in inst if i.api == "fwd_splitkv" and i.variant == "full"} == {
        (d, q, v, m) for d in ("fp16", "bf16") for (q, v) in dims for m in (16, 64)}
    assert sorted((i.dtype, i.hdim, i.hdim_v, i.block_m, i.block_n, i.warps) for i in inst
                  if i.api == "fwd_splitkv" and i.variant != "full") == [
        (t, d, d, 16, 16 if d == 256 else 32, 1) for t in ("bf16", "fp16") for d in (64, 128, 256)]
    assert {i.variant for i in inst if i.api == "fwd_splitkv"} == {"full", "plain"}
    # backward: plain (masks only), alibi, dropout and full per head-dim pair and dtype
    assert {(i.dtype, i.hdim, i.hdim_v, i.variant) for i in inst if i.api == "bwd"} == {
        (d, q, v, var) for d in ("fp16", "bf16") for (q, v) in dims for var in ("plain", "alibi", "dropout", "full")}


def test_filters_select_the_expected_instances():
    inst = gen.all_instances()
    # plain: the ck instance, the asm (sm_90a) one and the split-KV decode tile's
    assert [i.name for i in gen.select(inst, ["fwd"], ["bf16"], ["128"], "", ["plain"])] == [
        "fmha_fwd_ck_bf16_d128_b128x48_w4_plain", "fmha_fwd_asm_v3_bf16_d128_b128x176_w12_plain",
        "fmha_fwd_splitkv_ck_bf16_d128_b16x32_w1_plain"]
    assert sorted(i.name for i in inst if i.family == "asm_v3" and i.api == "fwd") == [
        f"fmha_fwd_asm_v3_{t}_d{d}_b128x{n}_w12_plain" for t in ("bf16", "fp16")
        for d, n in (("128", 176), ("192_dv128", 128), ("256", 80), ("64", 176))]
    # the asm backward: d64 (128-row query blocks) and d128 (64-row), plain
    assert sorted(i.name for i in inst if i.family == "asm_v3" and i.api == "bwd") == [
        f"fmha_bwd_asm_v3_{t}_d{d}_b{m}x128_w12_plain" for t in ("bf16", "fp16") for d, m in ((128, 64), (64, 128))]
    # 192/128 and 192/192 x 2 dtypes: fwd plain + alibi + full, split-KV decode + prefill, bwd plain + alibi +
    # dropout + full; the asm forward's 192/128 x 2 dtypes
    assert len(gen.select(inst, None, None, ["192"], "")) == 38
    assert [i.name for i in gen.select(inst, ["bwd"], ["bf16"], ["128"], "", ["alibi", "dropout"])] == [
        "fmha_bwd_ck_bf16_d128_b64x128_w8_alibi", "fmha_bwd_ck_bf16_d128_b64x128_w8_dropout"]
    # as in AITER, fwd builds mha_fwd, mha_fwd_splitkv and mha_batch_prefill: 3 forward variants + 2 split tiles + the
    # asm one; fwd_v3 (AITER's asm-only build) the mha_fwd instances
    assert len(gen.select(inst, ["fwd"], None, ["192x128"], "*fp16*")) == 6
    assert {i.api for i in gen.select(inst, ["fwd_v3"], None, ["192x128"], "")} == {"fwd"}
    assert {i.api for i in gen.select(inst, ["bwd_v3"], None, ["192x128"], "")} == {"bwd"}
    # batch_prefill runs on the split-KV instances
    assert {i.api for i in gen.select(inst, ["batch_prefill"], ["bf16"], ["128"], "")} == {"fwd_splitkv"}
    assert [i.name for i in gen.select(inst, ["bwd"], ["bf16"], ["128"], "", ["plain"])] == [
        "fmha_bwd_ck_bf16_d128_b64x128_w8_plain", "fmha_bwd_asm_v3_bf16_d128_b64x128_w12_plain"]


def test_table_keeps_unbuilt_rows_with_a_hint():
    inst = gen.all_instances()
    chosen = gen.select(inst, ["fwd"], ["bf16"], ["128x128"], "", ["plain"])
    text = gen.fwd_table_source(inst, chosen, ["sm_90a"])
    fwd = [i for i in inst if i.api != "bwd"]
    # every other known instance is listed, not built (null launch and shared-memory size); built: the ck and asm
    # instances and the plain split-KV decode tile
    assert text.count("nullptr") == 2 * (len(fwd) - 3)
    assert ('{Family::ck, mha::DType::bf16, 128, 128, 0, true, 16, "fmha_fwd_splitkv_ck_bf16_d128_b16x32_w1_plain", '
            '"--api fwd_splitkv --dtypes bf16 --hdims 128x128 --variants plain", '
            '&mha::gen::launch_fwd_splitkv_ck_bf16_d128_dv128_m16_plain') in text
    assert "&mha::gen::launch_fwd_ck_bf16_d128_dv128_m128_plain" in text
    assert ('{Family::asm_v3, mha::DType::bf16, 128, 128, 0, false, 128, "fmha_fwd_asm_v3_bf16_d128_b128x176_w12_plain", '
            '"--api fwd --dtypes bf16 --hdims 128x128 --variants plain --arch sm_90a", '
            '&mha::gen::launch_fwd_asm_v3_bf16_d128_dv128_m128_plain') in text
    assert "&mha::gen::launch_fwd_ck_bf16_d128_dv128_m128_plain_smem" in text
    assert '"--api fwd --dtypes fp16 --hdims 64x64 --variants full"' in text
    # the feature mask rides in the table: plain 0, alibi 2, full 7
    assert '{Family::ck, mha::DType::bf16, 128, 128, 2, false, 128, "fmha_fwd_ck_bf16_d128_b128x48_w4_alibi"' in text
    assert '"sm_90a", kArchCcs, 1' in text
    bwd = gen.bwd_table_source(inst, gen.select(inst, ["bwd"], ["bf16"], ["128"], ""), ["sm_90a"])
    assert bwd.count("nullptr") == 2 * (len(inst) - len(fwd) - 5) # 4 ck variants and the asm instance built
    assert "&mha::gen::launch_bwd_ck_bf16_d128_dv128_m64_plain_smem" in bwd
    assert "&mha::gen::launch_bwd_ck_bf16_d128_dv128_m64_full" in bwd
    assert "&mha::gen::launch_bwd_ck_bf16_d128_dv128_m64_plain" in bwd
    # the feature mask rides in the table: alibi 2, dropout 4, full 7
    assert '{Family::ck, mha::DType::bf16, 128, 128, 2, 64, 128, "fmha_bwd_ck_bf16_d128_b64x128_w8_alibi"' in bwd
    assert '{Family::ck, mha::DType::bf16, 128, 128, 7, 64, 128, "fmha_bwd_ck_bf16_d128_b64x128_w8_full"' in bwd
    assert ('{Family::asm_v3, mha::DType::bf16, 128, 128, 0, 64, 128, "fmha_bwd_asm_v3_bf16_d128_b64x128_w12_plain", '
            '"--api bwd --dtypes bf16 --hdims 128x128 --variants plain --arch sm_90a", '
            '&mha::gen::launch_bwd_asm_v3_bf16_d128_dv128_m64_plain') in bwd


def test_asm_bwd_instances_assert_the_tile_the_api_sizes_the_workspace_by():
    inst = [i for i in gen.all_instances() if i.api == "bwd" and i.family == "asm_v3"]
    for i in inst:
        src = gen.instance_source(i)
        t = f"mha::asm90::Sm90BwdTraits<{gen.CPP_DTYPE[i.dtype]}, {i.hdim}>"
        assert (f"static_assert({t}::kBlockM == {i.block_m} && {t}::kBlockN == {i.block_n} && "
                f"{t}::kHeadDim == {i.hdim}") in src, src
        assert "mha::asm90::run_bwd_sm90<" in src


def test_write_if_changed_keeps_timestamp(tmp_path):
    p = tmp_path / "a" / "x.cu"
    gen.write_if_changed(str(p), "x")
    os.utime(p, (1, 1))
    gen.write_if_changed(str(p), "x")
    assert os.path.getmtime(p) == 1
    gen.write_if_changed(str(p), "y")
    assert p.read_text() == "y"


def test_list_prints_instances_and_support_table():
    r = run_compile("--list", "--preset", "ci", "--arch", "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "instances: 5 selected of 164 known" in r.stdout
    assert "[x] fmha_bwd_ck_bf16_d128_b64x128_w8_plain" in r.stdout
    assert "[x] fmha_fwd_ck_bf16_d128_b128x48_w4_plain" in r.stdout
    assert "[x] fmha_fwd_asm_v3_bf16_d128_b128x176_w12_plain" in r.stdout
    asm_row = next(l for l in r.stdout.splitlines() if l.startswith("| fwd | asm_v3 (plain)"))
    assert "| batch, group | no_mask, causal t/b |" in asm_row and asm_row.endswith("| n | y | n |"), asm_row
    assert "[x] fmha_bwd_asm_v3_bf16_d128_b64x128_w12_plain" in r.stdout
    asm_row = next(l for l in r.stdout.splitlines() if l.startswith("| bwd | asm_v3 (plain)"))
    assert "| up to 128; any multiple of 8 below | batch, group | no_mask, causal t/b |" in asm_row, asm_row
    assert asm_row.endswith("| n | y | n |"), asm_row
    # the asm family is sm_90a code: a build without that target leaves it out
    r80 = run_compile("--list", "--preset", "ci", "--arch", "sm_80")
    assert r80.returncode == 0, r80.stderr
    assert "instances: 3 selected of 164 known" in r80.stdout
    assert "[ ] fmha_fwd_asm_v3_bf16_d128_b128x176_w12_plain" in r80.stdout and "asm_v3 (plain)" not in r80.stdout
    assert "| api | family | dtype |" in r.stdout and "sm80/86/89 | sm90 | sm100" in r.stdout
    # the arch columns are the build's: sm_90a only
    fwd_row = next(l for l in r.stdout.splitlines() if l.startswith("| fwd | ck (plain)"))
    assert fwd_row.endswith("| n | y | n |"), fwd_row


def test_list_arch_aliases_and_columns():
    r = run_compile("--list", "--preset", "ci", "--arch", "sm_90,sm_80")
    assert r.returncode == 0, r.stderr
    assert "archs: sm_90a,sm_80" in r.stdout
    fwd_row = next(l for l in r.stdout.splitlines() if l.startswith("| fwd | ck (plain)"))
    assert fwd_row.endswith("| y | y | n |"), fwd_row


def test_list_refuses_an_empty_selection_like_the_build():
    r = run_compile("--list", "--api", "fwd", "--variants", "dropout", "--hdims", "64", "--arch", "sm_90a")
    assert r.returncode == 2
    assert "no instance for --api fwd matches the selection" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--api", "nope"], "unknown api 'nope'"),
    (["--dtypes", "fp32"], "unknown dtype 'fp32'"),
    (["--hdims", "100"], "unknown hdim 100"),
    (["--hdims", "128x64"], "unknown hdim 128x64"),
    (["--variants", "fast"], "unknown variant 'fast'"),
    (["--arch", "sm_70"], "unknown arch 'sm_70'"),
    (["--api=,"], "--api=',' lists nothing"),
    (["--arch", " , "], "--arch=' , ' lists nothing"),
    (["--hdims", ","], "--hdims=',' lists nothing"),
    (["--api=fwd", "--api", "bwd"], "--api given more than once (cmake/aiter_mha.cmake passes AITER_MHA_APIS as --api"),
    (["--arch", "sm_90a", "--arch=sm_80"], "--arch given more than once"),
])
def test_bad_options_fail_with_a_reason(args, message):
    r = run_compile("--list", *args)
    assert r.returncode == 2
    assert message in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--api", "fwd", "--variants", "dropout", "--hdims", "64"], "no instance for --api fwd matches the selection"),
    (["--api", "fwd_splitkv", "--variants", "plain", "--hdims", "96"], "its variants are full, plain"),
    (["--preset", "ci", "--api", "batch_prefill", "--dtypes", "fp16", "--hdims", "96"],
     "no instance for --api batch_prefill"),
    (["--filter", "*bf16_d999*"], "filter '*bf16_d999*'"),
])
def test_empty_selection_is_an_error(tmp_path, args, message):
    """A selection that would link a library without kernels stops before nvcc is even looked for."""
    env = dict(os.environ, PATH="/usr/bin:/bin", NVCC="", CUDA_HOME=str(tmp_path))
    r = run_compile("--arch", "sm_90a", *args, cwd=tmp_path, env=env)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_plain_only_split_selection_gets_a_note():
    """A selection whose split-KV instances are all plain (the d128 decode tile alone, as the ci preset has) builds,
    with a note that batch prefill / spec-decode rows and calls with features need the full instances."""
    r = run_compile("--list", "--preset", "ci", "--api", "batch_prefill", "--arch", "sm_90a")
    assert r.returncode == 0, r.stderr
    assert "[x] fmha_fwd_splitkv_ck_bf16_d128_b16x32_w1_plain" in r.stdout
    assert "builds only plain split-KV decode tiles" in r.stderr and "(add --variants full)" in r.stderr, r.stderr
    r = run_compile("--list", "--api", "fwd_splitkv", "--dtypes", "bf16", "--hdims", "128", "--arch", "sm_90a")
    assert r.returncode == 0 and "plain split-KV decode tiles" not in r.stderr, r.stderr


def test_print_toolchain_names_nvcc_and_the_archs(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    r = run_compile("--print-toolchain", "--arch", "sm_80,sm_90a", env=dict(os.environ, NVCC=str(nvcc)))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == str(nvcc)
    assert lines[1].split() == ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a",
                                "-gencode=arch=compute_80,code=compute_80"]


@pytest.mark.parametrize("env_key, value, message", [
    ("NVCC", "/nonexistent/nvcc", "NVCC=/nonexistent/nvcc is not an executable file"),
    ("MAX_JOBS", "abc", "MAX_JOBS='abc': give a positive number"),
    ("MAX_JOBS", "0", "MAX_JOBS='0': give a positive number"),
    ("CUTLASS_DIR", "/nonexistent", "CUTLASS_DIR=/nonexistent holds no include/cute/tensor.hpp"),
])
def test_bad_environment_is_explained(tmp_path, env_key, value, message):
    env = dict(os.environ, **{env_key: value})
    if env_key == "CUTLASS_DIR" and not (os.environ.get("NVCC") or shutil.which("nvcc") or
                                         os.path.exists("/usr/local/cuda/bin/nvcc")):
        pytest.skip("no nvcc here to get past the nvcc check")
    r = run_compile("--preset", "ci", "--arch", "sm_90a", "--build-dir", str(tmp_path / "b"), cwd=tmp_path, env=env)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_unknown_gpu_arch_warns(tmp_path):
    """A visible GPU without a build target (here a fake nvidia-smi reporting 7.5) is named, not silently skipped."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 7.5\necho 9.0\n")
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    r = run_compile("--list", "--preset", "ci", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "compute capability 7.5" in r.stderr and "archs: sm_90a" in r.stdout


def test_missing_nvcc_and_cutlass_are_explained(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin", NVCC="", CUDA_HOME=str(tmp_path))
    r = run_compile("--preset", "ci", "--arch", "sm_90a", cwd=tmp_path, env=env)
    assert r.returncode == 2 and f"CUDA_HOME={tmp_path} has no bin/nvcc" in r.stderr
    if not any(os.path.exists(os.path.join(d, "nvcc")) for d in ("/usr/bin", "/bin", "/usr/local/cuda/bin")):
        env.pop("CUDA_HOME")
        r = run_compile("--preset", "ci", "--arch", "sm_90a", cwd=tmp_path, env=env)
        assert r.returncode == 2 and "nvcc not found" in r.stderr
    nvcc = "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        pytest.skip("no nvcc here to get past the nvcc check")
    fake_site = tmp_path / "site"
    fake_site.mkdir()
    code = ("import sys, runpy, importlib.util; importlib.util.find_spec = lambda n, *a: None; "
            "sys.argv = ['compile.py', '--preset', 'ci', '--arch', 'sm_90a']; "
            "runpy.run_path(%r, run_name='__main__')" % os.path.join(ROOT, "compile.py"))
    env = dict(os.environ, NVCC=nvcc, CUTLASS_DIR=str(tmp_path / "nowhere"))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "pip install nvidia-cutlass==" in r.stderr


def test_compile_py_never_imports_torch():
    code = ("import runpy, sys; sys.argv = ['compile.py', '--list']\n"
            "try:\n    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'compile.py imported torch'" % os.path.join(ROOT, "compile.py"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_instance_sources_export_their_shared_memory_size():
    """csrc/api checks <fn>_smem against the device's per-block limit before it launches (a clear reason on GPUs
    with less shared memory than the tile needs, instead of a CUDA launch error)."""
    inst = gen.all_instances()
    for api in ("fwd", "fwd_splitkv", "bwd"):
        i = next(x for x in inst if x.api == api)
        src = gen.instance_source(i)
        traits = "BwdKernelTraits" if api == "bwd" else "FwdKernelTraits"
        assert f"extern const int {i.fn}_smem = mha::ck::{traits}<" in src and "::kSmemBytes;" in src


def test_bwd_tiles_follow_the_build_archs():
    # 99 KB-shared-memory archs keep d <= 64 on the 64 x 128 tile; the others get 128 x 128 (162 KB) for plain
    def bwd(archs, variant="plain"):
        return {i.dims: i for i in gen.all_instances(archs)
                if i.api == "bwd" and i.family == "ck" and i.dtype == "bf16" and i.variant == variant}
    big, small = bwd(["sm_80", "sm_90a"]), bwd(["sm_90a", "sm_86"])
    assert (big["64x64"].block_m, big["64x64"].block_n) == (128, 128)
    assert (small["64x64"].block_m, small["64x64"].block_n) == (64, 128)
    # the full variant (dropout and bias registers) keeps 64 x 128 everywhere; alibi and dropout take 128 x 128
    assert bwd(["sm_90a"], "full")["64x64"].block_m == 64
    assert bwd(["sm_90a"], "dropout")["64x64"].block_m == 128
    assert bwd(["sm_90a", "sm_86"], "dropout")["64x64"].block_m == 64
    assert bwd(["sm_90a"], "alibi")["64x64"].block_m == 128
    assert bwd(["sm_90a", "sm_86"], "alibi")["64x64"].block_m == 64
    assert big["128x128"] == small["128x128"]
    src = gen.instance_source(small["64x64"])
    assert "BwdKernelTraits<cutlass::bfloat16_t, 64, 64, 64, 128, 8, 2, 4, 4, 0>" in src
    src = gen.instance_source(big["64x64"])
    assert "BwdKernelTraits<cutlass::bfloat16_t, 64, 64, 128, 128, 8, 2, 4, 4, 0>" in src


def test_hand_written_kernels_build_for_sm80_and_sm86():
    """libmha_fwd.so's hand-written kernels (paged attention, L2 sweep, merge counters, occupancy query) compile for
    the pre-Hopper targets too: sm_90-only PTX (mbarrier.try_wait) outside an arch guard once broke every sm_8x build,
    which the sm_90a-only CI preset never compiles."""
    from ninja_writer import FWD_KERNEL_SOURCES
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("nvcc not found")
    for src in FWD_KERNEL_SOURCES:
        r = subprocess.run([nvcc, "-std=c++17", "-O3", "-I", os.path.join(ROOT, "include"), "-I",
                            os.path.join(ROOT, "csrc"), "--expt-relaxed-constexpr", "-use_fast_math",
                            "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_86,code=sm_86", "-c",
                            os.path.join(ROOT, src), "-o", os.devnull], capture_output=True, text=True)
        assert r.returncode == 0, f"{src}:\n{r.stderr[-3000:]}"


def test_build_mha_takes_one_api(tmp_path):
    """A second API argument was ignored (only the first was built); now it is a usage error before any build."""
    r = subprocess.run(["bash", os.path.join(ROOT, "build_mha.sh"), "fwd", "bwd"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "one API; got: fwd bwd" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())


def build_mha_list(tmp_path, api, compile_args):
    return subprocess.run(["bash", os.path.join(ROOT, "build_mha.sh"), api], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, MHA_COMPILE_ARGS=compile_args))


def test_build_mha_compile_args_api_narrows_the_build(tmp_path):
    """An --api in MHA_COMPILE_ARGS replaces build_mha.sh's (scripts/decode_build.sh builds `fwd` with --api
    fwd_splitkv); one that builds no library for the benchmark the argument names is refused before compiling."""
    r = build_mha_list(tmp_path, "fwd", "--api fwd_splitkv --arch sm_90a --list")
    assert r.returncode == 0, r.stderr
    assert "fmha_fwd_splitkv_ck_" in r.stdout and "[x] fmha_fwd_ck_" not in r.stdout
    r = build_mha_list(tmp_path, "fwd", "--api=bwd --arch sm_90a --list")
    assert r.returncode == 2 and "builds no libmha_fwd.so" in r.stderr, r.stderr
    r = build_mha_list(tmp_path, "fwd", "--api fwd --api bwd --list")  # repeated within MHA_COMPILE_ARGS itself
    assert r.returncode == 2 and "MHA_COMPILE_ARGS gives --api more than once" in r.stderr, r.stderr
