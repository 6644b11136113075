// The binding's device helper (see strided_sum.h for what it computes), compiled into the aiter_mha module by the
// build (csrc/codegen/ninja_writer.py) for the same architectures as the libraries.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "strided_sum.h"

#include <cuda_runtime.h>

namespace {

__device__ float to_f32(__half x) { return __half2float(x); }
__device__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ T from_f32(float x);
template <> __device__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// One thread per output element (grid-stride); the reduction runs serially in that thread, so the order of the fp32
// additions, and with it the result, is the same on every run.
template <typename T>
__device__ void strided_sum(const mha_py::StridedSumParams& p)
{
    const T* in = static_cast<const T*>(p.in);
    T* out      = static_cast<T*>(p.out);
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.numel; o += step)
    {
        int64_t rest = o, out_off = 0, in_off = 0;
        for (int d = mha_py::kSumDims - 1; d >= 0; --d)
        {
            const int64_t i = rest % p.shape[d];
            rest /= p.shape[d];
            out_off += i * p.out_stride[d];
            in_off += i * p.in_stride[d];
        }
        float acc = 0.f;
        for (int64_t r0 = 0; r0 < p.red_shape[0]; ++r0)
            for (int64_t r1 = 0; r1 < p.red_shape[1]; ++r1)
                for (int64_t r2 = 0; r2 < p.red_shape[2]; ++r2)
                    acc += to_f32(in[in_off + r0 * p.red_stride[0] + r1 * p.red_stride[1] + r2 * p.red_stride[2]]);
        out[out_off] = from_f32<T>(acc);
    }
}

// vec8: one thread per 8 consecutive outputs of the last dim, each a 16-byte load per reduced index; the same
// serial fp32 order per element as strided_sum. The index arithmetic (64-bit divisions) is per 8 outputs: one per
// output made the GQA dK / dV sums of the backward instruction-bound: b=8, s=2k, 32 / 8 heads, d128, bf16, dK + dV
// 569 -> 122 us (0.59 -> 2.75 TB/s, H100), d64 16 x 1k 32 / 4 heads 231 -> 66 us.
template <typename T>
__device__ void strided_sum_vec8(const mha_py::StridedSumParams& p)
{
    const T* in = static_cast<const T*>(p.in);
    T* out      = static_cast<T*>(p.out);
    const int64_t n8 = p.numel / 8, last8 = p.shape[mha_py::kSumDims - 1] / 8;
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n8; o += step)
    {
        int64_t rest = o / last8, out_off = (o % last8) * 8, in_off = out_off;
        for (int d = mha_py::kSumDims - 2; d >= 0; --d)
        {
            const int64_t i = rest % p.shape[d];
            rest /= p.shape[d];
            out_off += i * p.out_stride[d];
            in_off += i * p.in_stride[d];
        }
        float acc[8] = {};
        for (int64_t r0 = 0; r0 < p.red_shape[0]; ++r0)
            for (int64_t r1 = 0; r1 < p.red_shape[1]; ++r1)
                for (int64_t r2 = 0; r2 < p.red_shape[2]; ++r2)
                {
                    const uint4 v = *reinterpret_cast<const uint4*>(
                        in + in_off + r0 * p.red_stride[0] + r1 * p.red_stride[1] + r2 * p.red_stride[2]);
                    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
                    for (int k = 0; k < 8; ++k)
                        acc[k] += to_f32(e[k]);
                }
        alignas(16) T r[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
            r[k] = from_f32<T>(acc[k]);
        *reinterpret_cast<uint4*>(out + out_off) = *reinterpret_cast<const uint4*>(r);
    }
}

template <typename T>
__global__ void strided_sum_kernel(const mha_py::StridedSumParams p)
{
    if (p.vec8)
        strided_sum_vec8<T>(p);
    else
        strided_sum<T>(p);
}

} // namespace

namespace mha_py {

cudaError_t launch_strided_sum(const StridedSumParams& p, bool bf16, unsigned blocks, unsigned threads,
                               cudaStream_t stream)
{
    if (bf16)
        strided_sum_kernel<__nv_bfloat16><<<blocks, threads, 0, stream>>>(p);
    else
        strided_sum_kernel<__half><<<blocks, threads, 0, stream>>>(p);
    return cudaGetLastError();
}

} // namespace mha_py
