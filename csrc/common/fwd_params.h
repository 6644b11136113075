#pragma once
// Device-side arguments of every forward kernel: one plain struct, filled on the host by csrc/api from
// aiter::mha_fwd_args after validation. Strides are 64-bit element counts so offsets never wrap past 2^31.
// Derived values (scale_log2, head ratio, mask offsets) are computed once on the host. Optional features are grouped
// in sub-structs; a null pointer or a zero switches a feature off.

#include <cstdint>

#ifdef __CUDACC__
#define MHA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MHA_HOST_DEVICE inline
#endif

namespace mha {

enum class DType : int
{
    fp16 = 0,
    bf16 = 1,
};

// Mask in FlashAttention's (left, right) form relative to the diagonal of the chosen corner: query row i may see key
// column j iff  i + diag_offset - left <= j <= i + diag_offset + right, where a negative left / right is unbounded and
// diag_offset is 0 for top-left anchoring and seqlen_k - seqlen_q for bottom-right anchoring. No mask = (-1, -1).
// sink_size > 0 additionally keeps key columns [0, sink_size) visible to every row that sees any column at or before
// its diagonal (StreamingLLM sink tokens).
struct MaskParams
{
    int32_t left      = -1;
    int32_t right     = -1;
    bool bottom_right = false;
    int32_t sink_size = 0;
    MHA_HOST_DEVICE bool is_none() const { return left < 0 && right < 0 && sink_size == 0; }
};

// Sequence layout. Batch mode: batch b starts at b * batch_stride and has seqlen_q / seqlen_k rows, or the logical
// lengths in cu_seqlen_*. Group mode: batch b starts at physical row seqstart[b]; its logical length comes from
// seqlen_*_ptr[b], else cu_seqlen_*[b+1] - cu_seqlen_*[b], else seqstart[b+1] - seqstart[b].
struct SeqParams
{
    bool is_group            = false;
    const int32_t* seqstart_q = nullptr;
    const int32_t* seqstart_k = nullptr;
    const int32_t* seqlen_q   = nullptr;
    const int32_t* seqlen_k   = nullptr;
    const int32_t* cu_seqlen_q = nullptr;
    const int32_t* cu_seqlen_k = nullptr;
    int32_t min_seqlen_q = 0; // group mode: batches with fewer query rows are skipped (CK's skip_min_seqlen_q)
};

// Score modifiers, applied in this order to s = scale * q.k (natural-log units): soft-cap, elementwise bias, ALiBi.
struct ScoreModParams
{
    float softcap = 0.f;          // > 0: s = softcap * tanh(s / softcap)
    const void* bias = nullptr;   // elementwise bias in the input dtype
    int64_t bias_row_stride = 0, bias_head_stride = 0, bias_batch_stride = 0;
    const float* alibi_slopes = nullptr; // fp32 slope per (batch, head): slopes[b * alibi_batch_stride + h]
    int64_t alibi_batch_stride = 0;
    // CK's ALiBi position: 0 -|i + sk - sq - j| (no mask, bottom-right), 1 -|i - j| (top-left), 2 +j (causal)
    int32_t alibi_mode = 0;
    const float* sink = nullptr;  // fp32 per-head sink logit joining every row's softmax denominator
};

// Dropout: keep an element iff its uint8 random value <= keep_threshold (floor(p_keep * 255)), then scale by 1/p_keep.
struct DropoutParams
{
    bool enabled = false;
    uint8_t keep_threshold = 255;
    float rp_keep = 1.f;                 // 1 / (1 - p_drop)
    float p_keep = 1.f;                  // 1 - p_drop: the backward's D = rowsum(dO * O) is stored times it, as CK's
    uint64_t seed = 0, offset = 0;
    const uint64_t* seed_ptr = nullptr;  // device values override seed / offset when set
    const uint64_t* offset_ptr = nullptr;
    uint8_t* randval = nullptr;          // optional store of the random values used
    int64_t randval_row_stride = 0, randval_head_stride = 0, randval_batch_stride = 0;
};

// K/V cache addressing of the split-KV / batch-prefill kernels (instances with kSplit). Dense: batch b's keys start
// at (cache_batch_idx ? cache_batch_idx[b] : b) * k_batch_stride. Paged (page_size > 0): key row j of batch b is row
// j % page_size of page pages[j / page_size], where pages = block_table + b * block_table_batch_stride, or
// page_indices + page_indptr[b] (SGLang's table); a page starts at page * k_batch_stride (page ids are 32-bit, the
// products 64-bit, so pools past 65,536 pages and 2^31 elements are fine).
// An opaque CUtensorMap (cuda.h), kept as bytes so that this header needs no driver API.
struct alignas(64) TmaDesc
{
    unsigned long long bytes[16];
};

struct KvCacheParams
{
    int32_t page_size = 0;                   // 0: dense
    const int32_t* block_table = nullptr;    // [batch, max_pages_per_seq]
    int64_t block_table_batch_stride = 0;
    const int32_t* page_indptr = nullptr;    // [batch + 1]
    const int32_t* page_indices = nullptr;   // [page_indptr[batch]]
    const int32_t* last_page_lens = nullptr; // [batch]: seqlen_k = page_size * (pages - 1) + last_page_lens[b]
    const int32_t* cache_batch_idx = nullptr; // [batch], dense only
    const int32_t* seqlen_k = nullptr;       // batch mode: per-batch key count (kv cache fill), else p.seqlen_k
    // Decode tile on sm_90 (csrc/ck/decode_ring.cuh): tensor maps of K and V with boxes of tma_box_rows rows and of
    // one row, filled by the launcher; tma_box_rows = 0 selects the cp.async loop.
    int32_t tma_box_rows = 0;
    TmaDesc tma_k, tma_v, tma_k1, tma_v1;
};

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by a multiply-high, an add and a shift (the round-up
// method of Granlund and Montgomery, "Division by invariant integers using multiplication", 1994): with
// l = ceil(log2 d) and mul = floor(2^32 (2^l - d) / d) + 1, n / d = (umulhi(n, mul) + n) >> l, where the sum stays
// below 2^32 because umulhi(n, mul) <= n < 2^31. The launcher builds it for the split kernel's divisions by
// num_splits: a division by a run-time value is ~20 dependent instructions, and the decode tile's one warp runs its
// set-up alone on its SM sub-partition before the first key block is copied.
struct FastDiv
{
    uint32_t mul   = 1;
    uint32_t shift = 0;

    static FastDiv make(int32_t divisor) // host; the callers validated divisor >= 1
    {
        const uint64_t d = divisor < 1 ? 1 : uint64_t(divisor);
        FastDiv f;
        while ((uint64_t(1) << f.shift) < d)
            ++f.shift;
        f.mul = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << f.shift) - d) / d + 1);
        return f;
    }
    MHA_HOST_DEVICE int32_t div(int32_t n) const
    {
#ifdef __CUDA_ARCH__
        const uint32_t hi = __umulhi(uint32_t(n), mul);
#else
        const uint32_t hi = uint32_t((uint64_t(uint32_t(n)) * mul) >> 32);
#endif
        return int32_t((hi + uint32_t(n)) >> shift);
    }
};

// The most splits of one call: the API's bound on num_splits and the combine kernel's weight table.
constexpr int kMaxSplits = 128;
// Split-KV decode on sm_90 (the tensor-copy ring) launches thread-block clusters with the load-balancing placement
// policy (fwd_launch.cuh):
// - 2 to kClusterMergeMaxSplits splits (the portable cluster size): the splits of a tile form one cluster and merge
//   their partials through distributed shared memory, without the global partials and the combine kernel.
// - One split and at least kPlacementClusterMinBlocks key blocks: clusters of kPlacementCluster tiles, for their
//   placement alone: KV heads of one batch (grid y) where their count divides, else batches of one KV head (grid z).
// Same-call A/B on H200 (bf16, 32 q / 8 KV heads, d128, bhsd, us per call, before -> after):
// - merge, b=16 (4 splits): 1k 27.4 -> 23.9, 2k 43.8 -> 40.0, 8k 134.1 -> 129.3, 32k 492.3 -> 482.1,
//   128k 1869 -> 1859; b=8 8k (8 splits) 73.7 -> 70.0; b=32 4k 135.1 -> 130.0.
// - The same clusters with the default placement lost at length (b=16: 8k 138.2, 32k 517.0, 128k 2025): that
//   policy loads the SMs unevenly, and this kernel's bandwidth is shared per SM.
// - placement, b=64 (one split): 4k 243.4 -> 241.8, 8k 482.5 -> 470.0, 32k 1871 -> 1858, 128k 7403 -> 7385;
//   2k even (125.9), 1k 67.4 -> 68.1, hence the bound. Along the KV heads instead of the batches (H100, same call,
//   two passes, KV GB/s, batches -> heads -> no cluster): bshd b=64 8k 3076-3077 -> 3096-3098 -> 3074-3078, 32k
//   3073-3074 -> 3101-3102 -> 3082-3093, 128k 3101 -> 3113-3114 -> 3090; bhsd b=64 8k 3059 -> 3059 -> 3049-3051, 32k
//   3076-3078 -> 3072-3084 -> 3063-3065, 128k 3095 -> 3098-3099 -> 3072-3074; b=32 32k even. In bshd the heads of a
//   batch share every key row's 2 KB, read by the cluster's CTAs at about the same time. 8 heads per cluster: b=32
//   32k -2.5%.
// - More splits (the b=1..4 decode steps of long caches), when the host hands out arrival counters
//   (SplitParams::merge_counters) and the grid fits on the GPU at once: a cooperative launch, and each tile's splits
//   merge inside the split grid (splitkv_combine.cuh: merge_splits_in_grid) instead of in the combine kernel, whose
//   launch, grid drain and dependent wait cost ~4.8 us after the last split (b=1 8k: 15.9 us without the combine
//   kernel, 20.7 with it, outputs aside). Cold A/B on H200 (L2 swept, KV GB/s, combine -> in grid): b=1 1k
//   297 -> 313, 8k 1620-1630 -> 1680-1749, 32k 2968-3041 -> 3096-3099, 128k 4044-4049 -> 4026-4027; b=2 8k 2438 ->
//   2483-2491, b=4 8k 3063-3079 -> 3103-3150. The merge ends ~3 us after the last split is in (1-1.5 us until every
//   CTA sees the count, ~1 us for its chunks: %globaltimer stamps).
constexpr int kClusterMergeMaxSplits     = 8;
// The transposed decode step (tiles of at most 8 rows, or 16 split over the keys) with 2 to kWarpMergeMaxSplits
// splits whose per-warp shared memory fits one CTA (d128: up to 6, d256: 3): the splits are the warps of one CTA instead of a cluster of one-warp
// CTAs, merged through its shared memory after one CTA barrier instead of two cluster barriers and distributed loads;
// each warp keeps a fixed key-block range (claiming them at run time from a shared-memory counter, MHA_DECODE_CLAIM,
// gained up to 1% but made the result change from call to call: decode_t.cuh). Same-call A/B on H100 (bf16, 32 q / 8 KV heads, d128, bhsd, L2 swept, KV GB/s, three
// passes; cluster -> warps -> warps claiming): b=16 1k 2160-2172 -> 2207-2224 -> 2218-2228, 2k 2542-2545 ->
// 2526-2606 -> 2599-2620, 8k 2948-2953 -> 2973-2974 -> 2915-2975, 32k 3056-3057 -> 3059-3069 -> 3099; b=32 2k
// 2786-2794 -> 2804-2808 -> 2806-2809. Per-warp stamps, b=16 1k: the wait for the slowest split before the merge p90
// 1.66 -> 1.15 us, max 3.84 -> 1.86.
constexpr int kWarpMergeMaxSplits = 8;
constexpr int kPlacementCluster          = 4;
constexpr int kPlacementClusterMinBlocks = 128;
// The decode tile's shared memory per one-warp CTA (FwdKernelTraits::kDecodeSmemBudget unless an experiment build
// sets MHA_DECODE_SMEM_BUDGET): a sixth of an sm_90 SM's 228 KB less the 1 KB reserved per CTA, six CTAs per SM.
constexpr int kDecodeSmemBudgetDefault = 37888;

// SplitParams::ring_flags. kRingLateRefill: a decode warp refills the stage it freed only after the next block's
// stage has landed (fewer bytes queued per warp). kRingInterleave: the warp splits of one CTA take the tile's key
// blocks in turn (warp w: blocks w, w + W, ...) instead of W contiguous ranges. kRingEarly: each warp issues its first
// block's copies at kernel entry, before the setup (the host allows it; the launcher keeps it only for calls whose
// first blocks follow from the kernel parameters alone: fwd_launch.cuh, early_first_block_ok). kRingEarlyTables (set
// by the launcher with kRingEarly): those first blocks need the cache's per-batch key counts or block table, loaded
// at entry too (a dense call without them reads no further parameter: b=16 1k lost 2-3% when it did).
// kRingL2Promo256 (host side only: decode_ring.cuh, encode_decode_maps): the K / V tensor maps promote L2 fills to
// 256 bytes instead of 128. kRingInterleaveGrid (with kRingInterleave): splits that are CTAs (one-warp CTAs of a
// cluster or of the grid) take the tile's key blocks in turn too (split s: blocks s, s + S, ...). kRingHeadPairs
// (launcher only, fwd_launch.cuh): a grid whose splits are the warps of one CTA launches as clusters of 2 CTAs along
// the KV heads, for their placement alone (the CTAs of heads 2i and 2i + 1 of a batch start together on one GPC),
// where such clusters all fit at once.
constexpr int32_t kRingLateRefill = 1, kRingInterleave = 2, kRingEarly = 4, kRingEarlyTables = 8;
constexpr int32_t kRingL2Promo256 = 16, kRingInterleaveGrid = 32, kRingHeadPairs = 64;

// Split-KV: CTA (m, h, b * num_splits + s) covers key blocks [s * per, (s + 1) * per), per = ceil(blocks / splits),
// and writes fp32 partial O (normalised by its own sum) and LSE; a combine kernel merges them (with cluster_merge,
// the CTAs of one cluster merge them in distributed shared memory instead; with merge_counters, the split CTAs merge
// them inside the grid). pack_ratio > 1 puts the nhead_q / nhead_k query heads that share a KV head into the rows of
// one tile (row r: query r / pack_ratio of head kv_head * pack_ratio + r % pack_ratio), so each CTA reads K/V once
// for the whole group.
struct SplitParams
{
    int32_t num_splits = 1;
    int32_t pack_ratio = 1;
    int32_t cc = 0;           // compute capability of the launching device (90 = sm_90); 0: the launcher asks
    int32_t cluster_merge = 0; // set by the launcher: the num_splits CTAs of a tile form a cluster and merge in it
    // set by the launcher: the num_splits splits of a tile are the warps of one CTA (grid z = batch) and merge in its
    // shared memory; 0 otherwise (fwd_launch.cuh, kWarpMergeMaxSplits)
    int32_t warp_splits = 0;
    // The decode ring's schedule, kRing* bits chosen by the host (mha_fwd.cpp, ring_flags_for); 0: refill a stage
    // before waiting for the next, contiguous key ranges per warp split
    int32_t ring_flags = 0;
    FastDiv splits_div; // set by the launcher from num_splits
    // Arrival counters of the merge inside the split grid, one per tile, zero between calls (the library's, one slot
    // per o_acc and stream: csrc/api/merge_counters.cu); nullptr: the combine kernel merges. The launcher clears it
    // when the split grid does not launch cooperatively.
    unsigned* merge_counters = nullptr;
    float* lse_acc = nullptr; // [splits, batch, nhead_q, max_seqlen_q] via strides; group mode: rows from seqstart_q
    float* o_acc   = nullptr; // [splits, batch, nhead_q, max_seqlen_q, hdim_v] via strides
    int64_t lse_acc_split_stride = 0, lse_acc_batch_stride = 0, lse_acc_head_stride = 0;
    int64_t o_acc_split_stride = 0, o_acc_batch_stride = 0, o_acc_head_stride = 0, o_acc_row_stride = 0;
};

struct FwdParams
{
    const void* __restrict__ q;
    const void* __restrict__ k;
    const void* __restrict__ v;
    void* __restrict__ o;
    float* __restrict__ lse; // nullptr when not stored

    int64_t q_row_stride, q_head_stride, q_batch_stride;
    int64_t k_row_stride, k_head_stride, k_batch_stride;
    int64_t v_row_stride, v_head_stride, v_batch_stride;
    int64_t o_row_stride, o_head_stride, o_batch_stride;
    int64_t lse_head_stride, lse_batch_stride;

    int32_t batch;
    int32_t nhead_q;
    int32_t nhead_k;
    int32_t head_ratio; // nhead_q / nhead_k
    int32_t seqlen_q;   // batch mode (padded) lengths; group mode: unused
    int32_t seqlen_k;
    int32_t max_seqlen_q; // grid extent in rows
    int32_t hdim_q;
    int32_t hdim_v;

    float scale;      // softmax scale applied to q.k
    float scale_log2; // scale * log2(e): the plain kernel exponentiates raw scores with exp2

    MaskParams mask;
    SeqParams seq;
    ScoreModParams mod;
    DropoutParams drop;
    KvCacheParams kv;   // kSplit instances only
    SplitParams split;  // kSplit instances only
};

} // namespace mha
