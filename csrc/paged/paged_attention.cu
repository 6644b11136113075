// Paged-attention decode over vLLM-style caches (include/mha_paged.h): the generic partitioned kernel
// (paged_attention_v1) with its partition-combine kernel, and the tuned asm-layout kernel (pa_fwd_asm).
// The generic kernel is SIMT (any head size, block size, layout and score modifier); the tuned one runs its dot
// products on the tensor cores (m16n8k16, 16 query heads per KV head at a time), streams K / V through per-warp
// cp.async rings and splits long contexts over thread-block clusters. Each CTA serves the query heads of one KV head,
// so every K/V byte is read once for the whole GQA group (up to 16 heads); block ids are 32-bit, every offset 64-bit.

#include "mha_paged.h"

#include "../api/error.h"
#include "../api/launch.h"
#include "../common/mma_sync.h"

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

// 16 bytes of 8 elements -> 8 floats
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8])
{
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i)
        f[i] = to_f(e[i]);
}

__device__ __forceinline__ float score_mod(float s, const Params& p, int head, int token, int ctx)
{
    s *= p.scale;
    if (p.softcap > 0.f)
        s = p.softcap * tanhf(s / p.softcap);
    if (p.alibi != nullptr)
        s += p.alibi[head] * float(token - ctx + 1); // vLLM: slope * (token position - last position)
    return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Generic kernel: CTA (partition, head group, sequence). Scores of the partition's tokens go to shared memory, then a
// softmax per head, then O = P V with each thread owning head-dim columns.
// ---------------------------------------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kV1Threads) pa_v1_kernel(const __grid_constant__ Params p)
{
    extern __shared__ float smem[];
    const int part = blockIdx.x, hg = blockIdx.y, seq = blockIdx.z;
    const int G = p.group, D = p.head_size, P = p.partition_size, bs = p.block_size;
    const int head0 = hg * G, kvh = head0 / p.ratio;
    const int ctx   = context_len(p, seq);
    const int start = part * P, end = min(start + P, ctx);
    if (start >= ctx && !(ctx == 0 && part == 0))
        return; // partitions past the context are never combined
    const int lo = p.sliding_window > 0 ? max(0, ctx - p.sliding_window) : 0;
    float* q_s    = smem;          // [G][D]
    float* logits = q_s + G * D;   // [G][P]
    float* stats  = logits + G * P; // max[G], sum[G]
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    for (int i = tid; i < G * D; i += kV1Threads)
    {
        const int g = i / D, d = i % D;
        q_s[i] = to_f(static_cast<const T*>(p.q)[seq * p.q_seq + (head0 + g) * p.q_head + d]);
    }
    __syncthreads();

    const int32_t* table = p.block_tables + int64_t(seq) * p.table_stride;
    const T* kc = static_cast<const T*>(p.k);
    const T* vc = static_cast<const T*>(p.v);

    // S: L lanes per token (one 16-byte chunk each), 32 / L tokens per warp step
    const int chunks = D / kX;
    int L = 1;
    while (L < chunks)
        L *= 2;
    const int per_warp = 32 / L, sub = lane / L, c = lane % L;
    for (int t0 = start + warp * per_warp; t0 < end; t0 += kV1Warps * per_warp)
    {
        const int t = t0 + sub;
        float kf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (t < end && c < chunks)
        {
            const int64_t blk = table[t / bs];
            load8(kc + blk * p.k_block + kvh * p.k_head + c * p.k_chunk + (t % bs) * p.k_token, kf);
        }
        for (int g = 0; g < G; ++g)
        {
            float acc = 0.f;
            if (c < chunks)
            {
                const float* qg = q_s + g * D + c * kX;
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    acc += qg[e] * kf[e];
            }
            for (int o = L / 2; o > 0; o /= 2)
                acc += __shfl_xor_sync(0xffffffff, acc, o);
            if (c == 0 && t < end)
                logits[g * P + (t - start)] = t < lo ? -INFINITY : score_mod(acc, p, head0 + g, t, ctx);
        }
    }
    __syncthreads();

    // softmax per head: a warp per head
    const int n = end - start;
    for (int g = warp; g < G; g += kV1Warps)
    {
        float m = -INFINITY;
        for (int i = lane; i < n; i += 32)
            m = fmaxf(m, logits[g * P + i]);
        for (int o = 16; o > 0; o /= 2)
            m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        float sum = 0.f;
        for (int i = lane; i < n; i += 32)
        {
            const float e = m == -INFINITY ? 0.f : __expf(logits[g * P + i] - m);
            logits[g * P + i] = e;
            sum += e;
        }
        for (int o = 16; o > 0; o /= 2)
            sum += __shfl_xor_sync(0xffffffff, sum, o);
        if (lane == 0)
            stats[g] = m, stats[G + g] = sum;
    }
    __syncthreads();

    // O = P V: thread owns columns d = tid, tid + 128
    for (int d = tid; d < D; d += kV1Threads)
    {
        float acc[kMaxGroup];
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g)
            acc[g] = 0.f;
        if (p.v_token == 1 && bs % kX == 0) // HND: 8 consecutive tokens of one column are one 16-byte chunk
        {
            for (int t = start & ~(kX - 1); t < end; t += kX)
            {
                const int64_t blk = table[t / bs];
                float vf[8];
                load8(vc + blk * p.v_block + kvh * p.v_head + d * p.v_dim + (t % bs), vf);
#pragma unroll
                for (int e = 0; e < 8; ++e)
                {
                    const int tt = t + e;
                    if (tt < start || tt >= end)
                        continue;
#pragma unroll
                    for (int g = 0; g < kMaxGroup; ++g)
                        if (g < G)
                            acc[g] += logits[g * P + (tt - start)] * vf[e];
                }
            }
        }
        else // NHD: columns of one token are contiguous across threads
        {
            for (int t = start; t < end; ++t)
            {
                const int64_t blk = table[t / bs];
                const float v = to_f(vc[blk * p.v_block + kvh * p.v_head + d * p.v_dim + (t % bs) * p.v_token]);
#pragma unroll
                for (int g = 0; g < kMaxGroup; ++g)
                    if (g < G)
                        acc[g] += logits[g * P + (t - start)] * v;
            }
        }
        for (int g = 0; g < G; ++g)
        {
            const float sum = stats[G + g];
            const float o   = sum > 0.f ? acc[g] / sum : 0.f;
            const int h     = head0 + g;
            if (p.num_partitions == 1)
                static_cast<T*>(p.out)[seq * p.o_seq + h * p.o_head + d] = T(o);
            else
                static_cast<T*>(p.tmp_out)[((int64_t(seq) * p.num_heads + h) * p.num_partitions + part) * D + d] = T(o);
        }
    }
    if (p.num_partitions > 1 && tid < G)
    {
        const int64_t i = (int64_t(seq) * p.num_heads + head0 + tid) * p.num_partitions + part;
        p.max_logits[i] = stats[tid];
        p.exp_sums[i]   = stats[G + tid];
    }
}

// Partition combine: CTA (head, sequence); O = sum_p w_p O_p / sum_p w_p, w_p = exp_sum_p * exp(max_p - max).
template <typename T>
__global__ void __launch_bounds__(kV1Threads) pa_v1_reduce_kernel(const __grid_constant__ Params p)
{
    const int h = blockIdx.x, seq = blockIdx.y, D = p.head_size;
    const int ctx = context_len(p, seq);
    const int parts = min((ctx + p.partition_size - 1) / p.partition_size, p.num_partitions);
    const int64_t base = (int64_t(seq) * p.num_heads + h) * p.num_partitions;
    float m = -INFINITY;
    for (int i = 0; i < parts; ++i)
        if (p.exp_sums[base + i] > 0.f)
            m = fmaxf(m, p.max_logits[base + i]);
    float total = 0.f;
    for (int i = 0; i < parts; ++i)
        if (p.exp_sums[base + i] > 0.f)
            total += p.exp_sums[base + i] * __expf(p.max_logits[base + i] - m);
    for (int d = threadIdx.x; d < D; d += kV1Threads)
    {
        float acc = 0.f;
        for (int i = 0; i < parts; ++i)
            if (p.exp_sums[base + i] > 0.f)
                acc += p.exp_sums[base + i] * __expf(p.max_logits[base + i] - m) *
                       to_f(static_cast<const T*>(p.tmp_out)[(base + i) * D + d]);
        static_cast<T*>(p.out)[seq * p.o_seq + h * p.o_head + d] = T(total > 0.f ? acc / total : 0.f);
    }
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

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
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
std::string str(long long v) { return std::to_string(v); }

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

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
                      a.k_stride_head, a.v_stride_block, a.v_stride_head})
        if (s < 0 || s % kX != 0)
            return "strides must be non-negative multiples of 8 elements";
    if (!(a.scale > 0.f) || std::isinf(a.scale) || !(a.logits_soft_cap >= 0.f) || std::isinf(a.logits_soft_cap))
        return "scale must be finite and > 0, logits_soft_cap finite and >= 0";
    return "";
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
    const int64_t tok_nhd = int64_t(a.num_kv_heads) * a.head_size;
    p.k_chunk = a.nhd ? kX : int64_t(a.block_size) * kX;
    p.k_token = a.nhd ? tok_nhd : kX;
    p.v_dim   = a.nhd ? 1 : a.block_size;
    p.v_token = a.nhd ? tok_nhd : 1;
    p.scale = a.scale, p.softcap = a.logits_soft_cap, p.sliding_window = a.sliding_window;
    return p;
}

// The attributes the asm kernel's launch needs in the current context (set at every call: they do not survive a
// cudaDeviceReset, and cost next to nothing): 96 KB of dynamic shared memory, clusters of up to 16.
template <typename T>
cudaError_t asm_attributes()
{
    auto kernel = &pa_asm_kernel<T>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kAsmSmemBytes);
    if (e == cudaSuccess && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
                                cudaSuccess)
        (void)cudaGetLastError(); // clusters of up to 8 only (asm_max_cluster asks)
    return e;
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
        for (int c = 2; c <= kAsmMaxCluster; c *= 2)
        {
            cudaLaunchAttribute at;
            const cudaLaunchConfig_t cfg = asm_config(dim3(c, 1, 1), c, at);
            int n = 0;
            const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, kernel, &cfg);
            if (e != cudaSuccess || n < 1)
            {
                // a size the GPU refuses (too large a cluster: invalid value / cluster size) is an answer; anything
                // else may be transient, so this call takes what it has and the next one asks again
                answered = e == cudaSuccess || e == cudaErrorInvalidValue || e == cudaErrorInvalidClusterSize;
                (void)cudaGetLastError();
                break;
            }
            best = c;
        }
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
        return cudaGetErrorString(cudaGetLastError());
    const int max_cluster = asm_max_cluster<T>();
    if (max_cluster < 1)
        return cudaGetErrorString(cudaGetLastError());
    const int64_t pairs = int64_t(seqs) * kv_heads * asm_groups(p.ratio);
    const int64_t blocks = (std::min<int64_t>(p.max_ctx, max_context_len > 0 ? max_context_len : INT_MAX) +
                            kAsmBlock - 1) / kAsmBlock;
    splits = 1;
    while (splits * 2 <= max_cluster && pairs * splits * 2 * 2 <= sms &&
           int64_t(splits) * 2 * 2 * kAsmWarps <= blocks)
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

} // namespace mha::paged

namespace aiter {

int64_t paged_attention_workspace_bytes(int num_seqs, int num_heads, int head_size, int max_context_len,
                                        int partition_size, int elem_bytes)
{
    if (partition_size < 1)
        return -1;
    const int64_t parts = (int64_t(max_context_len) + partition_size - 1) / partition_size;
    if (parts <= 1)
        return 0;
    return int64_t(num_seqs) * num_heads * parts * (int64_t(head_size) * elem_bytes + 2 * int64_t(sizeof(float)));
}

float paged_attention_v1(const paged_attention_args& a, const ck_tile::stream_config& s)
{
    using namespace mha::paged;
    mha_set_last_error("");
    const std::string who = "paged_attention_v1: invalid argument: ";
    if (std::string why = check_common(a); !why.empty())
        return mha::fail(who + why);
    if (a.partition_size < a.block_size || a.partition_size > kMaxPartition || a.partition_size % a.block_size != 0)
        return mha::fail(who + "partition_size must be a multiple of block_size in [block_size, 1024], got " +
                         str(a.partition_size));
    if (!a.nhd && a.block_size % kX != 0)
        return mha::fail(who + "the HND layout needs block_size to be a multiple of 8, got " + str(a.block_size));
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
    p.num_partitions = int(std::max<int64_t>(1, (a.max_context_len + a.partition_size - 1) / a.partition_size));
    if (p.num_partitions > 65535)
        return mha::fail(who + "max_context_len / partition_size must be <= 65535 partitions");
    if (p.num_partitions > 1)
    {
        const int64_t n = int64_t(a.num_seqs) * a.num_heads * p.num_partitions;
        p.exp_sums   = static_cast<float*>(a.workspace);
        p.max_logits = p.exp_sums + n;
        p.tmp_out    = p.max_logits + n;
    }
    const char* name = a.data_type == "bf16" ? "pa_v1_bf16" : "pa_v1_fp16";
    mha_set_last_kernel_name(name);
    auto pass = [&]() -> cudaError_t {
        const size_t smem = sizeof(float) * (size_t(p.group) * (p.head_size + p.partition_size) + 2 * p.group);
        const dim3 grid(p.num_partitions, p.num_heads / p.group, a.num_seqs);
        cudaError_t e;
        if (a.data_type == "bf16")
        {
            e = cudaFuncSetAttribute(&pa_v1_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(smem));
            if (e == cudaSuccess)
                pa_v1_kernel<__nv_bfloat16><<<grid, kV1Threads, smem, s.stream_id_>>>(p);
        }
        else
        {
            e = cudaFuncSetAttribute(&pa_v1_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            if (e == cudaSuccess)
                pa_v1_kernel<__half><<<grid, kV1Threads, smem, s.stream_id_>>>(p);
        }
        if (e != cudaSuccess || (e = cudaGetLastError()) != cudaSuccess || p.num_partitions == 1)
            return e;
        const dim3 rgrid(a.num_heads, a.num_seqs);
        if (a.data_type == "bf16")
            pa_v1_reduce_kernel<__nv_bfloat16><<<rgrid, kV1Threads, 0, s.stream_id_>>>(p);
        else
            pa_v1_reduce_kernel<__half><<<rgrid, kV1Threads, 0, s.stream_id_>>>(p);
        return cudaGetLastError();
    };
    return mha::launch_and_time(s, name, pass);
}

float pa_fwd_asm(const paged_attention_args& a, const ck_tile::stream_config& s)
{
    using namespace mha::paged;
    mha_set_last_error("");
    const std::string who = "pa_fwd_asm: invalid argument: ";
    if (std::string why = check_common(a); !why.empty())
        return mha::fail(who + why);
    if (a.head_size != kAsmHead)
        return mha::fail("pa_fwd_asm: ASM PA only supports head_size=128, got " + str(a.head_size));
    if (a.block_size != kAsmBlock)
        return mha::fail("pa_fwd_asm: only block_size=16 is supported, got " + str(a.block_size));
    if (a.nhd || a.alibi_slopes != nullptr || a.logits_soft_cap > 0.f || a.sliding_window > 0)
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
