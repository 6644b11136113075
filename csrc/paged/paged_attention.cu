// Paged-attention decode over vLLM-style caches (include/mha_paged.h): the generic partitioned kernel
// (paged_attention_v1) with its partition-combine kernel, and the tuned asm-layout kernel (pa_fwd_asm).
// Both run their dot products on the tensor cores (m16n8k16 over up to 16 query heads of one KV head) and stream
// K / V through cp.async rings: the generic one for any head size, block size, layout and score modifier, a partition
// of the context per CTA; the tuned one for its fixed shape, per-warp rings, and long contexts split over thread-block
// clusters. Each CTA serves the query heads of one KV head, so every K/V byte is read once for the whole GQA group
// (up to 16 heads); block ids are 32-bit, every offset 64-bit.

#include "mha_paged.h"

#include "../api/error.h"
#include "../api/launch.h"
#include "../api/strides.h"
#include "../common/func_attr.h"
#include "../common/mbarrier.h"
#include "../common/mma_sync.h"
#include "../common/pdl.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

namespace mha::paged {

constexpr int kX        = 8;   // elements per 16-byte chunk (fp16 / bf16)
constexpr int kMaxGroup = 16;  // query heads per CTA
constexpr int kMaxHead  = 256;
constexpr int kV1Threads = 128, kV1Warps = kV1Threads / 32;
constexpr int kMaxPartition = 1024;

struct Params
{
    const void* q;
    const void* k;
    const void* v;
    void* out;
    const int32_t* block_tables;
    const int32_t* context_lens;
    const float* alibi;
    float* exp_sums;   // [seqs, heads, partitions] (v1 with partitions > 1)
    float* max_logits; // [seqs, heads, partitions]
    void* tmp_out;     // [seqs, heads, partitions, head_size] in the element type
    int num_heads, group, ratio, head_size, block_size, table_stride, partition_size, num_partitions;
    int max_ctx; // block_size x table_stride (capped below INT_MAX): context_lens are clamped to [0, max_ctx]
    int token_end; // v1: the caller's partitions end here (tokens of a longer context past it are not read)
    int64_t q_seq, q_head, o_seq, o_head;
    int64_t k_block, k_head, k_chunk, k_token; // K element (block, kv head, dim 8c + e, token t): ... + e
    int64_t v_block, v_head, v_dim, v_token;   // V element (block, kv head, dim, token)
    float scale, softcap;
    int sliding_window;
};

// A sequence's context length, clamped to what its block-table row can address (device data: a length past the row
// would read table entries of the next sequence or past the table)
__device__ __forceinline__ int context_len(const Params& p, int seq)
{
    return max(0, min(p.context_lens[seq], p.max_ctx));
}

template <typename T>
__device__ __forceinline__ float to_f(T x)
{
    return float(x);
}

__device__ __forceinline__ float score_mod(float s, const Params& p, int head, int token, int ctx)
{
    // AITER's pa_v1 order: scale, ALiBi (vLLM's slope * (token position - last position)), then the cap
    s *= p.scale;
    if (p.alibi != nullptr)
        s += p.alibi[head] * float(token - ctx + 1);
    if (p.softcap > 0.f)
        s = p.softcap * tanhf(s / p.softcap);
    return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Generic kernel: CTA (partition, head group, sequence), four warps. The G <= 16 query heads of the group (of one KV
// head) are the rows of m16n8k16 tensor-core MMAs: S = Q K^T for the partition's tokens into shared memory, a softmax
// per head there (its probabilities rewritten in place in the element type), then O = P V. K and V reach shared
// memory through one ring of kV1Tile-token slots (the partition's K tiles, then its V tiles), filled by 16-byte
// cp.asyncs from any of the layouts and completed on one mbarrier per slot; the host sizes the ring (up to the whole
// partition in flight when the grid is small). Shared layouts: every fragment is one conflict-free ldmatrix, and
// every 128-byte segment of the cache lands in one 128-byte block of shared memory (else each lane's 16-byte copy is
// its own L2 request; measurements below). Dp = head size rounded up to 64, zeros past it:
//   Q [16][Dp + 8] (the pad: rows an odd number of 16-byte units apart); P [head][token] in the logits rows (stride
//   v1_ls floats, likewise); HND K chunk-major as in the cache, [Dp / 8][kV1Tile tokens][8]; HND V^T by v_unit
//   (below: a block's 8-token chunks of one dim together, XOR-swizzled); NHD K and V [kV1Tile tokens][Dp] with the
//   16-byte chunks of row t XORed with t % 8 (V through ldmatrix.trans).
// Tokens past the context or before a sliding window are zero-filled (K, V: their block ids are never used) and -inf
// (S); the window skips whole tiles before it. The Q rows and the partition's block ids arrive together by cp.async
// (one round trip before the first K copy). The grid
// adapts to its size: a large one merges the caller's partitions k at a time (v1_merge_partitions), a small one
// splits each partition over a thread-block cluster merging through distributed shared memory (v1_cluster), and the
// partition combine is a programmatic dependent launch (sm_90).
// H100, 32 query / 8 KV heads, d128, block 16, bf16, partitions of 256, L2 swept, GB/s of K + V
// (scripts/paged_bench.cu: each call timed by the library, CUDA events, mean of 20), b=1 / 16 / 64 at 1k / 8k / 32k:
// 294 / 1383 / 2352, 1987 / 2843 / 2930, 2535 / 2938 / 3030 (pa_fwd_asm in the same run: 287 / 1272 / 2029, 1978 / 2860
// / 3021, 2523 / 2998 / 3053); the first tensor-core version 186 / 1094 / 1755, 1771 / 2573 / 2756, 2217 / 2792 / 2834;
// the SIMT kernel before it (scores in shared memory, a thread per head-dim column for P V, dependent scalar loads): 27
// / 434 (32k), 343 / 696 (32k), 550 / 734 (32k). What mattered, by ncu at b=64 8k: the copies' shared-memory side must
// mirror the cache's 128-byte segments (each 8-lane phase of a 16-byte cp.async one 128-byte block of shared memory, in
// any order inside it), else every lane is its own L2 request: 113 M requests of 1.2 sectors, the L2 92% busy at 2.2
// TB/s of DRAM, against 50 M after (2 sectors each; pa_fwd_asm 25 M of 4) - and the ring 128-byte aligned too (it sat
// 64 bytes off after the logits rows, which split every phase in two: +3.6% at b=64 32k, +15% at b=1 8k).
// ---------------------------------------------------------------------------------------------------------------
constexpr int kV1Tile = 32;                  // tokens per ring slot
static_assert(kV1Tile == 32 && kV1Threads == 4 * kV1Tile && kV1Warps * 8 == kV1Tile,
              "a lane per token of a tile (HND K), four 8-token chunks, 8 tokens of S per warp");
constexpr int kV1MaxSlots = 2 * ((kMaxPartition + kV1Tile - 1) / kV1Tile); // every K and V tile of a partition
constexpr int kV1MaxCluster = 8; // CTAs splitting one partition (a portable cluster)
// shared memory header: one mbarrier per slot and one for the Q rows and block ids, each head's softmax max and sum,
// then (clusters) each rank's weight per head
constexpr int kV1QBar = 8 * kV1MaxSlots, kV1StatOffset = kV1QBar + 8;
constexpr int kV1WeightOffset = kV1StatOffset + 2 * kMaxGroup * 4;
constexpr int kV1BarBytes = (kV1WeightOffset + kV1MaxCluster * kMaxGroup * 4 + 127) / 128 * 128;

__host__ __device__ constexpr int v1_dp(int d) { return (d + 63) / 64 * 64; }
// logits row stride in floats: every tile of a partition, == 4 mod 8 (rows of P in 16-bit elements then start an
// odd number of 16-byte units apart)
__host__ __device__ constexpr int v1_ls(int partition) { return (partition + kV1Tile - 1) / kV1Tile * kV1Tile + 4; }
__host__ __device__ constexpr int v1_q_bytes(int d) { return 16 * (v1_dp(d) + 8) * 2; }
__host__ __device__ constexpr int v1_slot_bytes(int d)
{
    return kV1Tile * v1_dp(d) * 2;
}
// the partition's block ids, 128-byte rows
__host__ __device__ constexpr int v1_table_bytes(int partition, int block)
{
    return (partition / block + 31) / 32 * 128;
}
// the logits rows, rounded up to 128 bytes: the ring after them keeps every 128-byte segment of the cache in one
// 128-byte block of shared memory (a ring 64 bytes off split each 8-lane copy phase into two L2 requests)
__host__ __device__ constexpr int v1_logit_bytes(int group, int partition)
{
    return (group * v1_ls(partition) * 4 + 127) / 128 * 128;
}
__host__ __device__ constexpr int v1_fixed_bytes(int d, int group, int partition, int block)
{
    return kV1BarBytes + v1_table_bytes(partition, block) + v1_q_bytes(d) + v1_logit_bytes(group, partition);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    mma_m16n8k16<std::is_same_v<T, __nv_bfloat16>>(d, a, b0, b1);
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
    {
        const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&v);
    }
    else
    {
        const __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<const uint32_t*>(&v);
    }
}

// 16 bytes, of which the first `bytes` from src and the rest zeros
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t a, uint32_t (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t a, uint32_t (&r)[4])
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// The merge of a partition's cluster (csplit CTAs, this one `rank`): each CTA leaves its unnormalised O rows (fp32,
// [16][Dp] at `o_off`, the ring's bytes: every slot has been consumed) and its max / sum per head (stat); every CTA
// then weighs the ranks' rows (w_c = exp(m_c - M) / sum_c' l_c' exp(m_c' - M)) into its own stripe of the G x D
// outputs, and rank 0 stores the partition's max and sum.
template <typename T, int kNT>
__device__ __forceinline__ void v1_cluster_merge(const Params& p, const float (&o)[kNT][4], unsigned char* smem_raw,
                                                 uint32_t o_off, int part, int rank, int csplit, int seq, int head0,
                                                 int mine)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    const int G = p.group, D = p.head_size, Dp = v1_dp(D);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
    float* const ob = reinterpret_cast<float*>(smem_raw + o_off);
    float* const stat = reinterpret_cast<float*>(smem_raw + kV1StatOffset);
    float* const wt = reinterpret_cast<float*>(smem_raw + kV1WeightOffset); // [rank][16]
#pragma unroll
    for (int h = 0; h < 2; ++h)
    {
        const int r = g + 8 * h;
        if (r < G)
#pragma unroll
            for (int jj = 0; jj < kNT; ++jj)
                if (jj < mine)
                    *reinterpret_cast<float2*>(ob + r * Dp + 8 * (warp + kV1Warps * jj) + 2 * q) =
                        make_float2(o[jj][2 * h], o[jj][2 * h + 1]);
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    float M = -INFINITY, L = 0.f;
    if (tid < G)
    {
        float mc[kV1MaxCluster], lc[kV1MaxCluster];
#pragma unroll
        for (int c = 0; c < kV1MaxCluster; ++c)
            if (c < csplit)
            {
                const float* st = cluster.map_shared_rank(stat, c);
                mc[c] = st[tid], lc[c] = st[kMaxGroup + tid];
                M = fmaxf(M, mc[c]);
            }
#pragma unroll
        for (int c = 0; c < kV1MaxCluster; ++c)
            if (c < csplit)
            {
                mc[c] = M == -INFINITY ? 0.f : __expf(mc[c] - M); // (a rank with no tokens: sum 0)
                L += lc[c] * mc[c];
            }
        const float inv = L == 0.f ? 0.f : 1.f / L; // a NaN sum stays NaN, as in one CTA (see the combine)
#pragma unroll
        for (int c = 0; c < kV1MaxCluster; ++c)
            if (c < csplit)
                wt[c * kMaxGroup + tid] = mc[c] * inv;
    }
    __syncthreads();
    const bool direct = p.num_partitions == 1;
    for (int i = rank * kV1Threads + tid; i < G * D; i += csplit * kV1Threads)
    {
        const int r = i / D, d = i % D, head = head0 + r;
        float oc[kV1MaxCluster];
#pragma unroll
        for (int c = 0; c < kV1MaxCluster; ++c)
            if (c < csplit)
                oc[c] = cluster.map_shared_rank(ob, c)[r * Dp + d];
        float acc = 0.f;
#pragma unroll
        for (int c = 0; c < kV1MaxCluster; ++c)
            if (c < csplit)
                acc += wt[c * kMaxGroup + r] * oc[c];
        const int64_t row = (int64_t(seq) * p.num_heads + head) * p.num_partitions + part;
        T* dst = direct ? static_cast<T*>(p.out) + int64_t(seq) * p.o_seq + int64_t(head) * p.o_head
                        : static_cast<T*>(p.tmp_out) + row * D;
        dst[d] = T(acc);
    }
    if (!direct && rank == 0 && tid < G)
    {
        const int64_t i = (int64_t(seq) * p.num_heads + head0 + tid) * p.num_partitions + part;
        p.max_logits[i] = M;
        p.exp_sums[i]   = L;
    }
    cluster.sync(); // no CTA leaves while another may still read its shared memory
#else
    __trap(); // the host clusters only kernels compiled for sm_90 (v1_cluster): never reached
#endif
}

// kNT: 8-dim column tiles of O per warp, at most (4 up to head size 128, 8 up to 256). `csplit` CTAs (one cluster,
// consecutive in x) share a partition: each takes a contiguous share of its tiles, and they merge through
// distributed shared memory (sm_90; the host passes 1 elsewhere).
template <typename T, bool kNhd, int kNT>
__global__ void __launch_bounds__(kV1Threads) pa_v1_kernel(const __grid_constant__ Params p, int slots, int csplit)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    // the partition combine (a programmatic dependent launch on sm_90) may start: it waits for this grid to finish
    grid_launch_dependents();
    const int part = blockIdx.x / csplit, rank = blockIdx.x % csplit, hg = blockIdx.y, seq = blockIdx.z;
    const int G = p.group, D = p.head_size, P = p.partition_size, bs = p.block_size;
    const int Dp = v1_dp(D), Ls = v1_ls(P);
    const int head0 = hg * G, kvh = head0 / p.ratio;
    const int ctx   = context_len(p, seq);
    const int start = part * P, end = min(min(start + P, ctx), p.token_end);
    if (start >= ctx && !(ctx == 0 && part == 0))
        return; // partitions past the context are never combined (every CTA of the cluster leaves here)
    const int lo = p.sliding_window > 0 ? max(0, ctx - p.sliding_window) : 0;
    int first = lo > start ? start + (lo - start) / kV1Tile * kV1Tile : start; // tiles before it: all masked
    int nt = end > first ? (end - first + kV1Tile - 1) / kV1Tile : 0;
    if (csplit > 1) // this rank's share of the tiles (none for the last ranks of a short partition)
    {
        const int per = (nt + csplit - 1) / csplit, t0 = min(nt, rank * per);
        first += t0 * kV1Tile, nt = min(nt, t0 + per) - t0;
    }
    const int off0 = first - start; // logits column of `first`

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
    const int q_off = kV1BarBytes + v1_table_bytes(P, bs), lg_off = q_off + v1_q_bytes(D);
    const uint32_t bars = base, q_s = base + q_off, lg_s = base + lg_off;
    int* const tbl = reinterpret_cast<int*>(smem_raw + kV1BarBytes);       // block ids of the partition
    float* const logits = reinterpret_cast<float*>(smem_raw + lg_off);     // [G][Ls]
    float* const stat = reinterpret_cast<float*>(smem_raw + kV1StatOffset); // max [16], sum [16]
    const uint32_t ring = lg_s + v1_logit_bytes(G, P);
    const int slot_bytes = v1_slot_bytes(D), qrow = (Dp + 8) * 2, krow = Dp * 2;

    if (tid == 0)
    {
        for (int s = 0; s < slots; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bars + 8 * s), "r"(kV1Threads));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bars + kV1QBar), "r"(kV1Threads));
    }
    __syncthreads();
    // Q rows of the group (zeros past the head size) and the partition's block ids, copied together (one round trip
    // before the first K copy can be addressed)
    {
        const T* qg = static_cast<const T*>(p.q) + int64_t(seq) * p.q_seq + int64_t(head0) * p.q_head;
        for (int i = tid; i < G * (Dp / kX); i += kV1Threads)
        {
            const int r = i / (Dp / kX), c = i % (Dp / kX);
            const bool live = c * kX < D;
            cp_async16_zfill(q_s + r * qrow + c * 16, live ? qg + int64_t(r) * p.q_head + c * kX : qg, live ? 16 : 0);
        }
        const int32_t* row = p.block_tables + int64_t(seq) * p.table_stride + start / bs;
        const uint32_t tbl_s = base + kV1BarBytes;
        for (int i = tid; i < (end - start + bs - 1) / bs; i += kV1Threads)
            cp_async4(tbl_s + 4 * i, row + i);
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bars + kV1QBar) : "memory");
        mbar_wait(bars + kV1QBar, 0);
    }

    const T* kc = static_cast<const T*>(p.k) + int64_t(kvh) * p.k_head;
    const T* vc = static_cast<const T*>(p.v) + int64_t(kvh) * p.v_head;
    // x / block_size for 0 <= x < 2^12 without a division: the reciprocal rounded up by 2^-20 never lands below an
    // exact quotient, and stays below the next integer while block_size * (quotient + 1) < 2^20
    const float inv_bs = __frcp_rn(float(bs)) * (1.f + 1.f / (1 << 20));

    // Tile f < nt: K of tokens first + f * kV1Tile; tile nt + f: their V; slot f % slots. Tokens past the context and
    // before the window are zero-filled, their block ids never used (an engine may have freed a block that lies wholly
    // before the window and left a stale id in the table: reading it could fault, or put NaN into P V). The lanes of
    // a warp walk the cache in memory order, so that each 8-lane phase of a 16-byte copy reads 128 contiguous bytes
    // where the layout has them (one L2 request of four sectors, not four of one):
    //   HND K (chunk c of a block: its tokens, 16 bytes each): lane = token, warp w = chunks w, w + 4, ...
    //   HND V (dim d of a block: its tokens, 2 bytes each): a thread keeps one 8-token chunk tc and walks dims
    //         dl, dl + 32, ...; the tc chunks of one block (cpb of them: 1, 2 or 4) are the fastest lanes
    //   NHD K, V (token: its head dims): consecutive lanes take consecutive chunks of a token
    const int tiles = 2 * nt;
    const int cpb = bs % 32 == 0 ? 4 : bs % 16 == 0 ? 2 : 1; // 8-token chunks of a tile in one block (aligned)
    const int v_tc = (warp % (4 / cpb)) * cpb + lane % cpb, v_dl = (warp / (4 / cpb)) * (32 / cpb) + lane / cpb;
    const int kc_n = Dp / kX, vc_n = D / kX; // 16-byte chunks of a K row (zeros past the head size), of a V row
    // HND V^T: 16-byte unit of (dim d, 8-token chunk tc), the tile's chunks in one block (tc / cpb) together as in
    // the cache, so a 128-byte segment of the cache lands in one 128-byte segment here; the chunk bits XORed with
    // (d / (8 / cpb)) % cpb so that ldmatrix's 8 dims of one chunk hit 8 different bank groups
    auto v_unit = [&](int tc, int d) {
        return ((tc / cpb) * D + d) * cpb + ((tc % cpb) ^ ((d / (8 / cpb)) & (cpb - 1)));
    };
    const float inv_kc = __frcp_rn(float(kc_n)) * (1.f + 1.f / (1 << 20)),
                inv_vc = __frcp_rn(float(vc_n)) * (1.f + 1.f / (1 << 20));
    int fill = 0, fill_slot = 0;
    auto issue = [&]() {
        const uint32_t dst = ring + fill_slot * slot_bytes;
        const bool is_k = fill < nt;
        const int o0 = off0 + (is_k ? fill : fill - nt) * kV1Tile; // partition offset of the tile
        if constexpr (kNhd)
        {
            const T* src = is_k ? kc : vc;
            const int C = is_k ? kc_n : vc_n;
            const float inv = is_k ? inv_kc : inv_vc;
            const int64_t blk_stride = is_k ? p.k_block : p.v_block, tok_stride = is_k ? p.k_token : p.v_token;
            for (int j = tid; j < kV1Tile * C; j += kV1Threads)
            {
                const int r = __float2int_rz(float(j) * inv), c = j - r * C, o = o0 + r;
                const bool live = start + o < end && start + o >= lo && c < vc_n;
                const T* from = src;
                if (live)
                {
                    const int bi = __float2int_rz(float(o) * inv_bs);
                    from += int64_t(tbl[bi]) * blk_stride + int64_t(o - bi * bs) * tok_stride + c * kX;
                }
                cp_async16_zfill(dst + r * krow + ((c ^ (r & 7)) * 16), from, live ? 16 : 0);
            }
        }
        else if (is_k)
        {
            const int o = o0 + lane;
            const bool live = start + o < end && start + o >= lo;
            const T* from = kc;
            if (live)
            {
                const int bi = __float2int_rz(float(o) * inv_bs);
                from += int64_t(tbl[bi]) * p.k_block + int64_t(o - bi * bs) * p.k_token + warp * p.k_chunk;
            }
            const uint32_t row = dst + lane * 16;
            for (int c = warp; c < kc_n; c += kV1Warps, from += kV1Warps * p.k_chunk)
                cp_async16_zfill(row + c * (kV1Tile * 16), live && c < vc_n ? from : kc, live && c < vc_n ? 16 : 0);
        }
        else // HND V: 8 tokens of one dim per chunk (block_size % 8 == 0), into V^T
        {
            // a chunk wholly before the window is not read (n = 0); one that holds token lo lies in lo's block
            const int o = o0 + kX * v_tc, n = start + o + kX > lo ? min(kX, end - start - o) : 0;
            const T* from = vc;
            if (n > 0)
            {
                const int bi = __float2int_rz(float(o) * inv_bs);
                from += int64_t(tbl[bi]) * p.v_block + (o - bi * bs) + int64_t(v_dl) * p.v_dim;
            }
            const int bytes = n > 0 ? 2 * n : 0;
            const uint32_t col = dst + v_unit(v_tc, v_dl) * 16;
            const int64_t step = 32 * p.v_dim;
            for (int d = v_dl, k = 0; d < D; d += 32, ++k, from += step)
                cp_async16_zfill(col + k * 32 * cpb * 16, n > 0 ? from : vc, bytes);
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bars + 8 * fill_slot) : "memory");
        ++fill;
        fill_slot = fill_slot + 1 == slots ? 0 : fill_slot + 1;
    };
    while (fill < min(slots, tiles))
        issue();
    int use_slot = 0;
    uint32_t use_phase = 0;
    auto wait = [&]() {
        mbar_wait(bars + 8 * use_slot, use_phase);
        const uint32_t at = ring + use_slot * slot_bytes;
        if (++use_slot == slots)
            use_slot = 0, use_phase ^= 1;
        return at;
    };

    // lane's ldmatrix rows: A operands (Q, P) rows (lane % 8) + 8 ((lane / 8) % 2), clamped to the group, column
    // half lane / 16
    const int arow = min((lane & 7) + 8 * ((lane >> 3) & 1), G - 1), acol = 8 * (lane >> 4);

    // S = Q K^T: warp w takes tokens 8w .. 8w + 7 of each tile
    for (int i = 0; i < nt; ++i)
    {
        const uint32_t kt = wait();
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        // B rows: token 8w + lane % 8, chunk k / 8 + lane / 8 (NHD: rows of the head size, chunks XOR token % 8;
        // HND: chunk-major, [chunk][32 tokens])
        const uint32_t qa = q_s + arow * qrow + acol * 2;
        const int kt_row = 8 * warp + (lane & 7);
        for (int k = 0; k < Dp; k += 32)
        {
            uint32_t a0[4], a1[4], b[4];
            ldsm_x4(qa + k * 2, a0);
            ldsm_x4(qa + k * 2 + 32, a1);
            const int c = k / kX + (lane >> 3);
            ldsm_x4(kNhd ? kt + kt_row * krow + ((c ^ (lane & 7)) * 16) : kt + (c * kV1Tile + kt_row) * 16, b);
            mma16816<T>(acc, a0, b[0], b[1]);
            mma16816<T>(acc, a1, b[2], b[3]);
        }
        const int col = off0 + i * kV1Tile + 8 * warp + 2 * q; // logits column of acc[0] / acc[2]
#pragma unroll
        for (int h = 0; h < 2; ++h)
        {
            const int r = g + 8 * h;
            if (r < G)
            {
                float v[2];
#pragma unroll
                for (int e = 0; e < 2; ++e)
                {
                    const int t = start + col + e;
                    v[e] = t < lo || t >= end ? -INFINITY : score_mod(acc[2 * h + e], p, head0 + r, t, ctx);
                }
                *reinterpret_cast<float2*>(logits + r * Ls + col) = make_float2(v[0], v[1]);
            }
        }
        __syncthreads(); // every warp is done with the slot
        if (fill < tiles)
            issue();
    }
    __syncthreads(); // (nt == 0: no barrier above)

    // softmax per head: a warp per row; the probabilities overwrite the row in place as 16-bit elements (column j at
    // byte 2j: each write lands on floats this warp has already read)
    for (int r = warp; r < G; r += kV1Warps)
    {
        float* row = logits + r * Ls;
        T* prow = reinterpret_cast<T*>(row);
        const int a = off0, b = off0 + nt * kV1Tile;
        float m = -INFINITY;
        for (int j = a + lane; j < b; j += 32)
            m = fmaxf(m, row[j]);
        for (int o = 16; o > 0; o /= 2)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float sum = 0.f;
        for (int j0 = a; j0 < b; j0 += 32)
        {
            const int j = j0 + lane;
            const float e = j < b && m != -INFINITY ? __expf(row[j] - m) : 0.f;
            sum += e;
            __syncwarp();
            if (j < b)
                prow[j] = T(e);
        }
        for (int o = 16; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0)
            stat[r] = m, stat[kMaxGroup + r] = sum;
    }
    __syncthreads();

    // O = P V: warp w takes the 8-dim column tiles w, w + 4, ... (at most kNT) of every V tile
    const int ntile = D / kX;
    const int mine = (ntile - warp + kV1Warps - 1) / kV1Warps;
    // lane's B rows: NHD V tokens 0 .. 31 at dim 8j; HND V^T dims 8j + lane % 8 at token chunk lane / 8 (swizzled
    // by (lane % 8) / 2, the same for every j)
    // (NHD: row lane, chunk j XOR lane % 8, added per j below; HND: v_unit(lane / 8, 8j + lane % 8), whose XOR
    // term is the same for every j)
    const uint32_t vlane = kNhd ? lane * krow : v_unit(lane >> 3, 8 * warp + (lane & 7)) * 16;
    const uint32_t vstep = kNhd ? 0 : kV1Warps * 8 * cpb * 16;
    float o[kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    for (int i = nt; i < tiles; ++i)
    {
        const uint32_t vt = wait() + vlane;
        const int col = off0 + (i - nt) * kV1Tile;
        uint32_t a0[4], a1[4];
        ldsm_x4(lg_s + arow * Ls * 4 + (col + acol) * 2, a0);
        ldsm_x4(lg_s + arow * Ls * 4 + (col + 16 + acol) * 2, a1);
        auto step = [&](int jj) {
            uint32_t b[4];
            if constexpr (kNhd)
                ldsm_x4_t(vt + (((warp + kV1Warps * jj) ^ (lane & 7)) * 16), b);
            else
                ldsm_x4(vt + jj * vstep, b);
            mma16816<T>(o[jj], a0, b[0], b[1]);
            mma16816<T>(o[jj], a1, b[2], b[3]);
        };
        if (mine == kNT) // (no predicates for the common case)
        {
#pragma unroll
            for (int jj = 0; jj < kNT; ++jj)
                step(jj);
        }
        else
        {
#pragma unroll
            for (int jj = 0; jj < kNT; ++jj)
                if (jj < mine)
                    step(jj);
        }
        __syncthreads();
        if (fill < tiles)
            issue();
    }

    if (csplit > 1)
    {
        v1_cluster_merge<T, kNT>(p, o, smem_raw, ring - base, part, rank, csplit, seq, head0, mine);
        return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
    {
        const int r = g + 8 * h;
        if (r >= G)
            continue;
        const float sum = stat[kMaxGroup + r], inv = sum == 0.f ? 0.f : 1.f / sum;
        const int head = head0 + r;
        T* dst = p.num_partitions == 1
                     ? static_cast<T*>(p.out) + int64_t(seq) * p.o_seq + int64_t(head) * p.o_head
                     : static_cast<T*>(p.tmp_out) + ((int64_t(seq) * p.num_heads + head) * p.num_partitions + part) * D;
#pragma unroll
        for (int jj = 0; jj < kNT; ++jj)
        {
            const int j = warp + kV1Warps * jj;
            if (jj < mine)
                *reinterpret_cast<uint32_t*>(dst + 8 * j + 2 * q) = pack2<T>(o[jj][2 * h] * inv, o[jj][2 * h + 1] * inv);
        }
    }
    if (p.num_partitions > 1 && tid < G)
    {
        const int64_t i = (int64_t(seq) * p.num_heads + head0 + tid) * p.num_partitions + part;
        p.max_logits[i] = stat[tid];
        p.exp_sums[i]   = stat[kMaxGroup + tid];
    }
}

// Partition combine: CTA (head, sequence); O = sum_p w_p O_p / sum_p w_p, w_p = exp_sum_p * exp(max_p - max), the
// weights kV1Threads partitions at a time in shared memory, each thread summing its head-dim columns.
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* red)
{
    for (int o = 16; o > 0; o /= 2)
    {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int i = 1; i < kV1Warps; ++i)
        v = is_max ? fmaxf(v, red[i]) : v + red[i];
    __syncthreads();
    return v;
}

template <typename T>
__global__ void __launch_bounds__(kV1Threads) pa_v1_reduce_kernel(const __grid_constant__ Params p)
{
    __shared__ float w_s[kV1Threads], red[kV1Warps];
    const int h = blockIdx.x, seq = blockIdx.y, D = p.head_size, tid = threadIdx.x;
    const int ctx = context_len(p, seq);
    grid_dependency_wait(); // (launched as a programmatic dependent of the partition kernel on sm_90)
    const int parts = min((ctx + p.partition_size - 1) / p.partition_size, p.num_partitions);
    const int64_t base = (int64_t(seq) * p.num_heads + h) * p.num_partitions;
    const float* es = p.exp_sums + base;
    const float* ml = p.max_logits + base;
    // empty partitions (sum 0: no token in the context or the window) take no part; one whose sum is NaN (a NaN score
    // among finite ones) makes the output NaN, as one partition's would. fmaxf drops NaN, so a partition whose scores
    // are all NaN (NaN in Q, a partition of NaN keys) has sum 0 and counts as empty, as in one partition.
    float m = -INFINITY;
    for (int i = tid; i < parts; i += kV1Threads)
        if (es[i] != 0.f)
            m = fmaxf(m, ml[i]);
    m = block_reduce(m, true, red);
    float total = 0.f;
    for (int i = tid; i < parts; i += kV1Threads)
        if (es[i] != 0.f)
            total += es[i] * __expf(ml[i] - m);
    total = block_reduce(total, false, red);
    const float inv = total == 0.f ? 0.f : 1.f / total;
    const T* tmp = static_cast<const T*>(p.tmp_out) + base * D;
    float acc[kMaxHead / kV1Threads] = {};
    for (int i0 = 0; i0 < parts; i0 += kV1Threads)
    {
        const int i = i0 + tid;
        w_s[tid] = i < parts && es[i] != 0.f ? es[i] * __expf(ml[i] - m) * inv : 0.f; // empty partitions wrote zeros
        __syncthreads();
        const int n = min(kV1Threads, parts - i0);
#pragma unroll
        for (int c = 0; c < kMaxHead / kV1Threads; ++c)
        {
            const int d = tid + c * kV1Threads;
            if (d < D)
            {
                const T* col = tmp + int64_t(i0) * D + d;
#pragma unroll 8
                for (int k = 0; k < n; ++k)
                    acc[c] += w_s[k] * to_f(col[int64_t(k) * D]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int c = 0; c < kMaxHead / kV1Threads; ++c)
        if (tid + c * kV1Threads < D)
            static_cast<T*>(p.out)[seq * p.o_seq + h * p.o_head + tid + c * kV1Threads] = T(acc[c]);
}

// ---------------------------------------------------------------------------------------------------------------
// Tuned kernel (head 128, block 16; K [blocks, h_k, 16 chunks, 16 tokens, 8], V [blocks, h_k, 2, 128 dims, 8 tokens]):
// tensor-core MMAs (m16n8k16) on 16 query heads of one KV head against each block of 16 tokens.
//
// CTA (split, KV head x head group, sequence): four warps, each walking every fourth block of the split's range with
// its own ring of kAsmStages blocks in shared memory (16-byte cp.async, 8 KB per block: the K and V block of the KV
// head are contiguous 4 KB each). The splits of a sequence and KV head form one thread-block cluster (sm_90, up to
// 16 CTAs) and merge through distributed shared memory, so the kernel needs no workspace (AITER's pa_fwd_asm has
// none) and a batch of one still spreads over the GPU.
//
// The asm layouts let every fragment come from 16- or 8-byte shared loads: the dot products do not care in which
// order the head dims enter the MMA's k slots, nor which tokens sit in which n slots, so both are permuted.
//   S = Q K^T, 8 k steps x 2 n tiles. Lane (g, q) (g = lane / 4, q = lane % 4) loads K chunk 4q + c (8 dims) of
//   token tau_j(g) = 4 (g / 2) + 2 j + g % 2 for n tile j: its first 8 bytes are the B fragment of k step 2c, its
//   last 8 of step 2c + 1. Q's A fragments take the same dims: step s, k slots {2q, 2q + 1, 2q + 8, 2q + 9} hold
//   dims (4q + s / 2) * 8 + (s % 2) * 4 + {0, 1, 2, 3}.
//   With that token order the S accumulators of lane (g, q) hold tokens 4q + {0, 1} (tile 0) and 4q + {2, 3} (tile
//   1), which is the A fragment of P V with k slots {2q, 2q + 1, 2q + 8, 2q + 9} = tokens 4q .. 4q + 3; the B fragment
//   of V's n tile i is then the 8 bytes of tokens 4q .. 4q + 3 of dim 8i + g: one 8-byte load.
// Shared memory is swizzled so that both loads are free of bank conflicts: K chunk (c, token t) sits at 16-byte slot
// 16 c + (t ^ ((c / 2) & 6)), V chunk (token group tg, dim d) at 128 tg + (d ^ 4 tg).
// H100, 32 query / 8 KV heads, bf16, L2 swept, GB/s of K + V (scripts/paged_bench.py), b=1 / 16 / 64 at 1k / 8k / 32k
// tokens, with the split rule of asm_splits: 381 / 1475 / 2150, 2248 / 2881 / 2983, 2597 / 3011 / 3067; the SIMT
// kernel this replaced (one CTA of 8 warps per head group and sequence, no splits, scalar loads; the L2 swept by a
// write then): 57 / 59 / 60, 828 / 902 / 909, 890 / 930 / 934.
// ---------------------------------------------------------------------------------------------------------------
constexpr int kAsmHead = 128, kAsmBlock = 16, kAsmWarps = 4, kAsmThreads = 32 * kAsmWarps;
constexpr int kAsmRows = 16;                                    // query heads per CTA (MMA rows)
constexpr int kAsmBlockBytes = kAsmBlock * kAsmHead * 2;        // one K or V block of one KV head: 4 KB
// ring stages per warp: 3, 96 KB a CTA, two CTAs per SM (6 stages for a batch of one, one CTA per SM, read no faster:
// H100, b=1 8k / 32k 1072 / 1884 GB/s against 1084-1237 / 1720-1959 over three runs of 3 stages)
constexpr int kAsmStages = 3;
constexpr int kAsmSmemBytes = kAsmWarps * kAsmStages * 2 * kAsmBlockBytes;
constexpr int kAsmMaxCluster = 16;
// after the loop the ring holds the warps' states: O [warps][16][128], (m, l) [warps][16][2], then the CTA's own
// merged O [16][128] and (m, l) [16][2], which the cluster's other CTAs read
constexpr int kAsmWarpO = 0, kAsmWarpML = kAsmWarps * kAsmRows * kAsmHead * 4,
              kAsmCtaO = kAsmWarpML + kAsmWarps * kAsmRows * 2 * 4, kAsmCtaML = kAsmCtaO + kAsmRows * kAsmHead * 4;
static_assert(kAsmCtaML + kAsmRows * 2 * 4 <= kAsmSmemBytes, "merge buffers must fit in the ring");

// CTAs per KV head: one per group of kAsmRows query heads
__host__ __device__ constexpr int asm_groups(int ratio) { return (ratio + kAsmRows - 1) / kAsmRows; }

// A launch configuration of the asm kernel with `splits` CTAs per cluster (at: its cluster attribute)
inline cudaLaunchConfig_t asm_config(dim3 grid, int splits, cudaLaunchAttribute& at)
{
    at = cudaLaunchAttribute{};
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = unsigned(splits), at.val.clusterDim.y = at.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid, cfg.blockDim = dim3(kAsmThreads), cfg.dynamicSmemBytes = kAsmSmemBytes;
    cfg.attrs = &at, cfg.numAttrs = splits > 1 ? 1 : 0;
    return cfg;
}

__device__ __forceinline__ int asm_k_slot(int c, int t) { return c * 16 + (t ^ ((c >> 1) & 6)); }
__device__ __forceinline__ int asm_v_slot(int tg, int d) { return tg * 128 + (d ^ (tg * 4)); }

template <typename T>
__global__ void __launch_bounds__(kAsmThreads) pa_asm_kernel(const __grid_constant__ Params p)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int split = blockIdx.x, splits = gridDim.x, seq = blockIdx.z;
    const int groups = asm_groups(p.ratio);
    const int kvh = blockIdx.y / groups, row0 = (blockIdx.y % groups) * kAsmRows; // row r: query head kvh*ratio+row0+r
    const int rows = min(kAsmRows, p.ratio - row0);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;

    // Q's A fragments (rows g and g + 8; zeros past the group's heads), in the permuted dim order
    uint32_t qa[8][4];
    {
        const T* q0 = static_cast<const T*>(p.q) + int64_t(seq) * p.q_seq + int64_t(kvh * p.ratio + row0) * p.q_head;
#pragma unroll
        for (int s = 0; s < 8; ++s)
        {
            const int d = (4 * q + s / 2) * 8 + (s % 2) * 4;
            uint2 lo = make_uint2(0, 0), hi = make_uint2(0, 0);
            if (g < rows)
                lo = *reinterpret_cast<const uint2*>(q0 + int64_t(g) * p.q_head + d);
            if (g + 8 < rows)
                hi = *reinterpret_cast<const uint2*>(q0 + int64_t(g + 8) * p.q_head + d);
            qa[s][0] = lo.x, qa[s][1] = hi.x, qa[s][2] = lo.y, qa[s][3] = hi.y;
        }
    }

    const int ctx = context_len(p, seq);
    const int nblocks = (ctx + kAsmBlock - 1) / kAsmBlock;
    const int per = (nblocks + splits - 1) / splits;
    const int b_begin = split * per, b_end = min(nblocks, b_begin + per);
    const int mine = b_begin + warp < b_end ? (b_end - b_begin - warp + kAsmWarps - 1) / kAsmWarps : 0;
    const int32_t* table = p.block_tables + int64_t(seq) * p.table_stride;
    const unsigned char* kc = static_cast<const unsigned char*>(p.k) + int64_t(kvh) * p.k_head * 2;
    const unsigned char* vc = static_cast<const unsigned char*>(p.v) + int64_t(kvh) * p.v_head * 2;
    const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) +
                          warp * kAsmStages * 2 * kAsmBlockBytes;
    const unsigned char* ring_ptr = smem_raw + warp * kAsmStages * 2 * kAsmBlockBytes;

    // iteration k of this warp (block b_begin + warp + k * kAsmWarps) into stage k % kAsmStages; block ids come 32
    // iterations at a time, one per lane
    int ids = 0;
    auto issue = [&](int k) {
        if (k < mine)
        {
            if (k % 32 == 0)
            {
                const int b = b_begin + warp + (k + lane) * kAsmWarps;
                ids = b < b_end ? table[b] : 0;
            }
            const int64_t blk = __shfl_sync(0xffffffffu, ids, k % 32);
            const unsigned char* ks = kc + blk * p.k_block * 2;
            const unsigned char* vs = vc + blk * p.v_block * 2;
            const uint32_t st = ring + (k % kAsmStages) * 2 * kAsmBlockBytes;
#pragma unroll
            for (int i = 0; i < 8; ++i)
            {
                const int j = lane + 32 * i; // 16-byte chunk of the block
                cp_async16(st + asm_k_slot(j / 16, j % 16) * 16, ks + j * 16);
                cp_async16(st + kAsmBlockBytes + asm_v_slot(j / 128, j % 128) * 16, vs + j * 16);
            }
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    };

    float o[16][4];
#pragma unroll
    for (int i = 0; i < 16; ++i)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; // rows g, g + 8 (l: this lane's tokens only)
    const float sl = p.scale * 1.4426950408889634f;          // exp(x) = exp2(x log2 e)

#pragma unroll
    for (int k = 0; k < kAsmStages - 1; ++k)
        issue(k);
    for (int k = 0; k < mine; ++k)
    {
        issue(k + kAsmStages - 1);
        asm volatile("cp.async.wait_group %0;\n" ::"n"(kAsmStages - 1) : "memory");
        __syncwarp();
        const unsigned char* st = ring_ptr + (k % kAsmStages) * 2 * kAsmBlockBytes;

        float s[2][4] = {};
#pragma unroll
        for (int j = 0; j < 2; ++j)
        {
            const int t = 4 * (g / 2) + 2 * j + g % 2;
#pragma unroll
            for (int c = 0; c < 4; ++c)
            {
                const uint4 kv = *reinterpret_cast<const uint4*>(st + asm_k_slot(4 * q + c, t) * 16);
                mma16816<T>(s[j], qa[2 * c], kv.x, kv.y);
                mma16816<T>(s[j], qa[2 * c + 1], kv.z, kv.w);
            }
        }
        // tokens of the last block past the context: no score, and their V slots (anything, NaN too) zeroed below
        const int tok0 = (b_begin + warp + k * kAsmWarps) * kAsmBlock + 4 * q; // this lane's tokens tok0 .. tok0 + 3
        const bool partial = tok0 + 4 > ctx;
        if (partial)
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (tok0 + 2 * j + (e & 1) >= ctx)
                        s[j][e] = -INFINITY;
        float x0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
        float x1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1)), x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2)), x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
        // every block holds at least one token of the context, so the new maxima are finite
        const float n0 = fmaxf(m0, x0 * sl), n1 = fmaxf(m1, x1 * sl);
        const float c0 = exp2f(m0 - n0), c1 = exp2f(m1 - n1);
        m0 = n0, m1 = n1;
        float pr[2][4];
#pragma unroll
        for (int j = 0; j < 2; ++j)
        {
            pr[j][0] = exp2f(s[j][0] * sl - n0), pr[j][1] = exp2f(s[j][1] * sl - n0);
            pr[j][2] = exp2f(s[j][2] * sl - n1), pr[j][3] = exp2f(s[j][3] * sl - n1);
        }
        l0 = l0 * c0 + pr[0][0] + pr[0][1] + pr[1][0] + pr[1][1];
        l1 = l1 * c1 + pr[0][2] + pr[0][3] + pr[1][2] + pr[1][3];
        const uint32_t pa[4] = {pack2<T>(pr[0][0], pr[0][1]), pack2<T>(pr[0][2], pr[0][3]),
                                pack2<T>(pr[1][0], pr[1][1]), pack2<T>(pr[1][2], pr[1][3])};
        // V: lane (g, q) takes tokens 4q .. 4q + 3 (token group q / 2, bytes 8 (q % 2) of the chunk) of dim 8i + g
        uint32_t keep_lo = 0xffffffffu, keep_hi = 0xffffffffu;
        if (partial)
        {
            keep_lo = (tok0 < ctx ? 0x0000ffffu : 0u) | (tok0 + 1 < ctx ? 0xffff0000u : 0u);
            keep_hi = (tok0 + 2 < ctx ? 0x0000ffffu : 0u) | (tok0 + 3 < ctx ? 0xffff0000u : 0u);
        }
        const unsigned char* vst = st + kAsmBlockBytes + (q % 2) * 8;
#pragma unroll
        for (int i = 0; i < 16; ++i)
        {
            o[i][0] *= c0, o[i][1] *= c0, o[i][2] *= c1, o[i][3] *= c1;
            const uint2 vv = *reinterpret_cast<const uint2*>(vst + asm_v_slot(q / 2, 8 * i + g) * 16);
            mma16816<T>(o[i], pa, vv.x & keep_lo, vv.y & keep_hi);
        }
        __syncwarp(); // the stage is refilled by the next iteration's issue
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1), l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2), l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    __syncthreads(); // every warp is done with its ring: the merge buffers overlay it

    // the warps' states -> shared memory; O row g columns 8i + 2q, 2q + 1 (o[i][0..1]), row g + 8 (o[i][2..3])
    float* wo  = reinterpret_cast<float*>(smem_raw + kAsmWarpO) + warp * kAsmRows * kAsmHead;
    float* wml = reinterpret_cast<float*>(smem_raw + kAsmWarpML) + warp * kAsmRows * 2;
#pragma unroll
    for (int i = 0; i < 16; ++i)
    {
        *reinterpret_cast<float2*>(wo + g * kAsmHead + 8 * i + 2 * q)       = make_float2(o[i][0], o[i][1]);
        *reinterpret_cast<float2*>(wo + (g + 8) * kAsmHead + 8 * i + 2 * q) = make_float2(o[i][2], o[i][3]);
    }
    if (q == 0)
        wml[g * 2] = m0, wml[g * 2 + 1] = l0, wml[(g + 8) * 2] = m1, wml[(g + 8) * 2 + 1] = l1;
    __syncthreads();

    // the CTA's state: thread t merges row t / 8, columns 16 (t % 8) .. + 15 over the warps, in warp order
    float* co  = reinterpret_cast<float*>(smem_raw + kAsmCtaO);
    float* cml = reinterpret_cast<float*>(smem_raw + kAsmCtaML);
    {
        const float* ao  = reinterpret_cast<const float*>(smem_raw + kAsmWarpO);
        const float* aml = reinterpret_cast<const float*>(smem_raw + kAsmWarpML);
        const int r = tid / 8, c0 = (tid % 8) * 16;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kAsmWarps; ++w)
            mx = fmaxf(mx, aml[(w * kAsmRows + r) * 2]);
        float f[kAsmWarps], l = 0.f;
#pragma unroll
        for (int w = 0; w < kAsmWarps; ++w)
        {
            const float mw = aml[(w * kAsmRows + r) * 2];
            f[w] = mw == -INFINITY ? 0.f : exp2f(mw - mx);
            l += f[w] * aml[(w * kAsmRows + r) * 2 + 1];
        }
#pragma unroll
        for (int c = 0; c < 16; ++c)
        {
            float acc = 0.f;
#pragma unroll
            for (int w = 0; w < kAsmWarps; ++w)
                acc += f[w] * ao[(w * kAsmRows + r) * kAsmHead + c0 + c];
            co[r * kAsmHead + c0 + c] = acc;
        }
        if (tid % 8 == 0)
            cml[r * 2] = mx, cml[r * 2 + 1] = l;
    }
    T* out = static_cast<T*>(p.out) + int64_t(seq) * p.o_seq + int64_t(kvh * p.ratio + row0) * p.o_head;
    if (splits == 1)
    {
        __syncthreads();
        for (int i = tid; i < rows * kAsmHead; i += kAsmThreads)
        {
            const int r = i / kAsmHead, d = i % kAsmHead;
            const float l = cml[r * 2 + 1];
            out[int64_t(r) * p.o_head + d] = T(l > 0.f ? co[i] / l : 0.f);
        }
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // the cluster's CTAs (the splits, in rank order) merge: CTA `split` takes rows split * 16 / splits onwards. Every
    // remote read is issued before any is used (up to 16 CTAs x 3 values in flight per output).
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int rows_per = kAsmRows / splits;
    for (int i = tid; i < rows_per * kAsmHead; i += kAsmThreads)
    {
        const int r = split * rows_per + i / kAsmHead, d = i % kAsmHead;
        float mc[kAsmMaxCluster], lc[kAsmMaxCluster], oc[kAsmMaxCluster];
#pragma unroll
        for (int c = 0; c < kAsmMaxCluster; ++c)
            if (c < splits)
            {
                mc[c] = cluster.map_shared_rank(cml, c)[r * 2];
                lc[c] = cluster.map_shared_rank(cml, c)[r * 2 + 1];
                oc[c] = cluster.map_shared_rank(co, c)[r * kAsmHead + d];
            }
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < kAsmMaxCluster; ++c)
            if (c < splits)
                mx = fmaxf(mx, mc[c]);
        float acc = 0.f, l = 0.f;
#pragma unroll
        for (int c = 0; c < kAsmMaxCluster; ++c)
            if (c < splits)
            {
                const float f = mc[c] == -INFINITY ? 0.f : exp2f(mc[c] - mx);
                acc += f * oc[c], l += f * lc[c];
            }
        if (r < rows)
            out[int64_t(r) * p.o_head + d] = T(l > 0.f ? acc / l : 0.f);
    }
    cluster.sync(); // no CTA leaves while another may still read its shared memory
#else
    __trap(); // the host splits only kernels compiled for sm_90 (asm_max_cluster): never reached
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------------------------------
// The largest divisor of the GQA ratio that fits one CTA.
int group_of(int ratio)
{
    for (int g = std::min(ratio, kMaxGroup); g > 1; --g)
        if (ratio % g == 0)
            return g;
    return 1;
}

std::string check_common(const aiter::paged_attention_args& a)
{
    if (a.data_type != "fp16" && a.data_type != "bf16")
        return "data_type must be fp16 or bf16, got '" + a.data_type + "'";
    if (a.num_seqs < 1 || a.num_seqs > 65535)
        return "num_seqs must be in [1, 65535], got " + str(a.num_seqs);
    if (a.num_kv_heads < 1 || a.num_heads < 1 || a.num_heads % a.num_kv_heads != 0)
        return "num_heads (" + str(a.num_heads) + ") must be a positive multiple of num_kv_heads (" +
               str(a.num_kv_heads) + ")";
    if (a.num_heads > 65535) // a grid dimension
        return "num_heads must be <= 65535, got " + str(a.num_heads);
    if (a.head_size < kX || a.head_size > kMaxHead || a.head_size % kX != 0)
        return "head_size must be a multiple of 8 in [8, 256], got " + str(a.head_size);
    if (a.block_size < 1 || a.block_tables_stride < 1)
        return "block_size and block_tables_stride must be >= 1";
    if (a.max_context_len < 0 || int64_t(a.max_context_len) > int64_t(a.block_size) * a.block_tables_stride)
        return "max_context_len must be in [0, block_size * block_tables_stride]";
    if (!a.query || !a.key_cache || !a.value_cache || !a.out || !a.block_tables || !a.context_lens)
        return "query, key_cache, value_cache, out, block_tables and context_lens must not be null";
    for (const void* x : {a.query, a.key_cache, a.value_cache, static_cast<const void*>(a.out)})
        if (!aligned(x, 16))
            return "query, key_cache, value_cache and out must be 16-byte aligned";
    if (!aligned(a.block_tables, 4) || !aligned(a.context_lens, 4))
        return "block_tables and context_lens must be 4-byte aligned int32 arrays";
    for (int64_t s : {a.q_stride_seq, a.q_stride_head, a.o_stride_seq, a.o_stride_head, a.k_stride_block,
                      a.k_stride_head, a.v_stride_block, a.v_stride_head, a.k_stride_token, a.v_stride_token})
        if (s < 0 || s % kX != 0)
            return "strides must be non-negative multiples of 8 elements";
    if (!(a.scale > 0.f) || std::isinf(a.scale) || !(a.logits_soft_cap >= 0.f) || std::isinf(a.logits_soft_cap))
        return "scale must be finite and > 0, logits_soft_cap finite and >= 0";
    // out [num_seqs, num_heads, head_size]: heads or sequences sharing addresses would race
    return overlapping_output("out", 1, a.num_seqs, a.num_heads, a.head_size, a.o_stride_seq, a.o_stride_head, 0,
                              false);
}

Params make_params(const aiter::paged_attention_args& a)
{
    Params p{};
    p.q = a.query, p.k = a.key_cache, p.v = a.value_cache, p.out = a.out;
    p.block_tables = a.block_tables, p.context_lens = a.context_lens, p.alibi = a.alibi_slopes;
    p.num_heads = a.num_heads, p.ratio = a.num_heads / a.num_kv_heads, p.group = group_of(p.ratio);
    p.head_size = a.head_size, p.block_size = a.block_size, p.table_stride = a.block_tables_stride;
    // (below INT_MAX by a partition's length: the kernels round lengths up to blocks and partitions in 32 bits)
    p.max_ctx = int(std::min<int64_t>(INT_MAX - kMaxPartition, int64_t(a.block_size) * a.block_tables_stride));
    p.q_seq = a.q_stride_seq, p.q_head = a.q_stride_head, p.o_seq = a.o_stride_seq, p.o_head = a.o_stride_head;
    p.k_block = a.k_stride_block, p.k_head = a.k_stride_head, p.v_block = a.v_stride_block, p.v_head = a.v_stride_head;
    const int64_t tok_nhd = int64_t(a.num_kv_heads) * a.head_size; // a packed NHD row
    p.k_chunk = a.nhd ? kX : int64_t(a.block_size) * kX;
    p.k_token = a.nhd ? (a.k_stride_token > 0 ? a.k_stride_token : tok_nhd) : kX;
    p.v_dim   = a.nhd ? 1 : a.block_size;
    p.v_token = a.nhd ? (a.v_stride_token > 0 ? a.v_stride_token : tok_nhd) : 1;
    p.scale = a.scale, p.softcap = a.logits_soft_cap, p.sliding_window = a.sliding_window;
    p.token_end = INT_MAX;
    return p;
}

// The attributes the asm kernel's launch needs in the current context (once per context: func_attr.h): 96 KB of
// dynamic shared memory, clusters of up to 16.
template <typename T>
cudaError_t asm_attributes()
{
    auto kernel = &pa_asm_kernel<T>;
    cudaError_t e = set_max_dynamic_smem(kernel, kAsmSmemBytes);
    if (e == cudaSuccess && set_func_attribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
                                cudaSuccess)
        (void)cudaGetLastError(); // clusters of up to 8 only (asm_max_cluster asks)
    return e;
}

// The largest cluster size in 2, 4, ..., most (1 when none) of which the current GPU runs at least one cluster of
// `kernel` launched as config(c). `answered` turns false when a query failed for a reason that may be transient (a
// size the GPU refuses, too large a cluster, is an answer): the caller then keeps the result for this call only.
template <typename Kernel, typename Config>
int probe_clusters(Kernel kernel, int most, Config config, bool& answered)
{
    int best = 1;
    answered = true;
    for (int c = 2; c <= most; c *= 2)
    {
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = config(c, at);
        int n = 0;
        const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, kernel, &cfg);
        if (e != cudaSuccess || n < 1)
        {
            answered = e == cudaSuccess || e == cudaErrorInvalidValue || e == cudaErrorInvalidClusterSize;
            (void)cudaGetLastError();
            break;
        }
        best = c;
    }
    return best;
}

// The largest cluster of the asm kernel's CTAs the current GPU runs (1, 2, 4, 8 or 16), once per device and element
// type (a failed query is asked again next call); 1 where the kernel was not compiled for sm_90 (PTX and SASS: its
// cluster merge exists only there); 0 on a CUDA error (left for the caller).
template <typename T>
int asm_max_cluster()
{
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices]; // max cluster + 1, 0: not yet known
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return 0;
    if (dev < kDevices && known[dev].load(std::memory_order_relaxed) > 0)
        return known[dev].load(std::memory_order_relaxed) - 1;
    auto kernel = &pa_asm_kernel<T>;
    cudaFuncAttributes fa{};
    if (asm_attributes<T>() != cudaSuccess || cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
        return 0;
    int best = 1;
    bool answered = true;
    if (fa.binaryVersion >= 90 && fa.ptxVersion >= 90)
        best = probe_clusters(kernel, kAsmMaxCluster, [](int c, cudaLaunchAttribute& at) {
            return asm_config(dim3(c, 1, 1), c, at);
        }, answered);
    if (answered && dev < kDevices)
        known[dev].store(best + 1, std::memory_order_relaxed);
    return best;
}

// Splits of a sequence's blocks for the asm kernel (one cluster per sequence, KV head and head group): doubled while
// the CTAs stay within half the SMs and every warp keeps at least two blocks of the longest context (max_context_len
// when given, else block_size x block_tables_stride, the bound the kernel clamps to: a padded table of a serving
// engine would otherwise split short contexts). A split costs more than its parallelism gains sooner than the
// SMs fill up: H100, 32 query / 8 KV heads, L2 swept, GB/s at 1k / 8k / 32k tokens (scripts/paged_bench.py with the
// count forced), b=16: 1 split 2248 / 2881 / 2983, 2: 1725 / 2765 / 2963, 4: 1204 / 2640 / 2968, 16: 597 / 2414 /
// 2907; b=1: 4 splits 321 / 921 / 1149, 8: 381 / 1475 / 2150, 16: 287 / 1239 / 1957. "" or the CUDA error.
template <typename T>
std::string asm_splits(const Params& p, int seqs, int kv_heads, int max_context_len, int& splits)
{
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
        return mha::cuda_error_reason("querying the device", cudaGetLastError());
    const int max_cluster = asm_max_cluster<T>();
    if (max_cluster < 1)
        return mha::cuda_error_reason("querying the device", cudaGetLastError());
    const int64_t pairs = int64_t(seqs) * kv_heads * asm_groups(p.ratio);
    const int64_t blocks = (std::min<int64_t>(p.max_ctx, max_context_len > 0 ? max_context_len : INT_MAX) +
                            kAsmBlock - 1) / kAsmBlock;
    splits = 1;
    while (splits * 2 <= max_cluster && pairs * splits * 2 * 2 <= sms &&
           int64_t(splits) * 2 * 2 * kAsmWarps <= blocks)
        splits *= 2;
    // long contexts take one more doubling, up to a CTA per SM, while every warp keeps 32 blocks and the cluster
    // stays portable (8). H100, scripts/paged_bench.cu, GB/s before -> after (two passes): b=3 8k / 32k 1445-1456 /
    // 1743-1750 -> 2070-2082 / 2711-2712, b=6 4k / 32k 1595-1606 / 1818-1831 -> 2012-2016 / 2839-2847, b=8 8k / 32k
    // 2256-2271 / 2416-2434 -> 2557-2561 / 2906-2917, b=2 / 4 32k 2187-2207 / 2350-2351 -> 2355-2360 / 2465-2479; b=1
    // / 16 and the shorter contexts unchanged. The same doubling at shorter contexts lost 1-11% (b=2 1k / 4k / 8k 491
    // / 1232 / 1645 -> 436 / 1188 / 1628), clusters of 16 at b=1 7-15% (8k / 32k 1259 / 2003 -> 1091 / 1861), and a
    // CTA forced onto each SM (116 KB of shared memory) 10-30%.
    if (splits * 2 <= std::min(max_cluster, 8) && pairs * splits * 2 <= sms &&
        int64_t(splits) * 2 * kAsmWarps * 32 <= blocks)
        splits *= 2;
    return "";
}

template <typename T>
cudaError_t asm_launch(const Params& p, int seqs, int kv_heads, int splits, cudaStream_t stream)
{
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = asm_config(dim3(splits, kv_heads * asm_groups(p.ratio), seqs), splits, at);
    cfg.stream = stream;
    cudaError_t e = asm_attributes<T>();
    if (e == cudaSuccess)
        e = cudaLaunchKernelEx(&cfg, &pa_asm_kernel<T>, p);
    return e != cudaSuccess ? e : cudaGetLastError();
}

// What the launch shapes read about the current device.
struct V1Device
{
    int sms = 0, max_cluster = 1;
    int smem_block = 0, smem_sm = 0; // opt-in shared memory per block, shared memory per SM (bytes)
    bool sm90 = false;
};

// The generic kernel's ring: as many slots as fit the shared memory a CTA gets when the grid's CTAs (csplit per
// partition) share the device's SMs (the whole share of a partition in flight for a grid within the SMs; at least two
// slots).
void v1_ring(const Params& p, dim3 grid, int csplit, const V1Device& d, int& slots, size_t& smem)
{
    const int sms = d.sms;
    const int64_t ctas = int64_t(grid.x) * csplit * grid.y * grid.z;
    // (a cluster's CTAs at no more than half an SM's shared memory each: at a whole SM each, clusters of 4 no longer
    // all fit the GPCs at once, H100 b=1 4k with 1024-token partitions 466 GB/s against 808 in CTAs of 256)
    // (at most 4 CTAs' share: capped at 3 / 2, the ring's extra slots did not make up for the resident CTAs lost,
    // H100 b=16 1k 2025 -> 1570 / 1728 GB/s, b=1 32k 2365 -> 1759 / 1935, b=64 32k 3033 -> 3021 / 2700)
    const int per_sm = int(std::min<int64_t>(4, std::max<int64_t>(csplit > 1 ? 2 : 1, (ctas + sms - 1) / sms)));
    // (H100: 227 KB per block, 228 KB per SM, 1 KB of it reserved per CTA)
    const int budget = std::min(d.smem_block, d.smem_sm / per_sm - 1024);
    const int fixed = v1_fixed_bytes(p.head_size, p.group, p.partition_size, p.block_size);
    const int slot  = v1_slot_bytes(p.head_size);
    const int tiles = (p.partition_size + kV1Tile - 1) / kV1Tile, most = 2 * ((tiles + csplit - 1) / csplit);
    slots = std::max(2, std::min(most, (budget - fixed) / slot));
    smem = size_t(fixed) + size_t(slots) * slot;
}

template <typename T, bool kNhd>
auto v1_kernel(const Params& p)
{
    return p.head_size <= 128 ? &pa_v1_kernel<T, kNhd, 4> : &pa_v1_kernel<T, kNhd, kMaxHead / kX / kV1Warps>;
}

// Whether a kernel runs code compiled for sm_90 or newer (its cluster merge and programmatic-launch controls exist
// only there; a PTX of an older target JIT-compiled on an sm_90 GPU has neither)
inline bool has_sm90_code(const void* kernel)
{
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, kernel) != cudaSuccess)
        return (void)cudaGetLastError(), false;
    return fa.binaryVersion >= 90 && fa.ptxVersion >= 90;
}

inline cudaLaunchConfig_t v1_config(dim3 grid, int csplit, size_t smem, cudaStream_t stream, cudaLaunchAttribute& at)
{
    at = cudaLaunchAttribute{};
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = unsigned(csplit), at.val.clusterDim.y = at.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid.x * csplit, grid.y, grid.z), cfg.blockDim = dim3(kV1Threads);
    cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cfg.attrs = &at, cfg.numAttrs = csplit > 1 ? 1 : 0;
    return cfg;
}

// What the generic kernel's launch needs of the current GPU: its SMs, and (once per device: a failed query is asked
// again next call) whether the kernels run sm_90 code (the cluster merge and the programmatic launch of the combine
// exist only there) and the largest cluster of them it runs with a whole SM's shared memory each (1, 2, 4 or 8).
// Every instance has the same launch bounds; the one with the most registers answers for all.
// "" or the CUDA error
std::string v1_device(V1Device& d)
{
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices]; // 1 + max cluster + 16 x sm90, 0: not yet known
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        cudaDeviceGetAttribute(&d.smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ||
        cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev))
        return mha::cuda_error_reason("querying the device", cudaGetLastError());
    if (const int k = dev < kDevices ? known[dev].load(std::memory_order_relaxed) : 0; k > 0)
        return d.max_cluster = (k - 1) % 16, d.sm90 = (k - 1) / 16 != 0, "";
    auto kernel = &pa_v1_kernel<__nv_bfloat16, false, kMaxHead / kX / kV1Warps>;
    const int smem_most = std::min(227 * 1024, d.smem_block); // sm_90's 227 KB; 99 KB on sm_120
    d.max_cluster = 1;
    d.sm90 = major >= 9 && has_sm90_code(reinterpret_cast<const void*>(kernel));
    bool answered = true;
    if (d.sm90)
    {
        if (set_max_dynamic_smem(kernel, smem_most) != cudaSuccess)
            return mha::cuda_error_reason("querying the device", cudaGetLastError());
        d.max_cluster = probe_clusters(kernel, kV1MaxCluster, [smem_most](int c, cudaLaunchAttribute& at) {
            return v1_config(dim3(1, 1, 1), c, smem_most, nullptr, at);
        }, answered);
    }
    if (answered && dev < kDevices)
        known[dev].store(1 + d.max_cluster + 16 * int(d.sm90), std::memory_order_relaxed);
    return "";
}

// The caller's partitions merged k at a time (k a power of two, k x partition_size <= 1024) while the grid keeps at
// least 3.5 CTAs per SM: fewer, longer CTAs (set-up and block ids amortised, fewer partials to combine, one partition
// and no combine where k covers the context) where the grid has CTAs to spare; and a small grid (within half the SMs,
// clusters available) whose contexts fit 1024 tokens takes them as one partition. The workspace holds the merged
// partials in the same layout (fewer of them).
// H100, 32 query / 8 KV heads, d128, block 16, partitions of 256, GB/s with k = 1 / 2 / 4 (the k chosen marked *):
// b=1 8k 1375* / 1076 / 1043, 32k 1907 / 2327* / 2190; b=16 1k 1970* / 1834 / 1400, 2k 2272 / 2385* / 2182, 8k 2712 /
// 2783 / 2836*, 32k 2868 / 2934 / 2929*; b=64 1k 2346 / 2380 / 2528*, 4k 2849 / 2866 / 2916*, 32k 2939 / 2995 /
// 3030* (pa_fwd_asm: 1278, 2020; 2040, 2410, 2860, 3017; 2520, 2918, 3055). One partition for small grids, before ->
// after: b=1 512 / 768 / 1k 146 / 215 / 277 -> 178-180 / 239-243 / 294-297, b=2 512 / 768 / 1k 287 / 373 / 482 ->
// 337-341 / 453-459 / 548-554, b=4 512 474 -> 559-566 (pa_fwd_asm 140 / 198 / 284, 269 / 382 / 481, 430); NHD,
// partitions of 128: b=1 512 133 -> 170, 1k 280 -> 272, b=2 512 275 -> 322, 1k 497 -> 511.
void v1_merge_partitions(Params& p, int max_context_len, int num_seqs, const V1Device& d)
{
    const int sms = d.sms;
    auto ctas = [&](int partition) {
        return (int64_t(max_context_len) + partition - 1) / partition * (p.num_heads / p.group) * num_seqs;
    };
    // a merged partition must still take the ring's two slots (GPUs of 99 KB per block: sm_86 / 89 / 120)
    auto fits = [&](int partition) {
        return v1_fixed_bytes(p.head_size, p.group, partition, p.block_size) + 2 * v1_slot_bytes(p.head_size) <=
               d.smem_block;
    };
    int k = 1;
    while (p.partition_size * k * 2 <= kMaxPartition && ctas(p.partition_size * k * 2) * 2 >= int64_t(7) * sms &&
           fits(p.partition_size * k * 2))
        k *= 2;
    // a grid within half the SMs whose contexts fit one partition of up to 1024 tokens: that one partition, split
    // over a cluster instead, and no combine
    const int64_t whole = (int64_t(max_context_len) + p.partition_size - 1) / p.partition_size; // of the context
    if (k == 1 && whole > 1 && whole * p.partition_size <= kMaxPartition && ctas(p.partition_size) * 2 <= sms &&
        d.max_cluster > 1 && fits(int(whole * p.partition_size)))
        k = int(whole);
    p.partition_size *= k;
    p.num_partitions = int(std::max<int64_t>(1, (int64_t(max_context_len) + p.partition_size - 1) / p.partition_size));
}

// CTAs per partition (a cluster, 1 / 2 / 4 / 8): doubled while the grid stays within the SMs and every CTA keeps at
// least two of the partition's K tiles (max_context_len's), up to the device's largest. A grid that small is bound by
// each CTA's round trips rather than by the DRAM (H100 measurements: docs/decode_log.md, thirty-second session).
int v1_cluster(const Params& p, dim3 grid, int max_context_len, const V1Device& d)
{
    const int64_t ctas = int64_t(grid.x) * grid.y * grid.z;
    const int tiles = (std::min(p.partition_size, std::max(1, max_context_len)) + kV1Tile - 1) / kV1Tile;
    int c = 1;
    while (c * 2 <= d.max_cluster && ctas * c * 2 <= d.sms && c * 2 * 2 <= tiles)
        c *= 2;
    return c;
}

template <typename T, bool kNhd>
cudaError_t v1_launch(const Params& p, dim3 grid, int csplit, int slots, size_t smem, cudaStream_t stream)
{
    auto kernel = v1_kernel<T, kNhd>(p);
    cudaError_t e = set_max_dynamic_smem(kernel, int(smem));
    if (e != cudaSuccess)
        return e;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = v1_config(grid, csplit, smem, stream, at);
    e = cudaLaunchKernelEx(&cfg, kernel, p, slots, csplit);
    return e != cudaSuccess ? e : cudaGetLastError();
}

// The partition combine, a programmatic dependent of the partition kernel where the GPU has them (sm_90 on)
template <typename T>
cudaError_t v1_reduce_launch(const Params& p, int num_heads, int num_seqs, bool dependent, cudaStream_t stream)
{
    cudaLaunchAttribute at{};
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(num_heads, num_seqs), cfg.blockDim = dim3(kV1Threads), cfg.stream = stream;
    cfg.attrs = &at, cfg.numAttrs = dependent ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, &pa_v1_reduce_kernel<T>, p);
    return e != cudaSuccess ? e : cudaGetLastError();
}

} // namespace mha::paged

namespace aiter {

int64_t paged_attention_workspace_bytes(int num_seqs, int num_heads, int head_size, int max_context_len,
                                        int partition_size, int elem_bytes)
{
    // -1 (with the reason in mha_get_last_error) for arguments no call accepts (paged_attention_v1's limits; within
    // them the product fits 64 bits)
    using mha::str;
    auto refuse = [](const std::string& why) -> int64_t {
        mha_set_last_error("paged_attention_workspace_bytes: invalid argument: " + why);
        return -1;
    };
    mha_set_last_error("");
    if (partition_size < 1)
        return refuse("partition_size must be >= 1, got " + str(partition_size));
    if (num_seqs < 0 || num_seqs > 65535 || num_heads < 0 || num_heads > 65535)
        return refuse("num_seqs and num_heads must be in [0, 65535], got " + str(num_seqs) + " and " + str(num_heads));
    if (head_size < 0 || head_size > mha::paged::kMaxHead)
        return refuse("head_size must be in [0, " + str(mha::paged::kMaxHead) + "], got " + str(head_size));
    if (max_context_len < 0)
        return refuse("max_context_len must be >= 0, got " + str(max_context_len));
    if (elem_bytes < 1 || elem_bytes > 8)
        return refuse("elem_bytes must be in [1, 8], got " + str(elem_bytes));
    const int64_t parts = (int64_t(max_context_len) + partition_size - 1) / partition_size;
    if (parts <= 1)
        return 0;
    if (parts > 65535)
        return refuse(str(parts) + " partitions of " + str(partition_size) + " keys for max_context_len " +
                      str(max_context_len) + "; at most 65535");
    return int64_t(num_seqs) * num_heads * parts * (int64_t(head_size) * elem_bytes + 2 * int64_t(sizeof(float)));
}

float paged_attention_v1(const paged_attention_args& a, const ck_tile::stream_config& s)
{
    using namespace mha::paged;
    using mha::aligned, mha::str;
    mha_set_last_error("");
    const std::string who = "paged_attention_v1: invalid argument: ";
    if (std::string why = check_common(a); !why.empty())
        return mha::fail(who + why);
    if (a.partition_size < a.block_size || a.partition_size > kMaxPartition || a.partition_size % a.block_size != 0)
        return mha::fail(who + "partition_size must be a multiple of block_size in [block_size, 1024], got " +
                         str(a.partition_size));
    if (!a.nhd && a.block_size % kX != 0)
        return mha::fail(who + "the HND layout needs block_size to be a multiple of 8, got " + str(a.block_size));
    // Without token strides, NHD rows are tokens of num_kv_heads x head_size contiguous elements: a padded head stride
    // has no token stride to go with it
    if (a.nhd && a.num_kv_heads > 1 && ((a.k_stride_token == 0 && a.k_stride_head != a.head_size) ||
                                        (a.v_stride_token == 0 && a.v_stride_head != a.head_size)))
        return mha::fail(who + "the NHD layout without k_stride_token / v_stride_token needs k_stride_head and "
                         "v_stride_head equal to head_size (" + str(a.head_size) + "), got " + str(a.k_stride_head) +
                         " and " + str(a.v_stride_head));
    if (!a.nhd && (a.k_stride_token != 0 || a.v_stride_token != 0))
        return mha::fail(who + "k_stride_token / v_stride_token are for token-major caches (nhd = true); the HND "
                         "layout's token strides are fixed");
    if (a.alibi_slopes != nullptr && !aligned(a.alibi_slopes, 4))
        return mha::fail(who + "alibi_slopes must be 4-byte aligned fp32");
    const int elem = 2;
    const int64_t need = paged_attention_workspace_bytes(a.num_seqs, a.num_heads, a.head_size, a.max_context_len,
                                                         a.partition_size, elem);
    if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need || !aligned(a.workspace, 16)))
        return mha::fail(who + "workspace too small: " + str(a.max_context_len) + " tokens in partitions of " +
                         str(a.partition_size) + " need " + str(need) + " bytes (16-byte aligned), got " +
                         str(a.workspace == nullptr ? 0 : a.workspace_bytes));
    Params p = make_params(a);
    p.partition_size = a.partition_size;
    const int64_t parts = std::max<int64_t>(1, (int64_t(a.max_context_len) + a.partition_size - 1) / a.partition_size);
    if (parts > 65535)
        return mha::fail(who + "max_context_len / partition_size must be <= 65535 partitions");
    p.num_partitions = int(parts);
    p.token_end = int(std::min<int64_t>(INT_MAX, int64_t(p.num_partitions) * p.partition_size));
    V1Device dev;
    if (std::string why = v1_device(dev); !why.empty())
        return mha::fail("paged_attention_v1: " + why);
    v1_merge_partitions(p, a.max_context_len, a.num_seqs, dev);
    if (p.num_partitions > 1)
    {
        const int64_t n = int64_t(a.num_seqs) * a.num_heads * p.num_partitions;
        p.exp_sums   = static_cast<float*>(a.workspace);
        p.max_logits = p.exp_sums + n;
        p.tmp_out    = p.max_logits + n;
    }
    const char* name = a.data_type == "bf16" ? "pa_v1_bf16" : "pa_v1_fp16";
    mha_set_last_kernel_name(name);
    const dim3 grid(p.num_partitions, p.num_heads / p.group, a.num_seqs);
    const bool bf16 = a.data_type == "bf16";
    const int csplit = v1_cluster(p, grid, a.max_context_len, dev);
    int slots = 0;
    size_t smem = 0;
    v1_ring(p, grid, csplit, dev, slots, smem);
    if (smem > size_t(dev.smem_block))
        return mha::fail("paged_attention_v1: head_size " + str(a.head_size) + " with " + str(p.group) +
                         " query heads per KV head and partitions of " + str(p.partition_size) + " tokens need " +
                         str(int64_t(smem)) + " bytes of shared memory per CTA; this GPU allows " +
                         str(dev.smem_block));
    const bool dependent = dev.sm90; // the combine as a programmatic dependent launch
    auto pass = [&]() -> cudaError_t {
        cudaError_t e;
        if (bf16)
            e = a.nhd ? v1_launch<__nv_bfloat16, true>(p, grid, csplit, slots, smem, s.stream_id_)
                      : v1_launch<__nv_bfloat16, false>(p, grid, csplit, slots, smem, s.stream_id_);
        else
            e = a.nhd ? v1_launch<__half, true>(p, grid, csplit, slots, smem, s.stream_id_)
                      : v1_launch<__half, false>(p, grid, csplit, slots, smem, s.stream_id_);
        if (e != cudaSuccess || p.num_partitions == 1)
            return e;
        return bf16 ? v1_reduce_launch<__nv_bfloat16>(p, a.num_heads, a.num_seqs, dependent, s.stream_id_)
                    : v1_reduce_launch<__half>(p, a.num_heads, a.num_seqs, dependent, s.stream_id_);
    };
    return mha::launch_and_time(s, name, pass);
}

float pa_fwd_asm(const paged_attention_args& a, const ck_tile::stream_config& s)
{
    using namespace mha::paged;
    using mha::aligned, mha::str;
    mha_set_last_error("");
    const std::string who = "pa_fwd_asm: invalid argument: ";
    if (std::string why = check_common(a); !why.empty())
        return mha::fail(who + why);
    if (a.head_size != kAsmHead)
        return mha::fail("pa_fwd_asm: ASM PA only supports head_size=128, got " + str(a.head_size));
    if (a.block_size != kAsmBlock)
        return mha::fail("pa_fwd_asm: only block_size=16 is supported, got " + str(a.block_size));
    if (a.nhd || a.k_stride_token != 0 || a.v_stride_token != 0 || a.alibi_slopes != nullptr ||
        a.logits_soft_cap > 0.f || a.sliding_window > 0)
        return mha::fail(who + "the asm layout has no NHD, ALiBi, soft-cap or sliding window (use paged_attention_v1)");
    Params p = make_params(a);
    const char* name = a.data_type == "bf16" ? "pa_asm_bf16_d128_b16" : "pa_asm_fp16_d128_b16";
    mha_set_last_kernel_name(name);
    const bool bf16 = a.data_type == "bf16";
    int splits = 1;
    if (std::string why = bf16 ? asm_splits<__nv_bfloat16>(p, a.num_seqs, a.num_kv_heads, a.max_context_len, splits)
                               : asm_splits<__half>(p, a.num_seqs, a.num_kv_heads, a.max_context_len, splits);
        !why.empty())
        return mha::fail("pa_fwd_asm: " + why);
    auto pass = [&]() -> cudaError_t {
        return bf16 ? asm_launch<__nv_bfloat16>(p, a.num_seqs, a.num_kv_heads, splits, s.stream_id_)
                    : asm_launch<__half>(p, a.num_seqs, a.num_kv_heads, splits, s.stream_id_);
    };
    return mha::launch_and_time(s, name, pass);
}

} // namespace aiter
