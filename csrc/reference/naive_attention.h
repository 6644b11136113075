#pragma once
// Naive fp32 GPU reference of the attention forward pass (naive_attention.cu), for shapes too large for the host
// reference: reads fp16/bf16 Q/K/V through 64-bit element strides and writes fp32 O [b, h, s_q, d_v] and
// LSE [b, h, s_q] (natural log), with host_reference.h's mask rule and fully-masked-row convention (O = 0, LSE = -inf).
// Host code can include this header without nvcc.

#include "reference/host_reference.h"

#include <cuda_runtime_api.h>
#include <cstdint>

namespace reference {

enum class NaiveDType : int
{
    fp16 = 0,
    bf16 = 1,
};

constexpr int kNaiveMaxHdimV = 512; // each of the 128 threads of a block owns at most 4 output columns

struct NaiveAttentionArgs
{
    NaiveDType dtype;
    const void* q; // [batch, nhead_q, seqlen_q, hdim_q] through q_strides
    const void* k; // [batch, nhead_k, seqlen_k, hdim_q] through k_strides
    const void* v; // [batch, nhead_k, seqlen_k, hdim_v] through v_strides
    Strides q_strides, k_strides, v_strides;
    float* o;   // device, contiguous [batch, nhead_q, seqlen_q, hdim_v]
    float* lse; // device, contiguous [batch, nhead_q, seqlen_q]
    int batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q, hdim_v;
    float scale;
    MaskSpec mask;
};

// Enqueues the kernel on `stream`. cudaErrorInvalidValue for shapes it does not cover (hdim_v > kNaiveMaxHdimV, batch or nhead_q
// above 65535, nhead_q not a multiple of nhead_k); otherwise the launch error.
cudaError_t naive_attention_fwd(const NaiveAttentionArgs& args, cudaStream_t stream);

} // namespace reference
