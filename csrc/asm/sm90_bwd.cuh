#pragma once
// The asm ("v3") family's backward on sm_90a: one CTA per (128-key block, query head, batch), three warpgroups.
//   warpgroup 0        producer: one thread issues the tensor copies (TMA, 128-byte swizzle) of the CTA's K and V
//                      once, then of Q and dO per query block into a ring of kStages stages, with the block's
//                      log2-scaled LSE and D rows (bulk copies from the padded copies sm90_bwd_pre wrote); in
//                      deterministic mode a thread of its second warp keeps the dQ turns (turn_watcher)
//   warpgroups 1 and 2 consumers: 64 keys each. Per query block, by wgmma:
//                        S^T  = K Q^T,  dP^T = V dO^T         (both operands from shared memory)
//                        P^T  = exp2(S^T scale_log2 - LSE2),  dS^T = P^T (dP^T - D)   (registers)
//                        dV  += P^T dO,  dK += dS^T Q         (P^T, dS^T as register A fragments)
//                        dS^T -> shared memory;  dQ_part = dS K  (the two warpgroups split dQ's rows or columns)
//                      dQ_part is added to an fp32 accumulator in fragment order: by red.global.add.v4.f32 (d128)
//                      or from shared memory by the copy engine's bulk reduction (d64, kDqBulk); dK and dV stay in
//                      registers until the CTA's last block.
// Computing S^T and dP^T (keys as the GEMM's M) puts P^T and dS^T in the accumulator layout that is wgmma's register
// A layout, so the dV and dK GEMMs take them without a trip through shared memory; only dS goes there, for dQ.
// Three kernels per call (run_bwd_sm90): sm90_bwd_pre (D = rowsum(dO * O) into the caller's d_ptr, padded LSE2 / D
// rows, the dQ accumulator zeroed), sm90_bwd_kernel, sm90_bwd_convert (dQ = scale * accumulator).
// Covers no mask, causal masks and sliding windows (top-left or bottom-right; no sink tokens), batch and group mode
// (group mode: per-sequence tensor maps, sm90_bwd_pre), MQA / GQA (dK / dV per query head, as the ck backward),
// deterministic dQ (kDet; without a mask and up to kRotMaxBlocks key blocks, the rotated order, kRot), head dims
// up to 64 or 128;
// csrc/api/mha_bwd.cpp (asm_choice / asm_instance) decides which calls come here.

#include "sm90_fwd.cuh"
#include "../common/bwd_params.h"
#include "../common/row_dot.h"
#include "../ck/seq_info.cuh"

namespace mha::asm90 {

// Tile shape. d64: 128 query rows per block (each warpgroup's dQ GEMM takes 64 of them); d128: 64 rows (each takes
// 64 of dQ's 128 columns). Shared memory: K + V 2 x kBlockN x D x 2 B, kStages x (Q + dO) blocks, two dS buffers,
// the statistics, 1 KB of alignment slack, and with kDqBulk one 16 KB dQ staging part per consumer: d128 64 + 64 +
// 32 + 1 + 1 KB = 162 KB, d64 32 + 64 + 64 + 2 + 1 + 32 KB = 195 KB.
template <typename Element_, int kHeadDim_, bool kDqBulk_ = (kHeadDim_ <= 64)>
struct Sm90BwdTraits
{
    using Element = Element_;
    // kDsXorStore: dS^T's stores address by one XOR each instead of offsets computed ahead (see the loop). Same-call
    // A/B, H200 bf16 16k tokens TFLOP/s, s = 1k / 4k / 16k non-causal: d128 304 / 401 / 436 -> 326 / 442 / 488 (causal
    // 213 / 343 / 428 -> 225 / 377 / 476-481); d64 267 / 341 / 370 -> 255 / 318 / 341, so d64 keeps the offsets
    // (there the XOR form spills less, 28 B against 64 B, and still runs slower: not understood).
    // The XOR offsets as plain C++ stores instead of st.shared: d128 0.5-1% slower, d64 1-2% slower.
    // With dS^T's plain stores as STS (shared memory addressed from smem_raw, see the kernel) the XOR form still
    // loses at d64, H100 bf16 16k tokens TFLOP/s s = 1k / 4k / 16k non-causal 293 / 369 / 394 -> 283 / 354 / 378.
    static constexpr bool kDsXorStore = kHeadDim_ > 64;
    // kDqBulk: each warpgroup's 64 x 64 dQ part goes to shared memory and reaches the accumulator by the copy
    // engine's bulk reduction (cp.reduce.async.bulk .add.f32, 16 KB per warpgroup and query block) instead of 8
    // red.global.add.v4.f32 per thread. Same-call A/B, H200 bf16 16k tokens TFLOP/s, red -> bulk, s = 1k / 4k / 16k:
    // d64 263 / 330 / 353 -> 265 / 341 / 369 (causal 187 / 292 / 351 -> 186 / 300 / 365); d128 (two buffers per
    // warpgroup) 303 / 401 / 437 -> 295 / 393 / 430 (causal 212 / 343 / 427 -> 203 / 334 / 418), so d128 keeps red
    // (again with the XOR dS^T store below, as C++ stores: 324 / 438 / 483 -> 317 / 427 / 471; and again with the
    // staging stores as STS, H100 s = 1k / 2k / 4k / 16k: 379 / 437 / 471 / 504 -> 371 / 425 / 462 / 493).
    static constexpr bool kDqBulk = kDqBulk_;
    // kRotateM: the CTAs of one head start their query blocks at different ones (key block n at its n-th), so that
    // their dQ additions at any moment go to different accumulator tiles instead of all to the same one. Same call,
    // H100 bf16 16k tokens TFLOP/s, s = 1k / 2k / 4k / 16k: d64 304 / 346 / 373 / 400 -> 308 / 351 / 380 / 409
    // (causal 218 / 285 / 331 / 392 -> 222 / 287 / 338 / 402); d128 377 / 437 / 469 / 501 -> 361 / 415 / 450 / 479
    // (that build spilled 24 B, none without it), so d128 keeps the blocks in order.
    static constexpr bool kRotateM = kHeadDim_ <= 64;
    static constexpr int kHeadDim   = kHeadDim_;
    static constexpr int kBlockN    = 128; // keys per CTA: 64 per consumer warpgroup
    static constexpr int kBlockM    = kHeadDim <= 64 ? 128 : 64;
    static constexpr bool kDqSplitRows = kBlockM == 128; // else the warpgroups split dQ's columns (64 each)
    static constexpr int kStages    = 2;
    static constexpr int kConsumers = 2;
    static constexpr int kThreads   = 128 * (kConsumers + 1);
    static constexpr int kAtoms     = kHeadDim / 64;
    static constexpr int kKvBytes   = kBlockN * kHeadDim * 2;
    static constexpr int kQBytes    = kBlockM * kHeadDim * 2;
    static constexpr int kDsBytes   = kBlockN * kBlockM * 2;
    static constexpr int kStatBytes = kBlockM * 4;
    static constexpr int kDqTile    = kBlockM * kHeadDim; // floats of one query block's accumulator tile
    // setmaxnreg: the CTA starts with 168 registers a thread (65,536 / 384, rounded down to 8); the consumers'
    // increase waits until the producer's decrease has freed enough: 128 x (168 - 24) = 256 x (240 - 168)
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168, "setmaxnreg would wait forever");
    static constexpr int kSmemBase = 1024 + 2 * kKvBytes + kStages * 2 * kQBytes + 2 * kDsBytes +
                                     kStages * 2 * kStatBytes + 8 * (1 + 2 * kStages + 5);
    static constexpr int kDqPartBytes = 64 * 64 * 4;
    // dQ staging parts per consumer: two where they fit (d128 when kDqBulk is forced), else one (d64)
    static constexpr int kDqBufs = !kDqBulk ? 0 : kSmemBase + 2 * 2 * kDqPartBytes <= 232448 ? 2 : 1;
    static constexpr int kSmemBytes = kSmemBase + kConsumers * kDqBufs * kDqPartBytes;
    static_assert(kHeadDim == 64 || kHeadDim == 128, "the wgmma atoms instantiated below");
    static_assert(kDqTile == 2 * 64 * 64, "each consumer adds one 64 x 64 part of dQ");
    static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory");
};

// Device arguments of the three kernels.
struct Sm90BwdParams
{
    // batch mode: the maps of the whole tensors; group mode: one sequence's rows, the template of `maps`
    TmaDesc tma_q, tma_k, tma_v, tma_do;
    TmaDesc* maps;      // group mode: [batch][4] (q, k, v, do) over each sequence's rows, written by sm90_bwd_pre
    float* lse2;        // [batch * nhead][sq_pad]: LSE * log2(e); +inf past seqlen_q and for rows without keys
    float* dpad;        // [batch * nhead][sq_pad]: D, 0 past seqlen_q
    float* dq_acc;      // [batch * nhead][m_blocks][kDqTile], fragment order (dq_part_index)
    int32_t* turns;     // deterministic: [batch * nhead][m_blocks] dQ turn counters (sm90_bwd_kernel), else null
    void* dk;
    void* dv;
    int64_t dk_row_stride, dk_head_stride, dk_batch_stride;
    int64_t dv_row_stride, dv_head_stride, dv_batch_stride;
    int32_t seqlen_q, seqlen_k; // batch mode; group mode: unused
    int32_t max_seqlen_q, max_seqlen_k; // the grid's and the accumulator's extents (batch mode: seqlen_q / seqlen_k)
    int32_t hdim_q, hdim_v, head_ratio, nhead, batch;
    int32_t m_blocks, sq_pad; // of max_seqlen_q
    float scale, scale_log2;
    // key j visible to row i iff -win_left <= j - (i + diag) <= win_right, diag = 0 top-left, seqlen_k - seqlen_q
    // bottom-right; kNoBound (INT_MAX): no bound on that side; causal: kNoBound, 0 (Sm90FwdParams' convention)
    int32_t win_left, win_right;
    uint32_t win_span; // win_left + win_right
    int32_t bottom_right;
    // kRot (deterministic, no mask, batch mode): rot_heads heads at a time (flat b * nhead + h), each as rot_n CTAs, one
    // per key block
    int32_t rot_n, rot_heads;
    int32_t dq_vec16;     // every dQ row 16-byte aligned: sm90_bwd_convert's 16-byte stores (else 4-byte)
    int32_t kv_vec16;     // every dK and dV row 16-byte aligned: the main kernel's 16-byte stores (else 4-byte)
    SeqParams seq;        // group mode: the sequences' rows (ck::SeqInfo)
};

// One batch's logical lengths and (group mode) physical first rows, clamped to the maxima that sized the grid and
// the accumulator, and its mask's diagonal.
struct BwdBatch
{
    int sq, sk;
    int64_t q_row0, k_row0;
    int diag; // the window's centre: row i's is key i + diag
};

__device__ __forceinline__ BwdBatch batch_of(const Sm90BwdParams& a, int b)
{
    BwdBatch r;
    if (a.seq.is_group)
    {
        const ck::SeqInfo s(a, b);
        r.sq = max(0, min(s.seqlen_q, a.max_seqlen_q)), r.sk = max(0, min(s.seqlen_k, a.max_seqlen_k));
        r.q_row0 = s.q_row0, r.k_row0 = s.k_row0;
    }
    else
        r.sq = a.seqlen_q, r.sk = a.seqlen_k, r.q_row0 = r.k_row0 = 0;
    r.diag = a.bottom_right ? r.sk - r.sq : 0;
    return r;
}

// Query blocks [first, end) of a batch that see some key of key block n_block (first == end: none): from the first
// row whose right bound reaches the block's first key to the last row whose left bound reaches its last key.
template <typename Kt>
__device__ __forceinline__ void query_blocks(const Sm90BwdParams& a, const BwdBatch& bt, int n_block, int& first,
                                             int& end)
{
    const int64_t n0 = int64_t(n_block) * Kt::kBlockN, n_last = min(n0 + Kt::kBlockN, int64_t(bt.sk)) - 1;
    const int64_t row_lo = max(int64_t(0), n0 - bt.diag - a.win_right);
    const int64_t row_hi = min(int64_t(bt.sq) - 1, n_last - bt.diag + a.win_left);
    if (row_lo > row_hi)
        first = end = 0;
    else
        first = int(row_lo / Kt::kBlockM), end = int(row_hi / Kt::kBlockM) + 1;
}

#if MHA_SM90A
namespace dev {

// A 1-d bulk copy global -> shared completing on `bar` (bytes: a multiple of 16, both addresses 16-byte aligned).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

template <typename Element, int N>
struct SsKK; // both operands K-major (S^T = K Q^T, dP^T = V dO^T)
template <>
struct SsKK<cutlass::bfloat16_t, 64> { using type = gm::MMA_64x64x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsKK<cutlass::bfloat16_t, 128> { using type = gm::MMA_64x128x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsKK<cutlass::half_t, 64> { using type = gm::MMA_64x64x16_F32F16F16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsKK<cutlass::half_t, 128> { using type = gm::MMA_64x128x16_F32F16F16_SS<gm::Major::K, gm::Major::K>; };

template <typename Element>
struct SsMnMn; // both operands MN-major (dQ = dS K with dS^T and K as stored)
template <>
struct SsMnMn<cutlass::bfloat16_t> { using type = gm::MMA_64x64x16_F32BF16BF16_SS<gm::Major::MN, gm::Major::MN>; };
template <>
struct SsMnMn<cutlass::half_t> { using type = gm::MMA_64x64x16_F32F16F16_SS<gm::Major::MN, gm::Major::MN>; };

// Group mode: sequence maps made from a template map in global memory (tensormap.replace), released by their writer
// and acquired by the thread that issues copies with them
__device__ __forceinline__ void tensormap_set_rows(TmaDesc* map, const void* base, int rows)
{
    asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" ::"l"(map), "l"(base) : "memory");
    asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;" ::"l"(map), "r"(rows) : "memory");
}
__device__ __forceinline__ void tensormap_release()
{
    asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
}
__device__ __forceinline__ void tensormap_acquire(const TmaDesc* map)
{
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
}

__device__ __forceinline__ int load_acquire(const int32_t* a)
{
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(a) : "memory");
    return v;
}

__device__ __forceinline__ void red_add_v4(float* a, float x, float y, float z, float w)
{
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a), "f"(x), "f"(y), "f"(z), "f"(w)
                 : "memory");
}

} // namespace dev
#endif // MHA_SM90A

// Where a consumer thread's dQ part lives in its query block's accumulator tile: part cw (64 x 64 floats), then
// float4 c of thread t (0..127 in the warpgroup) at (c * 128 + t) * 4, holding acc[4c .. 4c + 3]. One warp's
// reduction instruction covers 512 contiguous bytes.
__host__ __device__ __forceinline__ int dq_part_index(int cw, int c, int t)
{
    return cw * 4096 + (c * 128 + t) * 4;
}

// ---- 1. preprocess: D, the padded LSE2 / D rows, the dQ accumulator zeroed, group mode's sequence maps -----------
// grid (sq_pad / 16, nhead, batch), 128 threads: 8 threads per row. Only a batch's query blocks that hold rows are
// touched (group mode sizes the accumulator by max_seqlen_q; the main and convert kernels read no other block).
template <typename Kt>
__global__ void __launch_bounds__(128) sm90_bwd_pre(const __grid_constant__ BwdParams p,
                                                    const __grid_constant__ Sm90BwdParams a)
{
    using Element = typename Kt::Element;
    const int b = blockIdx.z, h = blockIdx.y;
    const int row = blockIdx.x * 16 + threadIdx.x / 8, lane8 = threadIdx.x % 8;
    const int64_t bh = int64_t(b) * a.nhead + h;
    const BwdBatch bt = batch_of(a, b);
#if MHA_SM90A
    if (a.seq.is_group && a.max_seqlen_k > 0 && blockIdx.x == 0 && h == 0 && threadIdx.x < 4)
    {
        // sequence b's map i (q, k, v, do): the template's, starting at the sequence's first row, as many rows as it
        // has (at least 1: a map has no empty dimension; an empty sequence's map is never used). Without keys the
        // templates were not encoded and the main kernel does not run.
        const int i = threadIdx.x;
        const TmaDesc& t   = i == 0 ? a.tma_q : i == 1 ? a.tma_k : i == 2 ? a.tma_v : a.tma_do;
        const void* base   = i == 0 ? p.q : i == 1 ? p.k : i == 2 ? p.v : p.dout;
        const int64_t rs   = i == 0 ? p.q_row_stride : i == 1 ? p.k_row_stride : i == 2 ? p.v_row_stride
                                                                                    : p.do_row_stride;
        const bool q_side  = i == 0 || i == 3;
        TmaDesc* m = a.maps + 4 * b + i;
#pragma unroll
        for (int w = 0; w < int(sizeof(TmaDesc) / 16); ++w)
            reinterpret_cast<uint4*>(m)[w] = reinterpret_cast<const uint4*>(&t)[w];
        dev::tensormap_set_rows(m, static_cast<const char*>(base) + (q_side ? bt.q_row0 : bt.k_row0) * rs * 2,
                                max(1, q_side ? bt.sq : bt.sk));
        dev::tensormap_release();
    }
#endif
    const int rows_used = (bt.sq + Kt::kBlockM - 1) / Kt::kBlockM * Kt::kBlockM;
    if (blockIdx.x * 16 >= rows_used)
        return;
    if (blockIdx.x * 16 % Kt::kBlockM == 0)
    {
        float4* tile = reinterpret_cast<float4*>(a.dq_acc + (bh * a.m_blocks + blockIdx.x * 16 / Kt::kBlockM) *
                                                               Kt::kDqTile);
#pragma unroll 4
        for (int i = threadIdx.x; i < Kt::kDqTile / 4; i += 128)
            tile[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (a.turns != nullptr && threadIdx.x == 0)
            a.turns[bh * a.m_blocks + blockIdx.x * 16 / Kt::kBlockM] = 0;
    }
    const bool group = a.seq.is_group;
    float acc = 0.f;
    if (row < bt.sq)
    {
        const int64_t qrow = bt.q_row0 + row;
        const Element* o = static_cast<const Element*>(p.o) + (group ? 0 : b * p.o_batch_stride) +
                           h * p.o_head_stride + qrow * p.o_row_stride;
        const Element* dout = static_cast<const Element*>(p.dout) + (group ? 0 : b * p.do_batch_stride) +
                              h * p.do_head_stride + qrow * p.do_row_stride;
        acc = row_dot_share(o, dout, p.hdim_v, lane8);
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (lane8 == 0)
    {
        float* lse2 = a.lse2 + bh * a.sq_pad + row;
        float* dpad = a.dpad + bh * a.sq_pad + row;
        if (row < bt.sq)
        {
            const int64_t off = (group ? 0 : b * p.lse_batch_stride) + h * p.lse_head_stride + bt.q_row0 + row;
            p.dsum[off]       = acc;
            const float lse   = p.lse[off];
            // a row without keys (LSE -inf) has P = 0 everywhere: +inf makes exp2(s - lse2) exactly 0
            *lse2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
            *dpad = acc;
        }
        else
            *lse2 = INFINITY, *dpad = 0.f;
    }
}

// ---- 2. dQ (accumulated), dK, dV ----------------------------------------------------------------------------------
// Consumer thread geometry (wgmma's accumulator layout, 64-row warpgroup tiles): warp w of the warpgroup holds rows
// 16w .. 16w + 15; lane l rows 16w + l / 4 and + 8, and in each 8-column chunk j the columns 8j + 2 (l % 4), + 1 as
// acc[4j + {0, 1}] (first row) and acc[4j + {2, 3}] (second row). In S^T / dP^T the rows are keys and the columns
// query rows.
// kDet (deterministic mode): every dQ element sums the key blocks' parts in one fixed order (below: descending key
// blocks; kRot: the rotated order), each CTA adding its part when the query block's counter (p.turns) says its turn
// has come (turn_watcher). Descending order: the grid runs
// in reverse (key block gridDim.x - 1 first), so a CTA only waits on CTAs dispatched before it; the parts are added
// with red from registers (no bulk reduction, whose completion would sit in the turn's critical path) and every CTA
// walks its query blocks upward (no kRotateM), so that descending is the order the CTAs reach a block in.
//
// turn_watcher: the turns of one CTA, kept off the consumers' path by one thread of the producer warpgroup. For step
// i (query block m_first + i, counter turns[i]) it waits until the counter reaches rank_of(i), the number of key
// blocks that add before this one, and arrives on turn_ok[i % 2]; once every consumer thread has issued its part
// (dq_in[i % 2]), a gpu-scope release fence (cumulative over the arrivals its mbarrier wait acquired) orders those
// reductions before the counter's increment, and the next key block may add. The consumers neither poll nor fence.
// The next step's turn is tried once before the current step's release and waited for only after it, so a release
// never waits on another CTA. turn_ok / dq_in slot s serves steps s, s + 2, ...: step i + 1 is signalled only after
// the consumers' arrivals for step i - 1 were seen, so no phase of either barrier completes twice unobserved.
// Before, each consumer warpgroup polled the counter (an acquire load, at the reduction), then fenced its own
// reductions, synchronized and counted itself in: two round trips to the L2 in every step's critical path. Same
// call, H100 bf16 16k tokens TFLOP/s, s = 1k / 4k / 16k, before -> watcher (non-deterministic in the same call): d64
// 221 / 269 / 308 -> 293 / 377 / 465 (355 / 450 / 483), causal 187 / 259 / 286 -> 256 / 390 / 453 (255 / 401 /
// 478); d128 244 / 294 / 316 -> 348 / 449 / 507 (415 / 530 / 553), causal 188 / 265 / 294 -> 283 / 424 / 487 (297 /
// 464 / 546). (The try skipped when the consumers have already arrived: even.)
//
// kRot, the rotated order (calls without a mask, rotate_det): in the descending order the key blocks of a head all
// begin at query block 0, where each waits for the one above it, a chain of N turns before the last can add. Here
// key block n starts at query block s(n) = n M / N and walks them cyclically, and each query block takes the parts in
// the order the key blocks reach it, so no CTA waits at the start. That order has CTAs wait on CTAs of any key
// block, so all of a head's must be resident at once: the grid is cooperative (run_rotated) and persistent, a CTA
// per SM taking its key block of one head per round (items; K / V reloaded per item behind empty_kv).
#if MHA_SM90A
template <typename BlockOf, typename RankOf>
__device__ __forceinline__ void turn_watcher(int32_t* turns, int steps, int gs, uint64_t* turn_ok, uint64_t* dq_in,
                                             BlockOf&& block_of, RankOf&& rank_of)
{
    // the CTA's steps before this item's: the barrier slots and phases run on across items (kRot)
    int next = 0, target = rank_of(0);
    auto signal = [&](bool wait) { // step `next`, if its turn has come (wait: until it has)
        if (next >= steps)
            return;
        if (wait)
            while (dev::load_acquire(turns + block_of(next)) < target)
                __nanosleep(20);
        else if (dev::load_acquire(turns + block_of(next)) < target)
            return;
        mbar_arrive(smem_u32(turn_ok + (gs + next) % 2));
        if (++next < steps)
            target = rank_of(next);
    };
    signal(true);
    for (int i = 0; i < steps; ++i) // on entry next is i + 1 or i + 2
    {
        if (next == i + 1)
            signal(false);
        mbar_wait(smem_u32(dq_in + (gs + i) % 2), uint32_t(((gs + i) / 2) & 1));
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        asm volatile("red.relaxed.gpu.global.add.s32 [%0], 1;" ::"l"(turns + block_of(i)) : "memory");
        if (next == i + 1)
            signal(true);
    }
}
#endif

template <typename Kt, bool kDet, bool kRot = false>
__global__ void __launch_bounds__(Kt::kThreads, 1) sm90_bwd_kernel(const __grid_constant__ Sm90BwdParams p)
{
    static_assert(!kRot || kDet, "the rotated order is deterministic mode's");
#if MHA_SM90A
    constexpr bool kBulk    = Kt::kDqBulk && !kDet;
    constexpr bool kRotateM = Kt::kRotateM && !kDet;
    using Element = typename Kt::Element;
    using G       = dev::Gmma<Element>;
    constexpr int kBlockM = Kt::kBlockM, kBlockN = Kt::kBlockN, kStages = Kt::kStages, D = Kt::kHeadDim;
    constexpr int kAtoms = Kt::kAtoms;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // The 1024-byte boundary as an offset from smem_raw, so that the compiler still knows every pointer below to be
    // shared memory: the LSE / D reads are LDS and d64's dS^T / dQ stores STS, not generic loads and stores (the
    // generic loads stalled the consumers on the L1TEX scoreboard, a third of their stall cycles at d128 s = 16k).
    // Same call, H100 bf16 16k tokens TFLOP/s, s = 1k / 4k / 16k, with the convert kernel below in both: d128
    // non-causal 306 / 438 / 488 -> 352 / 462 / 492, causal 207 / 368 / 472 -> 249 / 399 / 484; d64 255 / 338 /
    // 368 -> 293 / 369 / 394, causal 175 / 295 / 363 -> 209 / 327 / 391 (d64 spills 24 B instead of 44 B).
    unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    unsigned char* sK  = smem;                           // kAtoms x [kBlockN rows][128 B]
    unsigned char* sV  = sK + Kt::kKvBytes;
    unsigned char* sQ  = sV + Kt::kKvBytes;              // kStages x kAtoms x [kBlockM rows][128 B]
    unsigned char* sDo = sQ + kStages * Kt::kQBytes;
    unsigned char* sDs = sDo + kStages * Kt::kQBytes;    // 2 x (kBlockM / 64) x [kBlockN keys][128 B]
    float* sDq         = reinterpret_cast<float*>(sDs + 2 * Kt::kDsBytes); // kConsumers x kDqBufs x 64 x 64
    float* sLse        = sDq + Kt::kConsumers * Kt::kDqBufs * 4096; // kStages x kBlockM
    float* sD          = sLse + kStages * kBlockM;
    uint64_t* full_kv  = reinterpret_cast<uint64_t*>(sD + kStages * kBlockM);
    uint64_t* full     = full_kv + 1;
    uint64_t* empty    = full + kStages;
    uint64_t* turn_ok  = empty + kStages; // kDet: [2] the watcher's "step i's turn has come" (one arrival)
    uint64_t* dq_in    = turn_ok + 2;     // kDet: [2] the consumers' "step i's dQ part is issued" (256 arrivals)
    uint64_t* empty_kv = dq_in + 2;       // kRot: the item's K / V read (one arrival per consumer warp)

    // The CTA's items, each a (key block, query head, batch): one (the block index), or with kRot one per round: CTA
    // c takes key block c % rot_n of flat head it * rot_heads + c / rot_n in round it (32-bit: the host's bounds).
    // Below, item 0's variables; each role walks the items alone (item()), with the steps of their query blocks
    // counted on across them (gi), and so the ring's, dS's and the turns' barrier phases. Every kRot item has the same
    // steps (batch mode, no mask) and loads K / V once: item it starts at step it * steps, is the CTA's K / V load it.
    const uint32_t rot_c = blockIdx.x, rot_n = kRot ? uint32_t(p.rot_n) : 1u;
    auto rot_head = [&](int it) { return uint32_t(it) * uint32_t(p.rot_heads) + rot_c / rot_n; };
    const int n_items = kRot ? int((uint32_t(p.batch) * uint32_t(p.nhead) - rot_c / rot_n + p.rot_heads - 1) /
                                   uint32_t(p.rot_heads))
                             : 1;
    const int n_block = kRot   ? int(rot_c % rot_n)
                        : kDet ? int(gridDim.x) - 1 - int(blockIdx.x)
                               : int(blockIdx.x);
    const int h = kRot ? int(rot_head(0) % uint32_t(p.nhead)) : int(blockIdx.y);
    const int b = kRot ? int(rot_head(0) / uint32_t(p.nhead)) : int(blockIdx.z);
    const int n0 = n_block * kBlockN;
    const BwdBatch bt = batch_of(p, b);
    if (n0 >= bt.sk) // group mode: past this sequence's keys (the grid covers max_seqlen_k)
        return;
    int m_first, m_end;
    query_blocks<Kt>(p, bt, n_block, m_first, m_end);
    const int steps = m_end - m_first;
    // kRotateM: step i takes query block m_first + (i + n_block) % steps; kRot: (i + n_block steps / rot_n) % steps
    const int rot = kRot       ? int(uint32_t(n_block) * uint32_t(steps) / uint32_t(p.rot_n))
                    : kRotateM && steps > 0 ? n_block % steps
                                            : 0;
    auto step_block = [&](int i) {
        if constexpr (!kRotateM && !kRot)
            return i;
        const int x = i + rot;
        return x >= steps ? x - steps : x;
    };
    // item it's (batch, head): item 0's above, another round's anew; the rest is every kRot item's (batch mode: the
    // same lengths, the same key block)
    auto item = [&](int it) {
        return kRot && it > 0 ? make_int2(int(rot_head(it) / uint32_t(p.nhead)), int(rot_head(it) % uint32_t(p.nhead)))
                              : make_int2(b, h);
    };

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    if (tid == 0)
    {
        mbar_init(smem_u32(full_kv), 1);
        for (int s = 0; s < kStages; ++s)
        {
            mbar_init(smem_u32(full + s), 1);
            mbar_init(smem_u32(empty + s), Kt::kConsumers * 4); // one arrival per consumer warp
        }
        if constexpr (kDet)
            for (int s = 0; s < 2; ++s)
            {
                mbar_init(smem_u32(turn_ok + s), 1);
                mbar_init(smem_u32(dq_in + s), 128 * Kt::kConsumers);
            }
        if constexpr (kRot)
            mbar_init(smem_u32(empty_kv), Kt::kConsumers * 4);
        mbar_init_fence();
    }
    __syncthreads();

    const int64_t bh0 = int64_t(b) * p.nhead + h; // item 0's
    auto item_bh = [&](int it) { return kRot && it > 0 ? int64_t(item(it).x) * p.nhead + item(it).y : bh0; };
    if (wg == 0)
    {
        // producer
        dev::regs_dec<Kt::kProducerRegs>();
        if constexpr (kDet)
            if (tid == 32 && steps > 0)
            for (int it = 0; it < n_items; ++it)
            {
                const int64_t bh = item_bh(it);
                const int gs = kRot ? it * steps : 0;
                if constexpr (kRot)
                {
                    // Every key block of the head visits every query block, key block n from s(n) = n M / N on,
                    // cyclically (rot), and they all run at once (the launch is cooperative): they reach query block
                    // m in the order of the steps (m - s(n)) mod M they take to get there, and add in that order
                    // (ties: the higher key block first). The rank of step i (m = s(n) + i): the key blocks whose
                    // start lies in the i query blocks up to m (cyclically), F(x) = #{n : s(n) < x}, plus the tied
                    // ones above this one. 32-bit: M N < 2^31 (the host's bound).
                    const uint32_t N = p.rot_n, M = steps;
                    auto F = [=](uint32_t v) { return min(N, (v * N + M - 1) / M); };
                    const int ties = int(F(rot + 1)) - (n_block + 1);
                    turn_watcher(p.turns + bh * p.m_blocks, steps, gs, turn_ok, dq_in, step_block, [=](int i) {
                        const int m = step_block(i), lo = m - i + 1;
                        const uint32_t before = i == 0  ? 0u
                                                : lo >= 0 ? F(m + 1) - F(lo)
                                                          : F(m + 1) + N - F(uint32_t(lo) + M);
                        return int(before) + ties;
                    });
                    if (it + 1 == n_items)
                        return;
                    continue;
                }
                // the key blocks that see query block m are a contiguous range whose ends do not decrease with m
                // (query_blocks' bounds do not decrease with the key block), and its highest adds first; the
                // watcher asks for the steps in order, so the highest visitor is found by a cursor that only moves up
                const int n_blocks = (bt.sk + kBlockN - 1) / kBlockN;
                int last_visitor   = n_block;
                turn_watcher(p.turns + bh * p.m_blocks + m_first, steps, gs, turn_ok, dq_in, [](int i) { return i; },
                             [&](int i) {
                                 for (;;)
                                 {
                                     int f = 0, e = 0;
                                     if (last_visitor + 1 < n_blocks)
                                         query_blocks<Kt>(p, bt, last_visitor + 1, f, e);
                                     if (!(f <= m_first + i && m_first + i < e))
                                         return last_visitor - n_block;
                                     ++last_visitor;
                                 }
                             });
                return;
            }
        if (tid != 0 || steps <= 0)
            return;
        for (int it = 0; it < n_items; ++it)
        {
        const int b = item(it).x, h = item(it).y, gs = kRot ? it * steps : 0;
        const int64_t bh = item_bh(it);
        const int hk = h / p.head_ratio;
        // group mode: the sequence's own maps (batch coordinate 0), written by sm90_bwd_pre
        const bool group = p.seq.is_group;
        const TmaDesc* maps = group ? p.maps + 4 * b : nullptr;
        const TmaDesc& map_q = group ? maps[0] : p.tma_q;
        const TmaDesc& map_k = group ? maps[1] : p.tma_k;
        const TmaDesc& map_v = group ? maps[2] : p.tma_v;
        const TmaDesc& map_do = group ? maps[3] : p.tma_do;
        const int cb = group ? 0 : b;
        if (group)
            for (int i = 0; i < 4; ++i)
                dev::tensormap_acquire(maps + i);
        if (kRot && it > 0) // the consumers are done with the previous item's K / V
            mbar_wait(smem_u32(empty_kv), uint32_t((it - 1) & 1));
        // (V on a barrier of its own, so that the first S^T GEMM waits for K only: 7-9% slower at d128, 1% at d64)
        mbar_expect_tx(smem_u32(full_kv), 2 * Kt::kKvBytes);
        for (int a = 0; a < kAtoms; ++a)
            dev::tma_load(sK + a * kBlockN * 128, map_k, 64 * a, n0, hk, cb, full_kv);
        for (int a = 0; a < kAtoms; ++a)
            dev::tma_load(sV + a * kBlockN * 128, map_v, 64 * a, n0, hk, cb, full_kv);
        for (int i = 0; i < steps; ++i)
        {
            const int gi = gs + i, s = gi % kStages, m0 = (m_first + step_block(i)) * kBlockM;
            if (gi >= kStages)
                mbar_wait(smem_u32(empty + s), uint32_t(((gi / kStages) & 1) ^ 1));
            mbar_expect_tx(smem_u32(full + s), 2 * Kt::kQBytes + 2 * Kt::kStatBytes);
            for (int a = 0; a < kAtoms; ++a)
                dev::tma_load(sQ + s * Kt::kQBytes + a * kBlockM * 128, map_q, 64 * a, m0, h, cb, full + s);
            for (int a = 0; a < kAtoms; ++a)
                dev::tma_load(sDo + s * Kt::kQBytes + a * kBlockM * 128, map_do, 64 * a, m0, h, cb, full + s);
            dev::bulk_load(sLse + s * kBlockM, p.lse2 + bh * p.sq_pad + m0, Kt::kStatBytes, full + s);
            dev::bulk_load(sD + s * kBlockM, p.dpad + bh * p.sq_pad + m0, Kt::kStatBytes, full + s);
        }
        }
        return;
    }

    // consumers
    dev::regs_inc<Kt::kConsumerRegs>();
    const int cw = wg - 1;             // consumer warpgroup: keys n0 + 64 cw .. + 63
    const int t128 = tid - 128 * wg;   // thread in the warpgroup
    const int wrow = 16 * (warp % 4);  // the warp's first row in the warpgroup
    const int g = lane / 4, t = lane % 4;
    constexpr int kSRegs  = kBlockM / 2; // 64 x kBlockM accumulators
    constexpr int kKvRegs = D / 2;       // 64 x D
    constexpr int kKSteps = kBlockM / 16; // k-steps of the dV / dK GEMMs (query rows)

    for (int it = 0; it < n_items; ++it)
    {
    const int b = item(it).x, h = item(it).y, gs = kRot ? it * steps : 0;
    const int64_t bh = item_bh(it);
    float dv[kKvRegs], dk[kKvRegs];
#pragma unroll
    for (int i = 0; i < kKvRegs; ++i)
        dv[i] = 0.f, dk[i] = 0.f;

    if (steps > 0)
        mbar_wait(smem_u32(full_kv), uint32_t(kRot ? it & 1 : 0));
    const uint32_t k_base  = smem_u32(sK), v_base = smem_u32(sV);
    const uint32_t ds_base = smem_u32(sDs);
    const int key0 = 64 * cw + wrow + g; // this thread's key rows in the block: key0, key0 + 8
    for (int i = 0; i < steps; ++i)
    {
        const int gi = gs + i; // the CTA's step: ring stage and phase, dS buffer, turn slot
        const int st = gi % kStages, m_block = m_first + step_block(i), m0 = m_block * kBlockM;
        mbar_wait(smem_u32(full + st), uint32_t((gi / kStages) & 1));
        const uint32_t q_base = smem_u32(sQ + st * Kt::kQBytes), do_base = smem_u32(sDo + st * Kt::kQBytes);

        // S^T = K_w Q^T, dP^T = V_w dO^T: A the warpgroup's 64 key rows, B the block's query rows (both K-major)
        float s[kSRegs], dp[kSRegs];
        dev::fence_regs(s);
        dev::fence_regs(dp);
        // acc (64 keys x kBlockM) = A (a_base: K or V) * B^T (b_base: Q or dO), one commit group
        auto issue_ss = [&](uint32_t a_base, uint32_t b_base, float (&acc)[kSRegs]) {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk)
            {
                const uint32_t off_a = (kk / 4) * kBlockN * 128 + 64 * cw * 128 + (kk % 4) * 32;
                const uint32_t off_b = (kk / 4) * kBlockM * 128 + (kk % 4) * 32;
                dev::gmma_ss<typename dev::SsKK<Element, kBlockM>::type>(dev::desc_sw128(a_base + off_a, 16, 1024),
                                                                         dev::desc_sw128(b_base + off_b, 16, 1024), acc,
                                                                         kk > 0, std::make_index_sequence<kSRegs>{});
            }
            cute::warpgroup_commit_batch();
        };
        cute::warpgroup_arrive();
        issue_ss(k_base, q_base, s);
        issue_ss(v_base, do_base, dp);

        // P^T = exp2(S^T scale_log2 - LSE2[query]); 0 for keys past seqlen_k (their zero-filled rows would give
        // exp2(-LSE2), which overflows for very negative LSEs) and outside the window. Query rows past
        // seqlen_q have LSE2 = +inf: P = 0.
        const float* lse_s = sLse + st * kBlockM;
        const float* d_s   = sD + st * kBlockM;
        // (the LSE pairs loaded before this wait instead: 2-4% slower at d128, 2-8% at d64, and spills)
        cute::warpgroup_wait<1>();
        dev::fence_regs(s);
        // the warpgroup's last key right of the block's first row's bound, or its first key left of the last row's
        const int dx     = m0 + bt.diag - (n0 + 64 * cw); // the block's first row's diagonal from its first key
        const bool right = 63 - dx > p.win_right;
        const bool left  = dx + kBlockM - 1 > p.win_left;
        const bool tail  = n0 + 64 * cw + 64 > bt.sk;
#pragma unroll
        for (int j = 0; j < kBlockM / 8; ++j)
        {
            const float2 l = *reinterpret_cast<const float2*>(lse_s + 8 * j + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e)
            {
                float x = exp2f(fmaf(s[4 * j + e], p.scale_log2, -((e & 1) ? l.y : l.x)));
                // The element test is one unsigned comparison (visible: -win_left <= key - (row + diag) <=
                // win_right) besides key < sk, and compiles to predicated selects. Its causal-only form before, `key
                // >= sk || (causal && key > row + diag)`, compiled to branch regions (BSSY / BRA / BSYNC) around the
                // elements, entered every query block (the kernels' BSSY count: d64 115 -> 51, d128 96 -> 64). With
                // the window flags above, same call, H100 bf16 16k tokens TFLOP/s, s = 1k / 16k, no mask and causal
                // alike: d64 306 / 407 -> 351 / 482 (+15-19%), d128 380 / 505 -> 414 / 549 (+8-9%).
                if (right || left || tail)
                {
                    const int key = n0 + key0 + 8 * (e >> 1), row = m0 + 8 * j + 2 * t + (e & 1);
                    const uint32_t off = uint32_t(key - (row + bt.diag)) + uint32_t(p.win_left);
                    if (key >= bt.sk || off > p.win_span)
                        x = 0.f;
                }
                s[4 * j + e] = x;
            }
        }
        // P^T and dS^T as A fragments (k-step kk covers the chunks 2 kk and 2 kk + 1); dV += P^T dO and dK += dS^T Q
        // with B MN-major (query rows are K, head columns N; 64-column atoms kBlockM rows apart)
        uint32_t pa[kKSteps][4], da[kKSteps][4];
        // acc (64 x D) += A (registers: P^T or dS^T) * B (dO or Q, MN-major)
        auto issue_rs = [&](const uint32_t (&a)[kKSteps][4], uint32_t b_base, float (&acc)[kKvRegs]) {
#pragma unroll
            for (int kk = 0; kk < kKSteps; ++kk)
            {
                const uint64_t db = dev::desc_sw128(b_base + kk * 16 * 128, kBlockM * 128, 1024);
                if constexpr (D == 128)
                    dev::gmma_rs<typename G::RS128>(a[kk], db, acc, std::make_index_sequence<kKvRegs>{});
                else
                    dev::gmma_rs<typename G::RS64>(a[kk], db, acc, std::make_index_sequence<kKvRegs>{});
            }
        };
        // dS^T = P^T (dP^T - D[query]), in dp
        auto ds = [&]() {
#pragma unroll
            for (int j = 0; j < kBlockM / 8; ++j)
            {
                const float2 dd = *reinterpret_cast<const float2*>(d_s + 8 * j + 2 * t);
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dd.y : dd.x));
            }
        };
        auto pack = [&](uint32_t (&a)[kKSteps][4], const float (&x)[kSRegs]) {
#pragma unroll
            for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
                for (int r = 0; r < 4; ++r)
                    a[kk][r] = G::pack(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
        };
        // Both GEMMs after dS: issuing the dV GEMM before computing dS (so that it runs meanwhile) measured slower,
        // H200 bf16 16k tokens TFLOP/s s = 1k / 4k / 16k non-causal: d64 263 / 330 / 355 -> 235 / 289 / 307, d128
        // 302 / 400 / 437 -> 300 / 396 / 434 (more registers live: 108 / 88 B of spill instead of 8 / 52).
        cute::warpgroup_wait<0>();
        dev::fence_regs(dp);
        ds();
        pack(pa, s);
        pack(da, dp);
        dev::fence_regs(dv);
        dev::fence_regs(dk);
        cute::warpgroup_arrive();
        issue_rs(pa, do_base, dv);
        issue_rs(da, q_base, dk);
        cute::warpgroup_commit_batch();

        // dS^T into shared memory (buffer i % 2): [query atom][key][128 B], 128-byte swizzle, bf16 / fp16 pairs;
        // dS^T[key][8j + 2t, + 1] goes to atom j / 8, row key, 16-byte chunk (j % 8) ^ g.
        if constexpr (Kt::kDsXorStore)
        {
            // The buffer is 1024-byte aligned and the chunk bits of row0's address are g's, so each store's address
            // is row0's XOR (j % 8) << 4. With the 16 offsets computed ahead instead, the compiler kept them across
            // the loop: 13 registers at d128, spilled and reloaded every step (52 B of spill; none now)
            const uint32_t row0 = ds_base + (gi % 2) * Kt::kDsBytes + key0 * 128 + g * 16 + 4 * t;
#pragma unroll
            for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                {
                    const uint32_t addr = (row0 ^ ((j % 8) << 4)) + (j / 8) * kBlockN * 128 + r * 8 * 128;
                    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(da[j / 2][2 * (j % 2) + r]) : "memory");
                }
        }
        else
        {
            unsigned char* ds = sDs + (gi % 2) * Kt::kDsBytes;
#pragma unroll
            for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                {
                    const int key = key0 + 8 * r;
                    const uint32_t off = (j / 8) * kBlockN * 128 + key * 128 + (((j % 8) ^ g) * 16) + 4 * t;
                    *reinterpret_cast<uint32_t*>(ds + off) = da[j / 2][2 * (j % 2) + r];
                }
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        // dK += dS^T Q from shared memory after the barrier (dS^T's registers free before dq's are live) measured
        // slower, H200 bf16 16k tokens TFLOP/s s = 1k / 4k / 16k non-causal: d128 326 / 442 / 482 -> 318 / 427 / 470.
        // Each warpgroup computing dQ from its own 64 keys instead (no barrier between the warpgroups, twice the
        // reductions) measured, H200 bf16 16k tokens TFLOP/s s = 1k / 4k / 16k non-causal: d64 259 / 321 / 342 ->
        // 258 / 328 / 354 (causal 1k 186 -> 179), d128 304 / 401 / 437 -> 263 / 337 / 364.
        if constexpr (kBulk) // the dQ staging buffer this step fills: its last bulk reduction has read it
            if (t128 == 0 && gi >= Kt::kDqBufs)
            {
                if constexpr (Kt::kDqBufs == 2)
                    asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
                else
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            }
        asm volatile("bar.sync 1, 256;" ::: "memory"); // both warpgroups' dS^T halves are in
        // dQ part cw = dS K over the block's 128 keys: A = dS (dS^T as stored: MN-major, queries are M), B = K
        // (MN-major, head columns are N). d64: this warpgroup's 64 query rows; d128: its 64 head columns.
        float dq[32];
        const uint32_t a_base = ds_base + (gi % 2) * Kt::kDsBytes + (Kt::kDqSplitRows ? cw * kBlockN * 128 : 0);
        const uint32_t b_base = k_base + (Kt::kDqSplitRows ? 0 : cw * kBlockN * 128);
        dev::fence_regs(dq);
        cute::warpgroup_arrive();
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk)
            dev::gmma_ss<typename dev::SsMnMn<Element>::type>(
                dev::desc_sw128(a_base + kk * 16 * 128, kBlockN * 128, 1024),
                dev::desc_sw128(b_base + kk * 16 * 128, kBlockN * 128, 1024), dq, kk > 0,
                std::make_index_sequence<32>{});
        cute::warpgroup_commit_batch();
        // The dV / dK GEMMs have read the stage's Q and dO: this warp releases the stage before waiting for the dQ
        // GEMM (after it, as before: d128 0.5-1.5% slower, d64 even; H100 bf16 16k tokens).
        cute::warpgroup_wait<1>();
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r)
            {
                cute::warpgroup_fence_operand(pa[kk][r]);
                cute::warpgroup_fence_operand(da[kk][r]);
            }
        if (lane == 0)
            mbar_arrive(smem_u32(empty + st));
        // (Issuing the next step's S^T GEMM here, behind this dQ GEMM, before waiting for it, and the next dP^T GEMM
        // at the next step's start: 14-17% slower at d64 and d128, H100 bf16 16k tokens; issuing both of the next
        // step's GEMMs here spilled 536 B at d128.)
        cute::warpgroup_wait<0>();
        dev::fence_regs(dv);
        dev::fence_regs(dk);
        dev::fence_regs(dq);
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) // (as after the wait above; kept, the measured code has both)
#pragma unroll
            for (int r = 0; r < 4; ++r)
            {
                cute::warpgroup_fence_operand(pa[kk][r]);
                cute::warpgroup_fence_operand(da[kk][r]);
            }
        float* tile = p.dq_acc + (bh * p.m_blocks + m_block) * Kt::kDqTile;
        if constexpr (kDet) // the higher key blocks that see this query block have added theirs (turn_watcher)
            mbar_wait(smem_u32(turn_ok + gi % 2), uint32_t((gi / 2) & 1));
        if constexpr (kBulk)
        {
            float* part = sDq + (cw * Kt::kDqBufs + gi % Kt::kDqBufs) * 4096; // the fragment order of dq_part_index
#pragma unroll
            for (int c = 0; c < 8; ++c)
                *reinterpret_cast<float4*>(part + (c * 128 + t128) * 4) =
                    make_float4(dq[4 * c], dq[4 * c + 1], dq[4 * c + 2], dq[4 * c + 3]);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            asm volatile("bar.sync %0, 128;" ::"r"(3 + cw) : "memory");
            if (t128 == 0)
            {
                asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                                 tile + dq_part_index(cw, 0, 0)),
                             "r"(smem_u32(part)), "r"(Kt::kDqPartBytes)
                             : "memory");
                asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            }
        }
        else
        {
#pragma unroll
            for (int c = 0; c < 8; ++c)
                dev::red_add_v4(tile + dq_part_index(cw, c, t128), dq[4 * c], dq[4 * c + 1], dq[4 * c + 2],
                                dq[4 * c + 3]);
        }
        if constexpr (kDet) // this thread's part is issued; the watcher passes the turn on once it is performed
            mbar_arrive(smem_u32(dq_in + gi % 2));
    }
    if (kRot && steps > 0 && lane == 0) // this warp's GEMMs are done with the item's K / V: the next item's may load
        mbar_arrive(smem_u32(empty_kv));
    if constexpr (kBulk) // the bulk reductions complete before the CTA's shared memory goes away
        if (t128 == 0)
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");

    // epilogue: dK = scale * dS^T Q sums, dV (bf16 / fp16 pairs), rows past seqlen_k and columns past the head dims
    // not written
    const bool group = p.seq.is_group;
    Element* dk_out = static_cast<Element*>(p.dk) + (group ? bt.k_row0 * p.dk_row_stride : b * p.dk_batch_stride) +
                      int64_t(h) * p.dk_head_stride;
    Element* dv_out = static_cast<Element*>(p.dv) + (group ? bt.k_row0 * p.dv_row_stride : b * p.dv_batch_stride) +
                      int64_t(h) * p.dv_head_stride;
    // 16-byte stores where every dK / dV row is 16-byte aligned: the quad transposes its 4 x 4 blocks of pairs
    // (dev::quad_transpose), so that a warp instruction covers 64 contiguous bytes of each of its 8 rows instead of
    // 16 (with a quarter of the instructions). Same call, H100 bf16 16k tokens TFLOP/s, s = 1k / 2k / 4k / 16k,
    // 4-byte -> 16-byte: d128 347 / 416 / 458 / 500 -> 377 / 437 / 469 / 503 (causal 249 / 332 / 399 / 493 -> 270
    // / 350 / 408 / 499), d64 294 / 339 / 368 / 400 -> 306 / 345 / 371 / 401 (causal 208 -> 220 at 1k).
    if (p.kv_vec16)
    {
#pragma unroll
        for (int r = 0; r < 2; ++r)
        {
            const int key = n0 + key0 + 8 * r;
            const bool row_ok = key < bt.sk;
            Element* krow = dk_out + int64_t(key) * p.dk_row_stride;
            Element* vrow = dv_out + int64_t(key) * p.dv_row_stride;
#pragma unroll
            for (int c = 0; c < D / 32; ++c)
            {
                uint32_t wk[4], wv[4];
#pragma unroll
                for (int e = 0; e < 4; ++e)
                {
                    wk[e] = G::pack(dk[4 * (4 * c + e) + 2 * r] * p.scale, dk[4 * (4 * c + e) + 2 * r + 1] * p.scale);
                    wv[e] = G::pack(dv[4 * (4 * c + e) + 2 * r], dv[4 * (4 * c + e) + 2 * r + 1]);
                }
                dev::quad_transpose(wk, t);
                dev::quad_transpose(wv, t);
                const int col = 8 * (4 * c + t);
                if (row_ok && col < p.hdim_q)
                    *reinterpret_cast<uint4*>(krow + col) = make_uint4(wk[0], wk[1], wk[2], wk[3]);
                if (row_ok && col < p.hdim_v)
                    *reinterpret_cast<uint4*>(vrow + col) = make_uint4(wv[0], wv[1], wv[2], wv[3]);
            }
        }
    }
    else
#pragma unroll
    for (int r = 0; r < 2; ++r)
    {
        const int key = n0 + key0 + 8 * r;
        if (key >= bt.sk)
            continue;
        Element* krow = dk_out + int64_t(key) * p.dk_row_stride;
        Element* vrow = dv_out + int64_t(key) * p.dv_row_stride;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
        {
            const int col = 8 * j + 2 * t;
            if (col < p.hdim_q)
                *reinterpret_cast<uint32_t*>(krow + col) =
                    G::pack(dk[4 * j + 2 * r] * p.scale, dk[4 * j + 2 * r + 1] * p.scale);
            if (col < p.hdim_v)
                *reinterpret_cast<uint32_t*>(vrow + col) = G::pack(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
        }
    }
    } // items
#endif // MHA_SM90A
}

// ---- 3. dQ = scale * accumulator ---------------------------------------------------------------------------------
// grid (m_blocks, nhead, batch), 256 threads. Thread (cw, t) reads back what consumer thread t of warpgroup cw added
// (eight coalesced float4), scales it and puts its bf16 / fp16 pairs into a row-major tile in shared memory; then each
// thread writes 16-byte chunks of whole rows (4-byte pairs where dQ's rows are not 16-byte aligned). Writing the pairs
// straight from the fragments (8 rows x 16 B per warp instruction) took 198 us for a 134 MB accumulator on an H100
// (~1 TB/s; bf16 d128, 16k tokens), this 63 us.
template <typename Kt>
__global__ void __launch_bounds__(256) sm90_bwd_convert(const __grid_constant__ BwdParams p,
                                                        const __grid_constant__ Sm90BwdParams a)
{
    using Element = typename Kt::Element;
    constexpr int kRows = Kt::kBlockM, D = Kt::kHeadDim;
    constexpr int kPitch = D + 8; // elements: a row's pairs of one warp instruction land on distinct banks
    __shared__ __align__(16) Element tile_s[kRows * kPitch];
    const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int cw = threadIdx.x / 128, t128 = threadIdx.x % 128, lane = t128 % 32;
    const BwdBatch bt = batch_of(a, b);
    if (m_block * kRows >= bt.sq)
        return;
    const float* tile = a.dq_acc + ((int64_t(b) * a.nhead + h) * a.m_blocks + m_block) * Kt::kDqTile;
    float4 x[8];
#pragma unroll
    for (int c = 0; c < 8; ++c)
        x[c] = *reinterpret_cast<const float4*>(tile + dq_part_index(cw, c, t128));
    const int row0 = 16 * (t128 / 32) + lane / 4 + (Kt::kDqSplitRows ? 64 * cw : 0);
    const int col0 = 2 * (lane % 4) + (Kt::kDqSplitRows ? 0 : 64 * cw);
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int r = 0; r < 2; ++r)
        {
            alignas(4) Element pair[2] = {static_cast<Element>((r ? x[c].z : x[c].x) * a.scale),
                                          static_cast<Element>((r ? x[c].w : x[c].y) * a.scale)};
            *reinterpret_cast<uint32_t*>(tile_s + (row0 + 8 * r) * kPitch + 8 * c + col0) =
                *reinterpret_cast<const uint32_t*>(pair);
        }
    __syncthreads();
    Element* dq = static_cast<Element*>(p.dq) +
                  (a.seq.is_group ? bt.q_row0 * p.dq_row_stride : b * p.dq_batch_stride) + h * p.dq_head_stride;
    const int m0 = m_block * kRows;
    // hdim_q % 8 == 0; rows at least 4-byte aligned (csrc/api)
    store_tile_rows<kRows, D, kPitch>(tile_s, dq + int64_t(m0) * p.dq_row_stride, p.dq_row_stride,
                                      min(kRows, bt.sq - m0), a.hdim_q / 8, a.dq_vec16 ? 16 : 4);
}

// ---- host ----------------------------------------------------------------------------------------------------------
// Host: the four tensor maps of a backward call (encode_map_4d, sm90_fwd.cuh). Group mode: templates of one sequence
// (batch extent 1, max_seqlen rows) that sm90_bwd_pre re-points at each sequence's rows.
inline bool encode_bwd_maps(Sm90BwdParams& a, const BwdParams& p, int block_m, int block_n)
{
    const bool g = p.seq.is_group;
    const int nb = g ? 1 : p.batch;
    const int64_t qb = g ? 0 : p.q_batch_stride, kb = g ? 0 : p.k_batch_stride, vb = g ? 0 : p.v_batch_stride,
                  dob = g ? 0 : p.do_batch_stride;
    return encode_map_4d(a.tma_q, p.q, p.hdim_q, a.max_seqlen_q, p.nhead_q, nb, block_m, p.q_row_stride,
                         p.q_head_stride, qb) &&
           encode_map_4d(a.tma_do, p.dout, p.hdim_v, a.max_seqlen_q, p.nhead_q, nb, block_m, p.do_row_stride,
                         p.do_head_stride, dob) &&
           encode_map_4d(a.tma_k, p.k, p.hdim_q, a.max_seqlen_k, p.nhead_k, nb, block_n, p.k_row_stride,
                         p.k_head_stride, kb) &&
           encode_map_4d(a.tma_v, p.v, p.hdim_v, a.max_seqlen_k, p.nhead_k, nb, block_n, p.v_row_stride,
                         p.v_head_stride, vb);
}

// Deterministic mode's rotated order (sm90_bwd_kernel, kRot) for a call without a mask in batch mode with at most
// kRotMaxBlocks key blocks per head (and the 32-bit bounds of the kernel's arithmetic), where the descending order's
// start, each key block of a head waiting for the one above it at query block 0, costs most. Same call, H100 bf16
// 16k tokens TFLOP/s (.carry/s51/c6.sh), descending -> rotated, s = 1k / 2k / 4k / 16k: d64 291 / 337 / 375 / 458
// -> 332 / 386 / 424 / 456 (16k: the descending order, 128 key blocks), d128 346 / 403 / 444 / 494 -> 370 / 429 /
// 466 / 488 (16k rotated there: 0.99).
constexpr int kRotMaxBlocks = 32;
inline bool rotate_det(const Sm90BwdParams& a, int n_blocks, bool group)
{
    return !group && a.win_left == kNoBound && a.win_right == kNoBound && a.max_seqlen_q > 0 &&
           n_blocks <= std::min(kRotMaxBlocks, sm_count()) &&
           int64_t(a.m_blocks) * n_blocks < (int64_t(1) << 31) &&
           int64_t(a.batch) * a.nhead < (int64_t(1) << 31);
}

// The rotated order's launch: every key block of a head must run at once, so the grid is cooperative, one CTA per
// SM for as many whole heads as fit, each CTA taking its key block of one head per round (sm90_bwd_kernel, kRot).
// cudaErrorNotSupported (nothing launched): the launch was refused (a partitioned GPU, where the heads' CTAs would
// not all fit), and the caller takes the descending order. (Rounds as separate cooperative launches instead cost
// the gaps between them: d128 1k 0.97-0.98 of the descending order, against 1.07 in one grid.)
template <typename Kt>
cudaError_t run_rotated(const Sm90BwdParams& a, int n_blocks, int64_t heads, cudaStream_t stream)
{
    auto kernel = &sm90_bwd_kernel<Kt, true, true>;
    cudaError_t err = set_max_dynamic_smem(kernel, Kt::kSmemBytes);
    if (err != cudaSuccess)
        return err;
    Sm90BwdParams r = a;
    r.rot_n = n_blocks, r.rot_heads = int(std::min<int64_t>(sm_count() / n_blocks, heads));
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeCooperative, attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(r.rot_heads * n_blocks)), cfg.blockDim = dim3(Kt::kThreads);
    cfg.dynamicSmemBytes = Kt::kSmemBytes, cfg.stream = stream, cfg.attrs = &attr, cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, kernel, r);
    if (err == cudaErrorCooperativeLaunchTooLarge)
    {
        (void)cudaGetLastError();
        return cudaErrorNotSupported;
    }
    return err;
}

// One call: p.dq_acc is the workspace (asm_bwd_workspace_bytes, bwd_params.h, with the table's block_m and hdim,
// which the generated instance asserts are these traits'). csrc/api has checked what the kernels assume: batch mode
// without logical lengths or group mode, no sink tokens, sm_90, the copies' alignment.
template <typename Kt>
cudaError_t run_bwd_sm90(const BwdParams& p, cudaStream_t stream)
{
    Sm90BwdParams a{};
    const bool group = p.seq.is_group;
    a.seqlen_q = p.seqlen_q, a.seqlen_k = p.seqlen_k;
    a.max_seqlen_q = p.max_seqlen_q, a.max_seqlen_k = p.max_seqlen_k; // batch mode: seqlen_q / seqlen_k (make_params)
    a.seq      = p.seq;
    a.m_blocks = (a.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM;
    a.sq_pad   = a.m_blocks * Kt::kBlockM;
    if (a.max_seqlen_q > 0 && a.max_seqlen_k > 0 && !encode_bwd_maps(a, p, Kt::kBlockM, Kt::kBlockN))
        return cudaErrorInvalidValue;
    const size_t tiles = size_t(p.batch) * p.nhead_q * a.m_blocks;
    a.dq_acc = p.dq_acc;
    a.lse2   = p.dq_acc + tiles * Kt::kDqTile;
    a.dpad   = a.lse2 + tiles * Kt::kBlockM;
    int32_t* turns = reinterpret_cast<int32_t*>(a.dpad + tiles * Kt::kBlockM);
    a.turns  = p.deterministic ? turns : nullptr;
    if (group)
        a.maps = reinterpret_cast<TmaDesc*>((reinterpret_cast<uintptr_t>(turns + tiles) + 127) / 128 * 128);
    a.dk = p.dk, a.dv = p.dv;
    a.dk_row_stride = p.dk_row_stride, a.dk_head_stride = p.dk_head_stride, a.dk_batch_stride = p.dk_batch_stride;
    a.dv_row_stride = p.dv_row_stride, a.dv_head_stride = p.dv_head_stride, a.dv_batch_stride = p.dv_batch_stride;
    a.hdim_q = p.hdim_q, a.hdim_v = p.hdim_v;
    a.head_ratio = p.head_ratio, a.nhead = p.nhead_q, a.batch = p.batch;
    a.scale = p.scale, a.scale_log2 = p.scale * 1.4426950408889634f;
    if (p.mask.sink_size != 0) // csrc/api sends calls with sink tokens to ck
        return cudaErrorInvalidValue;
    a.win_left = window_bound(p.mask.left), a.win_right = window_bound(p.mask.right);
    a.win_span = uint32_t(a.win_left) + uint32_t(a.win_right);
    a.bottom_right = p.mask.bottom_right ? 1 : 0;
    const int nh = p.nhead_q, nb = p.batch;
    a.dq_vec16 = rows_16b_aligned(p.dq, p.dq_row_stride, p.dq_head_stride, nh, p.dq_batch_stride, nb, group);
    a.kv_vec16 = rows_16b_aligned(p.dk, p.dk_row_stride, p.dk_head_stride, nh, p.dk_batch_stride, nb, group) &&
                 rows_16b_aligned(p.dv, p.dv_row_stride, p.dv_head_stride, nh, p.dv_batch_stride, nb, group);

    cudaError_t err = cudaSuccess;
    auto kernel = p.deterministic ? &sm90_bwd_kernel<Kt, true> : &sm90_bwd_kernel<Kt, false>;
    if (a.max_seqlen_k > 0 && (err = set_max_dynamic_smem(kernel, Kt::kSmemBytes)) != cudaSuccess)
        return err;
    if (a.max_seqlen_q > 0) // group mode: also the sequence maps, before the main kernel reads them
    {
        sm90_bwd_pre<Kt><<<dim3(a.sq_pad / 16, p.nhead_q, p.batch), 128, 0, stream>>>(p, a);
        if ((err = cudaGetLastError()) != cudaSuccess)
            return err;
    }
    if (a.max_seqlen_k > 0) // keys without queries still get dK = dV = 0
    {
        const int n_blocks = (a.max_seqlen_k + Kt::kBlockN - 1) / Kt::kBlockN;
        if (!(p.deterministic && rotate_det(a, n_blocks, group)) ||
            (err = run_rotated<Kt>(a, n_blocks, int64_t(p.batch) * p.nhead_q, stream)) == cudaErrorNotSupported)
        {
            kernel<<<dim3(n_blocks, p.nhead_q, p.batch), Kt::kThreads, Kt::kSmemBytes, stream>>>(a);
            err = cudaGetLastError();
        }
        if (err != cudaSuccess)
            return err;
    }
    if (a.max_seqlen_q > 0)
    {
        sm90_bwd_convert<Kt><<<dim3(a.m_blocks, p.nhead_q, p.batch), 256, 0, stream>>>(p, a);
        err = cudaGetLastError();
    }
    return err;
}

} // namespace mha::asm90
