#pragma once
// Shared-memory mbarriers by their shared-window address: init, arrivals (plain, or arming a phase for a number of
// copy-engine bytes) and the wait for a phase of a given parity. Shared by the decode step's tensor-copy ring
// (csrc/ck/decode_ring.cuh), the generic paged-attention kernel's cp.async ring (csrc/paged/paged_attention.cu) and
// the asm forward's TMA rings (csrc/asm/sm90_fwd.cuh).

#include <cstdint>

namespace mha {

// The shared-window address of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

// Makes the thread's mbarrier.init calls visible to the copy engine and to the other threads (before a CTA barrier).
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Arrives and arms the current phase for `bytes` more bytes of copy-engine writes (complete_tx).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

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
