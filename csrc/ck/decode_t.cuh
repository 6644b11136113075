#pragma once
// The decode tile's transposed step (fwd_kernel.cuh, sm_90 ring, tiles of at most 8 query rows): keys and head
// dimensions go on the MMA's 16-row M side and the query rows on its 8-column N side,
//   S^T (32 keys x 8 rows)   = K (32 x d) Q^T            two m16 tiles x d/16 k-steps
//   O^T (d x 8 rows)        += V^T (d x 32 keys) P^T     d/16 m16 tiles x two k-steps
// so a 4-row GQA step (32 query heads on 8 KV heads, one query) runs half the m16n8k16 MMAs of the 16-row tile,
// keeps half the O accumulators (d/4 floats per lane instead of d/2) and rescales half as many.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): lane l = 4 g + t. C: (row g [+8], cols 2t, 2t+1). A (row-major 16 x 16):
// a0 (g, 2t..), a1 (g + 8, 2t..), a2 (g, 2t + 8..), a3 (g + 8, 2t + 8..). B (16 x 8, "col"): b0 (k 2t.., n g),
// b1 (k 2t + 8.., n g). So
// - K, stored [key][d], is the A operand of S^T as it is (ldmatrix); V, stored [key][d], is the A operand of O^T
//   transposed (ldmatrix.trans); Q, stored [row][d], is the B operand of S^T as it is (ldmatrix, kept in registers);
// - S^T's C fragment holds (key g [+8], rows 2t, 2t + 1); packed to bf16x2 / f16x2, each 8 x 8 quarter transposed
//   by movmatrix is (row g, keys 2t, 2t + 1): the B fragment of P^T. No shared-memory round trip.
// Each lane owns rows 2t and 2t + 1 of the softmax; a row's keys spread over the 8 lanes of equal t (xor 4, 8, 16).

#include <cutlass/numeric_types.h>

#include "../common/mma_sync.h"

#include <cstdint>
#include <type_traits>

#ifndef MHA_DECODE_T
#define MHA_DECODE_T 1 // 0: every decode tile takes the 16-row step (experiments)
#endif
// 1: the warp splits of a tile claim its key blocks at run time (a shared-memory counter) instead of each keeping a
// fixed range. Off: which warp sums which blocks then changes from call to call, and with it the result's last bits
// (kvcache_check's determinism case: every repeat differed), for at most ~1% (H100, b=16: 1k +0.3%, 2k +1%, 8k even,
// 32k +1.1%). A forward pass stays deterministic. On H100-class GPUs the fixed partition over a dense cache takes
// the blocks in turn (SplitParams::ring_flags, kRingInterleave), which won that back at 32k (3064-3073 -> 3093-3099).
#ifndef MHA_DECODE_CLAIM
#define MHA_DECODE_CLAIM 0
#endif
#ifndef MHA_DECODE_WARP_SPLITS
#define MHA_DECODE_WARP_SPLITS 1 // 0: the splits of a transposed-step tile are one-warp CTAs in a cluster (experiments)
#endif

namespace mha::ck::dt {

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// 8 x 8 b16 transpose across the warp: in (row l / 4, cols 2 (l % 4), +1), out the same of the transpose
__device__ __forceinline__ uint32_t movm_t(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
}

template <typename Element>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    mma_m16n8k16<std::is_same_v<Element, cutlass::bfloat16_t>>(d, a, b0, b1);
}

// (lo, hi) -> one register, lo in the low half (the fragment's first column)
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t r;
    if constexpr (std::is_same_v<Element, cutlass::bfloat16_t>)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// max / sum over the 8 lanes that share l % 4 (one softmax row's keys)
__device__ __forceinline__ float group_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 4));
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 8));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 16));
}

__device__ __forceinline__ float group_sum(float x)
{
    x += __shfl_xor_sync(0xffffffff, x, 4);
    x += __shfl_xor_sync(0xffffffff, x, 8);
    return x + __shfl_xor_sync(0xffffffff, x, 16);
}

// Byte offset of element (row, col) in a tile stored as column atoms of 64 elements x `rows` rows, each row 128
// bytes with the 128-byte swizzle (16-byte chunk index ^ row % 8): the ring's K / V stages and the Q tile's atoms.
template <int kRows>
__device__ __forceinline__ uint32_t swz128_offset(int row, int col)
{
    return uint32_t(((col / 64) * kRows + row) * 128 + ((((col % 64) / 8) ^ (row % 8)) * 16) + (col % 8) * 2);
}

} // namespace mha::ck::dt
