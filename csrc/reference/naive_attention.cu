// Naive fp32 GPU reference of the attention forward pass (declared in naive_attention.h). One thread block per
// (query row, head, batch): pass 1 finds the row max of the scaled scores, pass 2 recomputes the scores in chunks of
// kThreads keys, exponentiates them into shared memory and accumulates P*V, each thread owning a few output columns.
// Correctness over speed: nothing is tiled, no tensor cores, every offset is 64-bit.

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
__global__ void __launch_bounds__(kThreads) naive_attention_fwd_kernel(NaiveAttentionArgs a)
{
    const int row   = blockIdx.x;
    const int head  = blockIdx.y;
    const int batch = blockIdx.z;
    const int head_k = head / (a.nhead_q / a.nhead_k);

    extern __shared__ float smem[];
    float* s_q       = smem;              // [hdim_q] the query row in fp32
    float* s_p       = s_q + a.hdim_q;    // [kThreads] exp(score - max) of the current key chunk
    float* s_scratch = s_p + kThreads;    // [kWarps] reduction scratch

    const T* q = static_cast<const T*>(a.q) + batch * a.q_strides.batch + head * a.q_strides.head +
                 row * a.q_strides.row;
    const T* k = static_cast<const T*>(a.k) + batch * a.k_strides.batch + head_k * a.k_strides.head;
    const T* v = static_cast<const T*>(a.v) + batch * a.v_strides.batch + head_k * a.v_strides.head;

    for (int d = threadIdx.x; d < a.hdim_q; d += kThreads)
        s_q[d] = to_float(q[d]);
    __syncthreads();

    auto score = [&](int j) {
        const T* k_row = k + j * a.k_strides.row;
        float dot      = 0.f;
        for (int d = 0; d < a.hdim_q; ++d)
            dot += s_q[d] * to_float(k_row[d]);
        return a.scale * dot;
    };

    // Pass 1: row max over the visible keys; stays -inf when none is visible.
    float row_max = -INFINITY;
    for (int j = threadIdx.x; j < a.seqlen_k; j += kThreads)
        if (a.mask.visible(row, j, a.seqlen_q, a.seqlen_k))
            row_max = fmaxf(row_max, score(j));
    row_max = block_reduce<true>(row_max, s_scratch);

    // Pass 2: P = exp(S - max) chunk by chunk; thread t accumulates output columns t, t + kThreads, ...
    float acc[kMaxColsPerThread] = {};
    float sum_part               = 0.f;
    for (int j0 = 0; j0 < a.seqlen_k; j0 += kThreads)
    {
        const int j = j0 + threadIdx.x;
        float p     = 0.f;
        if (j < a.seqlen_k && row_max != -INFINITY && a.mask.visible(row, j, a.seqlen_q, a.seqlen_k))
            p = expf(score(j) - row_max);
        s_p[threadIdx.x] = p;
        sum_part += p;
        __syncthreads();

        const int chunk = min(kThreads, a.seqlen_k - j0);
        for (int jj = 0; jj < chunk; ++jj)
        {
            const float pj = s_p[jj];
            if (pj == 0.f)
                continue;
            const T* v_row = v + (j0 + jj) * a.v_strides.row;
#pragma unroll
            for (int c = 0; c < kMaxColsPerThread; ++c)
            {
                const int d = threadIdx.x + c * kThreads;
                if (d < a.hdim_v)
                    acc[c] += pj * to_float(v_row[d]);
            }
        }
        __syncthreads(); // s_p is overwritten by the next chunk
    }
    const float sum = block_reduce<false>(sum_part, s_scratch);

    const int64_t out_row = (int64_t(batch) * a.nhead_q + head) * a.seqlen_q + row;
    float* o              = a.o + out_row * a.hdim_v;
#pragma unroll
    for (int c = 0; c < kMaxColsPerThread; ++c)
    {
        const int d = threadIdx.x + c * kThreads;
        if (d < a.hdim_v)
            o[d] = sum > 0.f ? acc[c] / sum : 0.f;
    }
    if (threadIdx.x == 0)
        a.lse[out_row] = sum > 0.f ? row_max + logf(sum) : -INFINITY;
}

template <typename T>
cudaError_t launch(const NaiveAttentionArgs& args, cudaStream_t stream)
{
    const size_t smem_bytes = sizeof(float) * (size_t(args.hdim_q) + kThreads + kWarps);
    if (smem_bytes > kDefaultSmemBytes)
    {
        const cudaError_t e = cudaFuncSetAttribute(naive_attention_fwd_kernel<T>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes));
        if (e != cudaSuccess)
            return e;
    }
    const dim3 grid(unsigned(args.seqlen_q), unsigned(args.nhead_q), unsigned(args.batch));
    naive_attention_fwd_kernel<T><<<grid, kThreads, smem_bytes, stream>>>(args);
    return cudaGetLastError();
}

} // namespace

cudaError_t naive_attention_fwd(const NaiveAttentionArgs& args, cudaStream_t stream)
{
    if (args.batch < 0 || args.nhead_q < 1 || args.nhead_k < 1 || args.nhead_q % args.nhead_k != 0 ||
        args.seqlen_q < 0 || args.seqlen_k < 0 || args.hdim_q < 1 || args.hdim_v < 1 ||
        args.hdim_v > kNaiveMaxHdimV || args.nhead_q > kMaxGridYZ || args.batch > kMaxGridYZ)
        return cudaErrorInvalidValue;
    if (args.batch == 0 || args.seqlen_q == 0)
        return cudaSuccess;
    return args.dtype == NaiveDType::fp16 ? launch<__half>(args, stream) : launch<__nv_bfloat16>(args, stream);
}

} // namespace reference
