#pragma once
// Waits on a shared-memory mbarrier (its shared-window address) until the phase of the given parity has completed;
// shared by the decode step's tensor-copy ring (csrc/ck/decode_ring.cuh) and the generic paged-attention kernel's
// cp.async ring (csrc/paged/paged_attention.cu).

#include <cstdint>

namespace mha {

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done = 0;
    while (!done)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
#else // sm_80 / 86 / 89: try_wait (a bounded sleep in hardware) is sm_90's; test_wait polls
        asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
#endif
}

} // namespace mha
