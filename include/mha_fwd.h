#pragma once
// Public forward API, source-compatible with AITER HEAD's csrc/include/mha_fwd.h (hipStream_t -> cudaStream_t):
// aiter::mha_fwd_args (same fields, order and meaning), aiter::mha_fwd, aiter::mha_fwd_splitkv and
// aiter::mha_batch_prefill with their CK argument structs. Link libmha_fwd.so. Needs only the CUDA runtime headers.
//
// Return contract of every entry point: average ms when stream_config.time_kernel_ is set, 0 when not, and a negative
// value when the call is invalid or unsupported (then nothing was launched) or a launch failed; the thread-local
// aiter::mha_get_last_error() says why. A CUDA error already pending when a call would launch (the context's sticky
// error after an earlier kernel fault, say) is reported before anything is launched and left pending; a launch error
// of the library's own is consumed, so it does not fail the next call. No exception crosses these functions except std::bad_alloc and
// whatever a caller's callback (mha_bwd's workspace_alloc / pinned_host_alloc) throws.
//
// Limits, checked (each a negative return with its reason): batch and nhead_q in [1, 65535], nhead_q a multiple of
// nhead_k; hdim_q / hdim_v multiples of 8 in [8, 256]; q, k, v, o 16-byte aligned with every stride a multiple of 8
// elements and the last dimension contiguous; stride_k / stride_v below 2^24; scale_s (mha_bwd: scale) finite and > 0;
// fp16 / bf16 only (qscale_type 0). mha_fwd_splitkv: batch x num_splits <= 65535. scale_p / scale_o are fp8
// quantization scales, unused by fp16 / bf16 calls (as CK). When the mask_enum argument of mha_fwd_splitkv /
// mha_batch_prefill and args.mask_type are both set, args.mask_type decides (the kernel's run-time mask, as CK).

#include "ck_tile_compat.h"

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace aiter {

using drop_seed_offset_t =
    std::variant<std::pair<uint64_t, uint64_t>, std::pair<const void*, const void*>>;

// Semantics (AITER / CK's, made explicit). For query row i and key column j of one (batch, head):
//   s = scale_s * q_i . k_j;  if logits_soft_cap > 0: s = cap * tanh(s / cap);  then + bias[i, j] (bias_type 1:
//   same dtype as q, addressed bias_ptr + h*nhead_stride_bias + b*batch_stride_bias (group mode:
//   seqstart_q[b]*stride_bias) + i*stride_bias + j) or + ALiBi (bias_type 2: fp32 slopes at
//   bias_ptr[b*stride_bias + h]; value -slope*|i + sk - sq - j| with no mask or bottom-right windows,
//   -slope*|i - j| with top-left and window_generic windows, +slope*j with causal masks (left < 0, right == 0), as
//   CK's make_alibi_from_lr_mask).
//   Masks (FlashAttention form): diag = i + (bottom-right ? sk - sq : 0); j is visible iff j < sk and
//   (left < 0 || j >= diag - left) and (right < 0 || j <= diag + right). mask_type 1 anchors top-left, 2 and 3 (CK's
//   device treats window_generic's (left, right) as a bottom-right window) bottom-right.
//   Sinks (has_sink): sink_size > 0 keeps keys j < sink_size visible (if j <= diag + right and i < sk) when a finite
//   left window would hide them (mask types 1-3); sink_ptr (fp32 [nhead_q], natural-log logit, not scaled) joins
//   every row's softmax denominator: LSE = log(sum_j exp(s_ij) + exp(sink)), O = sum_j exp(s_ij) v_j / that sum.
//   Dropout (p_drop > 0): keep iff randval <= floor((1 - p_drop) * 255), kept probabilities scaled by
//   1 / (1 - p_drop); LSE uses the undropped probabilities. randval is uint8 from this library's Philox4x32-10
//   stream (csrc/common/philox.h), stored at rand_val_ptr (same addressing as the bias) when s_randval.
//   A row that sees no key gets O = 0 and LSE = -inf (LSE = sink with a sink logit). A window side that reaches past
//   every key (INT_MAX, say) is the same as -1; with a mask, batch mode needs seqlen_q + seqlen_k < 2^31 and group
//   mode a key-side window (right for top-left, left for bottom-right) of -1 or < 2^30, with max_seqlen_q plus it
//   < 2^31. Lengths are at most 2^31 - 4096. O, LSE and randval strides must give every element its own address (checked; in group mode heads against
//   columns only, randval not).
//   Group mode: batch b starts at physical rows seqstart_q[b] / seqstart_k[b]; its logical lengths are seqlen_*_ptr[b],
//   else cu_seqlen_*[b+1] - cu_seqlen_*[b], else seqstart_*[b+1] - seqstart_*[b]; max_seqlen_q must be >= every
//   logical seqlen_q; LSE at lse_ptr + h*nhead_stride_lse + seqstart_q[b] + i; min_seqlen_q > 0 skips batches with
//   seqlen_q <= min_seqlen_q (nothing is written for them, as CK's skip_min_seqlen_q).
struct mha_fwd_args
{
    // aiter
    bool use_asm_v3 = {};     // try the asm (sm90a TMA + wgmma) family first; calls it does not cover run on ck
    bool v3_api_check = {};   // only ask whether the asm family covers the call: 1 yes, -1 no; nothing launches
    int how_v3_bf16_cvt = {}; // fp32->bf16 rounding of the asm family; accepted, NVIDIA kernels round to nearest even

    // from ck fmha_fwd_traits
    std::string data_type = {}; // "fp16" | "bf16" (| "fp8bf16": not supported yet)
    bool is_group_mode = {};
    int bias_type = {}; // 0: no bias, 1: elementwise bias, 2: alibi
    bool has_lse = {};
    int qscale_type = {}; // quant_scale_enum
    bool has_sink = false;

    // from ck fmha_fwd_args
    const void* q_ptr = {};
    const void* k_ptr = {};
    const void* v_ptr = {};
    const void* bias_ptr = {}; // bias or alibi_slope pointer
    const void* q_descale_ptr = {};
    const void* k_descale_ptr = {};
    const void* v_descale_ptr = {};
    void* rand_val_ptr = {};
    void* lse_ptr = {}; // fp32, natural log: [b, h, s_q] in batch mode, [h, total_q] in group mode
    void* o_ptr = {};

    // Sequence-length arrays (int32, device memory):
    //   group mode: seqstart_{q,k} [b+1] cumulative physical starts; seqlen_{q,k} [b] logical lengths, or
    //               cu_seqlen_{q,k} [b+1] cumulative logical lengths (mutually exclusive with seqlen_*).
    //   batch mode: cu_seqlen_{q,k} only (padding; logical lengths above seqlen_q / seqlen_k are clamped to
    //               them); seqstart_* and seqlen_* must be nullptr.
    const void* seqstart_q_ptr  = nullptr;
    const void* seqstart_k_ptr  = nullptr;
    const void* seqlen_q_ptr    = nullptr;
    const void* seqlen_k_ptr    = nullptr;
    const void* cu_seqlen_q_ptr = nullptr;
    const void* cu_seqlen_k_ptr = nullptr;
    const void* block_scale_seqstart_q_ptr = {};
    const void* block_scale_seqstart_k_ptr = {};
    const void* sink_ptr = {};

    ck_tile::index_t seqlen_q = {}; // unused in group mode
    ck_tile::index_t seqlen_k = {}; // unused in group mode
    ck_tile::index_t batch = {};
    ck_tile::index_t max_seqlen_q = {};
    ck_tile::index_t hdim_q = {};
    ck_tile::index_t hdim_v = {};
    ck_tile::index_t nhead_q = {};
    ck_tile::index_t nhead_k = {}; // nhead_q % nhead_k == 0 (MQA / GQA)

    float scale_s = {};
    float logits_soft_cap = {}; // > 0 enables cap * tanh(s / cap)

    // strides are in elements; the last (hdim) dimension must be contiguous
    ck_tile::index_t stride_q = {}; // row (seqlen) strides
    ck_tile::index_t stride_k = {};
    ck_tile::index_t stride_v = {};
    ck_tile::index_t stride_bias = {}; // if alibi, b*h need set this to h, 1*h need set this to 0
    ck_tile::index_t stride_randval = {};
    ck_tile::index_t stride_o = {};
    ck_tile::index_t nhead_stride_q = {};
    ck_tile::index_t nhead_stride_k = {};
    ck_tile::index_t nhead_stride_v = {};
    ck_tile::index_t nhead_stride_bias = {};
    ck_tile::index_t nhead_stride_randval = {};
    ck_tile::index_t nhead_stride_lse = {};
    ck_tile::index_t nhead_stride_o = {};
    ck_tile::index_t nhead_stride_q_descale = {};
    ck_tile::index_t nhead_stride_k_descale = {};
    ck_tile::index_t nhead_stride_v_descale = {};
    ck_tile::index_t batch_stride_q = {};
    ck_tile::index_t batch_stride_k = {};
    ck_tile::index_t batch_stride_v = {};
    ck_tile::index_t batch_stride_bias = {};
    ck_tile::index_t batch_stride_randval = {};
    ck_tile::index_t batch_stride_lse = {};
    ck_tile::index_t batch_stride_o = {};
    ck_tile::index_t batch_stride_q_descale = {};
    ck_tile::index_t batch_stride_k_descale = {};
    ck_tile::index_t batch_stride_v_descale = {};

    ck_tile::index_t window_size_left = -1;  // -1: unbounded (the default)
    ck_tile::index_t window_size_right = -1; // -1: unbounded (the default); causal is (-1, 0)
    ck_tile::index_t sink_size = {};
    ck_tile::index_t mask_type = {}; // 0: no mask 1: top_left_causal 2: bottom_right_causal 3: window_generic
    ck_tile::index_t min_seqlen_q = {};

    float p_drop = {};
    bool s_randval = {};

    drop_seed_offset_t drop_seed_offset = {};

    ck_tile::index_t block_scale_size_q = {};
    ck_tile::index_t block_scale_size_kv = {};
};

// CK's fmha_fwd_splitkv_args (AITER: `using mha_fwd_splitkv_args = fmha_fwd_splitkv_args`). Semantics here:
// - Q / O / LSE / bias / masks as in mha_fwd_args (batch or group mode; seqstart_q / seqstart_k physical starts).
// - Keys per batch: batch mode seqlen_k_ptr[b] when given, else seqlen_k; group mode seqlen_k_ptr[b], else
//   seqstart_k[b+1] - seqstart_k[b]. Group mode over a block table with seqlen_k_ptr reads no physical key rows:
//   seqstart_k_ptr may be null there. is_gappy is not supported.
// - Dense K/V: batch b reads batch (cache_batch_idx ? cache_batch_idx[b] : b) at batch_stride_k / _v.
// - Paged K/V (page_block_size > 0, any size): key j of batch b is row j % page_block_size of page
//   block_table_ptr[b * batch_stride_block_table + j / page_block_size]; batch_stride_k / _v are the page strides,
//   stride_k / nhead_stride_k the row and head strides inside a page. Not combinable with cache_batch_idx.
// - num_splits: 1 writes O / LSE directly; 2-128 write fp32 partials to lse_acc_ptr / o_acc_ptr (split s of row q of
//   head h: s * split_stride + b * batch_stride (batch mode) + h * nhead_stride + physical row * stride_o_acc for O,
//   the same with the lse_acc strides and unit row stride for LSE) and combine them; 0 picks
//   mha_fwd_splitkv_num_splits(...) when both partial buffers are given, else 1. Group mode indexes partial rows by
//   their physical (seqstart_q) position and ignores the batch strides: size them [splits, nhead_q, total_q(, d_v)].
//   The strides must give every (split, batch, head, row) its own partial (checked; in group mode, where the rows'
//   count is device data, splits and heads only).
// - Page tables, seqlen_k_ptr and cache_batch_idx are device data and are not checked; batch mode requires
//   seqlen_k (the longest cache) <= batch_stride_block_table * page_block_size, and the kernels clamp batch-mode
//   seqlen_k_ptr[b] to [0, seqlen_k] and a group-mode key count over a block table to [0, batch_stride_block_table
//   * page_block_size] (a count past the cache never reads another batch's keys or table row); a negative group-mode
//   count is an empty batch. Batch mode: seqlen_k must be in [0, 2^31 - 4096]. Group mode: seqlen_k, the longest
//   cache, only sizes the split heuristic (CK never reads it there); a value outside that range reads as 0 (one split
//   when num_splits is 0).
// - A mask_enum argument other than no_mask with args.mask_type 0 runs args.mask_type 2 (bottom-right anchor, the
//   args' windows), as CK, whose masked kernels anchor top-left only for args.mask_type 1 (mha_batch_prefill too).
//   Not copied: CK's ALiBi for such a call with a non-causal window takes its vertical mode; ours bottom-right.
// - has_sink enables sink tokens (sink_size); there are no sink logits in this struct. No dropout (as in AITER).
struct mha_fwd_splitkv_args
{
    const void* q_ptr = {};
    const void* k_ptr = {};
    const void* v_ptr = {};
    const void* bias_ptr = {};
    void* lse_acc_ptr = {}; // fp32 partials
    void* o_acc_ptr = {};
    void* lse_ptr = {};
    void* o_ptr = {};

    void* block_table_ptr = {}; // int32 [b, max_blocks_per_seq]
    ck_tile::index_t batch_stride_block_table = {};
    ck_tile::index_t page_block_size = {};
    bool is_gappy = {};

    const void* cache_batch_idx = {}; // int32 [b]

    const void* seqstart_q_ptr = {};
    const void* seqstart_k_ptr = {};
    const void* seqlen_k_ptr = {};

    ck_tile::index_t seqlen_q = {};
    ck_tile::index_t seqlen_k = {};
    ck_tile::index_t batch = {};
    ck_tile::index_t max_seqlen_q = {};
    ck_tile::index_t hdim_q = {};
    ck_tile::index_t hdim_v = {};
    ck_tile::index_t nhead_q = {};
    ck_tile::index_t nhead_k = {};
    ck_tile::index_t num_splits = {};

    float scale_s = {};
    float scale_p = {};
    float scale_o = {};
    float logits_soft_cap = {};

    ck_tile::index_t stride_q = {};
    ck_tile::index_t stride_k = {};
    ck_tile::index_t stride_v = {};
    ck_tile::index_t stride_bias = {};
    ck_tile::index_t stride_o_acc = {};
    ck_tile::index_t stride_o = {};
    ck_tile::index_t nhead_stride_q = {};
    ck_tile::index_t nhead_stride_k = {};
    ck_tile::index_t nhead_stride_v = {};
    ck_tile::index_t nhead_stride_bias = {};
    ck_tile::index_t nhead_stride_lse = {};
    ck_tile::index_t nhead_stride_lse_acc = {};
    ck_tile::index_t nhead_stride_o_acc = {};
    ck_tile::index_t nhead_stride_o = {};
    ck_tile::index_t batch_stride_q = {};
    ck_tile::index_t batch_stride_k = {};
    ck_tile::index_t batch_stride_v = {};
    ck_tile::index_t batch_stride_bias = {};
    ck_tile::index_t batch_stride_lse = {};
    ck_tile::index_t batch_stride_lse_acc = {};
    ck_tile::index_t batch_stride_o_acc = {};
    ck_tile::index_t batch_stride_o = {};
    ck_tile::index_t split_stride_lse_acc = {};
    ck_tile::index_t split_stride_o_acc = {};

    ck_tile::index_t window_size_left = -1;  // -1: unbounded (the default); causal is (-1, 0)
    ck_tile::index_t window_size_right = -1;
    ck_tile::index_t sink_size = {};
    ck_tile::index_t mask_type = {};
};

// CK's fmha_batch_prefill_args (SGLang-style page table). Semantics here:
// - Q / O / LSE / bias / masks / dropout as in mha_fwd_args (batch or group mode; seqstart_q physical starts).
// - Keys of batch b: page_block_size * (pages - 1) + kv_last_page_lens[b] with pages = kv_indptr[b + 1] -
//   kv_indptr[b]; key j is row j % page_block_size of page kv_page_indices[kv_indptr[b] + j / page_block_size].
//   kv_last_page_lens may be null only when page_block_size is 1 (every last page full), as in AITER.
// - The page table is device data and is not checked. In batch mode seqlen_k bounds every batch's key count (masks,
//   bias and rand_val are sized by it; pass at least the longest sequence's count): the kernels clamp each to it.
struct mha_batch_prefill_args
{
    const void* q_ptr = {};
    const void* k_ptr = {};
    const void* v_ptr = {};
    const void* bias_ptr = {};
    void* rand_val_ptr = {};
    void* lse_ptr = {};
    void* o_ptr = {};

    const void* seqstart_q_ptr = {};

    ck_tile::index_t seqlen_q = {};
    ck_tile::index_t seqlen_k = {};
    ck_tile::index_t batch = {};
    ck_tile::index_t max_seqlen_q = {};
    ck_tile::index_t hdim_q = {};
    ck_tile::index_t hdim_v = {};
    ck_tile::index_t nhead_q = {};
    ck_tile::index_t nhead_k = {};

    int32_t num_total_pages = {}; // >= 0; not read otherwise: page ids are trusted device data (CK's view zero-fills
                                  // reads of ids past it; ours would read past the pool)
    ck_tile::index_t page_block_size = {};
    void* kv_indptr = {};
    void* kv_page_indices = {};
    void* kv_last_page_lens = {};

    float scale_s = {};
    float scale_p = {};
    float scale_o = {};
    float logits_soft_cap = {};

    ck_tile::index_t stride_q = {};
    ck_tile::index_t stride_k = {};
    ck_tile::index_t stride_v = {};
    ck_tile::index_t stride_bias = {};
    ck_tile::index_t stride_randval = {};
    ck_tile::index_t stride_o = {};
    ck_tile::index_t nhead_stride_q = {};
    ck_tile::index_t nhead_stride_k = {};
    ck_tile::index_t nhead_stride_v = {};
    ck_tile::index_t nhead_stride_bias = {};
    ck_tile::index_t nhead_stride_randval = {};
    ck_tile::index_t nhead_stride_lse = {};
    ck_tile::index_t nhead_stride_o = {};
    ck_tile::index_t batch_stride_q = {};
    ck_tile::index_t batch_stride_k = {};
    ck_tile::index_t batch_stride_v = {};
    ck_tile::index_t batch_stride_bias = {};
    ck_tile::index_t batch_stride_randval = {};
    ck_tile::index_t batch_stride_lse = {};
    ck_tile::index_t batch_stride_o = {};

    ck_tile::index_t window_size_left = -1;  // -1: unbounded (the default); causal is (-1, 0)
    ck_tile::index_t window_size_right = -1;
    ck_tile::index_t sink_size = {};
    ck_tile::index_t mask_type = {};

    float p_drop = {};
    bool s_randval = {};

    drop_seed_offset_t drop_seed_offset = {};
};

// With GQA / MQA and up to 256 (query, head) rows per KV head (max_seqlen_q x nhead_q / nhead_k: decode and
// speculative-decode steps, short chunks), and no bias, ALiBi, sink logits or dropout, mha_fwd runs the split-KV
// tiles with one split, the query heads of a KV head packed into one tile so that K and V are read once per KV head:
// the 16-row decode tile up to 16 rows, the 64 x 64 tile above, a CTA per 64 rows (the kernel name says which).
__attribute__((visibility("default"))) float mha_fwd(mha_fwd_args args, const ck_tile::stream_config& s);

__attribute__((visibility("default"))) float mha_fwd_splitkv(mha_fwd_splitkv_args args,
                                                             const ck_tile::stream_config& stream_config,
                                                             std::string q_dtype_str,
                                                             bool is_group_mode,
                                                             mask_enum mask_type,
                                                             bias_enum bias_type,
                                                             bool has_lse,
                                                             bool has_sink = false);

// Not in AITER: the split count mha_fwd_splitkv uses for num_splits = 0, so a caller can size lse_acc / o_acc
// ([num_splits, batch, nhead_q, max_seqlen_q(, hdim_v)] fp32; group mode [num_splits, nhead_q, total_q(, hdim_v)]).
// Query heads sharing a KV head are packed into one CTA (unless bias_type != 0); up to 16 packed rows run on the
// decode tile (32-key blocks, 6 CTAs per SM), more on the 64 x 64 prefill tile (64-key blocks, 2 per SM), except on
// sm_90 GPUs at head dims up to 128 for 17 to 64 rows (a speculative-decode step of 5 to 16 queries of 4 packed
// heads): those run on the decode tile in 16-row blocks (a CTA per block and split) where the grid of blocks fits
// one decode wave and the decode tile's count below (2 where it gives 1 and twice the CTAs still fit) splits the
// keys into ranges of at most 4096 keys for two blocks (17 to 32 rows; on H100-class GPUs 1024, or 4096 with at most
// 4 splits) or 512 for three or four, and take that count; elsewhere the prefill tile's. The tile follows the shape:
// a given num_splits > 1 runs the tile num_splits = 0 would.
// - Decode tile, CTAs within one wave (SMs x 6 resident): splits = SMs x 4 / CTAs, at most 128 and the key blocks,
//   then the fewest splits with the same key blocks per split. The kernel is memory-bound and about four one-warp
//   CTAs per SM already read at full bandwidth; fewer splits mean less partial traffic.
// - Otherwise: the fewest splits whose last wave is at least 85% as full as the best split count's (counts that leave
//   the key blocks per split unchanged are skipped); the prefill tile takes 1 once the grid fills 80% of a wave.
// Worked numbers on an H200 (132 SMs: 528 decode CTAs aimed at, 792 resident), decode with seqlen_q = 1 and 32 query
// heads on 8 KV heads (one CTA per KV head and split): b=1 -> 8 CTAs -> 66 splits; with 128k keys (4096 blocks of
// 32) that is 63 blocks per split, still 66 splits (528 CTAs); with 1k keys (32 blocks) 32 splits of one block.
// b=16 -> 128 CTAs -> 4 splits (512 CTAs). b=64 -> 512 CTAs -> 1 split (no combine pass). b=128 -> 1024 CTAs, 1.29
// resident waves -> 2 splits (2.6 waves).
// - On an sm_90 GPU with less than 4 TB/s of DRAM bandwidth (H100; H200 keeps the rules above), tiles of at most 8
//   rows (max_seqlen_q x nhead_q / nhead_k with packing) take other counts (measurements in csrc/api/mha_fwd.cpp):
//   - the band: more CTAs than SMs and at most 4/3 of them -> 2 splits (dense caches at every head dim, paged caches
//     at head dim 128 / 256);
//   - dense, head dim 128 / 256, 64 or more CTAs: SMs x 2.25 / CTAs instead of SMs x 4 / CTAs, except at 0.9 to 1 CTAs
//     per SM (b=16 above keeps 4);
//   - paged (block table), head dim 128 / 256, 80 CTAs to 0.9 per SM: 3 splits;
//   - dense, head dim 64, up to one CTA per SM: SMs x 6 / CTAs, at most 8, and 7 or 8 only while that many clusters
//     of one-warp CTAs fit on the GPU at once (its GPCs decide: 96 clusters of 8 on an H100 SXM), else 6;
//   - head dim 128, dense or paged, 80 CTAs to 3/2 per SM (ahead of the three rules above): ceil(SMs x 3 / CTAs),
//     three decode warps per SM;
//   - head dim 128, dense, 5/2 to 6 CTAs per SM and 4096 or more keys (ahead of the rules above): 4 splits, each
//     tile one CTA of four warps; past 6 CTAs per SM the same 4 where the wave rule above gives 1 or 2.
//   On an H100 (132 SMs): d128 (dense or paged) b=10 to 12 -> 5 splits, b=13 to 16 -> 4, b=17 to 24 -> 3; dense
//   d128 b=8 -> 64 CTAs -> 4, b=25 and up -> 1, b=42 to 99 with 4096+ keys -> 4 (b=64 8k: 512 CTAs -> 4), with
//   4096+ keys b=100 -> 6, b=128 -> 4 (the wave rule's 2), b=256 -> 4 (its 1), b=16384 and up -> its 1 (batch x
//   splits stays within the grid's 65535); dense
//   d256 b=12 -> 3, b=14 -> 2, b=17 to 22 -> 2; dense d64 b=9 to 12 -> 8, b=13 -> 7, b=14 to 16 -> 6.
// - On any sm_90 GPU, tiles of 9 to 16 rows (e.g. 3 or 4 queries of a speculative-decode step, 4 query heads per KV
//   head) at head dim 128, dense or paged: at most 8 splits (one cluster's) where the rules above give more and
//   either the cache has at most 32 blocks (1k keys) or 8 splits put 1.5 or more CTAs on each SM (2.5 at 4 TB/s and
//   up): 4 queries, 32 / 8 heads, H100: b=4 -> 32 CTAs -> 8 (general 16), b=6 -> 8 (11), b=1 / b=2 with 1k keys -> 8
//   (32), b=1 with 8k keys keeps 64; H200: b=4 keeps 16 past 1k keys, b=6 -> 8.
// The six-argument form sees neither the head dims nor the cache, so it returns the largest count any of them takes
// (the general rule's, or the head-dim-64 or head-dim-128 rule's where that is more): partial buffers sized by it
// fit any call of that shape. The nine-argument form returns exactly what a call with those head dims and a paged (block table) or
// dense cache resolves num_splits = 0 to.
__attribute__((visibility("default"))) int mha_fwd_splitkv_num_splits(int batch, int nhead_q, int nhead_k,
                                                                      int max_seqlen_q, int max_seqlen_k,
                                                                      int bias_type = 0);
__attribute__((visibility("default"))) int mha_fwd_splitkv_num_splits(int batch, int nhead_q, int nhead_k,
                                                                      int max_seqlen_q, int max_seqlen_k,
                                                                      int bias_type, int hdim_q, int hdim_v,
                                                                      bool paged);

__attribute__((visibility("default"))) float mha_batch_prefill(mha_batch_prefill_args args,
                                                               const ck_tile::stream_config& stream_config,
                                                               std::string q_dtype_str,
                                                               bool is_group_mode,
                                                               mask_enum mask_type,
                                                               bias_enum bias_type,
                                                               bool has_lse,
                                                               quant_scale_enum qscale_type,
                                                               bool use_ext_asm);

// Why the last call on this thread returned a negative value ("" after a successful call). Not in AITER, which only
// logs; this library never prints on its own, so this is how a caller reads the reason.
__attribute__((visibility("default"))) const char* mha_get_last_error();

// The kernel that the last call on this thread chose: launched, tried to launch (a call that failed after choosing
// it), or would launch (v3_api_check). A call refused before choosing one leaves the previous name.
__attribute__((visibility("default"))) const char* mha_get_last_kernel_name();

} // namespace aiter
