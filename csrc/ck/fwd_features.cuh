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
    // are rows r, r + 8 of one 16-row tile and view columns 2u, 2u + 1 one column pair of n8 tile u. Those four
    // elements share a Philox counter (philox.h), and so do the n8 tiles 32 columns apart inside one 128-column period:
    // the tiles of one column slot (u % 4) are walked in order and a tile reuses the previous one's output when their
    // counters match (always for 64-key blocks, which start on a multiple of 64; most of the time for 48-key ones), so a
    // call serves up to kBlockN / 32 tiles instead of one. The match is warp-uniform: counters differ only in lane bits.
    //
    // Without randval (every call but the tests' and the benchmark's -v=1 ones) each element's byte comes from what
    // the layout fixes: the tile's rows start on a multiple of 16 (m0 and the warps' row offsets) and its columns on
    // an even key (n0), so view row r0 + h is row half h (row % 16 / 8 = h), view column 2u + e has col % 2 = e, and
    // the pair's col % 128 / 32 = j32 (2 (lane % 4) + 1 < 8 never crosses a 32-key group). Its byte is b = 8 h + 2 j32
    // + e of the output words: word x / y (h = 0) or z / w (h = 1) by j32 < 2, bits 16 (j32 % 2) + 8 e; one shift,
    // one compare and one select per element instead of dropout_byte's index arithmetic and word selects, as the
    // backward's pointwise step does (bwd_kernel.cuh). With randval the general path below stores every value too.
    // The walk both paths share: for each 16-row tile (view rows r0, r0 + 1) and column slot, the slot's n8 tiles u in
    // order, each with its first element's (row0, col0) and the Philox output of their counter (a call only when the
    // counter changes); `tile(r0, u, rnd, row0, col0)` handles the tile's four elements.
    template <int kRows, int kTiles, typename TC, typename F>
    __device__ __forceinline__ void walk(TC const& c, int m0, int n0, F&& tile) const
    {
        CUTE_UNROLL
        for (int r0 = 0; r0 < kRows; r0 += 2)
        {
            CUTE_UNROLL
            for (int slot = 0; slot < 4 && slot < kTiles; ++slot)
            {
                Philox4 rnd{};
                uint32_t have_x = 0xFFFFFFFFu, have_y = 0xFFFFFFFFu; // no counter yet
                CUTE_UNROLL
                for (int u = slot; u < kTiles; u += 4)
                {
                    const int row0 = m0 + get<0>(c(r0, 2 * u)), col0 = n0 + get<1>(c(r0, 2 * u));
                    const uint32_t x = dropout_counter_x(col0), y = dropout_counter_y(row0, col0);
                    if (x != have_x || y != have_y)
                    {
                        rnd    = dropout_philox(seed, offset, bh, row0, col0);
                        have_x = x, have_y = y;
                    }
                    tile(r0, u, rnd, row0, col0);
                }
            }
        }
    }

    template <typename TP, typename TC>
    __device__ __forceinline__ void apply(TP& p, TC const& c, int m0, int n0) const
    {
        constexpr int kRows  = decltype(size<0>(p))::value;
        constexpr int kCols  = decltype(size<1>(p))::value;
        constexpr int kTiles = kCols / 2;
        static_assert(kRows % 2 == 0 && kCols % 2 == 0);
        if (randval == nullptr)
        {
            walk<kRows, kTiles>(c, m0, n0, [&](int r0, int u, const Philox4& rnd, int, int col0) {
                const int j32        = col0 % 128 / 32;
                const uint32_t half0 = j32 < 2 ? rnd.x : rnd.y, half1 = j32 < 2 ? rnd.z : rnd.w;
                const int shift      = 16 * (j32 % 2);
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
        walk<kRows, kTiles>(c, m0, n0, [&](int r0, int u, const Philox4& rnd, int, int) {
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
};

} // namespace mha::ck
