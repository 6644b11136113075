// A consumer that includes only the public headers (no CUTLASS, no nvcc) and links libmha_fwd.so / libmha_bwd.so.
// It makes invalid calls and prints "<case> <return value> <reason>" per line; tests/test_api_cpu.py checks them.
// Nothing here touches the GPU: every case must be rejected before any CUDA call.
#include "mha_bwd.h"
#include "mha_fwd.h"
#include "mha_paged.h"

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

static aiter::mha_fwd_args valid_args()
{
    static char buf[1024] __attribute__((aligned(16)));
    aiter::mha_fwd_args a{};
    a.data_type = "bf16";
    a.q_ptr = a.k_ptr = a.v_ptr = buf;
    a.o_ptr = buf;
    a.lse_ptr = buf;
    a.seqlen_q = 128, a.seqlen_k = 128, a.batch = 2, a.max_seqlen_q = 128;
    a.hdim_q = a.hdim_v = 128, a.nhead_q = 8, a.nhead_k = 8;
    a.scale_s = 0.088f;
    a.stride_q = a.stride_k = a.stride_v = a.stride_o = 128;
    a.nhead_stride_q = a.nhead_stride_k = a.nhead_stride_v = a.nhead_stride_o = 128 * 128;
    a.batch_stride_q = a.batch_stride_k = a.batch_stride_v = a.batch_stride_o = 8 * 128 * 128;
    a.nhead_stride_lse = 128, a.batch_stride_lse = 8 * 128;
    a.window_size_left = -1, a.window_size_right = -1;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{1, 0};
    return a;
}

static void run(const char* name, const std::function<void(aiter::mha_fwd_args&)>& edit)
{
    aiter::mha_fwd_args a = valid_args();
    edit(a);
    const float r = aiter::mha_fwd(a, ck_tile::stream_config{});
    std::printf("%s %g %s\n", name, r, aiter::mha_get_last_error());
}

// A well-formed decode call (1 query, 8 KV heads, 32 query heads) on fake buffers, edited into an invalid one.
static void split(const char* name, const std::function<void(aiter::mha_fwd_splitkv_args&)>& edit,
                  bool group = false)
{
    static char buf[1024] __attribute__((aligned(16)));
    aiter::mha_fwd_splitkv_args s{};
    s.q_ptr = s.k_ptr = s.v_ptr = buf;
    s.o_ptr = s.lse_acc_ptr = s.o_acc_ptr = buf;
    s.seqlen_q = 1, s.seqlen_k = 4096, s.batch = 2, s.max_seqlen_q = 1;
    s.hdim_q = s.hdim_v = 128, s.nhead_q = 32, s.nhead_k = 8, s.num_splits = 1;
    s.scale_s = 0.088f;
    s.stride_q = s.stride_k = s.stride_v = s.stride_o = s.stride_o_acc = 128;
    s.nhead_stride_q = s.nhead_stride_o = 128, s.nhead_stride_k = s.nhead_stride_v = 4096 * 128;
    s.batch_stride_q = s.batch_stride_o = 32 * 128, s.batch_stride_k = s.batch_stride_v = 8 * 4096 * 128;
    s.window_size_left = s.window_size_right = -1;
    edit(s);
    const float r = aiter::mha_fwd_splitkv(s, ck_tile::stream_config{}, "bf16", group, mask_enum::no_mask,
                                           bias_enum::no_bias, false);
    std::printf("%s %g %s\n", name, r, aiter::mha_get_last_error());
}

// A well-formed backward call (bshd, 8 heads on 2 KV heads, d128, 128 x 128) on fake buffers, edited into an
// invalid one.
static void bwd(const char* name, const std::function<void(aiter::mha_bwd_args&)>& edit)
{
    static char buf[1024] __attribute__((aligned(16)));
    static char lse[1024] __attribute__((aligned(16)));
    aiter::mha_bwd_args b{};
    b.data_type = "bf16", b.hdim_q = b.hdim_v = 128, b.mask_type = 0, b.bias_type = 0;
    b.q_ptr = b.k_ptr = b.v_ptr = b.o_ptr = b.do_ptr = buf;
    b.dq_ptr = b.dk_ptr = b.dv_ptr = buf, b.lse_ptr = lse, b.d_ptr = buf;
    b.seqlen_q = b.seqlen_k = b.max_seqlen_q = b.max_seqlen_k = 128, b.batch = 2, b.nhead_q = 8, b.nhead_k = 2;
    b.scale = 0.088f;
    b.stride_q = b.stride_o = b.stride_do = b.stride_dq = b.stride_dk = b.stride_dv = 8 * 128;
    b.stride_k = b.stride_v = 2 * 128;
    b.nhead_stride_q = b.nhead_stride_k = b.nhead_stride_v = b.nhead_stride_o = b.nhead_stride_do = 128;
    b.nhead_stride_dq = b.nhead_stride_dk = b.nhead_stride_dv = 128;
    b.batch_stride_q = b.batch_stride_o = b.batch_stride_do = b.batch_stride_dq = 128 * 8 * 128;
    b.batch_stride_dk = b.batch_stride_dv = 128 * 8 * 128, b.batch_stride_k = b.batch_stride_v = 128 * 2 * 128;
    b.nhead_stride_lsed = 128, b.batch_stride_lsed = 8 * 128;
    b.window_size_left = b.window_size_right = -1;
    b.drop_seed_offset = std::pair<uint64_t, uint64_t>{1, 0};
    b.workspace_alloc = [](size_t, bool) -> void* { return buf; };
    b.pinned_host_alloc = [](size_t) { return std::shared_ptr<void>(); };
    edit(b);
    // mha_bwd_check first: the same host checks, nothing launched (a row "<name>.check <ret> <reason>")
    const int c = aiter::mha_bwd_check(b);
    std::printf("%s.check %d %s\n", name, c, aiter::mha_get_last_error());
    const float r = aiter::mha_bwd(b, ck_tile::stream_config{});
    std::printf("%s %g %s\n", name, r, aiter::mha_get_last_error());
}

int main(int argc, char** argv)
{
    // Well-formed calls reach the device; the buffers here are host memory, so only run them without a GPU.
    const bool no_gpu = argc > 1 && std::string(argv[1]) == "cpu";
    if (no_gpu)
        run("valid", [](auto&) {});
    run("head_ratio", [](auto& a) { a.nhead_q = 3, a.nhead_k = 2; });
    run("hdim_zero", [](auto& a) { a.hdim_q = 0; });
    run("hdim_big", [](auto& a) { a.hdim_v = 264; });
    run("hdim_odd", [](auto& a) { a.hdim_q = 100; });
    run("mask_bad", [](auto& a) { a.mask_type = 9; });
    run("qscale", [](auto& a) { a.qscale_type = 1; }); // fp8 descales: not yet
    run("bias_bad", [](auto& a) { a.bias_type = 7; });
    run("null_q", [](auto& a) { a.q_ptr = nullptr; });
    run("null_lse", [](auto& a) { a.has_lse = true, a.lse_ptr = nullptr; });
    run("neg_seqlen", [](auto& a) { a.seqlen_k = -1; });
    run("batch_zero", [](auto& a) { a.batch = 0; });
    run("stride_small", [](auto& a) { a.stride_q = 64; });
    run("stride_misaligned", [](auto& a) { a.nhead_stride_k = 100; });
    run("misaligned_ptr", [](auto& a) { a.v_ptr = static_cast<const char*>(a.v_ptr) + 2; });
    run("bad_dtype", [](auto& a) { a.data_type = "fp32"; });
    run("scale_neg", [](auto& a) { a.scale_s = -1.f; });
    run("window_bad", [](auto& a) { a.mask_type = 1, a.window_size_left = -5; });
    run("mask_sum", [](auto& a) { a.mask_type = 1, a.seqlen_q = a.max_seqlen_q = 1 << 30, a.seqlen_k = (1 << 30) + 8; });
    run("window_group", [](auto& a) {
        a.is_group_mode = true, a.seqstart_q_ptr = a.seqstart_k_ptr = a.q_ptr, a.mask_type = 1;
        a.window_size_left = -1, a.window_size_right = 2147483647;
    });
    run("window_group_rows", [](auto& a) { // rows past 2^30 plus a 2^30 - 1 window: past 32 bits
        a.is_group_mode = true, a.seqstart_q_ptr = a.seqstart_k_ptr = a.q_ptr, a.mask_type = 1;
        a.max_seqlen_q = 2147483647 - 4095, a.window_size_left = -1, a.window_size_right = (1 << 30) - 1;
    });
    run("group_mode", [](auto& a) { a.is_group_mode = true; });
    run("dropout_bad", [](auto& a) { a.p_drop = 1.5f; });
    run("sink_flag", [](auto& a) { a.sink_size = 4; });
    run("randval_null", [](auto& a) { a.p_drop = 0.1f, a.s_randval = true, a.rand_val_ptr = nullptr; });
    run("both_seqlens", [](auto& a) { a.is_group_mode = true, a.seqstart_q_ptr = a.seqstart_k_ptr = a.q_ptr, a.seqlen_q_ptr = a.cu_seqlen_q_ptr = a.q_ptr; });
    run("cu_seqlen_misaligned", [](auto& a) { a.cu_seqlen_k_ptr = static_cast<const char*>(a.q_ptr) + 2; });
    run("alibi_null", [](auto& a) { a.bias_type = 2, a.bias_ptr = nullptr; });
    run("fp8", [](auto& a) { a.data_type = "fp8bf16"; });
    run("v3_check", [](auto& a) { a.use_asm_v3 = true, a.v3_api_check = true; });
    // outputs whose strides write some elements twice: heads on top of each other, LSE rows 1 apart under heads 1
    // apart, random values of every row in one row
    run("o_overlap", [](auto& a) { a.nhead_stride_o = 0; });
    run("lse_overlap", [](auto& a) { a.has_lse = true, a.nhead_stride_lse = 1; });
    run("randval_overlap", [](auto& a) {
        a.p_drop = 0.1f, a.s_randval = true, a.rand_val_ptr = const_cast<void*>(a.q_ptr), a.stride_randval = 0;
        a.nhead_stride_randval = 128 * 128, a.batch_stride_randval = 8 * 128 * 128;
    });

    aiter::mha_bwd_args b{};
    b.is_group_mode = true;
    const float rb = aiter::mha_bwd(b, ck_tile::stream_config{});
    std::printf("bwd_group %g %s\n", rb, aiter::mha_get_last_error());
    // dK / dV laid out for the 2 KV heads (AITER's contract has nhead_q heads), dBias broadcast over heads, D on the
    // LSE, a max_seqlen_k past the length cap
    if (no_gpu) // well-formed: it reaches the device query (host buffers, so never with a GPU)
    {
        bwd("bwd_valid", [](auto&) {});
        bwd("bwd_no_instance", [](auto& b) { b.data_type = "fp16"; }); // fp16 d128: not in the ci build
        bwd("bwd_group_no_keys", [](auto& b) { // every sequence without keys: dK / dV of no rows, any head stride
            b.is_group_mode = true, b.seqstart_q_ptr = b.seqstart_k_ptr = b.q_ptr, b.max_seqlen_q = 128;
            b.max_seqlen_k = 0, b.nhead_stride_dk = b.nhead_stride_dv = 0;
        });
    }
    bwd("bwd_dropout_flag", [](auto& b) { b.p_drop = 0.2f, b.p_undrop = 0.8f, b.has_dropout = false; });
    bwd("bwd_randval_null", [](auto& b) {
        b.p_drop = 0.2f, b.p_undrop = 0.8f, b.has_dropout = true, b.is_store_randval = true, b.rand_val_ptr = nullptr;
    });
    bwd("bwd_randval_group_rows", [](auto& b) { // group mode: rand_val rows 64 apart for 128 keys
        b.is_group_mode = true, b.seqstart_q_ptr = b.seqstart_k_ptr = b.q_ptr;
        b.p_drop = 0.2f, b.p_undrop = 0.8f, b.has_dropout = true, b.is_store_randval = true;
        b.rand_val_ptr = b.dq_ptr, b.stride_randval = 64, b.nhead_stride_randval = 1 << 20;
    });
    bwd("bwd_randval_overlap", [](auto& b) { // the heads' random values on the same rows
        b.p_drop = 0.2f, b.p_undrop = 0.8f, b.has_dropout = true, b.is_store_randval = true;
        b.rand_val_ptr = b.dq_ptr, b.stride_randval = 128, b.nhead_stride_randval = 0, b.batch_stride_randval = 1 << 20;
    });
    bwd("bwd_dk_overlap", [](auto& b) { b.stride_dk = b.stride_dv = 2 * 128, b.batch_stride_dk = 128 * 2 * 128; });
    bwd("bwd_dbias_overlap", [](auto& b) {
        b.bias_type = 1, b.has_dbias = true, b.bias_ptr = b.dbias_ptr = const_cast<void*>(b.q_ptr);
        b.stride_bias = b.stride_dbias = 128, b.nhead_stride_dbias = 0, b.batch_stride_dbias = 128 * 128;
    });
    bwd("bwd_dbias_group_rows", [](auto& b) { // group mode: dbias rows 0 apart
        b.is_group_mode = true, b.seqstart_q_ptr = b.seqstart_k_ptr = b.q_ptr, b.max_seqlen_q = b.max_seqlen_k = 128;
        b.bias_type = 1, b.has_dbias = true, b.bias_ptr = b.dbias_ptr = const_cast<void*>(b.q_ptr);
        b.stride_bias = 128, b.stride_dbias = 0, b.nhead_stride_dbias = 128 * 128;
    });
    bwd("bwd_d_is_lse", [](auto& b) { b.d_ptr = const_cast<void*>(b.lse_ptr); });
    bwd("bwd_cu_seqlen_misaligned", [](auto& b) { b.cu_seqlen_q_ptr = static_cast<const char*>(b.q_ptr) + 2; });
    bwd("bwd_scale_zero", [](auto& b) { b.scale = 0.f; });
    bwd("bwd_hdim_odd", [](auto& b) { b.hdim_q = b.hdim_v = 12; });
    bwd("bwd_max_k", [](auto& b) {
        b.is_group_mode = true, b.seqstart_q_ptr = b.seqstart_k_ptr = b.q_ptr, b.max_seqlen_k = 2147483647;
    });
    split("splitkv_empty", [](auto& s) { s = aiter::mha_fwd_splitkv_args{}; });
    split("splitkv_splits", [](auto& s) { s.num_splits = 129; });
    split("splitkv_acc", [](auto& s) { s.num_splits = 4, s.o_acc_ptr = nullptr; });
    split("splitkv_table", [](auto& s) { s.page_block_size = 16, s.block_table_ptr = nullptr; });
    split("splitkv_cbi", [](auto& s) { s.page_block_size = 16, s.batch_stride_block_table = 8, s.block_table_ptr = s.o_ptr, s.cache_batch_idx = s.q_ptr; });
    split("splitkv_gappy", [](auto& s) { s.is_gappy = true; });
    split("splitkv_paged_len", [](auto& s) { s.page_block_size = 16, s.batch_stride_block_table = 8, s.block_table_ptr = s.o_ptr; });
    split("splitkv_heads", [](auto& s) { s.nhead_k = 3; });
    // partials whose strides make every split write the same place (split stride 0), a key count whose block
    // rounding would overflow 32 bits, a negative page size, window sinks without has_sink
    split("splitkv_acc_overlap", [](auto& s) {
        s.num_splits = 4, s.nhead_stride_o_acc = 128, s.batch_stride_o_acc = 32 * 128, s.split_stride_o_acc = 0;
        s.nhead_stride_lse_acc = 1, s.batch_stride_lse_acc = 32, s.split_stride_lse_acc = 64;
    });
    split("splitkv_lse_overlap", [](auto& s) {
        s.num_splits = 4, s.nhead_stride_o_acc = 128, s.batch_stride_o_acc = 32 * 128, s.split_stride_o_acc = 64 * 128;
        s.nhead_stride_lse_acc = 1, s.batch_stride_lse_acc = 16, s.split_stride_lse_acc = 64; // batches 16 apart
    });
    if (no_gpu) // well-formed: it reaches the device query (host buffers, so never with a GPU)
        split("splitkv_acc_dense", [](auto& s) { // [split, batch, head, d] and [split, batch, head]: no overlap
            s.num_splits = 4, s.nhead_stride_o_acc = 128, s.batch_stride_o_acc = 32 * 128;
            s.split_stride_o_acc = 64 * 128, s.nhead_stride_lse_acc = 1, s.batch_stride_lse_acc = 32;
            s.split_stride_lse_acc = 64;
        });
    split("splitkv_seqlen_big", [](auto& s) { s.seqlen_k = 2147483647; });
    // group mode: seqlen_k (the longest cache) only sizes the heuristic and, as CK ignores it, an unset one is no
    // error (read as 0); the call stops at the next check, the split count
    split("splitkv_group_seqlen_big", [](auto& s) {
        s.seqstart_q_ptr = s.seqstart_k_ptr = s.q_ptr, s.seqlen_k = 2147483647, s.num_splits = 200;
    }, true);
    // group mode over a block table with per-batch key counts: seqstart_k may be null (stops at the split count)
    split("splitkv_group_paged_no_seqstart_k", [](auto& s) {
        s.seqstart_q_ptr = s.seqlen_k_ptr = s.q_ptr, s.seqstart_k_ptr = nullptr, s.num_splits = 200;
        s.block_table_ptr = const_cast<void*>(s.q_ptr), s.page_block_size = 16, s.batch_stride_block_table = 256;
    }, true);
    split("splitkv_group_paged_no_counts", [](auto& s) { // without seqlen_k_ptr the keys come from seqstart_k
        s.seqstart_q_ptr = s.q_ptr, s.seqstart_k_ptr = nullptr, s.block_table_ptr = const_cast<void*>(s.q_ptr);
        s.page_block_size = 16, s.batch_stride_block_table = 256;
    }, true);
    split("splitkv_page_neg", [](auto& s) { s.page_block_size = -16; });
    split("splitkv_sink", [](auto& s) { s.sink_size = 4; });

    {
        // a mask_enum argument outside 0..3 (a cast from a bad int) is refused, not run as some masked call
        aiter::mha_fwd_splitkv_args s{};
        const float r = aiter::mha_fwd_splitkv(s, ck_tile::stream_config{}, "bf16", false, mask_enum(7),
                                               bias_enum::no_bias, false);
        std::printf("splitkv_mask_enum %g %s\n", r, aiter::mha_get_last_error());
        aiter::mha_batch_prefill_args b{};
        const float rb = aiter::mha_batch_prefill(b, ck_tile::stream_config{}, "bf16", true, mask_enum(-1),
                                                  bias_enum::no_bias, false, quant_scale_enum::no_scale, false);
        std::printf("prefill_mask_enum %g %s\n", rb, aiter::mha_get_last_error());
    }
    aiter::mha_batch_prefill_args bp{};
    const float rp = aiter::mha_batch_prefill(bp, ck_tile::stream_config{}, "bf16", true, mask_enum::no_mask,
                                              bias_enum::no_bias, false, quant_scale_enum::no_scale, false);
    std::printf("prefill_empty %g %s\n", rp, aiter::mha_get_last_error());
    // a well-formed group-mode prefill on fake buffers whose page stride is not a multiple of 8 elements
    static char pbuf[1024] __attribute__((aligned(16)));
    bp.q_ptr = bp.k_ptr = bp.v_ptr = pbuf, bp.o_ptr = pbuf, bp.seqstart_q_ptr = pbuf;
    bp.kv_indptr = bp.kv_page_indices = bp.kv_last_page_lens = pbuf;
    bp.batch = 2, bp.max_seqlen_q = 64, bp.hdim_q = bp.hdim_v = 128, bp.nhead_q = 8, bp.nhead_k = 2;
    bp.page_block_size = 16, bp.num_total_pages = 100, bp.scale_s = 0.088f;
    bp.stride_q = bp.stride_o = 8 * 128, bp.stride_k = bp.stride_v = 2 * 128;
    bp.nhead_stride_q = bp.nhead_stride_o = bp.nhead_stride_k = bp.nhead_stride_v = 128;
    bp.batch_stride_k = bp.batch_stride_v = 1004;
    bp.window_size_left = bp.window_size_right = -1;
    bp.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    const float rs = aiter::mha_batch_prefill(bp, ck_tile::stream_config{}, "bf16", true, mask_enum::no_mask,
                                              bias_enum::no_bias, false, quant_scale_enum::no_scale, false);
    std::printf("prefill_page_stride %g %s\n", rs, aiter::mha_get_last_error());
    bp.batch_stride_k = bp.batch_stride_v = 1024, bp.sink_size = -1;
    const float rk = aiter::mha_batch_prefill(bp, ck_tile::stream_config{}, "bf16", true, mask_enum::no_mask,
                                              bias_enum::no_bias, false, quant_scale_enum::no_scale, false);
    std::printf("prefill_sink_neg %g %s\n", rk, aiter::mha_get_last_error());
    bp.sink_size = 0, bp.kv_last_page_lens = nullptr; // required with pages of more than one key
    const float rl = aiter::mha_batch_prefill(bp, ck_tile::stream_config{}, "bf16", true, mask_enum::no_mask,
                                              bias_enum::no_bias, false, quant_scale_enum::no_scale, false);
    std::printf("prefill_last_null %g %s\n", rl, aiter::mha_get_last_error());
    const float rq = aiter::mha_batch_prefill(bp, ck_tile::stream_config{}, "bf16", true, mask_enum::no_mask,
                                              bias_enum::no_bias, false, quant_scale_enum(1), false);
    std::printf("prefill_qscale %g %s\n", rq, aiter::mha_get_last_error());

    // paged attention: table pointers off their int32 alignment, more heads than a grid dimension holds
    auto paged = [](const char* name, const std::function<void(aiter::paged_attention_args&)>& edit) {
        static char buf[1024] __attribute__((aligned(16)));
        aiter::paged_attention_args a{};
        a.data_type = "bf16";
        a.query = a.key_cache = a.value_cache = buf, a.out = buf;
        a.block_tables = a.context_lens = reinterpret_cast<const int32_t*>(buf);
        a.num_seqs = 1, a.num_heads = 8, a.num_kv_heads = 8, a.head_size = 128, a.block_size = 16;
        a.block_tables_stride = 4, a.max_context_len = 64, a.partition_size = 256, a.scale = 0.088f;
        a.q_stride_seq = a.o_stride_seq = 8 * 128, a.q_stride_head = a.o_stride_head = 128;
        a.k_stride_block = a.v_stride_block = 8 * 16 * 128, a.k_stride_head = a.v_stride_head = 16 * 128;
        edit(a);
        const float r = aiter::paged_attention_v1(a, ck_tile::stream_config{});
        std::printf("%s %g %s\n", name, r, aiter::mha_get_last_error());
    };
    paged("paged_align", [](auto& a) { a.block_tables = reinterpret_cast<const int32_t*>(
                                           reinterpret_cast<const char*>(a.block_tables) + 2); });
    paged("paged_heads", [](auto& a) { a.num_heads = a.num_kv_heads = 70000; });
    paged("paged_o_overlap", [](auto& a) { a.o_stride_head = 64; }); // heads half a head apart
    paged("paged_hnd_token", [](auto& a) { a.k_stride_token = a.v_stride_token = 8; });
    // strides so large that the overlap check's span would wrap int64 (sequence 2 and head 1 of sequence 0 meet)
    paged("paged_o_stride_wrap", [](auto& a) {
        a.num_seqs = 5, a.num_heads = a.num_kv_heads = 2, a.head_size = 8;
        a.o_stride_seq = int64_t(1) << 61, a.o_stride_head = int64_t(1) << 62;
    });
    // the workspace query: -1 with the reason (and a success clears an earlier one)
    auto ws = [](const char* name, int seqs, int head, int ctx, int part) {
        const long long r = aiter::paged_attention_workspace_bytes(seqs, 8, head, ctx, part, 2);
        std::printf("%s %lld %s\n", name, r, aiter::mha_get_last_error());
    };
    ws("paged_ws_partition", 1, 128, 64, 0);
    ws("paged_ws_head", 1, 512, 64, 256);
    ws("paged_ws_parts", 1, 128, 2147483647, 16);
    ws("paged_ws_ok", 2, 128, 1024, 256);
    // head counts no call accepts: the public query answers a count, never divides by zero
    std::printf("heuristic_bad_heads %d %d\n", aiter::mha_fwd_splitkv_num_splits(1, 32, 0, 1, 1024),
                aiter::mha_fwd_splitkv_num_splits(1, -2147483647 - 1, -1, 1, 1024, 0, 128, 128, false));
    std::printf("heuristic %d %d %d\n", aiter::mha_fwd_splitkv_num_splits(128, 32, 8, 1, 8192),
                aiter::mha_fwd_splitkv_num_splits(1, 32, 8, 1, 131072), aiter::mha_fwd_splitkv_num_splits(1, 32, 8, 1, 64));
    // the nine-argument form: a dense d128 cache, a paged one; without a GPU both are the general rule's count
    std::printf("heuristic9 %d %d %d\n", aiter::mha_fwd_splitkv_num_splits(12, 32, 8, 1, 8192),
                aiter::mha_fwd_splitkv_num_splits(12, 32, 8, 1, 8192, 0, 128, 128, false),
                aiter::mha_fwd_splitkv_num_splits(12, 32, 8, 1, 8192, 0, 128, 128, true));
    return 0;
}
