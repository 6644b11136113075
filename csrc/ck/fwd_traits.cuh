#pragma once
// Compile-time shape of one ck forward instance: tile sizes, the warp-level mma.sync TiledMMA, swizzled shared-memory
// layouts and the global<->shared copy atoms. Everything a kernel instance needs to know statically lives here;
// fwd_kernel.cuh only assembles these pieces. Tile choices per (hdim, dtype) are in fwd_tile_size().

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

namespace mha::ck {

using namespace cute;

// (kBlockM, kBlockN, kNWarps) per head dim. 4 warps of 32 query rows each; kBlockN keeps the S accumulator
// (kBlockM * kBlockN / 128 threads floats) plus the O accumulator (kBlockM * kHeadDim / 128) under ~200 registers:
//   hdim  64: 128 x 128 -> S 128 + O  64 fp32 regs per thread, smem (128 + 2*128) * 64 * 2 B = 48 KB
//   hdim 128: 128 x  64 -> S  64 + O 128 fp32 regs per thread, smem (128 + 2*64) * 128 * 2 B = 64 KB
constexpr int fwd_block_n(int hdim) { return hdim <= 64 ? 128 : 64; }

template <typename Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_>
struct FwdKernelTraits
{
    using Element = Element_;
    using ElementAccum = float;

    static constexpr int kHeadDim  = kHeadDim_;
    static constexpr int kBlockM   = kBlockM_;
    static constexpr int kBlockN   = kBlockN_;
    static constexpr int kNWarps   = kNWarps_;
    static constexpr int kNThreads = kNWarps * 32;

    static_assert(kHeadDim % 32 == 0, "instance head dim must be a multiple of 32");
    static_assert(kBlockM == 16 * kNWarps * (kBlockM / (16 * kNWarps)), "kBlockM must tile the warps' 16-row MMAs");
    static_assert(kBlockN % 16 == 0);

    // 64-element (128 B) rows when the head dim allows it: an 8-row x 128 B swizzle atom makes both the 16 B
    // cp.async stores and the ldmatrix reads conflict-free.
    static constexpr int kBlockKSmem = kHeadDim % 64 == 0 ? 64 : 32;
    static constexpr int kSwizzleB   = kBlockKSmem == 64 ? 3 : 2;

    using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                       MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                       MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
    // Warps stacked along M; each warp owns 16-row slices of the query tile and the whole N extent.
    using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kNWarps>, _1, _1>>, Tile<Int<16 * kNWarps>, _16, _16>>;

    using SmemLayoutAtom = decltype(composition(
        Swizzle<kSwizzleB, 3, 3>{}, Layout<Shape<_8, Int<kBlockKSmem>>, Stride<Int<kBlockKSmem>, _1>>{}));
    using SmemLayoutQ  = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutKV = decltype(tile_to_shape(SmemLayoutAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    // V seen as (hdim, n): the B operand of O = P V, read with ldmatrix.trans.
    using SmemLayoutVt = decltype(composition(
        SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    using SmemLayoutO = SmemLayoutQ; // the epilogue reuses Q's buffer

    static constexpr int kSmemQElems  = kBlockM * kHeadDim;
    static constexpr int kSmemKVElems = kBlockN * kHeadDim;
    static constexpr int kSmemBytes   = (kSmemQElems + 2 * kSmemKVElems) * int(sizeof(Element));

    using SmemCopyAtom           = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
    using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;

    // Global <-> shared: 16 B per thread per access, rows of kBlockKSmem elements spread over kGmemThreadsPerRow.
    static constexpr int kGmemElemsPerLoad  = 16 / int(sizeof(Element));
    static constexpr int kGmemThreadsPerRow = kBlockKSmem / kGmemElemsPerLoad;
    static_assert(kNThreads % kGmemThreadsPerRow == 0);
    using GmemLayoutAtom = Layout<Shape<Int<kNThreads / kGmemThreadsPerRow>, Int<kGmemThreadsPerRow>>,
                                  Stride<Int<kGmemThreadsPerRow>, _1>>;
    using GmemTiledCopyQKV = decltype(make_tiled_copy(
        Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, GmemLayoutAtom{},
        Layout<Shape<_1, Int<kGmemElemsPerLoad>>>{}));
    using GmemTiledCopyO = decltype(make_tiled_copy(
        Copy_Atom<UniversalCopy<cute::uint128_t>, Element>{}, GmemLayoutAtom{},
        Layout<Shape<_1, Int<kGmemElemsPerLoad>>>{}));
};

} // namespace mha::ck
