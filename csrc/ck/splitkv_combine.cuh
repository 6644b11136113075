#pragma once
// Split-KV combine: merges the fp32 partials (O_s normalised by its own sum, LSE_s) of every split into O and LSE:
//   LSE = log(sum_s exp(LSE_s)) [+ the sink logit],  O = sum_s exp(LSE_s - LSE) * O_s.
// One CTA per (query row, head, batch); thread (g, v) adds up the splits g, g + G, g + 2G, ... of column chunk v
// (4 columns when the partials allow 16-byte loads, else 1), and the G groups meet in shared memory. Every thread
// loads its first kCombinePrefetch partials before warp 0 has turned the splits' LSEs into weights, so a decode step
// (up to 128 splits at d128: 16 groups x 8) reads all its partials in one round trip.
//
// The split kernel launches this one as a programmatic dependent (sm_90): the launch and the CTAs' start overlap
// the split kernel's last blocks, and griddepcontrol.wait holds every read until the split grid has finished.
// On sm_90 the decode tile does not need it: up to 8 splits merge inside a thread-block cluster, more inside the
// split grid itself (merge_splits_in_grid below), with the same arithmetic (merge_lse / merge_weight).

#include "../common/fwd_params.h"
#include "../common/pdl.h"
#include "stamps.cuh"

#include <cmath>
#include <cstdint>
#include <cute/config.hpp>

namespace mha::ck {

constexpr int kCombineMaxThreads = 512;
constexpr int kCombinePrefetch   = 8; // partials per thread in flight with the weights

// Threads per combine CTA: enough for every column (scalar path) and for 4-column chunks of every split, <= 512.
inline int combine_threads(int hdim_v, int num_splits)
{
    auto up32 = [](int x) { return (x + 31) / 32 * 32; };
    const int want = up32(hdim_v > up32(hdim_v / 4 * num_splits) ? hdim_v : hdim_v / 4 * num_splits);
    return want < kCombineMaxThreads ? want : kCombineMaxThreads;
}

// The merged LSE of the splits from their largest LSE m and sum_s exp(LSE_s - m), with the sink logit when it is
// finite. Split s weighs exp(LSE_s - lse_keys) (0 when either is -inf), and the weighted sum is scaled by out_scale
// (the keys' share of the denominator, 1 without a sink). Shared by the combine kernel and the in-cluster merge.
struct MergedLse
{
    float lse, lse_keys, out_scale;
};

__device__ __forceinline__ MergedLse merge_lse(float m, float sum, float sink)
{
    MergedLse r;
    r.lse       = m == -INFINITY ? -INFINITY : m + logf(sum);
    r.out_scale = 1.f; // exp(lse_of_keys - lse_with_sink)
    if (sink != -INFINITY)
    {
        const float hi  = fmaxf(r.lse, sink);
        const float tot = hi + logf((r.lse == -INFINITY ? 0.f : expf(r.lse - hi)) + expf(sink - hi));
        r.out_scale = r.lse == -INFINITY ? 0.f : expf(r.lse - tot);
        r.lse       = tot;
    }
    r.lse_keys = r.out_scale > 0.f ? r.lse + logf(r.out_scale) : -INFINITY; // normaliser of the partials
    return r;
}

__device__ __forceinline__ float merge_weight(float lse_s, float lse_keys)
{
    return lse_keys == -INFINITY || lse_s == -INFINITY ? 0.f : expf(lse_s - lse_keys);
}

// ---- The merge inside the split grid (decode tile, sm_90; fwd_launch.cuh launches the split grid cooperatively, so
// every CTA of it is resident at once) ----
// Each split CTA writes its partial, counts itself in on the tile's counter (its low 16 bits), waits until the
// tile's num_splits CTAs are in, and merges its share of the tile's (row, 4-column) chunks (chunks split, split + n,
// split + 2n, ...). The counter's high 16 bits are a generation: the CTA that counts itself in last sets the count
// back to 0 and advances the generation in one release add, and the others wait for the count to reach num_splits or
// for the generation they counted themselves in under to pass, so no CTA counts itself out (that returning atomic
// held every CTA's exit; H100, same call, KV GB/s, three passes: b=1 1k 349-350 -> 353-354, 2k 625-630 -> 632-640,
// 8k 1573-1588 -> 1585, 32k / 128k and b=2 / b=4 even; twentieth session). The counters are the library's
// (fwd_params.h: SplitParams::merge_counters), zero from the module's load; between calls their counts are 0.

struct MergeRow
{
    int head;        // query head of the tile row
    int64_t acc_row; // its row in lse_acc / o_acc (the query's row; group mode: from seqstart_q)
    void* out;       // its O row
    float* lse_out;  // its LSE, nullptr when not stored
};

__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* ptr)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ptr) : "memory");
    return v;
}

// old value; release (this thread's and, after a __syncwarp, its warp's earlier stores) and acquire
__device__ __forceinline__ unsigned fetch_add_acq_rel_gpu(unsigned* ptr, unsigned v)
{
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(v) : "memory");
    return old;
}

// One warp merges chunks of the tile, kW at a time: lanes w * kG + g, g < kG, add up the splits g, g + kG, g + 2kG,
// g + 3kG of chunk w (kG: the fewest lanes for which four splits per lane cover them all), every partial and LSE
// loaded in one round trip, then meet in shuffles. A decode tile (4 rows of 32 chunks at d128) over 64 splits gives
// each CTA two chunks: one pass.
template <typename Element, int kG, typename RowOf, typename Wait>
__device__ __forceinline__ void merge_chunks(const SplitParams& sp, const float* o_acc, const float* lse_acc,
                                             const float* sink, int hdim_v, int split, int rows, RowOf row_of,
                                             Wait wait)
{
    constexpr int kW = 32 / kG, kSlots = 4;
    const int lane = threadIdx.x % 32, g = lane % kG, w = lane / kG;
    const int n = sp.num_splits, chunks = hdim_v / 4, total = rows * chunks;
    for (int j0 = 0; split + n * j0 < total; j0 += kW) // warp-uniform
    {
        const int it = split + n * (j0 + w);
        const bool valid = it < total;
        const int tr = valid ? it / chunks : 0, col = valid ? it % chunks * 4 : 0;
        const MergeRow r = row_of(tr);
        const float* lsrc = lse_acc + r.head * sp.lse_acc_head_stride + r.acc_row;
        const float* osrc = o_acc + r.head * sp.o_acc_head_stride + r.acc_row * sp.o_acc_row_stride + col;
        if (j0 == 0)
            wait(); // the first chunk's addresses are ready before the other splits are in
        float l[kSlots];
        float4 x[kSlots];
        float m = -INFINITY;
        CUTE_UNROLL
        for (int u = 0; u < kSlots; ++u)
        {
            const int s = g + u * kG;
            const bool on = valid && s < n;
            l[u] = on ? __ldcg(lsrc + s * sp.lse_acc_split_stride) : -INFINITY;
            x[u] = on ? __ldcg(reinterpret_cast<const float4*>(osrc + s * sp.o_acc_split_stride))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
            m = fmaxf(m, l[u]);
        }
        CUTE_UNROLL
        for (int o = kG / 2; o > 0; o /= 2)
            m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        float sum = 0.f;
        CUTE_UNROLL
        for (int u = 0; u < kSlots; ++u)
            sum += l[u] == -INFINITY ? 0.f : expf(l[u] - m);
        CUTE_UNROLL
        for (int o = kG / 2; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffff, sum, o);
        const MergedLse mg = merge_lse(m, sum, sink != nullptr ? sink[r.head] : -INFINITY);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        CUTE_UNROLL
        for (int u = 0; u < kSlots; ++u)
        {
            const float wt = merge_weight(l[u], mg.lse_keys);
            if (wt != 0.f) // an empty split's partial is never added
                acc.x += wt * x[u].x, acc.y += wt * x[u].y, acc.z += wt * x[u].z, acc.w += wt * x[u].w;
        }
        CUTE_UNROLL
        for (int o = kG / 2; o > 0; o /= 2)
        {
            acc.x += __shfl_xor_sync(0xffffffff, acc.x, o), acc.y += __shfl_xor_sync(0xffffffff, acc.y, o);
            acc.z += __shfl_xor_sync(0xffffffff, acc.z, o), acc.w += __shfl_xor_sync(0xffffffff, acc.w, o);
        }
        if (valid && g == 0)
        {
            alignas(8) Element out[4] = {static_cast<Element>(acc.x * mg.out_scale),
                                         static_cast<Element>(acc.y * mg.out_scale),
                                         static_cast<Element>(acc.z * mg.out_scale),
                                         static_cast<Element>(acc.w * mg.out_scale)};
            *reinterpret_cast<uint2*>(static_cast<Element*>(r.out) + col) = *reinterpret_cast<const uint2*>(out);
            if (r.lse_out != nullptr && col == 0)
                *r.lse_out = mg.lse;
        }
    }
}

// Called by every lane of a one-warp split CTA after its partial stores. o_acc / lse_acc: split 0 of this batch.
template <typename Element, typename RowOf>
__device__ void merge_splits_in_grid(const SplitParams& sp, unsigned* counter, const float* o_acc,
                                     const float* lse_acc, const float* sink, int hdim_v, int split, int rows,
                                     RowOf row_of)
{
    static_assert(kMaxSplits < 0x10000, "the count takes the counter's low 16 bits");
    const unsigned n = unsigned(sp.num_splits);
    __syncwarp(); // every lane's partial stores, ordered before lane 0's release below
    MHA_STAMP(kStampPartial);
    unsigned gen = 0, last = 0;
    if (threadIdx.x == 0)
    {
        const unsigned old = fetch_add_acq_rel_gpu(counter, 1u);
        gen = old >> 16, last = (old & 0xffffu) == n - 1;
        if (last) // every partial is in (acquired above): count 0, next generation (16 bits: it wraps, != below)
            asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(counter), "r"(0x10000u - n) : "memory");
        MHA_STAMP(kStampMerge, int(old)); // counted in
    }
    // Every split is in once the count reaches n (the last RMW of the release sequence of every split's count-in,
    // read with acquire) or, when this CTA reads the counter only after the last one reset it, once the generation
    // has moved on. Waiting for the count itself instead of the last CTA's reset saves the waiters a round trip:
    // the last count-in's return to its CTA and the reset's way back to the L2 (H100, b=1 8k stamps: every split
    // in 0.2 us p50 after the last count-in).
    auto wait = [&] {
        if (threadIdx.x == 0 && !last)
            for (unsigned v = load_acquire_gpu(counter); v >> 16 == gen && (v & 0xffffu) != n;)
                v = load_acquire_gpu(counter);
        __syncwarp();
        MHA_STAMP(kStampMergeLse); // every split is in
    };
    if (n > 64)
        merge_chunks<Element, 32>(sp, o_acc, lse_acc, sink, hdim_v, split, rows, row_of, wait);
    else if (n > 32)
        merge_chunks<Element, 16>(sp, o_acc, lse_acc, sink, hdim_v, split, rows, row_of, wait);
    else if (n > 16)
        merge_chunks<Element, 8>(sp, o_acc, lse_acc, sink, hdim_v, split, rows, row_of, wait);
    else
        merge_chunks<Element, 4>(sp, o_acc, lse_acc, sink, hdim_v, split, rows, row_of, wait);
    MHA_STAMP(kStampStored);
}

template <typename Element>
__global__ void __launch_bounds__(kCombineMaxThreads) splitkv_combine_kernel(const __grid_constant__ FwdParams p)
{
    __shared__ float s_w[kMaxSplits];                 // exp(LSE_s - LSE of the keys), 0 for empty splits
    __shared__ float4 s_acc[kCombineMaxThreads];      // per-thread column sums, reduced over groups
    __shared__ float s_out_scale;
    const int tid = threadIdx.x;
    const int q = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const SeqParams& sq = p.seq;
    int seqlen_q = p.seqlen_q;
    int64_t row0 = 0;
    if (sq.is_group)
    {
        row0 = sq.seqstart_q[b];
        seqlen_q = sq.seqlen_q ? sq.seqlen_q[b]
                               : (sq.cu_seqlen_q ? sq.cu_seqlen_q[b + 1] - sq.cu_seqlen_q[b]
                                                 : sq.seqstart_q[b + 1] - sq.seqstart_q[b]);
    }
    else if (sq.cu_seqlen_q)
        seqlen_q = min(sq.cu_seqlen_q[b + 1] - sq.cu_seqlen_q[b], p.seqlen_q); // as SeqInfo clamps it
    if (q >= seqlen_q)
        return;

    // Everything that does not come from the split kernel is read before the wait, off the critical path.
    const SplitParams& sp = p.split;
    const int n = sp.num_splits;
    const float* o_acc = sp.o_acc + (sq.is_group ? 0 : b * sp.o_acc_batch_stride) + h * sp.o_acc_head_stride +
                         (row0 + q) * sp.o_acc_row_stride;
    const float* lse_acc = sp.lse_acc + (sq.is_group ? 0 : b * sp.lse_acc_batch_stride) +
                           h * sp.lse_acc_head_stride + row0 + q;
    const int64_t o_split_stride = sp.o_acc_split_stride, lse_split_stride = sp.lse_acc_split_stride;
    const bool vec4 = (reinterpret_cast<uintptr_t>(sp.o_acc) % 16 == 0) && sp.o_acc_split_stride % 4 == 0 &&
                      sp.o_acc_head_stride % 4 == 0 && sp.o_acc_row_stride % 4 == 0 &&
                      (sq.is_group || sp.o_acc_batch_stride % 4 == 0) && p.hdim_v % 4 == 0;
    const int width  = vec4 ? 4 : 1;
    const int nvec   = p.hdim_v / width;
    const int groups = blockDim.x / nvec;
    const int g = tid / nvec, v = tid % nvec;
    const float sink = p.mod.sink != nullptr ? p.mod.sink[h] : -INFINITY;
    float* const lse_out = p.lse != nullptr
                               ? p.lse + h * p.lse_head_stride + (sq.is_group ? row0 : b * p.lse_batch_stride) + q
                               : nullptr;
    Element* const out = static_cast<Element*>(p.o) + (sq.is_group ? row0 * p.o_row_stride : b * p.o_batch_stride) +
                         h * p.o_head_stride + int64_t(q) * p.o_row_stride + tid * width;
    grid_dependency_wait();

    auto load = [&](int s) {
        const float* src = o_acc + s * o_split_stride + v * width;
        return vec4 ? *reinterpret_cast<const float4*>(src) : make_float4(*src, 0.f, 0.f, 0.f);
    };
    // the first partials of this thread, in flight while warp 0 computes the weights (an empty split's partial is
    // loaded too, but its weight is 0 and it is never added)
    float4 x0[kCombinePrefetch];
    CUTE_UNROLL
    for (int u = 0; u < kCombinePrefetch; ++u)
    {
        const int s = g + u * groups;
        x0[u] = g < groups && s < n ? load(s) : make_float4(0.f, 0.f, 0.f, 0.f);
    }

    if (tid < 32)
    {
        const int lane = tid;
        float l[kMaxSplits / 32];
        float m = -INFINITY;
        CUTE_UNROLL
        for (int i = 0; i < kMaxSplits / 32; ++i)
        {
            const int s = lane + 32 * i;
            l[i] = s < n ? lse_acc[s * lse_split_stride] : -INFINITY;
            m = fmaxf(m, l[i]);
        }
        for (int o = 16; o > 0; o /= 2)
            m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        float sum = 0.f;
        CUTE_UNROLL
        for (int i = 0; i < kMaxSplits / 32; ++i)
            sum += l[i] == -INFINITY ? 0.f : expf(l[i] - m);
        for (int o = 16; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffff, sum, o);
        const MergedLse merged = merge_lse(m, sum, sink);
        const float lse = merged.lse, out_scale = merged.out_scale, lse_keys = merged.lse_keys;
        CUTE_UNROLL
        for (int i = 0; i < kMaxSplits / 32; ++i)
            s_w[lane + 32 * i] = merge_weight(l[i], lse_keys);
        if (lane == 0)
        {
            s_out_scale = out_scale;
            if (lse_out != nullptr)
                *lse_out = lse;
        }
    }
    __syncthreads();

    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (g < groups)
    {
        CUTE_UNROLL
        for (int u = 0; u < kCombinePrefetch; ++u)
        {
            const int s   = g + u * groups;
            const float w = s < n ? s_w[s] : 0.f;
            if (w != 0.f)
            {
                acc.x += w * x0[u].x, acc.y += w * x0[u].y;
                acc.z += w * x0[u].z, acc.w += w * x0[u].w;
            }
        }
        for (int s0 = g + kCombinePrefetch * groups; s0 < n; s0 += 4 * groups)
        {
            float w[4];
            float4 x[4];
            CUTE_UNROLL
            for (int u = 0; u < 4; ++u) // the loads first, then the sums: four round trips overlap
            {
                const int s = s0 + u * groups;
                w[u] = s < n ? s_w[s] : 0.f;
                x[u] = w[u] != 0.f ? load(s) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            CUTE_UNROLL
            for (int u = 0; u < 4; ++u)
            {
                acc.x += w[u] * x[u].x, acc.y += w[u] * x[u].y;
                acc.z += w[u] * x[u].z, acc.w += w[u] * x[u].w;
            }
        }
    }
    s_acc[tid] = acc;
    __syncthreads();
    if (tid < nvec)
    {
        for (int k = 1; k < groups; ++k)
        {
            const float4 o = s_acc[k * nvec + tid];
            acc.x += o.x, acc.y += o.y, acc.z += o.z, acc.w += o.w;
        }
        const float scale = s_out_scale;
        out[0] = static_cast<Element>(acc.x * scale);
        if (vec4)
        {
            out[1] = static_cast<Element>(acc.y * scale);
            out[2] = static_cast<Element>(acc.z * scale);
            out[3] = static_cast<Element>(acc.w * scale);
        }
    }
}

} // namespace mha::ck
