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
        {
            const int row = m0 + get<0>(c(i));
            const int col = n0 + get<1>(c(i));
            float x = s(i) * scale;
            if (softcap > 0.f)
                x = softcap * tanhf(x / softcap);
            if (bias != nullptr && row < seqlen_q && col < seqlen_k)
                x += static_cast<float>(bias[row * bias_row_stride + col]);
            if (alibi_slope != 0.f)
                x += alibi_vertical ? alibi_slope * float(col)
                                    : -alibi_slope * fabsf(float(col - (row + alibi_offset)));
            s(i) = x;
        }
    }
};

// Dropout on a tile of unnormalised probabilities p (rows x cols view) with coordinates c (same view).
struct TileDropout
{
    uint64_t seed, offset;
    int bh; // batch * nhead_q + head
    uint8_t keep_threshold;
    uint8_t* randval; // this (batch, head)'s origin, nullptr: not stored
    int64_t randval_row_stride;
    int seqlen_q, seqlen_k;

    // Each thread holds, per row, pairs of columns 8 apart within every 16-column group: one Philox call per
    // (row, group) covers them. Columns of the row-major view are ordered (pair, n8 tile), so group g holds view
    // columns 4g .. 4g+3.
    template <typename TP, typename TC>
    __device__ __forceinline__ void apply(TP& p, TC const& c, int m0, int n0) const
    {
        constexpr int kRows = decltype(size<0>(p))::value;
        constexpr int kCols = decltype(size<1>(p))::value;
        static_assert(kCols % 4 == 0);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r)
        {
            const int row = m0 + get<0>(c(r, 0));
            CUTE_UNROLL
            for (int g = 0; g < kCols / 4; ++g)
            {
                const Philox4 rnd = dropout_random16(seed, offset, bh, row, (n0 + get<1>(c(r, 4 * g))) >> 4);
                CUTE_UNROLL
                for (int e = 0; e < 4; ++e)
                {
                    const int col  = n0 + get<1>(c(r, 4 * g + e));
                    const int byte = col & 15;
                    // select, not an indexed array: a run-time index would put the words in local memory
                    const uint32_t word = byte < 8 ? (byte < 4 ? rnd.x : rnd.y) : (byte < 12 ? rnd.z : rnd.w);
                    const uint8_t rv = uint8_t(word >> (8 * (byte & 3)));
                    if (rv > keep_threshold)
                        p(r, 4 * g + e) = 0.f;
                    if (randval != nullptr && row < seqlen_q && col < seqlen_k)
                        randval[row * randval_row_stride + col] = rv;
                }
            }
        }
    }
};

} // namespace mha::ck
