#pragma once
// The ck backward pass: three kernels (plus the sink-logit gradient and the stored dropout random values when asked
// for), launched in order on one stream (bwd_launch.cuh).
//  1. bwd_dot_do_o: D = rowsum(dO * O) in fp32 per query row, stored times 1 - p_drop (CK's softmax_d), and the
//     fp32 dQ accumulator tiles (and deterministic turn counters) of the query blocks that hold rows zeroed; then
//     bwd_sink_grad when d_sink is asked for.
//  2. bwd_kernel: one CTA per (key block, query head, batch). K and V stay in shared memory; for every query block
//     that sees the keys it recomputes P = exp(S - LSE) from Q, gets dP = dO V^T, dS = P (dP - D), and accumulates
//     dV += P^T dO and dK += dS^T Q in registers; dQ = dS K goes to an fp32 accumulator with vector reductions
//     (RED, in the MMA's fragment order: dq_acc_index). Deterministic mode orders those additions: the CTAs of one
//     query block add in descending key-block order (a turn counter per query block), so every run sums in the
//     same order.
//  3. bwd_convert_dq: dQ = scale * accumulator, in the input type and the caller's layout.
// Masks, ALiBi positions and dropout random values are the forward's (mask.h, ScoreMods, philox.h).

#include "../common/bwd_params.h"
#include "../common/mask.h"
#include "../common/philox.h"
#include "../common/row_dot.h"
#include "../common/row_store.h"
#include "bwd_traits.cuh"
#include "fwd_features.cuh"
#include "fwd_utils.cuh"
#include "seq_info.cuh"

namespace mha::ck {

// Logical lengths and physical first rows of one batch (seq_info.cuh), clamped to the maxima that size the grid and
// the dQ accumulator: lengths past them are not processed.
struct BwdSeq : SeqInfo
{
    __device__ __forceinline__ BwdSeq(const BwdParams& p, int b) : SeqInfo(p, b)
    {
        seqlen_q = max(0, min(seqlen_q, p.max_seqlen_q));
        seqlen_k = max(0, min(seqlen_k, p.max_seqlen_k));
    }
};

// Query rows that see key columns [n_begin, n_end) under the mask (sink-free window), clipped to [0, seqlen_q):
// row i sees column j iff i + off - left <= j <= i + off + right. Both bounds are non-decreasing in n_begin, which
// the deterministic turn order relies on.
__device__ __forceinline__ void rows_seeing(const WindowMask& m, int seqlen_q, int n_begin, int n_end, int& lo,
                                            int& hi)
{
    lo = 0, hi = seqlen_q;
    if (m.right >= 0)
        lo = max(0, n_begin - m.diag_offset - m.right);
    if (m.left >= 0)
        hi = min(seqlen_q, n_end - 1 - m.diag_offset + m.left + 1);
}

// ---- the dQ accumulator's fragment order ----------------------------------------------------------------------
// Element i of thread t's dQ fragment (TiledMmadQ) lives at dq_acc_index<Kt>(i, t) of its query block's tile. On
// sm_90 a thread adds Kt::kDqVecSm90 (4 or 1) consecutive elements with one red.global.add{.v4,}.f32, so one warp
// instruction covers 512 (128) contiguous bytes; below sm_90 a thread adds one element per instruction.
// bwd_convert_dq reads the tile back through the same partition: the order never leaves the library, and no
// reduction needs a row predicate (the tile has room for a whole query block).
template <typename Kt>
constexpr int dq_vec()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return Kt::kDqVecSm90;
#else
    return 1;
#endif
}

template <typename Kt>
__device__ __forceinline__ int dq_acc_index(int i, int t)
{
    constexpr int kVec = dq_vec<Kt>();
    return (i / kVec) * (Kt::kNThreads * kVec) + t * kVec + i % kVec;
}

// Fire-and-forget fp32 additions (RED, not ATOM: no value comes back, nothing waits on them).
__device__ __forceinline__ void red_add_f32x4(float* a, float x, float y, float z, float w)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a), "f"(x), "f"(y), "f"(z), "f"(w)
                 : "memory");
#endif
}

__device__ __forceinline__ void red_add_f32(float* a, float x)
{
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(a), "f"(x) : "memory");
}

// ---- 1. D = rowsum(dO * O), and the dQ accumulator zeroed -------------------------------------------------------
// 8 threads per row, 16 rows per 128-thread CTA; grid (ceil(max_seqlen_q / 16), nhead_q, batch). The CTA whose 16 rows
// start a query block (kBlockM rows) zeroes that block's dQ accumulator tile and turn counter. Only blocks holding
// rows are zeroed, the ones bwd_kernel adds to and bwd_convert_dq reads: a group-mode accumulator is sized by batch x
// max_seqlen_q (the host cannot know total_q without a synchronization), so one long sequence among many short ones
// leaves most of it untouched, and a memset of all of it would cost more than the pass.
template <typename Kt>
__global__ void __launch_bounds__(128) bwd_dot_do_o(const __grid_constant__ BwdParams p)
{
    using Element = typename Kt::Element;
    const int b = blockIdx.z, h = blockIdx.y;
    const int row = blockIdx.x * 16 + threadIdx.x / 8, lane8 = threadIdx.x % 8;
    const BwdSeq seq(p, b);
    if (blockIdx.x * 16 >= seq.seqlen_q)
        return;
    static_assert(Kt::kBlockM % 16 == 0 && Kt::kDqTileElems % (4 * 128) == 0);
    if (blockIdx.x * 16 % Kt::kBlockM == 0)
    {
        const int m_block        = blockIdx.x * 16 / Kt::kBlockM;
        const int m_blocks_total = (p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM;
        const int64_t tile_id    = (int64_t(b) * p.nhead_q + h) * m_blocks_total + m_block;
        float4* tile = reinterpret_cast<float4*>(p.dq_acc + tile_id * Kt::kDqTileElems); // 16-byte aligned (host)
        CUTE_UNROLL
        for (int i = threadIdx.x; i < Kt::kDqTileElems / 4; i += 128)
            tile[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (p.dq_turn != nullptr && threadIdx.x == 0)
            p.dq_turn[tile_id] = 0;
    }
    float acc = 0.f;
    if (row < seq.seqlen_q)
    {
        const int64_t qrow = seq.q_row0 + row;
        const Element* o  = static_cast<const Element*>(p.o) + (p.seq.is_group ? qrow * p.o_row_stride
                                                                                : b * p.o_batch_stride +
                                                                                  row * p.o_row_stride) +
                            h * p.o_head_stride;
        const Element* dout = static_cast<const Element*>(p.dout) + (p.seq.is_group ? qrow * p.do_row_stride
                                                                                     : b * p.do_batch_stride +
                                                                                       row * p.do_row_stride) +
                              h * p.do_head_stride;
        acc = row_dot_share(o, dout, p.hdim_v, lane8);
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (row < seq.seqlen_q && lane8 == 0)
    {
        const int64_t off = (p.seq.is_group ? 0 : b * p.lse_batch_stride) + h * p.lse_head_stride +
                            (p.seq.is_group ? seq.q_row0 + row : row);
        p.dsum[off] = acc * p.drop.p_keep; // CK's D: rowsum(dO * O) times p_undrop (1 without dropout)
    }
}

// Sink-logit gradient, deterministic: one CTA per head sums -exp(sink - lse) * D over (batch, row) in a fixed order.
// (A template, like every kernel here, so each instance file may carry its own copy.)
template <int kThreads = 256>
__global__ void __launch_bounds__(kThreads) bwd_sink_grad(const __grid_constant__ BwdParams p)
{
    const int h = blockIdx.x;
    const float sink = p.sink[h];
    float acc = 0.f;
    for (int b = 0; b < p.batch; ++b)
    {
        const BwdSeq seq(p, b);
        for (int i = threadIdx.x; i < seq.seqlen_q; i += kThreads)
        {
            const int64_t off = (p.seq.is_group ? 0 : b * p.lse_batch_stride) + h * p.lse_head_stride +
                                (p.seq.is_group ? seq.q_row0 + i : i);
            const float lse = p.lse[off];
            if (lse != -INFINITY)
                acc -= __expf(sink - lse) * p.dsum[off] * p.drop.rp_keep; // D stored times p_keep
        }
    }
    __shared__ float part[kThreads];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1)
    {
        if (threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        p.d_sink[h] = part[0];
}

// The dropout random values of the pass, stored when the caller asks (is_store_randval: AITER's benchmark validates
// its reference against them): randval[b, h, i, j] for every i < seqlen_q, j < seqlen_k of the batch, masked
// elements included (a superset of CK's, which stores the tiles it visits). grid (key blocks of 128, nhead_q, batch),
// 128 threads: a thread draws one Philox counter per 16 rows and writes its 16 values (rows r, r + 8; column pairs
// c, c + 8, c + 16, c + 24 of one 32-key group; philox.h), lanes along the columns (8-byte row segments).
template <int kThreads = 128>
__global__ void __launch_bounds__(kThreads) bwd_store_randval(const __grid_constant__ BwdParams p)
{
    static_assert(kThreads == 128, "one thread per Philox counter of a 16 x 128 tile");
    const int h = blockIdx.y, b = blockIdx.z;
    const BwdSeq seq(p, b);
    const int c0 = blockIdx.x * 128;
    if (c0 >= seq.seqlen_k)
        return;
    const DropoutParams& d = p.drop;
    const uint64_t seed   = d.seed_ptr ? *d.seed_ptr : d.seed;
    const uint64_t offset = d.offset_ptr ? *d.offset_ptr : d.offset;
    const uint32_t bh     = uint32_t(b) * uint32_t(p.nhead_q) + uint32_t(h);
    uint8_t* const base =
        d.randval + (p.seq.is_group ? seq.q_row0 * d.randval_row_stride : b * d.randval_batch_stride) +
        h * d.randval_head_stride;
    const int t = threadIdx.x;
    const int col = c0 + (t / 4 % 4) * 32 + (t % 4) * 2; // 32-key group t / 4 % 4, column % 8 / 2 = t % 4
    const int r8  = t / 16;                             // row % 8
    for (int r0 = 0; r0 < seq.seqlen_q; r0 += 16)
    {
        const Philox4 rnd = dropout_philox(seed, offset, bh, r0 + r8, col);
        CUTE_UNROLL
        for (int dr = 0; dr < 16; dr += 8)
        {
            const int row = r0 + r8 + dr;
            if (row >= seq.seqlen_q)
                continue;
            uint8_t* const line = base + row * d.randval_row_stride;
            CUTE_UNROLL
            for (int g = 0; g < 32; g += 8)
                CUTE_UNROLL
                for (int e = 0; e < 2; ++e)
                    if (col + g + e < seq.seqlen_k)
                        line[col + g + e] = dropout_byte(rnd, row, col + g + e);
        }
    }
}

// ---- 3. dQ = scale * accumulator ---------------------------------------------------------------------------------
// grid (query blocks, nhead_q, batch), Kt::kNThreads threads: thread t reads back the fragment elements that thread t
// of bwd_kernel added (dq_acc_index), scales them and puts them, as column pairs, into a row-major tile in shared
// memory; then the CTA writes whole rows of dQ, 16 bytes per store where its rows are 16-byte aligned. Writing the
// pairs straight from the fragments (8 rows x 16 B per warp instruction) ran at about 1 TB/s (the asm backward's
// conversion, which did the same, took 198 us for the 134 MB accumulator of bf16 d128 16k tokens on an H100; 63 us
// through shared memory).
template <typename Kt>
__global__ void __launch_bounds__(Kt::kNThreads) bwd_convert_dq(const __grid_constant__ BwdParams p)
{
    using Element = typename Kt::Element;
    constexpr int kRows = Kt::kBlockM, kCols = Kt::kHeadDim;
    constexpr int kPitch = kCols + 8; // elements: the 8 rows x 4 pairs of a warp's fragment store hit distinct banks
    static_assert(kRows * kPitch * sizeof(Element) <= 48 * 1024, "static shared memory");
    __shared__ __align__(16) Element tile_s[kRows * kPitch];
    const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tidx = threadIdx.x;
    const BwdSeq seq(p, b);
    const int m_begin = m_block * Kt::kBlockM;
    if (m_begin >= seq.seqlen_q)
        return;
    const int m_blocks_total = (p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM;
    const float* tile = p.dq_acc + ((int64_t(b) * p.nhead_q + h) * m_blocks_total + m_block) * Kt::kDqTileElems;
    typename Kt::TiledMmadQ mma_dq;
    Tensor cdq = mma_dq.get_thread_slice(tidx).partition_C(
        make_identity_tensor(Shape<Int<Kt::kBlockM>, Int<Kt::kDqCols>>{}));
    static_assert(decltype(size(cdq))::value == Kt::kDqPerThread);
    CUTE_UNROLL
    for (int part = 0; part < Kt::kDqSplit; ++part)
    {
        CUTE_UNROLL
        for (int j = 0; j < Kt::kDqPerThread; j += 4)
        {
            const float* src = tile + part * Kt::kDqPartElems;
            float v[4];
            if constexpr (dq_vec<Kt>() == 4)
            {
                const float4 x = *reinterpret_cast<const float4*>(src + dq_acc_index<Kt>(j, tidx));
                v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
            }
            else
            {
                CUTE_UNROLL
                for (int e = 0; e < 4; ++e)
                    v[e] = src[dq_acc_index<Kt>(j + e, tidx)];
            }
            CUTE_UNROLL
            for (int e = 0; e < 4; e += 2) // (j + e, j + e + 1): adjacent columns of one row
            {
                const int row = get<0>(cdq(j + e)), col = part * Kt::kDqCols + get<1>(cdq(j + e));
                alignas(4) Element pair[2] = {static_cast<Element>(v[e] * p.scale),
                                              static_cast<Element>(v[e + 1] * p.scale)};
                *reinterpret_cast<uint32_t*>(tile_s + row * kPitch + col) = *reinterpret_cast<const uint32_t*>(pair);
            }
        }
    }
    __syncthreads();
    Element* dq = static_cast<Element*>(p.dq) + h * p.dq_head_stride +
                  (p.seq.is_group ? seq.q_row0 * p.dq_row_stride : b * p.dq_batch_stride) + int64_t(m_begin) *
                  p.dq_row_stride;
    // this CTA's rows: 16-byte aligned ones take 16-byte stores, 4-byte aligned ones 4-byte stores, else elements
    const int align = reinterpret_cast<uintptr_t>(dq) % 16 == 0 && p.dq_row_stride % 8 == 0 ? 16
                      : reinterpret_cast<uintptr_t>(dq) % 4 == 0 && p.dq_row_stride % 2 == 0 ? 4
                                                                                           : 2;
    store_tile_rows<kRows, kCols, kPitch>(tile_s, dq, p.dq_row_stride, min(kRows, seq.seqlen_q - m_begin),
                                          p.hdim_q / 8, align); // hdim_q % 8 == 0
}

// ---- 2. dQ, dK, dV -----------------------------------------------------------------------------------------------
template <typename Kt>
__global__ void __launch_bounds__(Kt::kNThreads, 1) bwd_kernel(const __grid_constant__ BwdParams p)
{
    using Element = typename Kt::Element;
    constexpr int kBlockM   = Kt::kBlockM;
    constexpr int kBlockN   = Kt::kBlockN;
    constexpr int kHeadDim  = Kt::kHeadDim;
    constexpr int kHeadDimV = Kt::kHeadDimV;

    extern __shared__ __align__(128) char smem_raw[];
    const int tidx = threadIdx.x;
    // Deterministic mode walks the key blocks from the last: the dQ turn order is descending (see below), and a CTA
    // only ever waits on CTAs dispatched before it.
    const int n_block = p.dq_turn ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
    const int bidh = blockIdx.y, bidb = blockIdx.z;
    const int bidh_k = bidh / p.head_ratio;

    const BwdSeq seq(p, bidb);
    const int seqlen_q = seq.seqlen_q, seqlen_k = seq.seqlen_k;
    const int n_begin = n_block * kBlockN;
    if (n_begin >= seqlen_k)
        return;
    const int n_end = min(n_begin + kBlockN, seqlen_k);

    const WindowMask mask = WindowMask::make(p.mask, seqlen_q, seqlen_k);
    int row_lo, row_hi;
    rows_seeing(mask, seqlen_q, n_begin, n_end, row_lo, row_hi);
    const int m_block_min = row_lo / kBlockM;
    const int m_block_max = row_hi > row_lo ? (row_hi + kBlockM - 1) / kBlockM : m_block_min;

    // ---- global tensors, offsets in 64 bits; group mode rows are physical ----
    auto row_off = [&](int64_t row0, int64_t row_s, int64_t batch_s) {
        return p.seq.is_group ? row0 * row_s : int64_t(bidb) * batch_s;
    };
    const Element* q_ptr  = static_cast<const Element*>(p.q) + row_off(seq.q_row0, p.q_row_stride, p.q_batch_stride) +
                            bidh * p.q_head_stride;
    const Element* do_ptr = static_cast<const Element*>(p.dout) +
                            row_off(seq.q_row0, p.do_row_stride, p.do_batch_stride) + bidh * p.do_head_stride;
    const Element* k_ptr  = static_cast<const Element*>(p.k) + row_off(seq.k_row0, p.k_row_stride, p.k_batch_stride) +
                            bidh_k * p.k_head_stride + int64_t(n_begin) * p.k_row_stride;
    const Element* v_ptr  = static_cast<const Element*>(p.v) + row_off(seq.k_row0, p.v_row_stride, p.v_batch_stride) +
                            bidh_k * p.v_head_stride + int64_t(n_begin) * p.v_row_stride;
    const int64_t lse_off = (p.seq.is_group ? seq.q_row0 : int64_t(bidb) * p.lse_batch_stride) +
                            bidh * p.lse_head_stride;
    const int m_blocks_total = (p.max_seqlen_q + kBlockM - 1) / kBlockM;
    float* dq_acc = p.dq_acc + (int64_t(bidb) * p.nhead_q + bidh) * m_blocks_total * Kt::kDqTileElems;

    auto tile_q = [&](int m) {
        return make_tensor(make_gmem_ptr(q_ptr + int64_t(m) * kBlockM * p.q_row_stride),
                           Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_stride(p.q_row_stride, _1{}));
    };
    auto tile_do = [&](int m) {
        return make_tensor(make_gmem_ptr(do_ptr + int64_t(m) * kBlockM * p.do_row_stride),
                           Shape<Int<kBlockM>, Int<kHeadDimV>>{}, make_stride(p.do_row_stride, _1{}));
    };
    Tensor gK = make_tensor(make_gmem_ptr(k_ptr), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                            make_stride(p.k_row_stride, _1{}));
    Tensor gV = make_tensor(make_gmem_ptr(v_ptr), Shape<Int<kBlockN>, Int<kHeadDimV>>{},
                            make_stride(p.v_row_stride, _1{}));

    // ---- shared memory: K | V | (Q | dO) x kQStages | P | dS | (LSE, D) x kQStages ----
    Element* smem = reinterpret_cast<Element*>(smem_raw);
    Tensor sK  = make_tensor(make_smem_ptr(smem), typename Kt::SmemLayoutK{});
    // K^T, one dQ column part at a time (Kt::kDqSplit)
    auto sKt_part = [&](int part) {
        return make_tensor(sK.data() + part * (kBlockN * Kt::kDqCols), typename Kt::SmemLayoutKtPart{});
    };
    Tensor sV  = make_tensor(sK.data() + int(Kt::kSmemKElems), typename Kt::SmemLayoutV{});
    Element* stage0 = smem + Kt::kSmemKElems + Kt::kSmemVElems;
    constexpr int kStageElems = Kt::kSmemQElems + Kt::kSmemdOElems;
    Tensor sQ   = make_tensor(make_smem_ptr(stage0), typename Kt::SmemLayoutQ{});
    Tensor sQt  = make_tensor(sQ.data(), typename Kt::SmemLayoutQt{});
    Tensor sdO  = make_tensor(sQ.data() + int(Kt::kSmemQElems), typename Kt::SmemLayoutdO{});
    Tensor sdOt = make_tensor(sdO.data(), typename Kt::SmemLayoutdOt{});
    Tensor sP   = make_tensor(make_smem_ptr(stage0 + Kt::kQStages * kStageElems), typename Kt::SmemLayoutP{});
    Tensor sPt  = make_tensor(sP.data(), typename Kt::SmemLayoutPt{});
    Tensor sdS  = make_tensor(sP.data() + int(Kt::kSmemPElems), typename Kt::SmemLayoutP{});
    Tensor sdSt = make_tensor(sdS.data(), typename Kt::SmemLayoutPt{});
    float* s_stats = reinterpret_cast<float*>(stage0 + Kt::kQStages * kStageElems + 2 * Kt::kSmemPElems);
    // stage st of a Q / dO (partition of a) tensor, and of the per-row LSE / D
    auto stage = [&](auto const& t, int st) { return make_tensor(t.data() + st * kStageElems, t.layout()); };

    // ---- global -> shared copies ----
    typename Kt::GmemCopyQK gmem_copy_qk;
    typename Kt::GmemCopyV gmem_copy_v;
    auto gmem_thr_qk = gmem_copy_qk.get_thread_slice(tidx);
    auto gmem_thr_v  = gmem_copy_v.get_thread_slice(tidx);
    Tensor tQsQ   = gmem_thr_qk.partition_D(sQ);
    Tensor tdOsdO = gmem_thr_v.partition_D(sdO);
    Tensor tQcQ   = gmem_thr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tdOcdO = gmem_thr_v.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
    Tensor tKcK   = gmem_thr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    Tensor tVcV   = gmem_thr_v.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimV>>{}));

    const bool even_d = p.hdim_q == kHeadDim && p.hdim_v == kHeadDimV;
    auto load_q_do = [&](int m_block, int st) {
        const int rows_left = seqlen_q - m_block * kBlockM;
        auto sq  = stage(tQsQ, st);
        auto sdo = stage(tdOsdO, st);
        if (even_d && rows_left >= kBlockM) // a whole block: no predicates, no zero fill
        {
            cute::copy(gmem_copy_qk, gmem_thr_qk.partition_S(tile_q(m_block)), sq);
            cute::copy(gmem_copy_v, gmem_thr_v.partition_S(tile_do(m_block)), sdo);
        }
        else
        {
            copy_tile_pred(gmem_copy_qk, gmem_thr_qk.partition_S(tile_q(m_block)), sq, tQcQ, rows_left, p.hdim_q);
            copy_tile_pred(gmem_copy_v, gmem_thr_v.partition_S(tile_do(m_block)), sdo, tdOcdO, rows_left, p.hdim_v);
        }
        // LSE and D of the block's rows; rows past the end get P = 0 (LSE = +inf), D = 0. kAsyncStats: raw LSE through
        // cp.async with the tiles; else LSE * log2(e) through registers (the loads stall the first warps).
        // Kt::kStatsOneRow: one row per thread of the first kBlockM under a plain predicate (the strided loop
        // compiles to trip-count code: 3% of the d64 stall samples in ncu)
        float* stats = s_stats + st * 2 * kBlockM;
        auto stats_row = [&](int r) {
            const int row = m_block * kBlockM + r;
            const bool ok = row < seqlen_q;
            if constexpr (Kt::kAsyncStats)
            {
                if (ok)
                {
                    SM80_CP_ASYNC_CACHEALWAYS<float>::copy(p.lse[lse_off + row], stats[r]);
                    SM80_CP_ASYNC_CACHEALWAYS<float>::copy(p.dsum[lse_off + row], stats[kBlockM + r]);
                }
                else
                    stats[r] = INFINITY, stats[kBlockM + r] = 0.f;
            }
            else
            {
                stats[r]           = ok ? p.lse[lse_off + row] * kLog2e : INFINITY;
                stats[kBlockM + r] = ok ? p.dsum[lse_off + row] : 0.f;
            }
        };
        if constexpr (Kt::kStatsOneRow)
        {
            if (tidx < kBlockM)
                stats_row(tidx);
        }
        else
        {
            for (int r = tidx; r < kBlockM; r += Kt::kNThreads)
                stats_row(r);
        }
    };

    // ---- prologue: K, V and the first Q / dO block in flight ----
    Tensor tKsK = gmem_thr_qk.partition_D(sK);
    Tensor tVsV = gmem_thr_v.partition_D(sV);
    copy_tile_pred(gmem_copy_qk, gmem_thr_qk.partition_S(gK), tKsK, tKcK, n_end - n_begin, p.hdim_q);
    copy_tile_pred(gmem_copy_v, gmem_thr_v.partition_S(gV), tVsV, tVcV, n_end - n_begin, p.hdim_v);
    CUTE_UNROLL
    for (int i = 0; i < Kt::kQStages - 1; ++i) // the first kQStages - 1 blocks, one commit group each
    {
        if (m_block_min + i < m_block_max)
            load_q_do(m_block_min + i, i);
        cute::cp_async_fence();
    }

    // ---- MMA partitions ----
    typename Kt::TiledMmaSdP mma_sdp;
    typename Kt::TiledMmadKV mma_dkv;
    typename Kt::TiledMmadQ mma_dq;
    auto thr_sdp = mma_sdp.get_thread_slice(tidx);
    auto thr_dkv = mma_dkv.get_thread_slice(tidx);
    auto thr_dq  = mma_dq.get_thread_slice(tidx);

    Tensor tSrQ   = thr_sdp.partition_fragment_A(sQ);
    Tensor tSrK   = thr_sdp.partition_fragment_B(sK);
    Tensor tdPrdO = thr_sdp.partition_fragment_A(sdO);
    Tensor tdPrV  = thr_sdp.partition_fragment_B(sV);
    Tensor tdVrPt = thr_dkv.partition_fragment_A(sPt);
    Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt);
    Tensor tdKrdSt = thr_dkv.partition_fragment_A(sdSt);
    Tensor tdKrQt  = thr_dkv.partition_fragment_B(sQt);
    Tensor tdQrdS  = thr_dq.partition_fragment_A(sdS);
    Tensor tdQrKt  = thr_dq.partition_fragment_B(sKt_part(0));

    auto copy_a_sdp = make_tiled_copy_A(typename Kt::SmemCopyAtom{}, mma_sdp);
    auto copy_b_sdp = make_tiled_copy_B(typename Kt::SmemCopyAtom{}, mma_sdp);
    auto copy_a_dkv = make_tiled_copy_A(typename Kt::SmemCopyAtomTransposed{}, mma_dkv);
    auto copy_b_dkv = make_tiled_copy_B(typename Kt::SmemCopyAtomTransposed{}, mma_dkv);
    auto copy_a_dq  = make_tiled_copy_A(typename Kt::SmemCopyAtom{}, mma_dq);
    auto copy_b_dq  = make_tiled_copy_B(typename Kt::SmemCopyAtomTransposed{}, mma_dq);
    auto thr_a_sdp = copy_a_sdp.get_thread_slice(tidx);
    auto thr_b_sdp = copy_b_sdp.get_thread_slice(tidx);
    auto thr_a_dkv = copy_a_dkv.get_thread_slice(tidx);
    auto thr_b_dkv = copy_b_dkv.get_thread_slice(tidx);
    auto thr_a_dq  = copy_a_dq.get_thread_slice(tidx);
    auto thr_b_dq  = copy_b_dq.get_thread_slice(tidx);
    Tensor tSsQ    = thr_a_sdp.partition_S(sQ);
    Tensor tdPsdO  = thr_a_sdp.partition_S(sdO);
    Tensor tSsK    = thr_b_sdp.partition_S(sK);
    Tensor tdPsV   = thr_b_sdp.partition_S(sV);
    Tensor tdVsPt  = thr_a_dkv.partition_S(sPt);
    Tensor tdKsdSt = thr_a_dkv.partition_S(sdSt);
    Tensor tdVsdOt = thr_b_dkv.partition_S(sdOt);
    Tensor tdKsQt  = thr_b_dkv.partition_S(sQt);
    Tensor tdQsdS  = thr_a_dq.partition_S(sdS);

    // P / dS registers -> shared memory
    auto store_pds = make_tiled_copy_C(typename Kt::SmemStoreAtom{}, mma_sdp);
    auto thr_store = store_pds.get_thread_slice(tidx);
    Tensor tPsP  = thr_store.partition_D(sP);
    Tensor tdSsdS = thr_store.partition_D(sdS);

    Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kHeadDimV>>{});
    clear(acc_dk);
    clear(acc_dv);

    Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    // S fragment elements are ((column pair, row + 8), MMA_M, MMA_N), column-major: element i is on the thread's row
    // slot (i / 4 % MMA_M) * 2 + i / 2 % 2, one of 2 * MMA_M rows.
    static_assert(decltype(size<0, 0>(tScS))::value == 2 && decltype(size<0, 1>(tScS))::value == 2);
    constexpr int kMmaM     = decltype(size<1>(tScS))::value;
    constexpr int kRowSlots = 2 * kMmaM;
    auto row_slot = [](int i) { return (i / 4 % kMmaM) * 2 + i / 2 % 2; };
    // Dropout counters (philox.h): the dropout instances' S tiles put n8 tile nt of a thread at column 32 warp_n +
    // 8 (nt % 4) + 32 kAtomN (nt / 4) of the tile (bwd_traits.cuh), so its tiles 4 g .. 4 g + 3 are one 32-key group:
    // one Philox call per 16-row tile and group (kDropGroups of them; one in every instance).
    constexpr int kMmaN       = decltype(size<2>(tScS))::value;
    constexpr int kDropGroups = Kt::kDropout ? kMmaN / 4 : 1;
    static_assert(!Kt::kDropout || kMmaN % 4 == 0);
    // k-th pair in group order: (half h, tile within the group, group, 16-row tile), h fastest; the fragment index of
    // pair (h, mt, nt) is 2 h + 4 mt + 4 kMmaM nt, nt = 4 group + tile within the group
    auto drop_pair = [](int k) {
        constexpr int kPerGroup = kMmaN / kDropGroups;
        const int h = k % 2, j = k / 2 % kPerGroup, g = k / (2 * kPerGroup) % kDropGroups;
        const int mt = k / (2 * kPerGroup * kDropGroups);
        return 2 * h + 4 * mt + 4 * kMmaM * (kPerGroup * g + j);
    };

    // ---- score modifiers and dropout, as the forward applies them ----
    ScoreMods<Element> mods{};
    mods.scale          = p.scale;
    mods.softcap        = 0.f;
    mods.alibi_offset   = p.mod.alibi_mode == 0 ? seqlen_k - seqlen_q : 0;
    mods.alibi_vertical = p.mod.alibi_mode == 2;
    mods.seqlen_q       = seqlen_q;
    mods.seqlen_k       = seqlen_k;
    if (Kt::kBias && p.mod.bias != nullptr)
    {
        mods.bias = static_cast<const Element*>(p.mod.bias) +
                    (p.seq.is_group ? seq.q_row0 * p.mod.bias_row_stride : bidb * p.mod.bias_batch_stride) +
                    bidh * p.mod.bias_head_stride;
        mods.bias_row_stride = p.mod.bias_row_stride;
    }
    mods.alibi_slope =
        Kt::kAlibi && p.mod.alibi_slopes ? p.mod.alibi_slopes[bidb * p.mod.alibi_batch_stride + bidh] : 0.f;
    Element* dbias = nullptr;
    if (Kt::kBias && p.dbias != nullptr)
        dbias = static_cast<Element*>(p.dbias) +
                (p.seq.is_group ? seq.q_row0 * p.dbias_row_stride : bidb * p.dbias_batch_stride) +
                bidh * p.dbias_head_stride;
    const bool has_dropout = Kt::kDropout && p.drop.enabled;
    uint64_t drop_seed = 0, drop_offset = 0;
    if (has_dropout)
    {
        drop_seed   = p.drop.seed_ptr ? *p.drop.seed_ptr : p.drop.seed;
        drop_offset = p.drop.offset_ptr ? *p.drop.offset_ptr : p.drop.offset;
    }
    const uint32_t drop_bh = uint32_t(bidb) * uint32_t(p.nhead_q) + uint32_t(bidh);
    const float scale_log2 = Kt::kFull ? kLog2e : p.scale * kLog2e; // the full instance scales in mods.apply

    // Deterministic turns. The key blocks that visit query block m are a contiguous range (rows_seeing's bounds are
    // non-decreasing in the key block), and they add their dQ parts in descending order: last_visitor(m) first. Each
    // CTA walks m upward from its first block, which is non-decreasing in the key block, so a higher key block reaches
    // m no later than a lower one: descending is the order they arrive in, and a causal CTA rarely waits.
    int last_visitor = n_block;
    auto visits = [&](int nb, int m_block) {
        int lo, hi;
        rows_seeing(mask, seqlen_q, nb * kBlockN, min(nb * kBlockN + kBlockN, seqlen_k), lo, hi);
        return hi > lo && lo / kBlockM <= m_block && (hi + kBlockM - 1) / kBlockM > m_block;
    };
    auto last_visitor_of = [&](int m_block) { // non-decreasing in m_block: the cursor only moves up
        const int n_blocks = (seqlen_k + kBlockN - 1) / kBlockN;
        while (last_visitor + 1 < n_blocks && visits(last_visitor + 1, m_block))
            ++last_visitor;
        return last_visitor;
    };
    int32_t* turns = p.dq_turn ? p.dq_turn + (int64_t(bidb) * p.nhead_q + bidh) * m_blocks_total : nullptr;

    // dQ reductions of one column part: the kDqVec-element vector j of fragment `acc` into `tile`
    constexpr int kDqVec  = dq_vec<Kt>();
    constexpr int kDqReds = Kt::kDqPerThread / kDqVec;
    auto red_dq = [&](float* tile, auto const& acc, int j) {
        if constexpr (kDqVec == 4)
            red_add_f32x4(tile + dq_acc_index<Kt>(j * 4, tidx), acc(j * 4), acc(j * 4 + 1), acc(j * 4 + 2),
                          acc(j * 4 + 3));
        else
            red_add_f32(tile + dq_acc_index<Kt>(j, tidx), acc(j));
    };
    // Kt::kDqDefer (never in deterministic mode, whose turns order the additions): the last column part's
    // reductions of a step wait in registers and go out during the next step's dP GEMM, two after each of its first
    // k slices, instead of in one burst before the loop-top barrier.
    const bool dq_defer = Kt::kDqDefer && turns == nullptr;
    Tensor dq_pend = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<Kt::kDqCols>>{});
    float* dq_pend_tile = nullptr; // where dq_pend goes; null: nothing pending
    constexpr int kRedsPerK = 2;
    auto flush_after_k = [&](int k) {
        if constexpr (Kt::kDqDefer)
        {
            if (dq_pend_tile != nullptr)
            {
                CUTE_UNROLL
                for (int r = 0; r < kRedsPerK; ++r)
                    if (k * kRedsPerK + r < kDqReds)
                        red_dq(dq_pend_tile, dq_pend, k * kRedsPerK + r);
            }
        }
    };
    static_assert(!Kt::kDqDefer || kRedsPerK * decltype(size<2>(tdPrdO))::value >= kDqReds);

    constexpr int kStages = Kt::kQStages;
    int st = 0; // stage of m_block
    for (int m_block = m_block_min; m_block < m_block_max; ++m_block, st = st + 1 == kStages ? 0 : st + 1)
    {
        const int m_begin = m_block * kBlockM;
        // The one barrier between steps: Q / dO of this block (and K / V) landed, and every warp is done with the last
        // step, so its stage and P / dS are free to overwrite. One commit group per block (empty past the end), so
        // "all but the newest kStages - 2 groups" is exactly this block's.
        cute::cp_async_wait<kStages - 2>();
        __syncthreads();
        if (m_block + kStages - 1 < m_block_max)
            load_q_do(m_block + kStages - 1, st == 0 ? kStages - 1 : st - 1);
        cute::cp_async_fence();

        // LSE * log2(e) and D of this thread's rows of S, into registers (row slot of fragment element i: row_slot)
        float row_lse2[kRowSlots], row_dsum[kRowSlots];
        {
            const float* lse = s_stats + st * 2 * kBlockM; // LSE * log2(e); kAsyncStats: LSE
            CUTE_UNROLL
            for (int slot = 0; slot < kRowSlots; ++slot)
            {
                const int r   = get<0>(tScS(make_coord(make_coord(0, slot % 2), slot / 2, 0)));
                row_lse2[slot] = Kt::kAsyncStats ? lse[r] * kLog2e : lse[r];
                row_dsum[slot] = lse[kBlockM + r];
            }
        }

        // Dropout: this step's Philox outputs, one per (16-row tile, counter group) in drop_pair order, drawn before
        // the GEMMs so that their integer chains overlap the MMAs
        Philox4 drop_rnd[Kt::kDropout ? kMmaM * kDropGroups : 1];
        if constexpr (Kt::kDropout)
        {
            if (has_dropout)
            {
                CUTE_UNROLL
                for (int t = 0; t < kMmaM * kDropGroups; ++t)
                {
                    const int i = 4 * (t / kDropGroups) + 4 * kMmaM * (kMmaN / kDropGroups) * (t % kDropGroups);
                    drop_rnd[t] = dropout_philox(drop_seed, drop_offset, drop_bh, m_begin + get<0>(tScS(i)),
                                                 n_begin + get<1>(tScS(i)));
                }
            }
        }

        // S = Q K^T and dP = dO V^T
        Tensor acc_s  = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
        Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
        clear(acc_s);
        clear(acc_dp);
        gemm_smem_smem(acc_s, tSrQ, tSrK, stage(tSsQ, st), tSsK, mma_sdp, copy_a_sdp, copy_b_sdp, thr_a_sdp,
                       thr_b_sdp);
        gemm_smem_smem(acc_dp, tdPrdO, tdPrV, stage(tdPsdO, st), tdPsV, mma_sdp, copy_a_sdp, copy_b_sdp, thr_a_sdp,
                       thr_b_sdp, flush_after_k);

        // logits as the forward saw them, the mask, P = exp(logit - LSE), dropout, dS = P (dP - D)
        // (plain: the scale is folded into the exponent, x_log2 = S * scale * log2(e))
        if constexpr (Kt::kFull)
            mods.apply(acc_s, tScS, m_begin, n_begin);
        const bool full_tile = mask.tile_fully_visible(m_begin, m_begin + kBlockM, n_begin, n_begin + kBlockN);
        Tensor tPrP  = make_tensor_like<Element>(acc_s);
        Tensor tdSrdS = make_tensor_like<Element>(acc_s);
        // kMasked: the tile crosses the mask or the sequence ends; each thread's rows get their visible tile columns,
        // [lo, hi) plus the sink prefix [0, sink), and every element one branch-free test
        auto pointwise = [&](auto kMasked) {
            int vis_lo[kRowSlots], vis_hi[kRowSlots], vis_sink[kRowSlots];
            if constexpr (decltype(kMasked)::value)
            {
                CUTE_UNROLL
                for (int slot = 0; slot < kRowSlots; ++slot)
                {
                    int lo, hi, sink_hi;
                    mask.row_bounds(m_begin + get<0>(tScS(make_coord(make_coord(0, slot % 2), slot / 2, 0))), lo, hi,
                                    sink_hi);
                    vis_lo[slot] = lo - n_begin, vis_hi[slot] = hi - n_begin, vis_sink[slot] = sink_hi - n_begin;
                }
            }
            CUTE_UNROLL
            for (int pair = 0; pair < size(acc_s) / 2; ++pair)
            {
                // pair (i, i + 1): adjacent columns of one row. Dropout instances walk the pairs group by group
                // (drop_pair), in the order of drop_rnd.
                const int i = Kt::kDropout ? drop_pair(pair) : 2 * pair;
                const int r = get<0>(tScS(i)), c = get<1>(tScS(i));
                const int row = m_begin + r, col = n_begin + c;
                CUTE_UNROLL
                for (int e = 0; e < 2; ++e)
                {
                    const int k = row_slot(i), cc = c + e;
                    bool seen   = true;
                    if constexpr (decltype(kMasked)::value)
                        seen = (cc >= vis_lo[k] && cc < vis_hi[k]) || cc < vis_sink[k];
                    const float x = acc_s(i + e);
                    const bool live = seen && (!Kt::kBias || x != -INFINITY); // a -inf bias on an empty row
                    const float prob = live ? exp2f(x * scale_log2 - row_lse2[k]) : 0.f;
                    const float dp = acc_dp(i + e);
                    float ds;
                    if (has_dropout)
                    {
                        // dropout_byte(rnd, row, col + e) with the half h = row % 16 / 8, col % 2 = e and the n8
                        // tile's col % 32 / 8 = nt % 4 known at compile time (n_begin and the warp's columns are
                        // multiples of 32)
                        const Philox4& rnd = drop_rnd[pair / (2 * kMmaN / kDropGroups)];
                        const int j8 = i / (4 * kMmaM) % 4;
                        const uint32_t word = i / 2 % 2 ? (j8 < 2 ? rnd.z : rnd.w) : (j8 < 2 ? rnd.x : rnd.y);
                        const uint8_t rv = uint8_t(word >> (8 * (2 * (j8 % 2) + e)));
                        const bool keep = rv <= p.drop.keep_threshold;
                        // D is stored times p_keep (CK's softmax_d): P (dP kept / p_keep - D) = P / p_keep (dP kept
                        // - D stored)
                        const float pk = prob * p.drop.rp_keep;
                        tPrP(i + e) = static_cast<Element>(keep ? pk : 0.f);
                        ds = pk * ((keep ? dp : 0.f) - row_dsum[k]);
                    }
                    else
                    {
                        tPrP(i + e) = static_cast<Element>(prob);
                        ds = prob * (dp - row_dsum[k]);
                    }
                    tdSrdS(i + e) = static_cast<Element>(ds);
                    if (dbias != nullptr && row < seqlen_q && col + e < seqlen_k)
                        dbias[row * p.dbias_row_stride + col + e] = static_cast<Element>(ds);
                }
            }
        };
        if (full_tile)
            pointwise(cute::false_type{});
        else
            pointwise(cute::true_type{});
        cute::copy(store_pds, thr_store.retile_S(tPrP), tPsP);
        cute::copy(store_pds, thr_store.retile_S(tdSrdS), tdSsdS);
        __syncthreads(); // P and dS visible to every warp

        // dV += P^T dO, dK += dS^T Q. The plain instances interleave the two (gemm_smem_smem_x2). H200, plain d256:
        // +3% (s=16k non-causal 245 -> 253 TFLOP/s) and no spill (8 B before); d64 / d128 unchanged. The feature
        // instances (alibi, dropout, full) were not timed with it and keep them one after the other. Tried and
        // dropped: the same interleave of S and dP (-0.5% on d64 / d128, nothing on d256), dQ with its reductions
        // before these GEMMs (-2 to -7%), P computed between the S and dP GEMMs as FlashAttention-2 does (-1 to -4%),
        // and LSE / D stored in fragment order for 16-byte loads (spills, -1 to -3%). The d256 gain is sensitive to
        // code layout: the same order with dQ in a lambda lost it.
        if constexpr (Kt::kFull)
        {
            gemm_smem_smem(acc_dv, tdVrPt, tdVrdOt, tdVsPt, stage(tdVsdOt, st), mma_dkv, copy_a_dkv, copy_b_dkv,
                           thr_a_dkv, thr_b_dkv);
            gemm_smem_smem(acc_dk, tdKrdSt, tdKrQt, tdKsdSt, stage(tdKsQt, st), mma_dkv, copy_a_dkv, copy_b_dkv,
                           thr_a_dkv, thr_b_dkv);
        }
        else
            gemm_smem_smem_x2(acc_dv, tdVrPt, tdVrdOt, tdVsPt, stage(tdVsdOt, st), acc_dk, tdKrdSt, tdKrQt, tdKsdSt,
                              stage(tdKsQt, st), mma_dkv, copy_a_dkv, copy_b_dkv, thr_a_dkv, thr_b_dkv);

        // dQ (this key block's part) = dS K, added to the fp32 accumulator, in Kt::kDqSplit column parts
        CUTE_UNROLL
        for (int part = 0; part < Kt::kDqSplit; ++part)
        {
            Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<Kt::kDqCols>>{});
            static_assert(decltype(size(acc_dq))::value == Kt::kDqPerThread);
            clear(acc_dq);
            gemm_smem_smem(acc_dq, tdQrdS, tdQrKt, tdQsdS, thr_b_dq.partition_S(sKt_part(part)), mma_dq, copy_a_dq,
                           copy_b_dq, thr_a_dq, thr_b_dq);
            if (turns != nullptr && part == 0)
            {
                // wait for the key blocks before this one to have added theirs
                if (tidx == 0)
                {
                    const int turn = last_visitor_of(m_block) - n_block;
                    while (atomicAdd(turns + m_block, 0) != turn)
                        __nanosleep(64);
                }
                __syncthreads();
            }
            float* dq_tile = dq_acc + int64_t(m_block) * Kt::kDqTileElems + part * Kt::kDqPartElems;
            if (dq_defer && part == Kt::kDqSplit - 1)
            {
                cute::copy(acc_dq, dq_pend);
                dq_pend_tile = dq_tile;
            }
            else
            {
                CUTE_UNROLL
                for (int j = 0; j < kDqReds; ++j)
                    red_dq(dq_tile, acc_dq, j);
            }
        }
        if (turns != nullptr)
        {
            __threadfence();
            __syncthreads();
            if (tidx == 0)
                atomicAdd(turns + m_block, 1);
        }
    }

    if (dq_defer && dq_pend_tile != nullptr) // the last step's
    {
        CUTE_UNROLL
        for (int j = 0; j < kDqReds; ++j)
            red_dq(dq_pend_tile, dq_pend, j);
    }

    // ---- epilogue: dK = scale * acc, dV; per query head ----
    Tensor tdKVc = thr_dkv.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    Tensor tdVc  = thr_dkv.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimV>>{}));
    Element* dk = static_cast<Element*>(p.dk) + row_off(seq.k_row0, p.dk_row_stride, p.dk_batch_stride) +
                  bidh * p.dk_head_stride + int64_t(n_begin) * p.dk_row_stride;
    Element* dv = static_cast<Element*>(p.dv) + row_off(seq.k_row0, p.dv_row_stride, p.dv_batch_stride) +
                  bidh * p.dv_head_stride + int64_t(n_begin) * p.dv_row_stride;
    const int rows = n_end - n_begin;
    // 16-byte aligned rows (the usual case): through shared memory, as 16-byte row chunks. FlashAttention-2 does the
    // same; the fragment order below stores two bytes per instruction, eight sectors per warp store.
    auto rows16 = [](const Element* ptr, int64_t row_stride) {
        return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && row_stride % (16 / int(sizeof(Element))) == 0;
    };
    if (rows16(dk, p.dk_row_stride) && rows16(dv, p.dv_row_stride))
    {
        cute::cp_async_wait<0>(); // a key block no query sees never waited on its K / V copies
        __syncthreads();          // every warp is past its last read of sK / sV, which take dK / dV
        // The thread index read afresh (volatile asm): with the partitions derived from `tidx`, which the loop's
        // addressing shares, ptxas scheduled the loop differently and d64 at s=16k lost 1.2% to the old epilogue
        // (282.4 vs 286.0 TFLOP/s); with this it gains 0.7% (288.1).
        int etid;
        asm volatile("mov.u32 %0, %%tid.x;" : "=r"(etid));
        auto thr_e = mma_dkv.get_thread_slice(etid);
        Tensor rdk = make_tensor_like<Element>(acc_dk);
        Tensor rdv = make_tensor_like<Element>(acc_dv);
        CUTE_UNROLL
        for (int i = 0; i < size(acc_dk); ++i)
            rdk(i) = static_cast<Element>(acc_dk(i) * p.scale);
        CUTE_UNROLL
        for (int i = 0; i < size(acc_dv); ++i)
            rdv(i) = static_cast<Element>(acc_dv(i));
        cute::copy(rdk, thr_e.partition_C(sK));
        cute::copy(rdv, thr_e.partition_C(sV));
        __syncthreads();
        auto store = [&](auto tiled_copy, auto const& s_tile, auto width, Element* g, int64_t row_stride, int cols) {
            const auto tile_shape = make_shape(Int<kBlockN>{}, width);
            auto thr = tiled_copy.get_thread_slice(etid);
            Tensor tG = thr.partition_D(make_tensor(make_gmem_ptr(g), tile_shape, make_stride(row_stride, _1{})));
            Tensor tR = make_tensor<Element>(shape(tG));
            cute::copy(tiled_copy, thr.partition_S(s_tile), tR);
            store_tile_pred(tiled_copy, tR, tG, thr.partition_D(make_identity_tensor(tile_shape)), rows, cols);
        };
        store(typename Kt::GmemStoreK{}, sK, Int<kHeadDim>{}, dk, p.dk_row_stride, p.hdim_q);
        store(typename Kt::GmemStoreV{}, sV, Int<kHeadDimV>{}, dv, p.dv_row_stride, p.hdim_v);
        return;
    }
    cute::cp_async_wait<0>(); // as above: no copy into shared memory outlives the CTA
    CUTE_UNROLL
    for (int i = 0; i < size(acc_dk); i += 2)
    {
        const int r = get<0>(tdKVc(i)), c = get<1>(tdKVc(i));
        if (r < rows && c < p.hdim_q) // hdim_q is even: the pair stays inside
        {
            Element* d = dk + int64_t(r) * p.dk_row_stride + c;
            d[0] = static_cast<Element>(acc_dk(i) * p.scale);
            d[1] = static_cast<Element>(acc_dk(i + 1) * p.scale);
        }
    }
    CUTE_UNROLL
    for (int i = 0; i < size(acc_dv); i += 2)
    {
        const int r = get<0>(tdVc(i)), c = get<1>(tdVc(i));
        if (r < rows && c < p.hdim_v)
        {
            Element* d = dv + int64_t(r) * p.dv_row_stride + c;
            d[0] = static_cast<Element>(acc_dv(i));
            d[1] = static_cast<Element>(acc_dv(i + 1));
        }
    }
}

} // namespace mha::ck
