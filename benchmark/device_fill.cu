#include "device_fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace bench {
namespace {

template <typename T>
__global__ void fill_uniform_kernel(T* p, int64_t n, uint32_t seed)
{
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    {
        uint32_t x = uint32_t(i) * 0x9E3779B9u ^ uint32_t(i >> 32) * 0x85EBCA6Bu ^ seed;
        x ^= x >> 16, x *= 0x7FEB352Du, x ^= x >> 15, x *= 0x846CA68Bu, x ^= x >> 16;
        p[i] = T(float(x >> 8) * (1.f / 16777216.f));
    }
}

} // namespace

cudaError_t fill_uniform_device(void* p, int64_t n, bool bf16, uint32_t seed)
{
    if (n <= 0)
        return cudaSuccess;
    if (bf16)
        fill_uniform_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
    else
        fill_uniform_kernel<<<1024, 256>>>(static_cast<__half*>(p), n, seed);
    return cudaGetLastError();
}

} // namespace bench
