#pragma once
// Device-side arguments of the backward kernels (dot(dO, O) preprocess, dQ/dK/dV main kernel, dQ conversion), filled
// on the host by csrc/api/mha_bwd.cpp from aiter::mha_bwd_args after validation. Strides are 64-bit element counts.
// Masks, sequences, score modifiers and dropout reuse the forward's sub-structs, so the backward sees exactly the
// forward's mask, ALiBi positions and dropout random values.

#include "fwd_params.h"

#include <cstddef>
#include <cstdint>

namespace mha {

struct BwdParams
{
    const void* __restrict__ q;
    const void* __restrict__ k;
    const void* __restrict__ v;
    const void* __restrict__ o;
    const void* __restrict__ dout;
    const float* __restrict__ lse; // natural-log LSE of the forward, [b, h, s_q] via lse strides
    float* __restrict__ dsum;      // D = rowsum(dO * O), same layout as lse
    void* __restrict__ dq;
    void* __restrict__ dk;         // per query head (nhead_q heads)
    void* __restrict__ dv;
    void* __restrict__ dbias;      // elementwise bias only; nullptr: not written

    // fp32 dQ accumulator [batch, nhead_q, max_seqlen_q, kHeadDim] (logical rows, dense, zero-initialised), and in
    // deterministic mode one int32 turn counter per (batch, head, query block): [batch, nhead_q, m_blocks].
    float* dq_acc;
    int32_t* dq_turn;

    int64_t q_row_stride, q_head_stride, q_batch_stride;
    int64_t k_row_stride, k_head_stride, k_batch_stride;
    int64_t v_row_stride, v_head_stride, v_batch_stride;
    int64_t o_row_stride, o_head_stride, o_batch_stride;
    int64_t do_row_stride, do_head_stride, do_batch_stride;
    int64_t dq_row_stride, dq_head_stride, dq_batch_stride;
    int64_t dk_row_stride, dk_head_stride, dk_batch_stride;
    int64_t dv_row_stride, dv_head_stride, dv_batch_stride;
    int64_t dbias_row_stride, dbias_head_stride, dbias_batch_stride;
    int64_t lse_head_stride, lse_batch_stride;

    int32_t batch;
    int32_t nhead_q;
    int32_t nhead_k;
    int32_t head_ratio;
    int32_t seqlen_q; // batch mode lengths; group mode: unused
    int32_t seqlen_k;
    int32_t max_seqlen_q;
    int32_t max_seqlen_k;
    int32_t hdim_q;
    int32_t hdim_v;
    float scale;

    bool deterministic;

    const float* sink = nullptr; // fp32 [nhead_q] sink logits of the forward (their LSE already includes them)
    float* d_sink     = nullptr; // fp32 [nhead_q]: -sum over (batch, rows) of exp(sink - lse) * D

    MaskParams mask;
    SeqParams seq;
    ScoreModParams mod; // softcap stays 0: mha_bwd_args has no soft-cap
    DropoutParams drop; // randval: is_store_randval (bwd_store_randval)
};

// Workspace bytes of an asm (sm_90a) backward call, which csrc/api asks for and asm90::run_bwd_sm90 lays out: per
// (batch, query head, query block of max_seqlen_q) the fp32 dQ accumulator tile (block_m x hdim, the kernel's fragment
// order), the block's padded LSE * log2(e) and D rows (block_m floats each) and its int32 dQ turn counter (used in
// deterministic mode); group mode then 128 bytes of alignment slack and 4 tensor maps (q, k, v, dO) per sequence. 0 when a product overflows size_t.
inline size_t asm_bwd_workspace_bytes(int64_t batch, int64_t nhead, int64_t max_seqlen_q, int block_m, int hdim,
                                      bool group)
{
    // per query block: the dQ tile, the padded LSE2 and D rows, a deterministic-mode turn counter
    const size_t per = (size_t(block_m) * size_t(hdim) + 2 * size_t(block_m)) * sizeof(float) + sizeof(int32_t);
    size_t tiles     = 0; // batch x nhead (each below 2^31) fits; times the query blocks may not
    if (__builtin_mul_overflow(size_t(batch) * size_t(nhead), size_t((max_seqlen_q + block_m - 1) / block_m), &tiles) ||
        (tiles > 0 && tiles > (SIZE_MAX / 2) / per))
        return 0;
    return tiles * per + (group ? 128 + size_t(batch) * 4 * sizeof(TmaDesc) : 0);
}

} // namespace mha
