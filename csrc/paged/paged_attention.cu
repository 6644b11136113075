// Paged-attention decode over vLLM-style caches (include/mha_paged.h): the generic partitioned kernel
// (paged_attention_v1) with its partition-combine kernel, and the tuned asm-layout kernel (pa_fwd_asm).
// Both are SIMT kernels: decode is memory-bound, and one query row per head leaves nothing for the tensor cores.
// Each CTA serves the query heads of one KV head (up to kMaxGroup at a time), so every K/V byte is read once for
// the whole GQA group; block ids are 32-bit, every offset 64-bit.

#include "mha_paged.h"

#include "../api/error.h"
#include "../api/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

namespace mha::paged {

constexpr int kX        = 8;   // elements per 16-byte chunk (fp16 / bf16)
constexpr int kMaxGroup = 16;  // query heads per CTA
constexpr int kMaxHead  = 256;
constexpr int kV1Threads = 128, kV1Warps = kV1Threads / 32;
constexpr int kMaxPartition = 1024;
constexpr int kAsmHead = 128, kAsmBlock = 16, kAsmThreads = 256, kAsmWarps = kAsmThreads / 32;

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
    int max_ctx; // block_size x table_stride (capped at INT_MAX): context_lens are clamped to [0, max_ctx]
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
// Tuned kernel (head 128, block 16, asm V layout): CTA (head group, sequence), 8 warps each walking every 8th block
// of 16 tokens with an online softmax; lane l scores token l % 16 over head-dim half l / 16, and owns output columns
// l + 32 j. The warps' states are merged through shared memory at the end.
// ---------------------------------------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kAsmThreads) pa_asm_kernel(const __grid_constant__ Params p)
{
    extern __shared__ float smem[];
    const int hg = blockIdx.x, seq = blockIdx.y, G = p.group;
    const int head0 = hg * G, kvh = head0 / p.ratio;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    float* q_s   = smem;                                   // [G][128]
    float* p_s   = q_s + kMaxGroup * kAsmHead;             // [warps][G][16]
    float* acc_s = p_s + kAsmWarps * kMaxGroup * kAsmBlock; // [warps][G][128]
    float* ml_s  = acc_s + kAsmWarps * kMaxGroup * kAsmHead; // [warps][G][2]
    for (int i = tid; i < G * kAsmHead; i += kAsmThreads)
        q_s[i] = to_f(static_cast<const T*>(p.q)[seq * p.q_seq + (head0 + i / kAsmHead) * p.q_head + i % kAsmHead]);
    __syncthreads();

    const int ctx = context_len(p, seq);
    const int32_t* table = p.block_tables + int64_t(seq) * p.table_stride;
    const T* kc = static_cast<const T*>(p.k);
    const T* vc = static_cast<const T*>(p.v);
    const int tok = lane % kAsmBlock, half = lane / kAsmBlock;

    float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][4];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
    {
        m[g] = -INFINITY, l[g] = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            acc[g][j] = 0.f;
    }
    const int nblocks = (ctx + kAsmBlock - 1) / kAsmBlock;
    for (int b = warp; b < nblocks; b += kAsmWarps)
    {
        const int64_t blk = table[b];
        const T* kb = kc + blk * p.k_block + kvh * p.k_head;
        const T* vb = vc + blk * p.v_block + kvh * p.v_head;
        const int t = b * kAsmBlock + tok;
        // K: chunk c of token tok at (c * 16 + tok) * 8
        float s[kMaxGroup];
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g)
            s[g] = 0.f;
#pragma unroll
        for (int cc = 0; cc < 8; ++cc)
        {
            const int c = half * 8 + cc;
            float kf[8];
            load8(kb + (c * kAsmBlock + tok) * kX, kf);
#pragma unroll
            for (int g = 0; g < kMaxGroup; ++g)
                if (g < G)
                {
                    const float* qg = q_s + g * kAsmHead + c * kX;
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        s[g] += qg[e] * kf[e];
                }
        }
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g)
        {
            if (g >= G)
                continue;
            float x = s[g] + __shfl_xor_sync(0xffffffff, s[g], 16);
            x = t < ctx ? x * p.scale : -INFINITY;
            float bm = x;
            for (int o = 8; o > 0; o /= 2)
                bm = fmaxf(bm, __shfl_xor_sync(0xffffffff, bm, o));
            const float mn   = fmaxf(m[g], bm); // finite: the block holds at least one token
            const float corr = __expf(m[g] - mn);
            const float e    = __expf(x - mn);
            float es = e;
            for (int o = 8; o > 0; o /= 2)
                es += __shfl_xor_sync(0xffffffff, es, o);
            l[g] = l[g] * corr + es;
            m[g] = mn;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                acc[g][j] *= corr;
            if (half == 0)
                p_s[(warp * kMaxGroup + g) * kAsmBlock + tok] = e;
        }
        __syncwarp();
        // V: tokens 8 tg .. 8 tg + 7 of column d at (tg * 128 + d) * 8
#pragma unroll
        for (int j = 0; j < 4; ++j)
        {
            const int d = lane + 32 * j;
#pragma unroll
            for (int tg = 0; tg < 2; ++tg)
            {
                float vf[8];
                load8(vb + (tg * kAsmHead + d) * kX, vf);
#pragma unroll
#pragma unroll
                for (int e = 0; e < 8; ++e) // slots past the context may hold anything (0 * NaN = NaN)
                    if (b * kAsmBlock + tg * kX + e >= ctx)
                        vf[e] = 0.f;
#pragma unroll
                for (int g = 0; g < kMaxGroup; ++g)
                    if (g < G)
                    {
                        const float* pg = p_s + (warp * kMaxGroup + g) * kAsmBlock + tg * kX;
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            acc[g][j] += pg[e] * vf[e];
                    }
            }
        }
        __syncwarp();
    }
    // merge the warps
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
    {
        if (g >= G)
            continue;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            acc_s[(warp * kMaxGroup + g) * kAsmHead + lane + 32 * j] = acc[g][j];
        if (lane == 0)
            ml_s[(warp * kMaxGroup + g) * 2] = m[g], ml_s[(warp * kMaxGroup + g) * 2 + 1] = l[g];
    }
    __syncthreads();
    for (int i = tid; i < G * kAsmHead; i += kAsmThreads)
    {
        const int g = i / kAsmHead, d = i % kAsmHead;
        float mx = -INFINITY;
        for (int w = 0; w < kAsmWarps; ++w)
            mx = fmaxf(mx, ml_s[(w * kMaxGroup + g) * 2]);
        float num = 0.f, den = 0.f;
        if (mx != -INFINITY)
            for (int w = 0; w < kAsmWarps; ++w)
            {
                const float f = __expf(ml_s[(w * kMaxGroup + g) * 2] - mx);
                num += f * acc_s[(w * kMaxGroup + g) * kAsmHead + d];
                den += f * ml_s[(w * kMaxGroup + g) * 2 + 1];
            }
        static_cast<T*>(p.out)[seq * p.o_seq + (head0 + g) * p.o_head + d] = T(den > 0.f ? num / den : 0.f);
    }
}

constexpr size_t kAsmSmemBytes =
    sizeof(float) * (kMaxGroup * kAsmHead + kAsmWarps * kMaxGroup * (kAsmBlock + kAsmHead + 2));

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
    p.max_ctx = int(std::min<int64_t>(INT_MAX, int64_t(a.block_size) * a.block_tables_stride));
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
    auto pass = [&]() -> cudaError_t {
        const dim3 grid(a.num_heads / p.group, a.num_seqs);
        cudaError_t e;
        if (a.data_type == "bf16")
        {
            e = cudaFuncSetAttribute(&pa_asm_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(kAsmSmemBytes));
            if (e == cudaSuccess)
                pa_asm_kernel<__nv_bfloat16><<<grid, kAsmThreads, kAsmSmemBytes, s.stream_id_>>>(p);
        }
        else
        {
            e = cudaFuncSetAttribute(&pa_asm_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(kAsmSmemBytes));
            if (e == cudaSuccess)
                pa_asm_kernel<__half><<<grid, kAsmThreads, kAsmSmemBytes, s.stream_id_>>>(p);
        }
        return e != cudaSuccess ? e : cudaGetLastError();
    };
    return mha::launch_and_time(s, name, pass);
}

} // namespace aiter
