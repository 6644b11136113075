#pragma once
// Host-side launcher of one ck forward instance: grid = (row blocks, nhead_q, batch), one CTA per tile of O.
// Generated instance files (build/gen/fwd_ck_*.cu) call run_fwd<Traits>; csrc/api never sees CuTe.

#include "fwd_kernel.cuh"

#include <cuda_runtime.h>

namespace mha::ck {

template <typename Kt>
cudaError_t run_fwd(const FwdParams& p, cudaStream_t stream)
{
    auto kernel = &fwd_kernel<Kt>;
    // Per call, not cached: the attribute is per device, and the call costs well under a microsecond.
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Kt::kSmemBytes);
    if (err != cudaSuccess)
        return err;
    const dim3 grid((p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM, p.nhead_q, p.batch);
    kernel<<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(p);
    return cudaGetLastError();
}

} // namespace mha::ck
