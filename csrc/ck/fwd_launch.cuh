#pragma once
// Host-side launcher of one ck forward instance: grid = (row blocks, heads, batch [x splits]), one CTA per tile of O.
// Split-KV instances with num_splits > 1 follow with the combine kernel on the same stream.
// Generated instance files (build/gen/fwd_ck_*.cu) call run_fwd<Traits>; csrc/api never sees CuTe.

#include "fwd_kernel.cuh"
#include "splitkv_combine.cuh"

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
    if constexpr (Kt::kSplit)
    {
        // rows = (query, packed head) pairs; the host checked batch * num_splits against the grid limit
        const int pack = p.split.pack_ratio;
        const dim3 grid((p.max_seqlen_q * pack + Kt::kBlockM - 1) / Kt::kBlockM, pack > 1 ? p.nhead_k : p.nhead_q,
                        p.batch * p.split.num_splits);
        kernel<<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(p);
        if (p.split.num_splits > 1)
        {
            if ((err = cudaGetLastError()) != cudaSuccess)
                return err;
            const dim3 cgrid((p.max_seqlen_q + kCombineRowsPerCta - 1) / kCombineRowsPerCta, p.nhead_q, p.batch);
            splitkv_combine_kernel<typename Kt::Element><<<cgrid, 32 * kCombineRowsPerCta, 0, stream>>>(p);
        }
        return cudaGetLastError();
    }
    const dim3 grid((p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM, p.nhead_q, p.batch);
    kernel<<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(p);
    return cudaGetLastError();
}

} // namespace mha::ck
