#pragma once
// Device-side input fill for timing runs (-v=0): uniform [0, 1) from a per-element hash, so K/V caches of tens of GB
// take milliseconds and no host memory. Implemented in device_fill.cu (the benchmarks are host-only .cpp files).

#include <cuda_runtime.h>

#include <cstdint>

namespace bench {

// Fills n fp16 (bf16 = false) or bf16 (bf16 = true) elements at p; asynchronous on the default stream.
cudaError_t fill_uniform_device(void* p, int64_t n, bool bf16, uint32_t seed);

} // namespace bench
