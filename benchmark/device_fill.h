#pragma once
// Device-side input fill for timing runs (-v=0): uniform [0, 1) from a per-element hash, so K/V caches of tens of GB
// take milliseconds and no host memory. Implemented in device_fill.cu (the benchmarks are host-only .cpp files).

#include "bench_common.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace bench {

// Fills n fp16 (bf16 = false) or bf16 (bf16 = true) elements at p; asynchronous on the default stream.
cudaError_t fill_uniform_device(void* p, int64_t n, bool bf16, uint32_t seed);

// Allocates n elements of T (__half or __nv_bfloat16) in `buf` and fills them.
template <typename T>
cudaError_t device_fill(DeviceBuffer& buf, int64_t n, uint32_t seed)
{
    cudaError_t e = buf.allocate(sizeof(T) * size_t(n));
    return e == cudaSuccess ? fill_uniform_device(buf.get(), n, std::is_same_v<T, __nv_bfloat16>, seed) : e;
}

} // namespace bench
