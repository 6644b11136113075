#pragma once
// Optional forward features of the "full" ck instances, applied to one (kBlockM x kBlockN) score tile in registers:
// score modifiers (scale, soft-cap, elementwise bias, ALiBi) before the softmax, and dropout on the probabilities
// before O += P V. Element coordinates come from the identity tensor partitioned like the accumulator.

#include "../common/fwd_params.h"
#include "../common/philox.h"

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

namespace mha::ck {

using namespace cute;

// Per-CTA view of the feature parameters, offsets already resolved for this (batch, head).
template <typename Element>
struct ScoreMods
{
    float scale;
    float softcap;      // 0: off
    const Element* bias; // row-major tile origin of this (batch, head), nullptr: off
    int64_t bias_row_stride;
    float alibi_slope;  // 0: off
    int alibi_offset;   // ALiBi distance is measured from column i + alibi_offset
    bool alibi_vertical; // causal masks: +slope * j (CK's VERTICAL mode; equal up to a per-row constant)
    int seqlen_q, seqlen_k;

    // Anything beyond the scale: without it the kernel skips apply() and folds the scale into exp2.
    __device__ __forceinline__ bool active() const { return softcap > 0.f || bias != nullptr || alibi_slope != 0.f; }

    // s: score accumulator; c: matching (row, col) coordinates inside the tile; the tile starts at (m0, n0).
    template <typename TS, typename TC>
    __device__ __forceinline__ void apply(TS& s, TC const& c, int m0, int n0) const
    {
        CUTE_UNROLL
        for (int i = 0; i < size(s); ++i)
            s(i) = modify(s(i), m0 + get<0>(c(i)), n0 + get<1>(c(i)));
    }

    // One raw score at (row, col) of the (batch, head) turned into its natural-log logit.
    __device__ __forceinline__ float modify(float s, int row, int col) const
    {
        float x = s * scale;
        if (softcap > 0.f)
            x = softcap * tanhf(x / softcap);
        if (bias != nullptr && row < seqlen_q && col < seqlen_k)
            x += static_cast<float>(bias[row * bias_row_stride + col]);
        if (alibi_slope != 0.f)
            x += alibi_vertical ? alibi_slope * float(col) : -alibi_slope * fabsf(float(col - (row + alibi_offset)));
        return x;
    }
};

// Dropout on a tile of unnormalised probabilities p (rows x cols view) with coordinates c (same view).
struct TileDropout
{
    uint64_t seed, offset;
    uint32_t bh; // batch * nhead_q + head, modulo 2^32
    uint8_t keep_threshold;
    uint8_t* randval; // this (batch, head)'s origin, nullptr: not stored
    int64_t randval_row_stride;
    int seqlen_q, seqlen_k;

    // The view is the accumulator's (rows, cols): rows (half, MMA_M), columns (pair, n8 tile), so view rows 2t, 2t + 1
    // are rows r, r + 8 of one 16-row tile and view columns 2u, 2u + 1 one column pair of n8 tile u (key n0 + 8 u +
    // 2 (lane % 4)). Those four elements share a Philox counter (philox.h) with the same lane's elements of the other
    // n8 tiles of their 32-key group, so one call serves four n8 tiles. A key block of a multiple of 32 keys starts on
    // a group (n0 is a multiple of the block): tiles 4 k .. 4 k + 3 take call k, no run-time test. A 48-key block
    // starts on a multiple of 16 keys and spans two groups: one call for the group of its first tile and one for that
    // of its last, and each tile picks its group's words by a warp-uniform select.
    //
    // Without randval (every call but the tests' and the benchmark's -v=1 ones) in the d64 mha_fwd instances
    // (kDropoutPairs) the walk runs on P already converted to the 16-bit input type (apply_pairs), where view columns
    // 2u, 2u + 1 of a row are one 32-bit register. Each pair's two bytes come from what the layout fixes: the tile's
    // rows start on a multiple of 16 (m0 and the warps' row offsets) and its columns on an even key (n0), so view row
    // r0 + h is row half h (row % 16 / 8 = h), the pair's columns have col % 2 = 0, 1, and the tile's col % 32 / 8 =
    // j8. Their bytes are b = 8 h + 2 j8 + {0, 1} of the output words: word x / y (h = 0) or z / w (h = 1) by j8 < 2,
    // bits 16 (j8 % 2) up. One byte permute spreads them into the two 16-bit halves, one f16x2 compare against the
    // threshold (the values 0..255 as 16-bit patterns are positive f16 subnormals, ordered as the integers) gives each
    // half's keep mask, and one AND applies it: three instructions per pair, where the fp32 path (apply, every other
    // instance) takes a shift, a compare and a select per element. With randval the general path (apply) stores every value
    // too and zeroes the fp32 scores.
    // The walk both paths share: for each 16-row tile (view rows r0, r0 + 1), the n8 tiles u in order, each with its
    // group's Philox output, its j8 and its first element's (row0, col0); `tile(r0, u, rnd, j8, row0, col0)` handles
    // the tile's four elements.
    template <int kRows, int kTiles, typename TC, typename F>
    __device__ __forceinline__ void walk(TC const& c, int m0, int n0, F&& tile) const
    {
        constexpr bool kAligned = kTiles % 4 == 0;
        static_assert(kAligned || kTiles <= 6, "a key block of 16 x odd keys must span at most two 32-key groups");
        CUTE_UNROLL
        for (int r0 = 0; r0 < kRows; r0 += 2)
        {
            const int row0 = m0 + get<0>(c(r0, 0));
            if constexpr (kAligned)
            {
                CUTE_UNROLL
                for (int k = 0; k < kTiles / 4; ++k)
                {
                    const Philox4 rnd = dropout_philox(seed, offset, bh, row0, n0 + get<1>(c(r0, 8 * k)));
                    CUTE_UNROLL
                    for (int u = 4 * k; u < 4 * k + 4; ++u)
                        tile(r0, u, rnd, u % 4, row0, n0 + get<1>(c(r0, 2 * u)));
                }
            }
            else
            {
                const int first = n0 + get<1>(c(r0, 0)), last = n0 + get<1>(c(r0, 2 * (kTiles - 1)));
                const Philox4 rnd0 = dropout_philox(seed, offset, bh, row0, first);
                const Philox4 rnd1 =
                    kTiles > 2 ? dropout_philox(seed, offset, bh, row0, last) : rnd0; // 16 keys: one group
                const int j0 = first % 32 / 8;
                CUTE_UNROLL
                for (int u = 0; u < kTiles; ++u)
                {
                    const bool second = j0 + u >= 4; // warp-uniform
                    const Philox4 rnd{second ? rnd1.x : rnd0.x, second ? rnd1.y : rnd0.y, second ? rnd1.z : rnd0.z,
                                      second ? rnd1.w : rnd0.w};
                    tile(r0, u, rnd, (j0 + u) % 4, row0, n0 + get<1>(c(r0, 2 * u)));
                }
            }
        }
    }

    // On the fp32 scores: without randval each element's byte by the layout (above: word by h and j8, bits 16 (j8 % 2)
    // + 8 e for the pair's element e), one shift, one compare and one select each (every instance but mha_fwd's d64
    // ones, FwdKernelTraits::kDropoutPairs); with randval every element's byte by its (row, col), stored as well.
    template <typename TP, typename TC>
    __device__ __forceinline__ void apply(TP& p, TC const& c, int m0, int n0) const
    {
        constexpr int kRows  = decltype(size<0>(p))::value;
        constexpr int kCols  = decltype(size<1>(p))::value;
        constexpr int kTiles = kCols / 2;
        static_assert(kRows % 2 == 0 && kCols % 2 == 0);
        if (randval == nullptr)
        {
            walk<kRows, kTiles>(c, m0, n0, [&](int r0, int u, const Philox4& rnd, int j8, int, int) {
                const uint32_t half0 = j8 < 2 ? rnd.x : rnd.y, half1 = j8 < 2 ? rnd.z : rnd.w;
                const int shift      = 16 * (j8 % 2);
                CUTE_UNROLL
                for (int e = 0; e < 4; ++e)
                {
                    const uint32_t rv = ((e / 2 ? half1 : half0) >> (shift + 8 * (e % 2))) & 0xFFu;
                    if (rv > keep_threshold)
                        p(r0 + e / 2, 2 * u + e % 2) = 0.f;
                }
            });
            return;
        }
        walk<kRows, kTiles>(c, m0, n0, [&](int r0, int u, const Philox4& rnd, int, int, int) {
            CUTE_UNROLL
            for (int e = 0; e < 4; ++e)
            {
                const int r = r0 + e / 2, cc = 2 * u + e % 2;
                const int row = m0 + get<0>(c(r, cc)), col = n0 + get<1>(c(r, cc));
                const uint8_t rv = dropout_byte(rnd, row, col);
                if (rv > keep_threshold)
                    p(r, cc) = 0.f;
                if (row < seqlen_q && col < seqlen_k)
                    randval[row * randval_row_stride + col] = rv;
            }
        });
    }

    // The path without randval, on P converted to the input type: `p16` the converted tensor (the accumulator's
    // layout), `rc` its (rows, cols) view layout, `c` the coordinates in that view.
    template <typename TP16, typename LRC, typename TC>
    __device__ __forceinline__ void apply_pairs(TP16& p16, LRC const& rc, TC const& c, int m0, int n0) const
    {
        static_assert(sizeof(typename TP16::value_type) == 2, "pairs of 16-bit elements");
        constexpr int kRows  = decltype(size<0>(rc))::value;
        constexpr int kCols  = decltype(size<1>(rc))::value;
        constexpr int kTiles = kCols / 2;
        static_assert(kRows % 2 == 0 && kCols % 2 == 0);
        Tensor w = recast<uint32_t>(p16);
        const uint32_t thr = uint32_t(keep_threshold) * 0x10001u;
        walk<kRows, kTiles>(c, m0, n0, [&](int r0, int u, const Philox4& rnd, int j8, int, int) {
            const uint32_t sel = j8 % 2 ? 0x4342u : 0x4140u; // bytes 2, 3 or 0, 1 into the halves' low bytes
            CUTE_UNROLL
            for (int h = 0; h < 2; ++h)
            {
                const uint32_t word = h == 0 ? (j8 < 2 ? rnd.x : rnd.y) : (j8 < 2 ? rnd.z : rnd.w);
                const uint32_t rv2  = __byte_perm(word, 0u, sel);
                uint32_t keep;
                asm("set.le.u32.f16x2 %0, %1, %2;" : "=r"(keep) : "r"(rv2), "r"(thr));
                w(rc(r0 + h, 2 * u) / 2) &= keep; // the pair's first element sits at an even offset
            }
        });
    }
};

} // namespace mha::ck
