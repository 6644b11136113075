#pragma once
// Compile-time shape of one ck backward instance. A CTA owns kBlockN keys of one (batch, query head) and walks the
// query blocks of kBlockM rows that see them; five mma.sync GEMMs per step, each with its own warp arrangement:
//   S  = Q K^T,  dP = dO V^T   (kBlockM x kBlockN)      TiledMmaSdP: kAtomMSdP warps along M
//   dV += P^T dO, dK += dS^T Q (kBlockN x hdim)         TiledMmadKV: kAtomNdKV warps along N
//   dQ  = dS K                 (kBlockM x hdim_q)       TiledMmadQ:  kAtomMdQ warps along M
// P and dS go through shared memory (as the input type) to serve as the transposed operands. Q and dO are
// double-buffered: the next query block streams in while this one computes.
// Tiles per head dim are in csrc/codegen/generate.py CK_BWD_TILES.

#include "fwd_traits.cuh"

namespace mha::ck {

// kFeatures_: what the instance implements beyond masks (each run-time selected when present): 1 elementwise bias
// (+ dbias), 2 ALiBi, 4 dropout (kBwdBias / kBwdAlibi / kBwdDropout in api/registry.h). 0 is the "plain" instance, 7
// the "full" one; "alibi" (2) and "dropout" (4) carry only their feature's code and registers.
template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kNWarps_, int kAtomMSdP_,
          int kAtomNdKV_, int kAtomMdQ_, int kFeatures_ = 7>
struct BwdKernelTraits
{
    using Element = Element_;

    static constexpr int kHeadDim  = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kBlockM   = kBlockM_;
    static constexpr int kBlockN   = kBlockN_;
    static constexpr int kNWarps   = kNWarps_;
    static constexpr int kNThreads = kNWarps * 32;
    static constexpr int kAtomMSdP = kAtomMSdP_;
    static constexpr int kAtomNdKV = kAtomNdKV_;
    static constexpr int kAtomMdQ  = kAtomMdQ_;
    // LSE / D of a query block through cp.async with its Q / dO tiles. Register loads instead stall the warps that
    // issue them until the data lands (d128 s=4k: 303 vs 292 TFLOP/s on an H200); -DMHA_BWD_ASYNC_STATS=0 for A/B.
#ifdef MHA_BWD_ASYNC_STATS
    static constexpr bool kAsyncStats = MHA_BWD_ASYNC_STATS;
#else
    static constexpr bool kAsyncStats = true;
#endif
#ifdef MHA_BWD_FORCE_PLAIN // experiments: every instance plain
    static constexpr int kFeatures = 0;
#else
    static constexpr int kFeatures = kFeatures_;
#endif
    static constexpr bool kBias    = kFeatures & 1;
    static constexpr bool kAlibi   = kFeatures & 2;
    static constexpr bool kDropout = kFeatures & 4;
    static constexpr bool kFull    = kFeatures != 0; // scores go through ScoreMods (scale not folded into exp2)

    static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0, "instance head dims must be multiples of 32");
    static_assert(kNWarps % kAtomMSdP == 0 && kNWarps % kAtomNdKV == 0 && kNWarps % kAtomMdQ == 0);
    static_assert(kBlockM % (16 * kAtomMSdP) == 0 && kBlockN % (16 * (kNWarps / kAtomMSdP)) == 0);
    static_assert(kBlockN % (16 * kAtomNdKV) == 0 && kBlockM % (16 * kAtomMdQ) == 0);

    using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                       MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                       MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
    template <int kAtomM>
    using WarpTiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kAtomM>, Int<kNWarps / kAtomM>, _1>>,
                                  Tile<Int<16 * kAtomM>, Int<16 * (kNWarps / kAtomM)>, _16>>;
    // Dropout instances put each S / dP warp along N on 32 consecutive key columns, the four n8 tiles of one Philox
    // counter group (philox.h): internal column j + 8 w + 8 kAtomNSdP r (j < 8, warp w along N, repeat r < 4) is key
    // column j + 32 w + 8 r. The other instances keep the warps 8 columns apart.
    static constexpr int kAtomNSdP = kNWarps / kAtomMSdP;
    static_assert(!kDropout || kBlockN % (32 * kAtomNSdP) == 0, "dropout: each S warp along N takes 32-key groups");
    using TiledMmaSdP = std::conditional_t<
        kDropout,
        TiledMMA<MmaAtom, Layout<Shape<Int<kAtomMSdP>, Int<kAtomNSdP>, _1>>,
                 Tile<Int<16 * kAtomMSdP>, Layout<Shape<_8, Int<kAtomNSdP>, _4>, Stride<_1, _32, _8>>, _16>>,
        WarpTiledMma<kAtomMSdP>>;
    using TiledMmadKV = WarpTiledMma<kAtomNdKV>;
    using TiledMmadQ  = WarpTiledMma<kAtomMdQ>;

    template <int kRows, int kWidth>
    using SmemLayout = decltype(tile_to_shape(typename SmemTile<kWidth>::Atom{}, Shape<Int<kRows>, Int<kWidth>>{}));
    // (cols, rows) view of a (rows, cols) layout: the transposed operand, read with ldmatrix.trans
    template <typename L, int kRows, int kCols>
    using Transposed = decltype(composition(L{}, make_layout(Shape<Int<kCols>, Int<kRows>>{}, GenRowMajor{})));

    using SmemLayoutQ   = SmemLayout<kBlockM, kHeadDim>;
    using SmemLayoutdO  = SmemLayout<kBlockM, kHeadDimV>;
    using SmemLayoutK   = SmemLayout<kBlockN, kHeadDim>;
    using SmemLayoutV   = SmemLayout<kBlockN, kHeadDimV>;
    using SmemLayoutP   = SmemLayout<kBlockM, kBlockN>; // P (after dropout) and dS
    using SmemLayoutQt  = Transposed<SmemLayoutQ, kBlockM, kHeadDim>;   // (hdim, M)
    using SmemLayoutdOt = Transposed<SmemLayoutdO, kBlockM, kHeadDimV>; // (hdim_v, M)
    using SmemLayoutPt  = Transposed<SmemLayoutP, kBlockM, kBlockN>;    // (N, M)

    static constexpr int kSmemQElems  = kBlockM * kHeadDim;
    static constexpr int kSmemdOElems = kBlockM * kHeadDimV;
    static constexpr int kSmemKElems  = kBlockN * kHeadDim;
    static constexpr int kSmemVElems  = kBlockN * kHeadDimV;
    static constexpr int kSmemPElems  = kBlockM * kBlockN;
    // dQ accumulator: one kBlockM x kHeadDim fp32 tile per (batch, head, query block), stored in the dQ MMA's
    // fragment order (dq_acc_index) so that every reduction a warp issues covers whole, contiguous sectors.
    // hdim 256 computes dQ in two column parts of 128: the fp32 fragment next to dK / dV stays at 32 registers
    // instead of 64, which keeps the 64 x 64 tile free of spills. A part is whole swizzle atoms of K, so its K^T view
    // is SmemLayoutKtPart at an offset of kBlockN * kDqCols elements.
    static constexpr int kDqSplit     = kHeadDim > 128 && kHeadDim % 128 == 0 ? 2 : 1;
    static constexpr int kDqCols      = kHeadDim / kDqSplit;
    static constexpr int kDqTileElems = kBlockM * kHeadDim;
    static constexpr int kDqPartElems = kBlockM * kDqCols;
    static constexpr int kDqPerThread = kDqPartElems / kNThreads; // per part
    static_assert(kDqPerThread % 4 == 0);
    using SmemLayoutKtPart = Transposed<SmemLayout<kBlockN, kDqCols>, kBlockN, kDqCols>; // (kDqCols, N)
    // dQ elements per reduction instruction on sm_90 (bwd_kernel.cuh dq_acc_index; red.global.add.v4 or plain).
    // Same-call A/B on H200, bf16, TFLOP/s at s=1k / 4k / 16k non-causal (causal):
    // - d64 128 x 128: 1 element 219.9 / 267.0 / 281.4 (164.1 / 242.6 / 282.1) vs 4 216.6 / 265.3 / 281.0
    //   (159.9 / 240.4 / 279.9); red.global.add.v2 (2 elements) in between;
    // - d128 64 x 128: 4 elements 236.8 / 298.0 / 320.8 vs 1 233.4 / 294.0 / 312.6 and 2 235.7 / 293.7 / 314.9;
    // - d256 64 x 64: 4 elements 194.8 / 237.2 / 252.6 vs 1 185.9 / 224.1 / 237.6.
    // Tiles not measured keep 4. -DMHA_BWD_DQ_VEC=1 or 4 forces it for A/B builds.
#ifdef MHA_BWD_DQ_VEC
    static constexpr int kDqVecSm90 = MHA_BWD_DQ_VEC;
#else
    static constexpr int kDqVecSm90 = kHeadDim == 64 && kBlockM == 128 ? 1 : 4;
#endif
    static_assert(kDqVecSm90 == 1 || kDqVecSm90 == 4);
    // The last dQ column part's reductions of a step issued during the next step's dP GEMM (bwd_kernel.cuh
    // dq_pend), not in a burst before the loop-top barrier: the burst fills the LSU queue and the next step's first
    // instructions wait for the registers it reads. Same-call A/B on H200, bf16, TFLOP/s at s=1k / 4k / 16k:
    // - d256 64 x 64: non-causal 194.5 / 237.1 / 252.4 -> 198.6 / 244.8 / 260.9, causal 150.4 / 214.9 / 252.8 ->
    //   153.8 / 222.4 / 262.6 (24 B of spill). One after each of the first eight k slices: within 0.5% of that; one
    //   every other k slice: +1.5-2.8%; during the S GEMM: +0.8-1.7%; the first part's reductions also deferred, into
    //   the second part's GEMM: 220 B of spill, -13%.
    // - d128 64 x 128: -1.3-2% (96 B of spill; -2.5-3% issued during the S GEMM); d64 128 x 128 spills 280 B.
    // The feature instances were not measured and keep the burst. -DMHA_BWD_DQ_DEFER=0 or 1 forces it for A/B builds.
#ifdef MHA_BWD_DQ_DEFER
    static constexpr bool kDqDefer = MHA_BWD_DQ_DEFER;
#else
    static constexpr bool kDqDefer = kHeadDim == 256 && kBlockM == 64 && kBlockN == 64 && kFeatures == 0;
#endif
    // LSE / D rows of a Q / dO block loaded under a predicate (tidx < kBlockM) instead of a strided loop. Same-call
    // A/B, H200 bf16, s = 1k / 4k / 16k: d64 128 x 128 +0.7-1.4% (16k non-causal 283.2 -> 286.2, causal 281.9 ->
    // 285.5); d256 64 x 64 -2.5-3% (it spills 20 B). Tiles not measured keep the loop.
    static constexpr bool kStatsOneRow = kHeadDim == 64 && kBlockM == 128 && kBlockM <= kNThreads;
    // K | V | (Q | dO) x stages | P | dS | (LSE, D) x stages (fp32)
    static constexpr int smem_bytes(int stages)
    {
        return (kSmemKElems + kSmemVElems + stages * (kSmemQElems + kSmemdOElems) + 2 * kSmemPElems) *
                   int(sizeof(Element)) + stages * 2 * kBlockM * int(sizeof(float));
    }
    // Q / dO stages: the next query blocks stream in while this one computes. Two fit every GPU the tile fits.
    // On sm_90 / sm_100 (227 KB) the 128-row tiles take a third, which hides more of the L2 latency behind their
    // short steps (d64 on an H200: +1.5%); the 64-row d128 tile loses 2.5% with it (less L1 left), so it keeps two.
    // The device pass sees its arch; the host picks the bytes with smem_bytes_for(cc) (bwd_launch.cuh), and the
    // instance table reports kSmemBytes, the two-stage minimum.
    static constexpr int kSmemLimitDeep = 227 * 1024;
    static constexpr int kQStagesDeep   = kBlockM >= 128 && smem_bytes(3) <= kSmemLimitDeep ? 3 : 2;
    static constexpr bool deep_arch(int cc) { return cc == 90 || cc == 100; }
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000)
    static constexpr int kQStages = kQStagesDeep;
#else
    static constexpr int kQStages = 2;
#endif
    static constexpr int kSmemBytes = smem_bytes(2);
    static constexpr int smem_bytes_for(int cc) { return deep_arch(cc) ? smem_bytes(kQStagesDeep) : smem_bytes(2); }

    using SmemCopyAtom           = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
    using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
    using SmemStoreAtom          = Copy_Atom<UniversalCopy<cute::uint32_t>, Element>; // register pairs -> smem

    using GmemCopyQK = typename GmemTiledCopy<Element, kHeadDim, kNThreads,
                                              SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>>::type;
    using GmemCopyV  = typename GmemTiledCopy<Element, kHeadDimV, kNThreads,
                                              SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>>::type;
    // dK / dV: shared -> global, 16 bytes per thread per access (bwd_kernel.cuh epilogue)
    using GmemStoreK = typename GmemTiledCopy<Element, kHeadDim, kNThreads, UniversalCopy<cute::uint128_t>>::type;
    using GmemStoreV = typename GmemTiledCopy<Element, kHeadDimV, kNThreads, UniversalCopy<cute::uint128_t>>::type;
};

} // namespace mha::ck
