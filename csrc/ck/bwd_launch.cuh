#pragma once
// Host-side launcher of one ck backward instance: dot(dO, O) preprocess, which also zeroes the used tiles of the fp32
// dQ accumulator and the turn counters [+ sink gradient] [+ the dropout random values, when asked to store them], the
// dQ/dK/dV kernel (grid = key blocks x query heads x batch), then the dQ conversion, all on one stream. The caller
// (csrc/api) has put the accumulator (and, deterministic, the turn counters), uninitialized, into p.
// Generated instance files (build/gen/bwd_ck_*.cu) call run_bwd<Traits>; csrc/api never sees CuTe.

#include "../common/func_attr.h"
#include "bwd_kernel.cuh"

#include <cuda_runtime.h>

namespace mha::ck {

template <typename Kt>
cudaError_t run_bwd(const BwdParams& p, cudaStream_t stream)
{
    const dim3 row_grid((p.max_seqlen_q + 15) / 16, p.nhead_q, p.batch);
    cudaError_t err = cudaSuccess;
    // The main kernel's shared memory first: the device pass picked its Q / dO stage count by arch
    // (bwd_traits.cuh), and a refusal here must come before anything writes the caller's D / d_sink / rand_val.
    auto kernel = &bwd_kernel<Kt>;
    int smem    = 0;
    if (p.max_seqlen_k > 0)
    {
        int dev = 0, major = 0, minor = 0;
        if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
            (err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess ||
            (err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev)) != cudaSuccess)
            return err;
        smem = Kt::smem_bytes_for(major * 10 + minor);
        if ((err = set_max_dynamic_smem(kernel, smem)) != cudaSuccess)
            return err;
    }
    if (p.max_seqlen_q > 0)
    {
        bwd_dot_do_o<Kt><<<row_grid, 128, 0, stream>>>(p);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    if (p.d_sink != nullptr)
    {
        bwd_sink_grad<><<<p.nhead_q, 256, 0, stream>>>(p);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    if (p.drop.enabled && p.drop.randval != nullptr && p.max_seqlen_q > 0 && p.max_seqlen_k > 0)
    {
        bwd_store_randval<><<<dim3((p.max_seqlen_k + 127) / 128, p.nhead_q, p.batch), 128, 0, stream>>>(p);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    if (p.max_seqlen_k > 0) // keys without queries still get dK = dV = 0
    {
        const dim3 grid((p.max_seqlen_k + Kt::kBlockN - 1) / Kt::kBlockN, p.nhead_q, p.batch);
        kernel<<<grid, Kt::kNThreads, smem, stream>>>(p);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    if (p.max_seqlen_q > 0)
    {
        const dim3 block_grid((p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM, p.nhead_q, p.batch);
        bwd_convert_dq<Kt><<<block_grid, Kt::kNThreads, 0, stream>>>(p);
        err = cudaGetLastError();
    }
    return err;
}

} // namespace mha::ck
