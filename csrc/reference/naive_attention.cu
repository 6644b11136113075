// Naive fp32 GPU reference of the attention forward pass (declared in naive_attention.h). One thread block per
// (query row, head, batch): pass 1 finds the row max of the logits (attention_spec.h's modified_score over the
// visible keys, and the sink logit), pass 2 recomputes the logits in chunks of kThreads keys, exponentiates them into
// shared memory, applies dropout from the stored random values and accumulates P V, each thread owning a few output
// columns; O is divided by the full softmax denominator at the end. Correctness over speed: nothing is tiled, no
// tensor cores, every offset is 64-bit.

#include "reference/naive_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace reference {
namespace {

constexpr int kThreads          = 128; // threads per block; also the key chunk of pass 2
constexpr int kWarps            = kThreads / 32;
constexpr int kMaxColsPerThread = 4;     // output columns per thread
constexpr int kMaxGridYZ        = 65535; // gridDim.y / gridDim.z limit (heads / batches)
constexpr size_t kDefaultSmemBytes = 48 * 1024; // above this a kernel must opt in to more dynamic shared memory
static_assert(kThreads * kMaxColsPerThread == kNaiveMaxHdimV, "one block covers hdim_v up to kNaiveMaxHdimV");

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Block-wide reduction through one float per warp in `scratch` (kWarps floats); every thread gets the result.
template <bool IsMax>
__device__ float block_reduce(float x, float* scratch)
{
    for (int offset = 16; offset > 0; offset /= 2)
    {
        const float y = __shfl_xor_sync(0xffffffffu, x, offset);
        x             = IsMax ? fmaxf(x, y) : x + y;
    }
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0)
        scratch[warp] = x;
    __syncthreads();
    float r = scratch[0];
    for (int w = 1; w < kWarps; ++w)
        r = IsMax ? fmaxf(r, scratch[w]) : r + scratch[w];
    __syncthreads(); // scratch is reused by the next reduction
    return r;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) naive_attention_fwd_kernel(const AttentionProblem p)
{
    const int i        = blockIdx.x;
    const int h        = blockIdx.y;
    const int b        = blockIdx.z;
    const int seqlen_q = p.seqlen_q[b];
    const int seqlen_k = p.seqlen_k[b];
    if (i >= seqlen_q) // uniform over the block: rows past this batch's length
        return;
    const int hk = h / (p.nhead_q / p.nhead_k);

    extern __shared__ float smem[];
    float* s_q       = smem;           // [hdim_q] the query row in fp32
    float* s_p       = s_q + p.hdim_q; // [kThreads] dropped-out probabilities (unnormalised) of the current key chunk
    float* s_scratch = s_p + kThreads; // [kWarps] reduction scratch

    const T* q = static_cast<const T*>(p.q) + element_offset(p.q_strides, p.seqstart_q, b, h, i);
    const T* k = static_cast<const T*>(p.k) + element_offset(p.k_strides, p.seqstart_k, b, hk, 0);
    const T* v = static_cast<const T*>(p.v) + element_offset(p.v_strides, p.seqstart_k, b, hk, 0);
    const T* bias = p.bias_type == kElementwiseBias
                        ? static_cast<const T*>(p.bias) + element_offset(p.bias_strides, p.seqstart_q, b, h, i)
                        : nullptr;
    const uint8_t* rand =
        p.randval != nullptr ? p.randval + element_offset(p.randval_strides, p.seqstart_q, b, h, i) : nullptr;
    const float slope = p.bias_type == kAlibi ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;

    for (int d = threadIdx.x; d < p.hdim_q; d += kThreads)
        s_q[d] = to_float(q[d]);
    __syncthreads();

    auto logit = [&](int j) {
        const T* k_row = k + j * p.k_strides.row;
        float dot      = 0.f;
        for (int d = 0; d < p.hdim_q; ++d)
            dot += s_q[d] * to_float(k_row[d]);
        return modified_score<float>(p, dot, bias != nullptr ? to_float(bias[j]) : 0.f, slope, i, j, seqlen_q,
                                     seqlen_k);
    };

    // Pass 1: row max over the visible keys and the sink logit; stays -inf when there is neither.
    float row_max = -INFINITY;
    for (int j = threadIdx.x; j < seqlen_k; j += kThreads)
        if (p.mask.visible(i, j, seqlen_q, seqlen_k))
            row_max = fmaxf(row_max, logit(j));
    row_max          = block_reduce<true>(row_max, s_scratch);
    const float sink = p.sink != nullptr ? p.sink[h] : -INFINITY;
    row_max          = fmaxf(row_max, sink);

    // Pass 2: P = exp(S - max) chunk by chunk; the sum takes P before dropout, O after. Thread t accumulates output
    // columns t, t + kThreads, ...
    float acc[kMaxColsPerThread] = {};
    float sum_part               = 0.f;
    for (int j0 = 0; j0 < seqlen_k; j0 += kThreads)
    {
        const int j = j0 + threadIdx.x;
        float prob  = 0.f;
        if (j < seqlen_k && row_max != -INFINITY && p.mask.visible(i, j, seqlen_q, seqlen_k))
            prob = expf(logit(j) - row_max);
        sum_part += prob;
        s_p[threadIdx.x] = rand != nullptr && prob != 0.f ? apply_dropout(p, prob, rand[j]) : prob;
        __syncthreads();

        const int chunk = min(kThreads, seqlen_k - j0);
        for (int jj = 0; jj < chunk; ++jj)
        {
            const float pj = s_p[jj];
            if (pj == 0.f)
                continue;
            const T* v_row = v + (j0 + jj) * p.v_strides.row;
#pragma unroll
            for (int c = 0; c < kMaxColsPerThread; ++c)
            {
                const int d = threadIdx.x + c * kThreads;
                if (d < p.hdim_v)
                    acc[c] += pj * to_float(v_row[d]);
            }
        }
        __syncthreads(); // s_p is overwritten by the next chunk
    }
    float sum = block_reduce<false>(sum_part, s_scratch);
    if (sink != -INFINITY)
        sum += expf(sink - row_max);

    const int64_t out = packed_row(p, b, h, i);
    float* o          = p.o + out * p.hdim_v;
#pragma unroll
    for (int c = 0; c < kMaxColsPerThread; ++c)
    {
        const int d = threadIdx.x + c * kThreads;
        if (d < p.hdim_v)
            o[d] = sum > 0.f ? acc[c] / sum : 0.f;
    }
    if (threadIdx.x == 0)
        p.lse[out] = sum > 0.f ? row_max + logf(sum) : -INFINITY;
}

template <typename T>
cudaError_t launch(const AttentionProblem& p, cudaStream_t stream)
{
    const size_t smem_bytes = sizeof(float) * (size_t(p.hdim_q) + kThreads + kWarps);
    if (smem_bytes > kDefaultSmemBytes)
    {
        const cudaError_t e = cudaFuncSetAttribute(naive_attention_fwd_kernel<T>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes));
        if (e != cudaSuccess)
            return e;
    }
    const dim3 grid(unsigned(p.max_seqlen_q), unsigned(p.nhead_q), unsigned(p.batch));
    naive_attention_fwd_kernel<T><<<grid, kThreads, smem_bytes, stream>>>(p);
    return cudaGetLastError();
}

} // namespace

cudaError_t naive_attention_fwd(NaiveDType dtype, const AttentionProblem& p, cudaStream_t stream)
{
    if (p.batch < 0 || p.nhead_q < 1 || p.nhead_k < 1 || p.nhead_q % p.nhead_k != 0 || p.max_seqlen_q < 0 ||
        p.hdim_q < 1 || p.hdim_v < 1 || p.hdim_v > kNaiveMaxHdimV || p.nhead_q > kMaxGridYZ ||
        p.batch > kMaxGridYZ)
        return cudaErrorInvalidValue;
    if (p.batch == 0 || p.max_seqlen_q == 0)
        return cudaSuccess;
    return dtype == NaiveDType::fp16 ? launch<__half>(p, stream) : launch<__nv_bfloat16>(p, stream);
}

} // namespace reference
