#pragma once
// Building blocks of the ck forward mainloop: predicated global->shared tile copies, the two register-level GEMMs
// (S = Q K^T from shared memory, O += P V with P in registers), accumulator re-views, and the online softmax.

#include <cute/tensor.hpp>
#include <cmath>

namespace mha::ck {

using namespace cute;

constexpr float kLog2e = 1.4426950408889634f;

// ---------------------------------------------------------------------------------------------------------------
// Global -> shared copies. `tS`/`tD` are (CPY, CPY_M, CPY_K) partitions of one tile, `tC` the matching identity
// coordinates. Rows at or past `rows_left` and column chunks at or past `cols_left` are zero-filled in shared memory
// (never read from global), so a partial tile at the end of a sequence or a head dim below the instance's is safe.
// ---------------------------------------------------------------------------------------------------------------
template <typename TiledCopy, typename TS, typename TD, typename TC>
__device__ __forceinline__ void copy_tile_pred(TiledCopy const& tiled_copy, TS const& tS, TD& tD, TC const& tC,
                                               int rows_left, int cols_left)
{
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tS); ++m)
    {
        const bool row_ok = get<0>(tC(0, m, 0)) < rows_left;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tS); ++k)
        {
            if (row_ok && get<1>(tC(0, m, k)) < cols_left)
                cute::copy(tiled_copy, tS(_, m, k), tD(_, m, k));
            else
                cute::clear(tD(_, m, k));
        }
    }
}

// The same for tiles whose rows live at arbitrary addresses (paged K/V, query heads packed into rows):
// row_ptr(r) is the global address of tile row r, called only for rows below rows_left.
template <typename TiledCopy, typename TD, typename TC, typename RowPtr>
__device__ __forceinline__ void copy_rows_gather(TiledCopy const& tiled_copy, TD& tD, TC const& tC,
                                                 RowPtr const& row_ptr, int rows_left, int cols_left)
{
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tD); ++m)
    {
        const int r       = get<0>(tC(0, m, 0));
        const bool row_ok = r < rows_left;
        const auto* src   = row_ok ? row_ptr(r) : nullptr;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(tD); ++k)
        {
            const int c = get<1>(tC(0, m, k));
            if (row_ok && c < cols_left)
                cute::copy(tiled_copy, make_tensor(make_gmem_ptr(src + c), make_layout(shape(tD(_, m, k)))),
                           tD(_, m, k));
            else
                cute::clear(tD(_, m, k));
        }
    }
}

// Register -> global stores of an output tile whose rows live at arbitrary addresses (see copy_rows_gather).
template <typename TiledCopy, typename TS, typename TC, typename RowPtr>
__device__ __forceinline__ void store_rows_scatter(TiledCopy const& tiled_copy, TS const& tS, TC const& tC,
                                                   RowPtr const& row_ptr, int rows_left, int cols_left)
{
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tS); ++m)
    {
        const int r = get<0>(tC(0, m, 0));
        if (r < rows_left)
        {
            auto* dst = row_ptr(r);
            CUTE_UNROLL
            for (int k = 0; k < size<2>(tS); ++k)
            {
                const int c = get<1>(tC(0, m, k));
                if (c < cols_left)
                {
                    Tensor d = make_tensor(make_gmem_ptr(dst + c), make_layout(shape(tS(_, m, k))));
                    cute::copy(tiled_copy, tS(_, m, k), d);
                }
            }
        }
    }
}

// Shared -> global for the output tile; rows/columns outside the sequence or head dim are not written.
template <typename TiledCopy, typename TS, typename TD, typename TC>
__device__ __forceinline__ void store_tile_pred(TiledCopy const& tiled_copy, TS const& tS, TD& tD, TC const& tC,
                                                int rows_left, int cols_left)
{
    CUTE_UNROLL
    for (int m = 0; m < size<1>(tS); ++m)
    {
        if (get<0>(tC(0, m, 0)) < rows_left)
        {
            CUTE_UNROLL
            for (int k = 0; k < size<2>(tS); ++k)
                if (get<1>(tC(0, m, k)) < cols_left)
                    cute::copy(tiled_copy, tS(_, m, k), tD(_, m, k));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// GEMMs. Operands come from shared memory through ldmatrix, one 16-wide k slice ahead of the MMAs that use it.
// `after_k(k)` runs after the MMAs of k slice k (the backward issues deferred dQ reductions there).
// ---------------------------------------------------------------------------------------------------------------
struct NoKHook
{
    __device__ __forceinline__ void operator()(int) const {}
};

template <typename Acc, typename RA, typename RB, typename SA, typename SB, typename TiledMma, typename CopyA,
          typename CopyB, typename ThrCopyA, typename ThrCopyB, typename KHook = NoKHook>
__device__ __forceinline__ void gemm_smem_smem(Acc& acc, RA& tCrA, RB& tCrB, SA const& tCsA, SB const& tCsB,
                                               TiledMma const& tiled_mma, CopyA const& copy_a, CopyB const& copy_b,
                                               ThrCopyA const& thr_copy_a, ThrCopyB const& thr_copy_b,
                                               KHook const& after_k = {})
{
    Tensor tCrA_view = thr_copy_a.retile_D(tCrA);
    Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
    cute::copy(copy_a, tCsA(_, _, _0{}), tCrA_view(_, _, _0{}));
    cute::copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tCrA); ++k)
    {
        if (k < size<2>(tCrA) - 1)
        {
            cute::copy(copy_a, tCsA(_, _, k + 1), tCrA_view(_, _, k + 1));
            cute::copy(copy_b, tCsB(_, _, k + 1), tCrB_view(_, _, k + 1));
        }
        cute::gemm(tiled_mma, tCrA(_, _, k), tCrB(_, _, k), acc);
        after_k(k);
    }
}

// Two independent GEMMs through one tiled MMA (the backward's dV += P^T dO and dK += dS^T Q), their k slices
// interleaved. ldmatrix and mma.sync are volatile asm, which the compiler keeps in program order, so two
// gemm_smem_smem calls run one after the other; interleaved, each k slice has twice the independent MMAs and loads
// in flight. The k extents may differ.
template <typename Acc0, typename RA0, typename RB0, typename SA0, typename SB0, typename Acc1, typename RA1,
          typename RB1, typename SA1, typename SB1, typename TiledMma, typename CopyA, typename CopyB,
          typename ThrCopyA, typename ThrCopyB>
__device__ __forceinline__ void gemm_smem_smem_x2(Acc0& acc0, RA0& tCrA0, RB0& tCrB0, SA0 const& tCsA0,
                                                  SB0 const& tCsB0, Acc1& acc1, RA1& tCrA1, RB1& tCrB1,
                                                  SA1 const& tCsA1, SB1 const& tCsB1, TiledMma const& tiled_mma,
                                                  CopyA const& copy_a, CopyB const& copy_b,
                                                  ThrCopyA const& thr_copy_a, ThrCopyB const& thr_copy_b)
{
    Tensor tCrA0_view = thr_copy_a.retile_D(tCrA0);
    Tensor tCrB0_view = thr_copy_b.retile_D(tCrB0);
    Tensor tCrA1_view = thr_copy_a.retile_D(tCrA1);
    Tensor tCrB1_view = thr_copy_b.retile_D(tCrB1);
    constexpr int kK0 = decltype(size<2>(tCrA0))::value, kK1 = decltype(size<2>(tCrA1))::value;
    constexpr int kK  = kK0 > kK1 ? kK0 : kK1;
    cute::copy(copy_a, tCsA0(_, _, _0{}), tCrA0_view(_, _, _0{}));
    cute::copy(copy_b, tCsB0(_, _, _0{}), tCrB0_view(_, _, _0{}));
    cute::copy(copy_a, tCsA1(_, _, _0{}), tCrA1_view(_, _, _0{}));
    cute::copy(copy_b, tCsB1(_, _, _0{}), tCrB1_view(_, _, _0{}));
    CUTE_UNROLL
    for (int k = 0; k < kK; ++k)
    {
        if (k + 1 < kK0)
        {
            cute::copy(copy_a, tCsA0(_, _, k + 1), tCrA0_view(_, _, k + 1));
            cute::copy(copy_b, tCsB0(_, _, k + 1), tCrB0_view(_, _, k + 1));
        }
        if (k + 1 < kK1)
        {
            cute::copy(copy_a, tCsA1(_, _, k + 1), tCrA1_view(_, _, k + 1));
            cute::copy(copy_b, tCsB1(_, _, k + 1), tCrB1_view(_, _, k + 1));
        }
        if (k < kK0)
            cute::gemm(tiled_mma, tCrA0(_, _, k), tCrB0(_, _, k), acc0);
        if (k < kK1)
            cute::gemm(tiled_mma, tCrA1(_, _, k), tCrB1(_, _, k), acc1);
    }
}

// gemm_smem_smem for a B tile (keys) of which only the first `n_valid` rows hold keys (the last, partial key block):
// n8 MMAs wholly past n_valid are skipped, so their accumulators stay as they were (the caller masks those columns).
// The branches are warp-uniform. The ldmatrix loads stay unconditional: a conditionally loaded fragment would keep
// its previous contents alive across the mainloop (d128: 96 registers, 1.7 KB of spill).
template <typename Acc, typename RA, typename RB, typename SA, typename SB, typename TiledMma, typename CopyA,
          typename CopyB, typename ThrCopyA, typename ThrCopyB>
__device__ __forceinline__ void gemm_smem_smem_cols(Acc& acc, RA& tCrA, RB& tCrB, SA const& tCsA, SB const& tCsB,
                                                    TiledMma const& tiled_mma, CopyA const& copy_a,
                                                    CopyB const& copy_b, ThrCopyA const& thr_copy_a,
                                                    ThrCopyB const& thr_copy_b, int n_valid)
{
    Tensor tCrA_view = thr_copy_a.retile_D(tCrA);
    Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
    cute::copy(copy_a, tCsA(_, _, _0{}), tCrA_view(_, _, _0{}));
    cute::copy(copy_b, tCsB(_, _, _0{}), tCrB_view(_, _, _0{}));
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tCrA); ++k)
    {
        if (k < size<2>(tCrA) - 1)
        {
            cute::copy(copy_a, tCsA(_, _, k + 1), tCrA_view(_, _, k + 1));
            cute::copy(copy_b, tCsB(_, _, k + 1), tCrB_view(_, _, k + 1));
        }
        // serpentine over (m, n) as cute::gemm does; n8 tile n holds keys [8n, 8n + 8)
        CUTE_UNROLL
        for (int m = 0; m < size<1>(tCrA); ++m)
        {
            CUTE_UNROLL
            for (int i = 0; i < size<1>(tCrB); ++i)
            {
                const int n = (m & 1) ? size<1>(tCrB) - 1 - i : i;
                if (n * 8 < n_valid)
                    cute::gemm(tiled_mma, tCrA(_, m, k), tCrB(_, n, k), acc(_, m, n));
            }
        }
    }
}

template <typename Acc, typename RA, typename RB, typename SB, typename TiledMma, typename CopyB, typename ThrCopyB>
__device__ __forceinline__ void gemm_reg_smem(Acc& acc, RA const& tCrA, RB& tCrB, SB const& tCsB,
                                              TiledMma const& tiled_mma, CopyB const& copy_b,
                                              ThrCopyB const& thr_copy_b)
{
    Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tCrA); ++k)
    {
        cute::copy(copy_b, tCsB(_, _, k), tCrB_view(_, _, k));
        cute::gemm(tiled_mma, tCrA(_, _, k), tCrB(_, _, k), acc);
    }
}

// gemm_reg_smem where only the first `k_valid` entries of the k extent (keys of P V) are non-zero: the MMAs of whole
// 16-key steps past k_valid are skipped (P is exactly zero there). Warp-uniform.
template <typename Acc, typename RA, typename RB, typename SB, typename TiledMma, typename CopyB, typename ThrCopyB>
__device__ __forceinline__ void gemm_reg_smem_keys(Acc& acc, RA const& tCrA, RB& tCrB, SB const& tCsB,
                                                   TiledMma const& tiled_mma, CopyB const& copy_b,
                                                   ThrCopyB const& thr_copy_b, int k_valid)
{
    Tensor tCrB_view = thr_copy_b.retile_D(tCrB);
    CUTE_UNROLL
    for (int k = 0; k < size<2>(tCrA); ++k)
    {
        cute::copy(copy_b, tCsB(_, _, k), tCrB_view(_, _, k)); // unconditional: see gemm_smem_smem_cols
        if (k * 16 < k_valid)
            cute::gemm(tiled_mma, tCrA(_, _, k), tCrB(_, _, k), acc);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Accumulator views. An SM80 m16n8 accumulator fragment is ((2 cols, 2 rows), MMA_M, MMA_N) per thread: row r of
// an MMA tile is held by lanes 4*(r%8)..4*(r%8)+3, rows r and r+8 by the same thread.
// ---------------------------------------------------------------------------------------------------------------
// ((2,2), M, N) -> (rows = (2, M), cols = (2, N))
template <typename Layout>
__device__ __forceinline__ auto acc_rowcol_layout(Layout l)
{
    return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
}

// ((2,2), M, N) accumulator of two adjacent n8 tiles -> ((2,2,2), M, N/2): the A-operand layout of m16n8k16, so the
// probabilities P feed the second GEMM straight from registers.
template <typename Layout>
__device__ __forceinline__ auto acc_to_a_operand_layout(Layout l)
{
    auto d = logical_divide(l, Shape<Underscore, Underscore, _2>{}); // ((2,2), M, (2, N/2))
    return make_layout(make_layout(get<0>(d), get<2, 0>(d)), get<1>(d), get<2, 1>(d));
}

// ---------------------------------------------------------------------------------------------------------------
// Online softmax over the rows this thread holds (kRows of them). Each row is spread over a quad of 4 lanes.
// ---------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// One softmax row at the end: `sum` its exp2 weights summed over all its keys, `row_max` its running max of raw
// scores, `scale` turning that max into natural-log units, `sink` a natural-log logit (-inf: none) that joins the
// denominator without a value row. Returns the factor O's row is multiplied by and writes the row's natural-log LSE;
// a row that saw no key and no sink gets 0 and -inf.
__device__ __forceinline__ float finalize_row(float sum, float row_max, float scale, float sink, float& lse)
{
    float m      = sum > 0.f ? row_max * scale : -INFINITY;
    float factor = 1.f;
    if (sink > m)
    {
        const float rescale = m == -INFINITY ? 0.f : expf(m - sink);
        sum    = sum * rescale + 1.f;
        factor = rescale;
        m      = sink;
    }
    else if (sink != -INFINITY)
    {
        sum += expf(sink - m);
    }
    const bool empty = !(sum > 0.f);
    lse = empty ? -INFINITY : m + logf(sum);
    return empty ? 0.f : factor / sum;
}

template <int kRows>
struct OnlineSoftmax
{
    float row_max[kRows]; // running max of the raw (unscaled) scores
    float row_sum[kRows]; // this thread's partial sum of exp2(score*scale_log2 - max*scale_log2)

    __device__ __forceinline__ OnlineSoftmax()
    {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r)
        {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;
        }
    }

    // s: (rows, cols) view of the score accumulator, overwritten by the unnormalised probabilities.
    // o: (rows, cols) view of the output accumulator, rescaled by exp(old_max - new_max).
    // The first call needs no special case: row_max = -inf gives a correction factor of 0 on an all-zero O.
    template <typename TS, typename TO>
    __device__ __forceinline__ void update(TS& s, TO& o, float scale_log2)
    {
        static_assert(decltype(size<0>(s))::value == kRows);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r)
        {
            float m = row_max[r];
            CUTE_UNROLL
            for (int c = 0; c < size<1>(s); ++c)
                m = fmaxf(m, s(r, c));
            m = quad_max(m);
            // A row with nothing visible yet keeps max = -inf; shift by 0 so exp2(-inf) = 0 instead of NaN.
            const float shift = m == -INFINITY ? 0.f : m * scale_log2;
            const float corr  = exp2f(row_max[r] * scale_log2 - shift);
            row_sum[r] *= corr;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(o); ++c)
                o(r, c) *= corr;
            row_max[r] = m;
            float sum = 0.f;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(s); ++c)
            {
                s(r, c) = exp2f(s(r, c) * scale_log2 - shift);
                sum += s(r, c);
            }
            row_sum[r] += sum;
        }
    }

    // Normalises o in place and returns each row's natural-log LSE (finalize_row).
    template <typename TO>
    __device__ __forceinline__ void finalize(TO& o, float scale, float sink, float (&lse)[kRows])
    {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r)
        {
            const float inv = finalize_row(quad_sum(row_sum[r]), row_max[r], scale, sink, lse[r]);
            CUTE_UNROLL
            for (int c = 0; c < size<1>(o); ++c)
                o(r, c) *= inv;
        }
    }
};

} // namespace mha::ck
