#pragma once
// Host-side launcher of one ck forward instance: grid = (row blocks, heads, batch [x splits]), one CTA per tile of O.
// Split-KV instances with num_splits > 1 follow with the combine kernel on the same stream, except decode tiles on
// sm_90: up to 8 splits merge inside one CTA whose warps they are (a decode step of up to 8 rows per tile, when the
// shared memory fits) or a thread-block cluster, more inside a cooperatively launched split grid.
// Generated instance files (build/gen/fwd_ck_*.cu) call run_fwd<Traits>; csrc/api never sees CuTe.

#include "../api/decode_occupancy.h"
#include "../common/func_attr.h"
#include "decode_ring.cuh"
#include "fwd_kernel.cuh"
#include "splitkv_combine.cuh"
#include "stamps.cuh"

#include <algorithm>
#include <cuda_runtime.h>

namespace mha::ck {

// Launches `kernel` on `stream` with optional attributes: `dependent`, a programmatic dependent of the stream's
// previous kernel (sm_90); `cluster` of more than one CTA, thread-block clusters of those dimensions, placed with the
// load-balancing policy (fwd_params.h: kClusterMergeMaxSplits has the measurements); `cooperative`, every CTA
// resident at once, or cudaErrorCooperativeLaunchTooLarge.
template <typename Kernel>
cudaError_t launch_grid(Kernel kernel, dim3 grid, int threads, int smem, cudaStream_t stream, const FwdParams& p,
                        bool dependent, dim3 cluster = dim3(1, 1, 1), bool cooperative = false)
{
    cudaLaunchConfig_t cfg{};
    cfg.gridDim          = grid;
    cfg.blockDim         = dim3(threads);
    cfg.dynamicSmemBytes = size_t(smem);
    cfg.stream           = stream;
    cudaLaunchAttribute attrs[4]{};
    if (dependent)
    {
        attrs[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster.x * cluster.y * cluster.z > 1)
    {
        attrs[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attrs[cfg.numAttrs].val.clusterDim.x = cluster.x;
        attrs[cfg.numAttrs].val.clusterDim.y = cluster.y;
        attrs[cfg.numAttrs++].val.clusterDim.z = cluster.z;
        attrs[cfg.numAttrs].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
        attrs[cfg.numAttrs++].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicyLoadBalancing;
    }
    if (cooperative)
    {
        attrs[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
        attrs[cfg.numAttrs++].val.cooperative = 1;
    }
    cfg.attrs = attrs;
    const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p);
    return err != cudaSuccess ? err : cudaGetLastError();
}

// After a split-KV launch whose partials went to global memory: the combine kernel, a programmatic dependent of the
// split kernel on sm_90 (splitkv_combine.cuh): its launch and its CTAs' setup overlap the split grid's tail.
template <typename Kt>
cudaError_t finish_split(const FwdParams& p, cudaStream_t stream, bool dependent)
{
    if (p.split.num_splits <= 1)
        return cudaSuccess;
    return launch_grid(splitkv_combine_kernel<typename Kt::Element>, dim3(p.max_seqlen_q, p.nhead_q, p.batch),
                       combine_threads(p.hdim_v, p.split.num_splits), 0, stream, p, dependent);
}

// kRingEarly (fwd_params.h): a decode warp (a warp split or a one-warp split CTA) may issue its first block at
// kernel entry only where that block follows from the kernel parameters and the cache's own tables: a batch-mode
// cache, dense (no cache_batch_idx) or paged through a block table (not page_indptr) with pages of 2^k keys, the key
// count from seqlen_k or the per-batch counts, every tile row present, the KV head from blockIdx.y, and no mask at
// all where the counts are per batch (else a mask whose range over each row block's rows is [0, seqlen_k): it hides
// no key from any CTA, so the setup's first block is the one issued at entry).
template <typename Kt>
bool early_first_block_ok(const FwdParams& p)
{
    const KvCacheParams& kv = p.kv;
    if (kv.page_indptr != nullptr || kv.cache_batch_idx != nullptr || p.seq.is_group ||
        p.seq.cu_seqlen_q != nullptr || p.seq.cu_seqlen_k != nullptr ||
        (kv.page_size > 0 && (kv.block_table == nullptr || (kv.page_size & (kv.page_size - 1)) != 0)))
        return false;
    if (p.seqlen_q < 1 || p.seqlen_k < 1 || p.max_seqlen_q != p.seqlen_q ||
        !(p.split.pack_ratio > 1 || p.head_ratio == 1))
        return false;
    if (kv.seqlen_k != nullptr)
        return p.mask.is_none();
    // the row blocks of grid.x (a speculative-decode step has up to 4): query positions q0 .. q1 - 1 each
    const int pack     = p.split.pack_ratio > 1 ? p.split.pack_ratio : 1;
    const int64_t rows = int64_t(p.seqlen_q) * pack;
    if (rows > 64 * int64_t(Kt::kBlockM))
        return false;
    const WindowMask mask = WindowMask::make(p.mask, p.seqlen_q, p.seqlen_k);
    for (int64_t m = 0; m < rows; m += Kt::kBlockM)
    {
        const int q0 = int(m / pack), q1 = int((std::min<int64_t>(m + Kt::kBlockM, rows) - 1) / pack) + 1;
        const MaskRange r = mask.range(q0, q1);
        if (r.n_begin != 0 || r.n_end < p.seqlen_k)
            return false;
    }
    return true;
}

// Split-KV instances (run_fwd): p carries the fast divisor of num_splits.
template <typename Kt>
cudaError_t run_split(const FwdParams& p, cudaStream_t stream)
{
    auto kernel     = &fwd_kernel<Kt>;
    cudaError_t err = cudaSuccess;
    // rows = (query, packed head) pairs; the host checked batch * num_splits against the grid limit
    const int pack = p.split.pack_ratio;
    const dim3 grid((p.max_seqlen_q * pack + Kt::kBlockM - 1) / Kt::kBlockM, pack > 1 ? p.nhead_k : p.nhead_q,
                    p.batch * p.split.num_splits);
    int cc = p.split.cc;
    if (cc == 0)
    {
        int dev = 0, major = 0;
        if ((err = cudaGetDevice(&dev)) != cudaSuccess ||
            (err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev)) != cudaSuccess)
            return err;
        cc = major * 10;
    }
    if constexpr (Kt::kRing)
    {
        // sm_90: the tensor-copy ring (decode_ring.cuh), when the driver builds the tensor maps
        if (cc >= 90)
        {
            FwdParams q = p;
            q.split.ring_flags &= ~(kRingEarly | kRingEarlyTables); // kept below for the transposed step only
            int box_rows = Kt::kBlockN; // a paged box stays inside one page
            while (q.kv.page_size > 0 && q.kv.page_size % box_rows != 0)
                box_rows /= 2;
            if (encode_decode_maps(q, box_rows, Kt::kAtomQ, Kt::kAtomV))
            {
                // tiles of at most 8 rows (a decode step of up to 8 query heads per KV head), or of 9 to 16 (a few
                // queries of a speculative-decode step) split over the keys: the instances with the transposed step
                // alone (fwd_kernel.cuh, kDecodeT 1 and 2). H100, 32 query / 8 KV heads, d128, 4 queries (16 rows),
                // KV GB/s, the 16-row step -> kDecodeT 2: b=1 1k / 8k / 32k 209 / 1131 / 2206 -> 262 / 1281 / 2301,
                // b=4 704 / 2238 / 2814 -> 834 / 2322 / 2848, b=16 2041 / 2908 / 3046 -> 2135 / 2960 / 3042; one
                // split (b=64) 2784 / 3055 -> 2722 / 3037, so an unsplit tile of more than 8 rows keeps the 16-row
                // step, as do head dims above 128 (two N tiles of O accumulators would not fit the registers).
                // Tiles of more rows split over the keys (a speculative-decode step the host put on this tile,
                // mha_fwd.cpp: spec_decode_rows) take it per 16-row block, a CTA per block (grid.x).
                auto ring_kernel = kernel;
                const int n = p.split.num_splits;
                const int64_t rows = int64_t(p.max_seqlen_q) * p.split.pack_ratio;
                constexpr bool kRows16 = Kt::kHeadDim <= 128 && Kt::kHeadDimV <= 128 && Kt::kBlockM == 16;
                if (MHA_DECODE_T && (rows <= 8 || (kRows16 && n > 1)) &&
                    !(Kt::kDropout && p.drop.enabled))
                {
                    if constexpr (kRows16)
                        ring_kernel = rows <= 8 ? &fwd_kernel<Kt, 1> : &fwd_kernel<Kt, 2>;
                    else
                        ring_kernel = &fwd_kernel<Kt, 1>;
                    if (early_first_block_ok<Kt>(p) && (p.split.ring_flags & kRingEarly))
                    {
                        const bool tables = p.kv.page_size > 0 || p.kv.seqlen_k != nullptr; // loaded at entry too
                        q.split.ring_flags |= kRingEarly | (tables ? kRingEarlyTables : 0);
                    }
                    // 2 to kWarpMergeMaxSplits splits whose warps' shared memory fits one CTA: one CTA per tile,
                    // a warp per split, merged in its shared memory (fwd_params.h). More than an sm_90 CTA's 227 KB
                    // is not tried; a GPU with less room refuses the attribute: the cluster below.
                    const int warp_smem = n * Kt::kWarpSmemBytes;
                    if (MHA_DECODE_WARP_SPLITS && n > 1 && n <= kWarpMergeMaxSplits && warp_smem <= 227 * 1024)
                    {
                        err = set_max_dynamic_smem(ring_kernel, warp_smem);
                        if (err == cudaSuccess)
                        {
                            q.split.warp_splits = n;
                            // kRingHeadPairs: clusters of the CTAs of two KV heads, where every such cluster of
                            // the grid runs at once (a second wave would cost far more than the placement gains)
                            dim3 pairs(1, 1, 1);
                            const int64_t ctas = int64_t(grid.x) * grid.y * p.batch;
                            if ((q.split.ring_flags & kRingHeadPairs) && grid.y % 2 == 0 &&
                                ctas <= 2 * int64_t(decode_clusters_per_wave(2, warp_smem)))
                                pairs.y = 2;
                            err = launch_grid(ring_kernel, dim3(grid.x, grid.y, p.batch), 32 * n, warp_smem, stream,
                                              q, false, pairs);
                            if (pairs.y > 1 && err == cudaErrorInvalidClusterSize)
                            {
                                (void)cudaGetLastError(); // no room for the pairs after all: no clusters
                                err = launch_grid(ring_kernel, dim3(grid.x, grid.y, p.batch), 32 * n, warp_smem,
                                                  stream, q, false);
                            }
                            MHA_PRINT_STAMPS(grid, n); // a slot per warp: as many as one-warp CTAs
                            return err;
                        }
                        if (err != cudaErrorInvalidValue)
                            return err;
                        (void)cudaGetLastError();
                    }
                    if ((err = set_max_dynamic_smem(ring_kernel, Kt::kSmemBytes)) != cudaSuccess)
                        return err;
                }
                // Up to 8 splits: the splits of a tile form one cluster and merge through distributed shared
                // memory (fwd_kernel.cuh), no combine kernel. One split over long caches: clusters of 4 tiles,
                // only for their placement, KV heads of one batch where the heads divide by 4, else batches of one
                // KV head. Bounds and measurements in fwd_params.h.
                const int blocks = (p.seqlen_k + Kt::kBlockN - 1) / Kt::kBlockN; // of the longest cache
                unsigned* const counters = q.split.merge_counters;
                q.split.merge_counters = nullptr;
                q.split.cluster_merge = n > 1 && n <= kClusterMergeMaxSplits;
                dim3 cluster(1, 1, q.split.cluster_merge ? n : 1);
                if (n == 1 && blocks >= kPlacementClusterMinBlocks)
                {
                    if (grid.y % kPlacementCluster == 0)
                        cluster.y = kPlacementCluster;
                    else if (grid.z % kPlacementCluster == 0)
                        cluster.z = kPlacementCluster;
                }
                if (cluster.y * cluster.z > 1)
                {
                    err = launch_grid(ring_kernel, grid, Kt::kNThreads, Kt::kSmemBytes, stream, q, false, cluster);
                    MHA_PRINT_STAMPS(grid, n);
                    if (err != cudaErrorInvalidClusterSize)
                        return err;
                    (void)cudaGetLastError(); // a GPU (partition) without room for the cluster: no cluster
                    q.split.cluster_merge = 0;
                }
                // More splits, with arrival counters from the host: the grid launches cooperatively (every CTA
                // resident at once) and the splits merge inside it (fwd_params.h has the measurements). The host
                // hands out counters only for grids that fit by the instance's shared memory (mha_fwd.cpp); one
                // that does not fit at once after all takes the combine kernel.
                if (n > 1 && counters != nullptr)
                {
                    FwdParams c = q;
                    c.split.merge_counters = counters;
                    err = launch_grid(ring_kernel, grid, Kt::kNThreads, Kt::kSmemBytes, stream, c, false, dim3(1, 1, 1),
                                      true);
                    MHA_PRINT_STAMPS(grid, n);
                    if (err != cudaErrorCooperativeLaunchTooLarge && err != cudaErrorNotSupported)
                        return err;
                    (void)cudaGetLastError(); // more CTAs than fit at once: the combine kernel
                }
                if ((err = launch_grid(ring_kernel, grid, Kt::kNThreads, Kt::kSmemBytes, stream, q, false)) !=
                    cudaSuccess)
                    return err;
                MHA_PRINT_STAMPS(grid, n);
                return finish_split<Kt>(p, stream, true);
            }
        }
    }
    // the cp.async loop's two stages (merged by the combine kernel)
    FwdParams c = p;
    c.split.merge_counters = nullptr;
    if ((err = launch_grid(kernel, grid, Kt::kNThreads, Kt::kSmemLoopBytes, stream, c, false)) != cudaSuccess)
        return err;
    return finish_split<Kt>(p, stream, cc >= 90);
}

template <typename Kt>
cudaError_t run_fwd(const FwdParams& p, cudaStream_t stream)
{
    auto kernel = &fwd_kernel<Kt>;
    // set once per context (func_attr.h)
    cudaError_t err = set_max_dynamic_smem(kernel, Kt::kSmemBytes);
    if (err != cudaSuccess)
        return err;
    if constexpr (Kt::kSplit)
    {
        FwdParams s        = p;
        s.split.splits_div = FastDiv::make(p.split.num_splits);
        return run_split<Kt>(s, stream);
    }
    const dim3 grid((p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM, p.nhead_q, p.batch);
    kernel<<<grid, Kt::kNThreads, Kt::kSmemBytes, stream>>>(p);
    return cudaGetLastError();
}

} // namespace mha::ck
