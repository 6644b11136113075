#pragma once
// The decode tile's K / V ring on sm_90 (FwdKernelTraits::kDecode): key blocks land in kKvStages shared-memory
// stages through the tensor copy engine (cp.async.bulk.tensor) and complete on one mbarrier per stage.
//
// K and V are described to the copy engine by 4-d tensor maps over (column, row, KV head, batch or page), built on
// the host for every call (encode_decode_maps). A box is (one swizzle atom of columns, box_rows rows) and lands in
// the same swizzled layout the ldmatrix reads of fwd_kernel expect (Swizzle<3,3,3> = 128-byte swizzle, <2,3,3> =
// 64-byte). A full 32-key block is 32 / box_rows boxes per atom column; box_rows is 32 for a dense cache and, for a
// paged one, the largest power of two up to 32 that divides the page size (a box never crosses a page), so a
// page-16 cache costs two copies per atom column instead of one. A partial last block loads row by row through a
// second map with one-row boxes, so no copy reads past seqlen_k. Older GPUs, 32-column atoms (d32 / d96 / d160: a
// one-row box would start off a 128-byte boundary) and calls whose maps could not be built keep the cp.async loop.

#include "../common/fwd_params.h"
#include "../common/mbarrier.h"

#include <cstdint>
#include <cuda_runtime.h>
#ifndef __CUDACC_RTC__
#include "../common/driver_api.h"
#endif

namespace mha::ck {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MHA_DECODE_TMA 1
#else
#define MHA_DECODE_TMA 0
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if MHA_DECODE_TMA
// Pulls a tensor map (kernel parameter space) into the copy engine's descriptor cache ahead of its first use.
__device__ __forceinline__ void prefetch_tensormap(const TmaDesc& map)
{
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map)) : "memory");
}
#endif

// Thread-block clusters (the in-cluster split merge of fwd_kernel.cuh): this CTA's rank, a barrier over every
// thread of the cluster (release / acquire: shared-memory writes before it are visible to the other CTAs' reads
// after it), and loads from another CTA's shared memory at the address `p` has in this one.
__device__ __forceinline__ int cluster_cta_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return int(r);
}

__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// A cluster barrier without memory ordering: after it, no CTA of the cluster still reads this one's shared memory
// (every CTA's remote loads returned before it arrived), so the CTA may exit. Unlike cluster_sync, its arrival does
// not wait for this thread's earlier global stores to be performed at cluster scope.
__device__ __forceinline__ void cluster_sync_relaxed()
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_smem_addr(const void* p, int rank)
{
    uint32_t a;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
    return a;
}

__device__ __forceinline__ float cluster_load(uint32_t a)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
    return v;
}

__device__ __forceinline__ float4 cluster_load4(uint32_t a)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(a)
                 : "memory");
    return v;
}

template <int kStages>
struct DecodeRing
{
    uint64_t* bars; // kStages mbarriers

#if MHA_DECODE_TMA
    // Lane 0 initialises the barriers; the caller's __syncwarp publishes them.
    __device__ __forceinline__ void init(void* bar_smem, int lane)
    {
        bars = static_cast<uint64_t*>(bar_smem);
        if (lane == 0)
        {
            for (int s = 0; s < kStages; ++s)
                mbar_init(smem_addr(bars + s), 1);
            mbar_init_fence();
        }
        __syncwarp();
    }

    // Arms stage `st` for `bytes` bytes of copies; every lane calls it before issuing any copy (lane 0 acts).
    __device__ __forceinline__ void arm(int st, uint32_t bytes, int lane)
    {
        if (lane == 0)
            mbar_expect_tx(smem_addr(bars + st), bytes);
        __syncwarp();
    }

    // One box of tensor map `map` at coordinates (c0, c1, c2, c3) into `dst`, completing on stage `st`. Every K / V
    // line is read once per call, so it enters the L2 as evict-first (H200, L2 swept before every call, two passes,
    // KV GB/s: b=16 1k keys 2638-2666 -> 2729-2732, b=64 1k 3838 -> 3891, b=1 128k +0.5-1.4%, b=16 8k +0.5%, even
    // at 32k-128k; 256-byte L2 promotion with it lost 5-7%, none was even with 128 bytes).
    __device__ __forceinline__ void load(void* dst, const TmaDesc& map, int c0, int c1, int c2, int c3, int st)
    {
        uint64_t policy;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;" ::"r"(smem_addr(dst)),
                     "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
                     "r"(smem_addr(bars + st)), "l"(policy)
                     : "memory");
    }

    // Waits until stage `st` (its fill number `phase`, mod 2) has landed.
    __device__ __forceinline__ void wait(int st, int phase)
    {
        mbar_wait(smem_addr(bars + st), uint32_t(phase));
        __syncwarp();
    }

    // Orders this lane's ordinary shared-memory accesses (ldmatrix reads, zero fills) before later copy-engine
    // writes into the same stage.
    __device__ __forceinline__ static void fence_async()
    {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
#endif
};

// 16-byte zero stores over elements [0, n) of a shared-memory row (n a multiple of 8).
template <typename Element>
__device__ __forceinline__ void zero_row(Element* row, int n)
{
    for (int c = 0; c < n; c += 8)
        *reinterpret_cast<uint4*>(row + c) = make_uint4(0, 0, 0, 0);
}

#ifndef __CUDACC_RTC__
// Host: the K and V tensor maps of a decode call (coarse boxes of `box_rows` rows and one-row boxes), swizzle atoms
// of `atom_q` / `atom_v` columns. False when the driver has no tensor maps or rejects a stride: the caller then
// leaves p.kv.tma_box_rows at 0 and the kernel takes the cp.async loop.
inline bool encode_decode_maps(FwdParams& p, int box_rows, int atom_q, int atom_v)
{
    static const auto encode =
        driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
    if (encode == nullptr)
        return false;
    constexpr cuuint64_t kOpen = (1ull << 31) - 1; // extent of a dimension whose size the call does not give
    // L2 fetches of 128 bytes, the size of a box row: 256-byte promotion saturated the L2 at 87% of DRAM
    // bandwidth (H200, b=64, 32k keys: 4.11 TB/s against 4.62 with 128 bytes or none). On H100 it reads faster
    // (kRingL2Promo256, the host's choice: mha_fwd.cpp, ring_flags_for has the measurements).
    // -DMHA_DECODE_L2PROMO=<CUtensorMapL2promotion value> builds one promotion for every call (A/Bs).
#ifdef MHA_DECODE_L2PROMO
    const CUtensorMapL2promotion l2_promotion = CUtensorMapL2promotion(MHA_DECODE_L2PROMO);
#else
    const CUtensorMapL2promotion l2_promotion = p.split.ring_flags & kRingL2Promo256
                                                    ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                                                    : CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
#endif
    const bool paged = p.kv.page_size > 0, group = p.seq.is_group;
    auto one = [&](TmaDesc& out, const void* base, int hdim, int atom, int rows, int64_t row_stride,
                   int64_t head_stride, int64_t outer_stride) {
        const int64_t eb = 2; // fp16 / bf16
        cuuint64_t dims[4] = {cuuint64_t(hdim), 0, cuuint64_t(p.nhead_k), 0};
        cuuint64_t strides[3] = {cuuint64_t(row_stride * eb), cuuint64_t(head_stride * eb),
                                 cuuint64_t(outer_stride * eb)};
        if (paged)
            dims[1] = cuuint64_t(p.kv.page_size), dims[3] = kOpen;
        else if (group)
            dims[1] = kOpen, dims[3] = 1;
        else
            dims[1] = cuuint64_t(p.seqlen_k > 0 ? p.seqlen_k : 1),
            dims[3] = p.kv.cache_batch_idx != nullptr ? kOpen : cuuint64_t(p.batch);
        // a dimension of extent 1 is never stepped over: give it a stride the encoder accepts
        for (int d = 1; d < 4; ++d)
            if (dims[d] == 1 || strides[d - 1] == 0)
            {
                if (dims[d] != 1)
                    return false;
                strides[d - 1] = strides[0];
            }
        const cuuint32_t box[4] = {cuuint32_t(atom), cuuint32_t(rows), 1, 1};
        const cuuint32_t unit[4] = {1, 1, 1, 1};
        const CUtensorMapSwizzle swizzle = atom * eb == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
        return encode(reinterpret_cast<CUtensorMap*>(&out), CU_TENSOR_MAP_DATA_TYPE_UINT16, 4,
                      const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                      l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
    };
    const int64_t k_outer = paged ? p.k_batch_stride : group ? p.k_row_stride : p.k_batch_stride;
    const int64_t v_outer = paged ? p.v_batch_stride : group ? p.v_row_stride : p.v_batch_stride;
    const bool ok = one(p.kv.tma_k, p.k, p.hdim_q, atom_q, box_rows, p.k_row_stride, p.k_head_stride, k_outer) &&
                    one(p.kv.tma_v, p.v, p.hdim_v, atom_v, box_rows, p.v_row_stride, p.v_head_stride, v_outer) &&
                    one(p.kv.tma_k1, p.k, p.hdim_q, atom_q, 1, p.k_row_stride, p.k_head_stride, k_outer) &&
                    one(p.kv.tma_v1, p.v, p.hdim_v, atom_v, 1, p.v_row_stride, p.v_head_stride, v_outer);
    p.kv.tma_box_rows = ok ? box_rows : 0;
    return ok;
}
#endif

} // namespace mha::ck
