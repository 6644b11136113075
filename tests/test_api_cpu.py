"""The public headers and the argument validation, without a GPU: a g++ -std=c++17 consumer that includes only
include/ and the CUDA runtime headers links libmha_fwd.so, and every invalid call returns -1 with a readable reason
before any CUDA call. Also `benchmark_mha_fwd -?` and its error exits."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT, gpu_available

CUDA_INC = "/usr/local/cuda/include"

EXPECTED = {
    "head_ratio": "must be a positive multiple of nhead_k",
    "hdim_zero": "hdim_q must be a multiple of 8 in [8, 256]",
    "hdim_big": "hdim_v must be a multiple of 8 in [8, 256]",
    "hdim_odd": "hdim_q must be a multiple of 8",
    "mask_bad": "mask_type must be 0 (none)",
    "qscale": "qscale_type 1 (fp8 descales) is not supported yet",
    "prefill_qscale": "mha_batch_prefill: qscale_type 1 (fp8 descales) is not supported yet",
    "bias_bad": "bias_type must be 0 (none)",
    "null_q": "q_ptr and o_ptr must not be null",
    "null_lse": "has_lse is set but lse_ptr is null",
    "neg_seqlen": "seqlen_q and seqlen_k must be in [0, 2147479552]",
    "batch_zero": "batch must be in [1, 65535]",
    "stride_small": "stride_q (64) must be >= the head dim (128)",
    "stride_misaligned": "must be multiples of 8 elements",
    "misaligned_ptr": "v_ptr must be 16-byte aligned",
    "bad_dtype": "data_type 'fp32' is not supported",
    "scale_neg": "scale_s must be finite and > 0",
    "window_bad": "window_size_left/right must be >= -1",
    "mask_sum": "with a mask, seqlen_q + seqlen_k must be < 2^31",
    "window_group": "in group mode window_size_right must be -1 (unbounded) or < 2^30 with this mask, got 2147483647",
    "window_group_rows": "in group mode max_seqlen_q + window_size_right must be < 2^31 with this mask",
    "group_mode": "group mode needs seqstart_q_ptr and seqstart_k_ptr",
    "dropout_bad": "p_drop must be in [0, 1)",
    "sink_flag": "has_sink is false",
    "randval_null": "rand_val_ptr is null",
    "both_seqlens": "mutually exclusive",
    "cu_seqlen_misaligned": "cu_seqlen_k_ptr must be 4-byte aligned (int32)",
    "alibi_null": "fp32 slope array",
    "fp8": "data_type 'fp8bf16' is not supported yet",
    "v3_check": "v3_api_check",
    "bwd_group": "group mode requires pinned_host_alloc callback",
    "splitkv_empty": "batch must be in [1",
    "splitkv_splits": "num_splits must be in [0, 128]",
    "splitkv_acc": "num_splits > 1 needs 4-byte aligned fp32 lse_acc_ptr and o_acc_ptr",
    "splitkv_table": "block_table_ptr must be a 4-byte aligned int32 array",
    "splitkv_cbi": "cache_batch_idx cannot be combined with a paged KV cache",
    "splitkv_gappy": "is_gappy",
    "splitkv_heads": "must be a positive multiple of nhead_k",
    "prefill_empty": "mha_batch_prefill: invalid argument: batch must be in [1",
    "splitkv_paged_len": "exceeds batch_stride_block_table x page_block_size",
    "prefill_page_stride": "the page strides) must be non-negative multiples of 8 elements",
    "splitkv_acc_overlap": "o_acc strides overlap: 1 rows x 32 heads x 128 columns x 2 batches x 4 splits at row / "
                           "head / batch / split strides 128 / 128 / 4096 / 0",
    "splitkv_lse_overlap": "lse_acc strides overlap: 1 rows x 32 heads x 1 columns x 2 batches x 4 splits",
    "splitkv_seqlen_big": "seqlen_q and seqlen_k must be in [0, 2147479552], got 1 and 2147483647",
    "splitkv_group_seqlen_big": "num_splits must be in [0, 128]",
    "splitkv_group_paged_no_seqstart_k": "num_splits must be in [0, 128]",
    "splitkv_group_paged_no_counts": "group mode needs seqstart_q_ptr and seqstart_k_ptr",
    "prefill_last_null": "kv_last_page_lens must be a 4-byte aligned int32 [batch] array (it may be null only when "
                         "page_block_size is 1)",
    "splitkv_page_neg": "page_block_size must be >= 0 (0: a dense cache), got -16",
    "splitkv_sink": "sink_ptr / sink_size are set but has_sink is false",
    "prefill_sink_neg": "sink_size must be >= 0, got -1",
    "paged_align": "block_tables and context_lens must be 4-byte aligned int32 arrays",
    "paged_heads": "num_heads must be <= 65535, got 70000",
    "paged_o_overlap": "out strides overlap: 1 rows x 8 heads x 128 columns",
    "paged_hnd_token": "the HND layout's token strides are fixed",
    "paged_o_stride_wrap": "out strides overlap: 5 rows x 2 heads x 8 columns",
    "paged_ws_partition": "paged_attention_workspace_bytes: invalid argument: partition_size must be >= 1, got 0",
    "paged_ws_head": "head_size must be in [0, 256], got 512",
    "paged_ws_parts": "134217728 partitions of 16 keys for max_context_len 2147483647; at most 65535",
    "splitkv_mask_enum": "mask_type argument 7 is not a mask_enum (0 to 3)",
    "prefill_mask_enum": "mask_type argument -1 is not a mask_enum (0 to 3)",
    "bwd_scale_zero": "scale must be finite and > 0",
    "bwd_hdim_odd": "hdim_q must be a multiple of 8",
    "bwd_dropout_flag": "p_drop is 0.200000 but has_dropout is false",
    "bwd_randval_null": "is_store_randval is set but rand_val_ptr is null",
    "bwd_randval_overlap": "randval strides overlap",
    "bwd_randval_group_rows": "in group mode stride_randval (64) must be >= max_seqlen_k (128)",
    "o_overlap": "o strides overlap: 128 rows x 8 heads x 128 columns x 2 batches at row / head / batch strides 128 / 0",
    "lse_overlap": "lse strides overlap",
    "randval_overlap": "rand_val strides overlap",
    "bwd_dk_overlap": "dk strides overlap",
    "bwd_dbias_overlap": "dbias strides overlap",
    "bwd_dbias_group_rows": "in group mode stride_dbias (0) must be >= max_seqlen_k (128)",
    "bwd_d_is_lse": "d_ptr must not be lse_ptr",
    "bwd_cu_seqlen_misaligned": "cu_seqlen_q_ptr must be 4-byte aligned (int32)",
    "bwd_max_k": "max_seqlen_k must be in [0, 2147479552], got 2147483647",
}


@pytest.fixture(scope="module")
def consumer(built, tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None or not os.path.isdir(CUDA_INC):
        pytest.skip("g++ or the CUDA runtime headers are missing")
    exe = str(tmp_path_factory.mktemp("consumer") / "consumer")
    cmd = [gxx, "-std=c++17", "-Wall", "-Werror", "-I", os.path.join(ROOT, "include"), "-I", CUDA_INC,
           os.path.join(ROOT, "tests", "cpp", "consumer.cpp"), "-L", built, "-lmha_fwd", "-lmha_bwd",
           f"-Wl,-rpath,{built}", "-o", exe]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"header-only consumer failed to build:\n{r.stderr}"
    return exe


def test_headers_need_no_cutlass():
    for h in ("mha_fwd.h", "mha_bwd.h", "ck_tile_compat.h"):
        includes = [l for l in open(os.path.join(ROOT, "include", h)) if l.lstrip().startswith("#include")]
        assert not [l for l in includes if "cute" in l or "cutlass" in l], includes


def test_headers_refuse_the_old_libstdcxx_abi():
    # the structs carry std::string by value: an old-ABI caller would link and pass misread fields
    gxx = shutil.which("g++")
    if gxx is None or not os.path.isdir(CUDA_INC):
        pytest.skip("g++ or the CUDA runtime headers are missing")
    base = [gxx, "-std=c++17", "-fsyntax-only", "-x", "c++", "-I", os.path.join(ROOT, "include"), "-I", CUDA_INC, "-"]
    src = '#include "mha_bwd.h"\n#include "mha_paged.h"\nint main() { return 0; }\n'
    ok = subprocess.run(base, input=src, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    old = subprocess.run(base[:2] + ["-D_GLIBCXX_USE_CXX11_ABI=0"] + base[2:], input=src, capture_output=True,
                         text=True)
    assert old.returncode != 0 and "C++11 ABI" in old.stderr, old.stderr


def test_header_structs_start_zeroed(tmp_path):
    # every field has a default (zero / null / empty; windows -1, unbounded), so a field the caller forgets (AITER's newer ones: sink_ptr,
    # block_scale_*) is not garbage, and C++20 designated initializers build under -Wextra -Werror
    gxx = shutil.which("g++")
    if gxx is None or not os.path.isdir(CUDA_INC):
        pytest.skip("g++ or the CUDA runtime headers are missing")
    src = tmp_path / "zeroed.cpp"
    src.write_text('#include "mha_bwd.h"\n#include "mha_paged.h"\n#include <cstring>\n'
                   "int main() {\n"
                   '  aiter::mha_fwd_args d{.data_type = "bf16", .batch = 2};\n'
                   "  aiter::mha_fwd_args f; aiter::mha_fwd_splitkv_args s; aiter::mha_batch_prefill_args b;\n"
                   "  aiter::mha_bwd_args w; aiter::paged_attention_args p;\n"
                   "  return !(d.batch == 2 && d.q_ptr == nullptr && f.sink_ptr == nullptr && f.batch == 0 &&\n"
                   "           f.data_type.empty() && f.p_drop == 0.f && s.num_splits == 0 && s.block_table_ptr == nullptr\n"
                   "           && b.kv_indptr == nullptr && !w.workspace_alloc && w.dq_ptr == nullptr &&\n"
                   "           p.num_seqs == 0 && p.k_stride_block == 0 && p.workspace == nullptr &&\n"
                   "           f.window_size_left == -1 && f.window_size_right == -1 && w.window_size_right == -1);\n}\n")
    exe = str(tmp_path / "zeroed")
    r = subprocess.run([gxx, "-std=c++20", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "include"), "-I",
                        CUDA_INC, str(src), "-o", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert subprocess.run([exe]).returncode == 0


def test_invalid_calls_return_minus_one_with_reason(consumer):
    has_gpu, _ = gpu_available()
    out = subprocess.run([consumer] + ([] if has_gpu else ["cpu"]), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        name, ret, reason = line.split(" ", 2)
        rows[name] = (float(ret), reason)
    for name, needle in EXPECTED.items():
        ret, reason = rows[name]
        assert ret == -1, f"{name}: returned {ret}"
        assert needle in reason, f"{name}: reason was {reason!r}"
    # aiter::mha_bwd_check makes every refusal of mha_bwd before its workspace without launching: each backward call
    # here (invalid ones, and without a GPU the well-formed ones, which stop at the device query) gets mha_bwd's
    # answer and reason from it
    checked = 0
    for name, (ret, reason) in rows.items():
        if name.startswith("bwd_") and not name.endswith(".check") and name != "bwd_group":
            assert rows[name + ".check"] == (int(ret), reason), (name, rows[name + ".check"], reason)
            checked += 1
    assert checked >= len([n for n in EXPECTED if n.startswith("bwd_") and n != "bwd_group"])
    if "bwd_no_instance" in rows:  # fp16 d128: refused for the instance in a build without it (the ci preset's)
        ret, reason = rows["bwd_no_instance"]
        assert ret == -1 and ("no ck backward kernel" in reason or "no usable CUDA device" in reason), reason
    if not has_gpu:  # a well-formed call reaches the device query and says there is no GPU
        ret, reason = rows["valid"]
        assert ret == -1 and "no usable CUDA device" in reason
        # dense partials ([split, batch, head, d], [split, batch, head]) pass the argument checks (the call stops
        # later: no GPU, or no split-KV instance in the build)
        ret, reason = rows["splitkv_acc_dense"]
        assert ret == -1 and "invalid argument" not in reason, reason
        # the backward's well-formed base case (dense outputs, nhead_q heads for dK / dV) passes the checks too
        ret, reason = rows["bwd_valid"]
        assert ret == -1 and "invalid argument" not in reason, reason
        # group mode with no keys in any sequence: dK / dV are empty, so their head stride may be anything
        ret, reason = rows["bwd_group_no_keys"]
        assert ret == -1 and "invalid argument" not in reason, reason
        # split heuristic with the 132-SM default (the worked numbers in include/mha_fwd.h): b=128 is 1.29 decode
        # waves (2 splits balance them), b=1 at 128k spreads to 66 splits, a 64-key cache (two key blocks) splits in 2
        ret, rest = rows["heuristic"]
        assert (ret, rest) == (2, "66 2")
        # the nine-argument form (head dims, paged) exported too; with no GPU its lean rule for dense d128 caches on
        # sm_90 GPUs under 4 TB/s is off, so b=12 (96 tiles) gets the general rule's 5 splits three times
        ret, rest = rows["heuristic9"]
        assert (ret, rest) == (5, "5 5")
    # a workspace query that answers clears the reason of an earlier refusal
    assert rows["paged_ws_ok"] == (2 * 8 * 4 * (128 * 2 + 8), ""), rows["paged_ws_ok"]
    # nhead_k 0 and INT_MIN / -1 heads: no packing, a count of at least 1 (no division by zero)
    ret, rest = rows["heuristic_bad_heads"]
    assert ret >= 1 and int(rest) >= 1, (ret, rest)


def bench(built, *args):
    return subprocess.run([os.path.join(built, "benchmark_mha_fwd"), *args], capture_output=True, text=True,
                          timeout=120)


def test_benchmark_help_works_anywhere(built):
    r = bench(built, "-?")
    assert r.returncode == 255  # main returns -1, as AITER's
    for flag in ("-v", "-mode", "-b", "-h_k", "-s_kpad", "-d_v", "-scale_s", "-iperm", "-operm", "-bias", "-prec",
                 "-mask", "-lse", "-kname", "-init", "-seed", "-p_drop", "-drop_prefs", "-num_splits",
                 "-page_block_size", "-cache_batch_idx", "-warmup", "-repeat", "-fwd_v3", "-is_v3_check"):
        assert f" {flag} " in r.stdout, f"{flag} missing from help"
    assert "(default:3328)" in r.stdout and "(default:fp16)" in r.stdout


def test_benchmark_rejects_unknown_flag_and_precision(built):
    r = bench(built, "-nosuch=1")
    assert r.returncode != 0 and "no such arg" in r.stdout + r.stderr
    r = bench(built, "-prec=fp32")
    assert r.returncode == 253  # -3, as AITER's


@pytest.mark.parametrize("args, msg", [
    (["-s=abc"], "-s=abc: expected a comma-separated list of integers"),
    (["-b=1.5"], "-b=1.5: expected an integer in"),
    (["-s=99999999999"], "-s=99999999999: expected"),
    (["-b=4294967298"], "-b=4294967298: expected an integer in"),
    (["-d=12abc"], "-d=12abc: expected an integer"),
    (["-v=yes"], "-v=yes: expected an integer"),
    (["-seed=abc"], "-seed=abc: expected an integer in [0, 4294967295]"),
    (["-lse=yes"], "-lse=yes: expected t, true, f, false or an integer"),
    (["-p_drop=nan"], "-p_drop=nan: expected a finite number"),
    (["-scale_s=0.1x"], "-scale_s=0.1x: expected a finite number"),
    (["-scale_s=1e39"], "-scale_s=1e39: expected a finite number in float range"),
    (["-mode=1", "-s=,3"], "-s=,3: expected a comma-separated list of integers"),
    (["-mode=1", "-s=1,,2"], "-s=1,,2: expected"),
    (["-s=128,64"], "batch mode takes one -s and one -s_k length"),
    (["-mode=1", "-b=2", "-s=10,20,30"], "-s lists 3 lengths for 2 batches"),
    (["-mode=1", "-b=2", "-s=10,20", "-s_k=5,6,7"], "-s_k may list at most as many lengths as -s (2), got 3"),
    (["-mask=t:abc,def"], "not supported mask: t:abc,def"),
    (["-mask=t:5,"], "not supported mask: t:5,"),
    (["-mask=t:1,2,3,4"], "not supported mask"),
    (["-mask=xt:"], "not supported mask"),
    (["-mask=xt:5,3"], "not supported mask"),
    (["-mask=t:4294967295,0"], "not supported mask"),
    (["-bias=apple"], "not supported bias: apple"),
    (["-bias=1x"], "not supported bias: 1x"),
    (["-bias=e:x"], "not supported bias: e:x"),
    (["-bias=a:2"], "not supported bias: a:2"),
    (["-timer=GPU"], "-timer must be gpu or cpu, got GPU"),
    (["-v3_bf16_cvt=9"], "-v3_bf16_cvt must be 0 (RTNE), 1 (RTNA) or 2 (RTZ)"),
    (["-repeat=0"], "-repeat must be >= 1"),
    (["-seed=4294967296"], "-seed=4294967296: expected an integer in [0, 4294967295]"),
    (["-drop_seed=18446744073709551616"], "-drop_seed=18446744073709551616: expected a whole number in [0, 2^64)"),
    (["-drop_seed=-1"], "-drop_seed=-1: expected a whole number"),
    (["-b=2147483648"], "-b=2147483648: expected an integer in [-2147483648, 2147483647]"),
    (["-d=16,,"], "-d=16,,: expected an integer"),
    (["-mask=t:-2147483649,0"], "not supported mask"),
])
@pytest.mark.parametrize("tool", ["benchmark_mha_fwd", "benchmark_mha_bwd"])
def test_benchmark_refuses_malformed_values(built, tool, args, msg):
    """A value outside its flag's grammar is a message and exit -1 (CK's atoi read "-s=abc" as 0 and "-v=yes" as no
    validation); the same flags and grammars in both benchmarks."""
    if tool == "benchmark_mha_bwd":  # the backward's names for these flags
        for fwd_flag, bwd_flag in (("-scale_s=", "-scale="), ("-lse=", "-deterministic=")):
            args = [a.replace(fwd_flag, bwd_flag) for a in args]
            msg = msg.replace(fwd_flag, bwd_flag)
    r = subprocess.run([os.path.join(built, tool), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 255, (r.returncode, r.stdout, r.stderr)
    assert msg in r.stderr, r.stderr


@pytest.mark.parametrize("args", [["-d=16,"], ["-mode=1", "-b=3", "-s=1,2,"], ["-mode=1", "-b=4", "-s=300",
                                  "-s_kpad=512"], ["-s_kpad=32"], ["-mask=t:128,30"], ["-mask=b:4,35,2"],
                                  ["-mask=xb:16"], ["-mask=g:16,8"], ["-bias=e:2"], ["-bias=alibi"], ["-bias=a:1"],
                                  ["-lse=t"], ["-iperm=0"], ["-seed=4294967295"], ["-p_drop=0.2"],
                                  ["-scale_s=1e-3"], ["-p_drop=1e-50"], ["-timer=cpu"], ["-num_splits=-0"],
                                  ["-seed=4294967295"], ["-drop_seed=18446744073709551615"], ["-b=+2"]])
def test_benchmark_accepts_aiter_forms(built, args):
    """AITER's spellings (a trailing comma after -d, lists for group mode, -s_kpad in batch mode, every mask and bias
    form) pass the parser; without a GPU the run then stops at the device check (exit -2)."""
    has_gpu, _ = gpu_available()
    if has_gpu:
        pytest.skip("a GPU is present: the runs would execute (the smoke scripts cover them there)")
    r = bench(built, *args)
    assert r.returncode == 254 and "no CUDA GPU" in r.stderr, (r.returncode, r.stderr)


@pytest.mark.parametrize("tool", ["benchmark_mha_fwd", "benchmark_mha_bwd"])
def test_benchmark_refuses_host_tensors_past_memory(built, tool):
    """-v=1 fills the inputs on the host: a problem whose host tensors far exceed this machine's memory (8 TB here)
    is refused at once, before any device work, instead of std::bad_alloc or minutes of paging."""
    r = subprocess.run([os.path.join(built, tool), "-b=65535", "-h=1", "-s=32768", "-d=128"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 254, (r.returncode, r.stderr)
    assert "GiB, more than this machine's" in r.stderr and "-v=0" in r.stderr, r.stderr


def test_benchmark_without_gpu_says_so(built):
    has_gpu, _ = gpu_available()
    if has_gpu:
        pytest.skip("a GPU is present; this checks the no-GPU message")
    r = bench(built, "-s=128")
    assert r.returncode != 0
    assert "no CUDA GPU" in r.stderr


def test_cmake_vendoring_module(built, tmp_path):
    # cmake/aiter_mha.cmake as README's vendoring section uses it: imported targets over the built libraries, the
    # public and CUDA headers on their include path, an app that links and runs from the build tree
    cmake = shutil.which("cmake")
    if cmake is None or shutil.which("g++") is None or not os.path.isdir(CUDA_INC):
        pytest.skip("cmake, g++ or the CUDA runtime headers are missing")
    (tmp_path / "main.cpp").write_text(
        '#include "mha_bwd.h"\n#include <cstdio>\n'
        "int main() { aiter::mha_fwd_args a{}; a.data_type = \"bf16\";\n"
        "  const float r = aiter::mha_fwd(a, ck_tile::stream_config{});\n"
        '  std::printf("%g %s\\n", r, aiter::mha_get_last_error()); return 0; }\n')
    # included twice (a subproject vendoring it too), the prebuilt directory given relative to the source tree
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "CMakeLists.txt").write_text(f'include("{ROOT}/cmake/aiter_mha.cmake")\n')
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(app LANGUAGES CXX)\n"
        f'include("{ROOT}/cmake/aiter_mha.cmake")\nadd_subdirectory(sub)\n'
        "add_executable(app main.cpp)\ntarget_compile_features(app PRIVATE cxx_std_17)\n"
        "target_link_libraries(app PRIVATE aiter_mha::fwd aiter_mha::bwd)\n")
    os.symlink(built, tmp_path / "pre")
    env = dict(os.environ, CUDAToolkit_ROOT=os.path.dirname(CUDA_INC))
    bad = subprocess.run([cmake, "-S", str(tmp_path), "-B", str(tmp_path / "bad"), "-DAITER_MHA_PREBUILT_DIR=nowhere"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "holds no libmha_fwd.so" in bad.stderr, bad.stderr
    b = tmp_path / "b"
    r = subprocess.run([cmake, "-S", str(tmp_path), "-B", str(b), "-DAITER_MHA_PREBUILT_DIR=pre"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([cmake, "--build", str(b)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    out = subprocess.run([str(b / "app")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("-1 mha_fwd: invalid argument: batch must be in [1, 65535]"), out.stdout
