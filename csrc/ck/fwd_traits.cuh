#pragma once
// Compile-time shape of one ck forward instance: tile sizes, the warp-level mma.sync TiledMMA, swizzled shared-memory
// layouts and the global<->shared copy atoms. Everything a kernel instance needs to know statically lives here;
// fwd_kernel.cuh only assembles these pieces. Tile choices per (hdim, dtype) are in fwd_tile_size().

#include "../common/fwd_params.h"

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

namespace mha::ck {

using namespace cute;

// Tile choices, by head dims (kHeadDim for Q/K, kHeadDimV for V/O); the table is csrc/codegen/generate.py
// CK_FWD_TILES. kBlockM = 128 query rows per CTA; the S accumulator (kBlockM * kBlockN / threads floats) plus the O
// accumulator (kBlockM * kHeadDimV / threads) must stay under ~200 registers per thread:
//   hdim <=  96: 128 x 64, 4 warps  -> S 64 + O <= 96 regs;  smem (128 + 2*64) * 64 * 2 B = 32 KB at d64
//   hdim == 128: 128 x 48, 4 warps  -> S 48 + O 128 regs;   smem (128 + 2*48) * 128 * 2 B = 56 KB
//                (the "full" variant 128 x 32: S 32, less to spill beside its feature state; CK_FWD_TILES_FULL)
//   hdim 160-192: 128 x 64, 8 warps -> S 32 + O <= 96 regs;  smem up to (128 + 2*64) * 192 * 2 B = 96 KB
//   hdim == 256: 64 x 64, 4 warps   -> S 32 + O 128 regs;   smem (64 + 2*64) * 256 * 2 B = 96 KB

// Shared-memory layout for a (rows, width) tile: 8-row swizzle atoms of 64 (128 B) or 32 (64 B) elements, which
// make both the 16 B cp.async stores and the ldmatrix reads conflict-free.
template <int kWidth>
struct SmemTile
{
    static constexpr int kAtomK   = kWidth % 64 == 0 ? 64 : 32;
    static constexpr int kSwizzle = kAtomK == 64 ? 3 : 2;
    using Atom = decltype(composition(Swizzle<kSwizzle, 3, 3>{},
                                      Layout<Shape<_8, Int<kAtomK>>, Stride<Int<kAtomK>, _1>>{}));
};

// Global <-> shared copies of (rows, width) tiles: 16 B per thread per access, kAtomK-element rows spread over
// kAtomK / 8 threads.
template <typename Element, int kWidth, int kNThreads, typename CopyOp>
struct GmemTiledCopy
{
    static constexpr int kElemsPerAccess = 16 / int(sizeof(Element));
    static constexpr int kThreadsPerRow  = SmemTile<kWidth>::kAtomK / kElemsPerAccess;
    static_assert(kNThreads % kThreadsPerRow == 0);
    using ThreadLayout = Layout<Shape<Int<kNThreads / kThreadsPerRow>, Int<kThreadsPerRow>>,
                                Stride<Int<kThreadsPerRow>, _1>>;
    using type = decltype(make_tiled_copy(Copy_Atom<CopyOp, Element>{}, ThreadLayout{},
                                          Layout<Shape<_1, Int<kElemsPerAccess>>>{}));
};

// kFeatures_: what the instance implements beyond scale, mask and LSE (each run-time selected when present):
// 1 soft-cap, elementwise bias, sink logits and sink tokens; 2 ALiBi; 4 dropout. 0 is the "plain" instance, 7 the
// "full" one, 2 the "alibi" one; the plain path carries no extra registers. Split-KV instances are full ones, and
// plain decode tiles at some head dims (generate.py SPLIT_PLAIN_DIMS).
// kSplit: the split-KV / paged-KV / batch-prefill kernel (KvCacheParams, SplitParams): gathers K/V rows through a
// page table, packs query heads of a KV head into rows, and writes fp32 partials when num_splits > 1.
template <typename Element_, int kHeadDim_, int kHeadDimV_, int kBlockM_, int kBlockN_, int kNWarps_, int kFeatures_,
          bool kSplit_ = false>
struct FwdKernelTraits
{
    using Element = Element_;
    using ElementAccum = float;

    static constexpr int kHeadDim  = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr int kBlockM   = kBlockM_;
    static constexpr int kBlockN   = kBlockN_;
    static constexpr int kNWarps   = kNWarps_;
    static constexpr int kNThreads = kNWarps * 32;
    static constexpr int kFeatures = kFeatures_;
    static constexpr bool kFull    = kFeatures != 0; // scores may go through ScoreMods
    static constexpr bool kOther   = kFeatures & 1;  // soft-cap, elementwise bias, sink logits and tokens
    static constexpr bool kAlibi   = kFeatures & 2;
    static constexpr bool kDropout = kFeatures & 4;
    // Dropout without randval on P converted to the input type, a byte permute, an f16x2 compare and an AND per
    // element pair (TileDropout::apply_pairs), instead of a shift, a compare and a select per fp32 element. H100
    // GPU-2e385f3a, bf16, 16k tokens, dropout 0.1, same call, fp32 / pairs / pairs / fp32, s = 1k / 16k: d64 +3-6.5%
    // (186.8 / 208.3 TFLOP/s, causal 150.2 / 200.2), d128 -1.9% to +1.2%, d256 -6.5% to -7.3% (its full instance
    // schedules worse). Hence d64 only, and mha_fwd's instances only (d32 and the split-KV / batch-prefill tiles
    // would take the same code, but were neither measured nor run on a GPU with it).
    static constexpr bool kDropoutPairs = kDropout && kHeadDim == 64 && !kSplit_;
    static constexpr bool kSplit   = kSplit_;
    // kDecode: the split-KV decode tile (16 rows, one warp; csrc/codegen/generate.py splitkv_tiles). Memory-bound:
    // on sm_90 its K / V blocks stream through a ring of kKvStages stages filled by the tensor copy engine
    // (decode_ring.cuh), and a tile of at most 8 rows computes transposed (decode_t.cuh); older GPUs run the
    // two-stage cp.async loop of the split prefill tile.
    static constexpr bool kDecode  = kSplit && kNWarps == 1;
    // K / V tile addresses: 64-bit block base plus 32-bit offsets inside the block. That saves registers in the
    // mainloop for hdim <= 192 (d128 128x48: 88 -> 44 B of spill, +6% on H200); at hdim 256 the 16 copies per thread
    // make full 64-bit offsets cheaper (d256 64x64: 8 B spill vs 108 B, +17% at s=1k).
    static constexpr bool kKvOffsets32 = kHeadDim <= 192;
    // Prefill tiles whose key width is not a power of two (d128's plain / alibi: 48) leave a partial last key block
    // on the usual power-of-two lengths (s_k = 1024: 16 of 48 keys); they skip its MMAs past seqlen_k (+2.5% at d128
    // s=1k, +2% up to 16k on H200). On 64-wide tiles the same branches cost 5-7% (d64, d256), so those keep plain
    // GEMMs.
    // -DMHA_CK_SKIP_PAD_KEYS=0 / 1 forces it off / on for every prefill tile.
#ifdef MHA_CK_SKIP_PAD_KEYS
    static constexpr bool kSkipPadKeys = !kSplit && MHA_CK_SKIP_PAD_KEYS;
#else
    static constexpr bool kSkipPadKeys = !kSplit && (kBlockN & (kBlockN - 1)) != 0;
#endif

    static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0, "instance head dims must be multiples of 32");
    static_assert(kBlockM % (16 * kNWarps) == 0, "kBlockM must tile the warps' 16-row MMAs");
    static_assert(kBlockN % 16 == 0);

    using MmaAtom = std::conditional_t<std::is_same_v<Element, cutlass::half_t>,
                                       MMA_Atom<SM80_16x8x16_F32F16F16F32_TN>,
                                       MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>>;
    // Warps stacked along M; each warp owns 16-row slices of the query tile and the whole N extent.
    using TiledMma = TiledMMA<MmaAtom, Layout<Shape<Int<kNWarps>, _1, _1>>, Tile<Int<16 * kNWarps>, _16, _16>>;

    using SmemLayoutQ = decltype(tile_to_shape(typename SmemTile<kHeadDim>::Atom{},
                                               Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutK = decltype(tile_to_shape(typename SmemTile<kHeadDim>::Atom{},
                                               Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    using SmemLayoutV = decltype(tile_to_shape(typename SmemTile<kHeadDimV>::Atom{},
                                               Shape<Int<kBlockN>, Int<kHeadDimV>>{}));
    // Columns per swizzle atom: one tensor-copy box is (atom columns, rows); the atoms of a (kBlockN, hdim) tile are
    // laid out column block after column block, kBlockN rows each.
    static constexpr int kAtomQ = SmemTile<kHeadDim>::kAtomK;
    static constexpr int kAtomV = SmemTile<kHeadDimV>::kAtomK;
    // V seen as (hdim_v, n): the B operand of O = P V, read with ldmatrix.trans.
    using SmemLayoutVt = decltype(composition(
        SmemLayoutV{}, make_layout(Shape<Int<kHeadDimV>, Int<kBlockN>>{}, GenRowMajor{})));
    using SmemLayoutO = decltype(tile_to_shape(typename SmemTile<kHeadDimV>::Atom{},
                                               Shape<Int<kBlockM>, Int<kHeadDimV>>{}));

    // Q | K | V; the epilogue reuses the first region for O.
    static constexpr int kSmemQOElems = kBlockM * (kHeadDim > kHeadDimV ? kHeadDim : kHeadDimV);
    static constexpr int kSmemKElems  = kBlockN * kHeadDim;
    static constexpr int kSmemVElems  = kBlockN * kHeadDimV;
    static constexpr int kStageBytes  = (kSmemKElems + kSmemVElems) * int(sizeof(Element));
    // Split-KV prefill tiles keep two K/V stages (Q | K0 | V0 | K1 | V1). The decode ring is as deep as fits in
    // kDecodeSmemBudget bytes, at least 2 and at most 8 stages. The default, 37,888, is a sixth of an sm_90 SM's
    // 228 KB less the 1 KB reserved per CTA: six one-warp CTAs per SM (d128: 2 stages of 32 keys; d64: 4). A
    // warp issues an instruction every ~5 cycles here, so warps per SM beat stages per CTA: on H200 (b=64, 32k keys,
    // d128, 256-byte L2 fetches) 6 CTAs x 2 stages read 4.16 TB/s, 4 x 3 4.09, 3 x 4 3.46 and 2 x 6 2.33.
#ifdef MHA_DECODE_SMEM_BUDGET
    static constexpr int kDecodeSmemBudget = MHA_DECODE_SMEM_BUDGET;
#else
    static constexpr int kDecodeSmemBudget = kDecodeSmemBudgetDefault;
#endif
    // kRing: the decode tile takes the tensor-copy ring on sm_90. Its one-row boxes must start on 128-byte rows, so
    // only instances with 64-column swizzle atoms (d64, d128, d192, d256) do; d32 / d96 / d160 keep the cp.async loop
    // and its two stages.
    static constexpr bool kRing = kDecode && kAtomQ == 64 && kAtomV == 64;
    // split-KV (both tiles' cp.async loops), paged: page id and row inside the page of every key of the next block,
    // two slots
    static constexpr int kSmemPageIdBytes = kSplit ? 2 * 2 * kBlockN * 4 : 0;
    static constexpr int kSmemQBytes      = kSmemQOElems * int(sizeof(Element));
    static constexpr int kKvStages =
        !kSplit ? 1
        : !kRing ? 2
                 : cute::max(2, cute::min(8, (kDecodeSmemBudget - kSmemQBytes - kSmemPageIdBytes - 64) / kStageBytes));
    // Q | stage 0 [| stage 1 | page ids]: all the cp.async loops use (kSmemLoopBytes). The ring's further stages
    // overlap the page ids, which it does not read, and its mbarriers come after both. A ring instance launches
    // with kSmemBytes when the ring runs and with kSmemLoopBytes otherwise (before sm_90: 99 KB SMs keep their
    // CTAs per SM).
    static constexpr int kSmemIdsOffset = kSmemQBytes + cute::min(kKvStages, 2) * kStageBytes;
    static constexpr int kSmemLoopBytes = kSmemIdsOffset + kSmemPageIdBytes;
    static constexpr int kSmemBarOffset = cute::max(kSmemQBytes + kKvStages * kStageBytes, kSmemLoopBytes);
    static constexpr int kSmemBytes     = kRing ? kSmemBarOffset + 8 * kKvStages : kSmemLoopBytes;
    // one warp's share of a CTA whose warps are the splits of a tile (SplitParams::warp_splits): kSmemBytes and 4
    // bytes (warp 0's hold the CTA's key-block claim counter) rounded up to the 1024-byte swizzle period, so every
    // warp's Q and ring stages stay aligned (d128: 37,888 bytes, six warps per CTA; d256: 75,776, three)
    static constexpr int kWarpSmemBytes = (kSmemBytes + 4 + 1023) / 1024 * 1024;
    // the decode ring's swizzled boxes land in 1024-byte periods: Q and every K / V stage must keep them aligned
    static_assert(!kRing || (kSmemQBytes % 1024 == 0 && kStageBytes % 1024 == 0 &&
                               kSmemKElems * int(sizeof(Element)) % 1024 == 0));

    using SmemCopyAtom           = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
    using SmemCopyAtomTransposed = Copy_Atom<SM75_U16x8_LDSM_T, Element>;

    using GmemCopyQK = typename GmemTiledCopy<Element, kHeadDim, kNThreads,
                                              SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>>::type;
    using GmemCopyV  = typename GmemTiledCopy<Element, kHeadDimV, kNThreads,
                                              SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>>::type;
    using GmemCopyO  = typename GmemTiledCopy<Element, kHeadDimV, kNThreads, UniversalCopy<cute::uint128_t>>::type;
};

} // namespace mha::ck
