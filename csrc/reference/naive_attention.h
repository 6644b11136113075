#pragma once
// Naive fp32 GPU reference of the attention forward pass (naive_attention.cu), for shapes too large for the host
// reference. It takes the same AttentionProblem as host_reference.h, with every array in device memory and fp16 /
// bf16 tensors, and implements the same contract through attention_spec.h: fp32 O and LSE in the packed layout.
// Host code can include this header without nvcc.

#include "reference/attention_spec.h"

#include <cuda_runtime_api.h>

namespace reference {

enum class NaiveDType : int
{
    fp16 = 0,
    bf16 = 1,
};

constexpr int kNaiveMaxHdimV = 512; // each of the 128 threads of a block owns at most 4 output columns

// Enqueues the kernel on `stream`. cudaErrorInvalidValue for shapes it does not cover (hdim_v > kNaiveMaxHdimV, batch
// or nhead_q above 65535, nhead_q not a multiple of nhead_k); otherwise the launch error.
cudaError_t naive_attention_fwd(NaiveDType dtype, const AttentionProblem& problem, cudaStream_t stream);

} // namespace reference
