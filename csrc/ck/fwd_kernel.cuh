#pragma once
// The ck forward kernel: FlashAttention-2-style tiling with CuTe's SM80 mma.sync atoms (runs on sm_80 and newer).
// One CTA computes a kBlockM x hdim_v tile of O for one (batch, head): Q stays in shared memory, K and V tiles stream
// through with cp.async (V[n] loads while S = Q K[n]^T computes, K[n-1] loads while softmax and O += P V[n] run),
// and the online softmax keeps O in fp32 registers. Key blocks are visited last-to-first so the partial / masked
// blocks come first and the rest run without elementwise masking.

#include "../common/fwd_params.h"
#include "../common/mask.h"
#include "fwd_traits.cuh"
#include "fwd_utils.cuh"

namespace mha::ck {

template <typename Kt>
__global__ void __launch_bounds__(Kt::kNThreads, 1) fwd_kernel(const __grid_constant__ FwdParams p)
{
    using Element = typename Kt::Element;
    constexpr int kBlockM  = Kt::kBlockM;
    constexpr int kBlockN  = Kt::kBlockN;
    constexpr int kHeadDim = Kt::kHeadDim;

    extern __shared__ __align__(128) char smem_raw[];

    const int tidx = threadIdx.x;
    // Heavier row blocks first when masked (a causal mask makes later row blocks longer): shortens the tail.
    const int m_block = p.mask.is_none() ? blockIdx.x : gridDim.x - 1 - blockIdx.x;
    const int bidh    = blockIdx.y;
    const int bidb    = blockIdx.z;
    const int bidh_k  = bidh / p.head_ratio;

    const int seqlen_q = p.seqlen_q;
    const int seqlen_k = p.seqlen_k;
    const int m_begin  = m_block * kBlockM;
    if (m_begin >= seqlen_q)
        return;
    const int m_end = min(m_begin + kBlockM, seqlen_q);

    const WindowMask mask = WindowMask::make(p.mask, seqlen_q, seqlen_k);
    const MaskRange nr    = mask.range(m_begin, m_end);
    const int n_block_min = nr.n_begin / kBlockN;
    const int n_block_max = nr.n_end > nr.n_begin ? (nr.n_end + kBlockN - 1) / kBlockN : n_block_min;

    // ---- global tensors of this (batch, head), offsets in 64 bits ----
    const Element* q_ptr = static_cast<const Element*>(p.q) + bidb * p.q_batch_stride + bidh * p.q_head_stride;
    const Element* k_ptr = static_cast<const Element*>(p.k) + bidb * p.k_batch_stride + bidh_k * p.k_head_stride;
    const Element* v_ptr = static_cast<const Element*>(p.v) + bidb * p.v_batch_stride + bidh_k * p.v_head_stride;
    Element* o_ptr       = static_cast<Element*>(p.o) + bidb * p.o_batch_stride + bidh * p.o_head_stride;

    Tensor mQ = make_tensor(make_gmem_ptr(q_ptr), make_shape(seqlen_q, Int<kHeadDim>{}),
                            make_stride(p.q_row_stride, _1{}));
    Tensor mK = make_tensor(make_gmem_ptr(k_ptr), make_shape(seqlen_k, Int<kHeadDim>{}),
                            make_stride(p.k_row_stride, _1{}));
    Tensor mV = make_tensor(make_gmem_ptr(v_ptr), make_shape(seqlen_k, Int<kHeadDim>{}),
                            make_stride(p.v_row_stride, _1{}));
    Tensor mO = make_tensor(make_gmem_ptr(o_ptr), make_shape(seqlen_q, Int<kHeadDim>{}),
                            make_stride(p.o_row_stride, _1{}));
    // local_tile on a shape that is not a tile multiple is fine: out-of-range rows are never dereferenced.
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));  // (M, K)
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));        // (N, K, n)
    Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));        // (N, K, n)
    Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));  // (M, K)

    // ---- shared memory: Q | K | V ----
    Element* smem = reinterpret_cast<Element*>(smem_raw);
    Tensor sQ  = make_tensor(make_smem_ptr(smem), typename Kt::SmemLayoutQ{});
    Tensor sK  = make_tensor(sQ.data() + int(Kt::kSmemQElems), typename Kt::SmemLayoutKV{});
    Tensor sV  = make_tensor(sK.data() + int(Kt::kSmemKVElems), typename Kt::SmemLayoutKV{});
    Tensor sVt = make_tensor(sV.data(), typename Kt::SmemLayoutVt{});
    Tensor sO  = make_tensor(sQ.data(), typename Kt::SmemLayoutO{});

    typename Kt::GmemTiledCopyQKV gmem_copy;
    auto gmem_thr = gmem_copy.get_thread_slice(tidx);
    Tensor tQgQ = gmem_thr.partition_S(gQ);
    Tensor tQsQ = gmem_thr.partition_D(sQ);
    Tensor tKgK = gmem_thr.partition_S(gK); // (CPY, CPY_N, CPY_K, n)
    Tensor tKsK = gmem_thr.partition_D(sK);
    Tensor tVgV = gmem_thr.partition_S(gV);
    Tensor tVsV = gmem_thr.partition_D(sV);
    // identity coordinates for bounds checks
    Tensor tQcQ  = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tKVcKV = gmem_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

    typename Kt::TiledMma tiled_mma;
    auto thr_mma   = tiled_mma.get_thread_slice(tidx);
    Tensor tSrQ    = thr_mma.partition_fragment_A(sQ);                                 // (MMA, MMA_M, MMA_K)
    Tensor tSrK    = thr_mma.partition_fragment_B(sK);                                 // (MMA, MMA_N, MMA_K)
    Tensor tOrVt   = thr_mma.partition_fragment_B(
        make_tensor(sV.data(), Layout<Shape<Int<kHeadDim>, Int<kBlockN>>>{}));       // (MMA, MMA_K=hdim, MMA_N)
    Tensor acc_o   = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{}); // (MMA, MMA_M, MMA_K)

    auto smem_copy_q  = make_tiled_copy_A(typename Kt::SmemCopyAtom{}, tiled_mma);
    auto smem_thr_q   = smem_copy_q.get_thread_slice(tidx);
    Tensor tSsQ       = smem_thr_q.partition_S(sQ);
    auto smem_copy_k  = make_tiled_copy_B(typename Kt::SmemCopyAtom{}, tiled_mma);
    auto smem_thr_k   = smem_copy_k.get_thread_slice(tidx);
    Tensor tSsK       = smem_thr_k.partition_S(sK);
    auto smem_copy_v  = make_tiled_copy_B(typename Kt::SmemCopyAtomTransposed{}, tiled_mma);
    auto smem_thr_v   = smem_copy_v.get_thread_slice(tidx);
    Tensor tOsVt      = smem_thr_v.partition_S(sVt);

    // (row, col) of every score element this thread holds, for masking
    Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));

    const bool even_k = p.hdim_q == kHeadDim && p.hdim_v == kHeadDim;

    // ---- prologue: Q and the last K block in flight ----
    copy_tile_pred(gmem_copy, tQgQ, tQsQ, tQcQ, seqlen_q - m_begin, p.hdim_q);
    auto load_kv = [&](auto const& tSrc, auto& tDst, int n_block, int cols) {
        const int rows_left = seqlen_k - n_block * kBlockN;
        if (even_k && rows_left >= kBlockN)
            cute::copy(gmem_copy, tSrc(_, _, _, n_block), tDst);
        else
            copy_tile_pred(gmem_copy, tSrc(_, _, _, n_block), tDst, tKVcKV, rows_left, cols);
    };
    if (n_block_max > n_block_min)
        load_kv(tKgK, tKsK, n_block_max - 1, p.hdim_q);
    cute::cp_async_fence();

    clear(acc_o);
    constexpr int kRows = decltype(size<0>(acc_rowcol_layout(acc_o.layout())))::value;
    OnlineSoftmax<kRows> softmax;
    Tensor o_rc = make_tensor(acc_o.data(), acc_rowcol_layout(acc_o.layout()));

    auto iteration = [&](int n_block, auto is_first) {
        Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{}); // (MMA, MMA_M, MMA_N)
        clear(acc_s);
        cute::cp_async_wait<0>();
        __syncthreads(); // K[n] landed; every warp finished reading V[n+1]
        load_kv(tVgV, tVsV, n_block, p.hdim_v);
        cute::cp_async_fence();

        gemm_smem_smem(acc_s, tSrQ, tSrK, tSsQ, tSsK, tiled_mma, smem_copy_q, smem_copy_k, smem_thr_q, smem_thr_k);

        const int n_begin = n_block * kBlockN;
        if (!mask.tile_fully_visible(m_begin, m_begin + kBlockM, n_begin, n_begin + kBlockN))
        {
            CUTE_UNROLL
            for (int i = 0; i < size(acc_s); ++i)
            {
                const int row = m_begin + get<0>(tScS(i));
                const int col = n_begin + get<1>(tScS(i));
                if (!mask.visible(row, col))
                    acc_s(i) = -INFINITY;
            }
        }

        cute::cp_async_wait<0>();
        __syncthreads(); // V[n] landed; every warp finished reading K[n]
        if (n_block > n_block_min)
        {
            load_kv(tKgK, tKsK, n_block - 1, p.hdim_q);
            cute::cp_async_fence();
        }

        Tensor s_rc = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
        softmax.template update<decltype(is_first)::value>(s_rc, o_rc, p.scale_log2);

        // P in the A-operand layout, converted to the input type without leaving registers
        Tensor tOrP = make_tensor_like<Element>(acc_s);
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i)
            tOrP(i) = static_cast<Element>(acc_s(i));
        Tensor tOrP_a = make_tensor(tOrP.data(), acc_to_a_operand_layout(tOrP.layout()));
        gemm_reg_smem(acc_o, tOrP_a, tOrVt, tOsVt, tiled_mma, smem_copy_v, smem_thr_v);
    };

    int n_block = n_block_max - 1;
    if (n_block >= n_block_min)
    {
        iteration(n_block, cute::true_type{});
        for (--n_block; n_block >= n_block_min; --n_block)
            iteration(n_block, cute::false_type{});
    }

    // ---- epilogue: normalise, LSE, O through shared memory with 16 B stores ----
    float lse[kRows];
    softmax.finalize(o_rc, p.scale, lse);

    if (p.lse != nullptr)
    {
        Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
        Tensor c_rc = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
        float* lse_ptr = p.lse + bidb * p.lse_batch_stride + bidh * p.lse_head_stride;
        if (get<1>(c_rc(0, 0)) == 0) // one lane of each quad owns the row's LSE
        {
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r)
            {
                const int row = m_begin + get<0>(c_rc(r, 0));
                if (row < seqlen_q)
                    lse_ptr[row] = lse[r];
            }
        }
    }

    Tensor tOrO = make_tensor_like<Element>(acc_o);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_o); ++i)
        tOrO(i) = static_cast<Element>(acc_o(i));
    cute::cp_async_wait<0>(); // with no visible key block the Q copy was never waited on
    __syncthreads();          // every warp is past its last read of sQ (sO aliases it)
    Tensor tOsO_mma = thr_mma.partition_C(sO);
    cute::copy(tOrO, tOsO_mma);
    __syncthreads();

    typename Kt::GmemTiledCopyO gmem_copy_o;
    auto gmem_thr_o = gmem_copy_o.get_thread_slice(tidx);
    Tensor tOsO = gmem_thr_o.partition_S(sO);
    Tensor tOgO = gmem_thr_o.partition_D(gO);
    Tensor tOcO = gmem_thr_o.partition_D(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tOrOut = make_tensor<Element>(shape(tOgO));
    cute::copy(gmem_copy_o, tOsO, tOrOut);
    store_tile_pred(gmem_copy_o, tOrOut, tOgO, tOcO, seqlen_q - m_begin, p.hdim_v);
}

} // namespace mha::ck
