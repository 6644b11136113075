#pragma once
// Device-side arguments of every forward kernel: one plain struct, filled on the host by csrc/api from
// aiter::mha_fwd_args after validation. Strides are 64-bit element counts so offsets never wrap past 2^31.
// Derived values (scale_log2, head ratio, mask offsets) are computed once on the host.

#include <cstdint>

#ifdef __CUDACC__
#define MHA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MHA_HOST_DEVICE inline
#endif

namespace mha {

enum class DType : int
{
    fp16 = 0,
    bf16 = 1,
};

// Mask in FlashAttention's (left, right) form relative to the diagonal of the chosen corner: query row i may see key
// column j iff  i + diag_offset - left <= j <= i + diag_offset + right, where a negative left / right is unbounded and
// diag_offset is 0 for top-left anchoring and seqlen_k - seqlen_q for bottom-right anchoring. No mask = (-1, -1).
struct MaskParams
{
    int32_t left  = -1;
    int32_t right = -1;
    bool bottom_right = false;
    MHA_HOST_DEVICE bool is_none() const { return left < 0 && right < 0; }
};

struct FwdParams
{
    const void* __restrict__ q;
    const void* __restrict__ k;
    const void* __restrict__ v;
    void* __restrict__ o;
    float* __restrict__ lse; // nullptr when not stored

    int64_t q_row_stride, q_head_stride, q_batch_stride;
    int64_t k_row_stride, k_head_stride, k_batch_stride;
    int64_t v_row_stride, v_head_stride, v_batch_stride;
    int64_t o_row_stride, o_head_stride, o_batch_stride;
    int64_t lse_head_stride, lse_batch_stride;

    int32_t batch;
    int32_t nhead_q;
    int32_t nhead_k;
    int32_t head_ratio; // nhead_q / nhead_k
    int32_t seqlen_q;
    int32_t seqlen_k;
    int32_t hdim_q;
    int32_t hdim_v;

    float scale;      // softmax scale applied to q.k
    float scale_log2; // scale * log2(e): the kernel exponentiates with exp2

    MaskParams mask;
};

} // namespace mha
