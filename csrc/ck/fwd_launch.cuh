#pragma once
// Host-side launcher of one ck forward instance: grid = (row blocks, heads, batch [x splits]), one CTA per tile of O.
// Split-KV instances with num_splits > 1 follow with the combine kernel on the same stream.
// Generated instance files (build/gen/fwd_ck_*.cu) call run_fwd<Traits>; csrc/api never sees CuTe.

#include "decode_ring.cuh"
#include "fwd_kernel.cuh"
#include "splitkv_combine.cuh"

#include <cuda_runtime.h>

namespace mha::ck {

// After a split-KV launch: the combine kernel when there are partials to merge. On sm_90 it is a programmatic
// dependent of the split kernel (splitkv_combine.cuh): its launch and its CTAs' setup overlap the split grid's tail.
template <typename Kt>
cudaError_t finish_split(const FwdParams& p, cudaStream_t stream, bool dependent)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess || p.split.num_splits <= 1)
        return err;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim  = dim3(p.max_seqlen_q, p.nhead_q, p.batch);
    cfg.blockDim = dim3(combine_threads(p.hdim_v, p.split.num_splits));
    cfg.stream   = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs    = &attr;
    cfg.numAttrs = dependent ? 1 : 0;
    err = cudaLaunchKernelEx(&cfg, splitkv_combine_kernel<typename Kt::Element>, p);
    return err != cudaSuccess ? err : cudaGetLastError();
}

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
        int dev = 0, major = 0;
        if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
            (err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess)
            return err;
        if constexpr (Kt::kRing)
        {
            // sm_90: the tensor-copy ring (decode_ring.cuh), when the driver builds the tensor maps
            if (major >= 9)
            {
                FwdParams q = p;
                int box_rows = Kt::kBlockN; // a paged box stays inside one page
                while (q.kv.page_size > 0 && q.kv.page_size % box_rows != 0)
                    box_rows /= 2;
                if (encode_decode_maps(q, box_rows, Kt::kAtomQ, Kt::kAtomV))
                {
                    kernel<<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(q);
                    return finish_split<Kt>(p, stream, true);
                }
            }
        }
        kernel<<<grid, Kt::kNThreads, Kt::kSmemLoopBytes, stream>>>(p); // the cp.async loop's two stages
        return finish_split<Kt>(p, stream, major >= 9);
    }
    const dim3 grid((p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM, p.nhead_q, p.batch);
    kernel<<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(p);
    return cudaGetLastError();
}

} // namespace mha::ck
