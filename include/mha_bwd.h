#pragma once
// Public backward API, source-compatible with AITER HEAD's csrc/include/mha_bwd.h (hipStream_t -> cudaStream_t):
// aiter::mha_bwd_args with the workspace_alloc / pinned_host_alloc callbacks, and aiter::mha_bwd. Link libmha_bwd.so.
// Same return contract as mha_fwd.h; aiter::mha_get_last_error() (declared there) gives the reason for a negative one.
// The mask is the window alone: mha_fwd_args::sink_size (sink tokens) has no backward counterpart here or in AITER, so
// the gradients of a forward with sink tokens under a finite window are not those of its mask. Sink logits
// (sink_ptr / d_sink_ptr) are supported.

#include "mha_fwd.h"

#include <functional>
#include <memory>

namespace aiter {

struct mha_bwd_args
{
    // aiter control
    bool use_asm_v3 = {};     // try the sm_90a asm backward first (batch mode, no mask / causal, no bias, ALiBi,
                              // dropout, sink logits or deterministic mode, head dims up to 128); else ck
    bool v3_atomic_fp32 = {}; // AITER: asm dQ accumulation in fp32 (1) or fp16/bf16 (0); accepted, dQ is fp32 here
    int v3_bf16_cvt = {};     // AITER: the asm backward's bf16 rounding (0 RTNE, 1 RTNA, 2 RTZ); accepted, RTNE
    bool v3_api_check = {};   // as AITER HEAD's mha_bwd: with use_asm_v3, returns 1 without launching when the asm
                              // backward covers the call; otherwise (or without use_asm_v3) the ck backward runs

    // traits
    int hdim_q = {};
    int hdim_v = {};
    std::string data_type = {};
    bool is_group_mode = {};
    int mask_type = {}; // 0: no mask 1: top_left_causal 2: bottom_right_causal 3: window_generic
    int bias_type = {}; // 0: no bias, 1: elementwise bias, 2: alibi
    bool has_dbias = {};
    bool has_dropout = {};      // must be p_drop > 0 (a p_drop > 0 without it is refused: AITER would skip the dropout)
    bool is_store_randval = {}; // with dropout: write the pass's uint8 random values to rand_val_ptr ([b, h, s_q,
                                // s_k] through the randval strides; group mode [h, total_q, >= max s_k], physical
                                // rows), every (i < s_q, j < s_k) of each batch, masked ones included; an element is
                                // kept iff its value <= floor(p_undrop * 255), as the forward's s_randval
    bool is_deterministic = {};

    // pointers
    const void* q_ptr = {};
    const void* k_ptr = {};
    const void* v_ptr = {};
    const void* bias_ptr = {};
    const void* o_ptr = {};
    const void* lse_ptr = {};
    const void* do_ptr = {};
    void* d_ptr = {};        // fp32 [b, h, s_q] workspace for D = rowsum(dO * O) * (1 - p_drop), as CK's (p_undrop)
    void* rand_val_ptr = {}; // uint8, written when is_store_randval (and p_drop > 0)
    void* dq_ptr = {};
    void* dk_ptr = {}; // nhead_q heads; the caller reduces over the GQA group
    void* dv_ptr = {};
    void* dbias_ptr = {};

    const void* sink_ptr   = nullptr; // sink scores log-space, fp32 (AITER's comment: [batch, nhead]); read as the
                                      // forward's [nhead_q] logits, the first nhead_q values
    void* d_sink_ptr       = nullptr; // fp32 [nhead_q], written (not accumulated into)

    const void* seqstart_q_ptr  = nullptr;
    const void* seqstart_k_ptr  = nullptr;
    const void* seqlen_q_ptr    = nullptr;
    const void* seqlen_k_ptr    = nullptr;
    const void* cu_seqlen_q_ptr = nullptr;
    const void* cu_seqlen_k_ptr = nullptr;

    int seqlen_q = {};
    int seqlen_k = {};
    int batch = {};
    int max_seqlen_q = {};
    int max_seqlen_k = {}; // group mode: >= every logical seqlen_k (0 visits no key: dQ = 0, dK / dV not written)
    int nhead_q = {};
    int nhead_k = {};
    float scale = {};

    int stride_q = {};
    int stride_k = {};
    int stride_v = {};
    int stride_bias = {};
    int stride_o = {};
    int stride_randval = {};
    int stride_do = {};
    int stride_dq = {};
    int stride_dk = {};
    int stride_dv = {};
    int stride_dbias = {};
    int nhead_stride_q = {};
    int nhead_stride_k = {};
    int nhead_stride_v = {};
    int nhead_stride_bias = {};
    int nhead_stride_o = {};
    int nhead_stride_randval = {};
    int nhead_stride_do = {};
    int nhead_stride_lsed = {}; // shared by LSE and D
    int nhead_stride_dq = {};
    int nhead_stride_dk = {};
    int nhead_stride_dv = {};
    int nhead_stride_dbias = {};
    int batch_stride_q = {};
    int batch_stride_k = {};
    int batch_stride_v = {};
    int batch_stride_bias = {};
    int batch_stride_o = {};
    int batch_stride_randval = {};
    int batch_stride_do = {};
    int batch_stride_lsed = {};
    int batch_stride_dq = {};
    int batch_stride_dk = {};
    int batch_stride_dv = {};
    int batch_stride_dbias = {};

    int window_size_left = -1;  // -1: unbounded (the default); causal is (-1, 0)
    int window_size_right = -1;
    float p_drop = {};
    float p_undrop = {};
    drop_seed_offset_t drop_seed_offset = {};

    // per-call device workspace (dq accumulators); the library never cudaMallocs on its own (except, once per context,
    // the L2 sweep buffer of a timed call with stream_config.flush_cache_)
    std::function<void*(size_t bytes, bool zero_init)> workspace_alloc = {};
    // required in group mode
    std::function<std::shared_ptr<void>(size_t bytes)> pinned_host_alloc = {};
};

// Outputs: dQ [b, s_q, nhead_q, d], dK / dV [b, s_k, nhead_q, d] (per query head), D [b, nhead_q, s_q] (the lsed
// strides, rows 1 apart; not the LSE's memory), dBias [b, nhead_q, s_q, s_k] (group mode [nhead_q, total_q, >=
// max_seqlen_k]): each with strides that give every element its own address (checked in batch mode; in group mode,
// where the row counts are device data, only that heads do not overlap a row's columns, and that stride_dbias >=
// max_seqlen_k). dBias is written only where the mask lets a query row see a key (as CK): zero it before the call
// when a mask hides part of it (the binding and benchmark_mha_bwd do, as AITER's callers do).
__attribute__((visibility("default"))) float mha_bwd(mha_bwd_args, const ck_tile::stream_config&);

// Not in AITER: every refusal mha_bwd makes before it asks for its workspace (the argument contract, this build's
// instances, the current device's arch and shared memory, the workspace's size), without launching, allocating or
// calling the callbacks; it only queries the current device. 0 when the call would launch, else -1 with mha_bwd's
// reason in mha_get_last_error(). A caller that prepares its buffers before the call (zeroing dBias or the gradients)
// can ask first, so a refused call leaves them untouched; after a 0, mha_bwd can still fail only in workspace_alloc,
// the launch or the device.
__attribute__((visibility("default"))) int mha_bwd_check(const mha_bwd_args& args);

} // namespace aiter
