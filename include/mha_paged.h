#pragma once
// Paged-attention decode over a vLLM-style KV cache, two implementations behind the same arguments, as AITER has:
//   aiter::paged_attention_v1  the generic one (role of AITER's paged_attention_v1_core): any head size that is a
//                              multiple of 8 up to 256, any block size (HND: multiples of 8), both cache layouts,
//                              partitions of the context combined through a caller workspace, ALiBi, soft-cap and a
//                              sliding window; tensor-core MMAs over the query heads of a KV head (up to 16), K / V
//                              through a cp.async ring sized to the grid.
//   aiter::pa_fwd_asm          the tuned one (role of AITER's pa_fwd_asm): head size 128, block size 16, K in the
//                              vLLM 5D layout and V in the asm layout below; tensor-core MMAs over 16 query heads
//                              of a KV head at a time, and on sm_90 a short batch's contexts split over a
//                              thread-block cluster that merges in distributed shared memory: no workspace.
// Both read each K/V block once per KV head for its query heads (pa_fwd_asm: once per 16 of them), and address pages
// in 64 bits, so block ids past 65,535 and caches past 2^31 elements are fine. Element strides; x = 16 /
// sizeof(element) = 8.
//
// Cache layouts (block = page of block_size tokens):
//   HND (vLLM): K [num_blocks, num_kv_heads, head_size / x, block_size, x], V [num_blocks, num_kv_heads, head_size,
//               block_size]
//   NHD:        K and V [num_blocks, block_size, num_kv_heads, head_size]
//   asm V:      [num_blocks, num_kv_heads, block_size / x, head_size, x] (pa_fwd_asm only; K as HND)
// The block and head strides are the caller's (a block stride of 0 aliases every block id to one block). NHD takes
// head strides of head_size (tokens num_kv_heads x head_size apart) unless token strides are given: with them, `nhd`
// reads any token-major cache whose tokens hold head_size contiguous elements, e.g. AITER's 4D "HND" of
// paged_attention_v1_core, K and V [num_blocks, num_kv_heads, block_size, head_size] (token stride head_size, head
// stride block_size x head_size).
// Score of query head h and token t of a context of n tokens (paged_attention_v1, AITER's pa_v1 order):
//   s = scale * q.k; s += alibi_slopes[h] * (t - n + 1); s = cap * tanh(s / cap) when logits_soft_cap > 0;
// with a sliding window W > 0, only the tokens t >= n - W are seen (the others get no weight, and the blocks that hold
// only such tokens are never read: their block-table entries may be stale).

#include "mha_fwd.h"

#include <cstdint>
#include <string>

namespace aiter {

struct paged_attention_args
{
    std::string data_type = {}; // "fp16" | "bf16": query, caches and out
    const void* query = {};     // [num_seqs, num_heads, head_size], head dim contiguous
    const void* key_cache = {};
    const void* value_cache = {};
    void* out = {};                   // [num_seqs, num_heads, head_size], head dim contiguous
    const int32_t* block_tables = {}; // [num_seqs, block_tables_stride] int32 ids, 4-byte aligned
    const int32_t* context_lens = {}; // [num_seqs] int32 tokens per sequence; device data, so not checked: each must be
                                      // <= max_context_len (paged_attention_v1 ignores tokens past its partitions); the
                                      // kernels clamp each to [0, block_size * block_tables_stride] (what a table row
                                      // addresses), so a longer one never reads another row
    const float* alibi_slopes = {};   // [num_heads] fp32, or nullptr
    void* workspace = {};             // paged_attention_v1 with more than one partition; 16-byte aligned
    int64_t workspace_bytes = {};
    // num_seqs, num_heads <= 65535
    int num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_size = 0, block_size = 0, block_tables_stride = 0;
    int max_context_len = {};
    int partition_size = {}; // paged_attention_v1: tokens per partition, a multiple of block_size, <= 1024;
                             // it sizes the workspace, and the launch may merge partitions (up to 1024 tokens)
                             // or split one over a cluster: the workspace's contents are not an interface
    int64_t q_stride_seq = 0, q_stride_head = 0, o_stride_seq = 0, o_stride_head = 0;
    int64_t k_stride_block = 0, k_stride_head = 0, v_stride_block = 0, v_stride_head = 0;
    float scale = {};           // softmax scale applied to q.k
    float logits_soft_cap = {}; // > 0: cap * tanh(s / cap) (after the scale and ALiBi)
    int sliding_window = {};    // > 0: each query sees only the last sliding_window tokens
    bool nhd = {};              // cache layout NHD instead of HND (paged_attention_v1 only)
    int64_t k_stride_token = 0; // nhd only: elements between a block's tokens, a multiple of 8; 0: num_kv_heads x
    int64_t v_stride_token = 0; // head_size (a packed NHD row). HND and pa_fwd_asm: must be 0
};

// Bytes paged_attention_v1 needs in `workspace`: 0 with one partition, else AITER's
// num_seqs * num_heads * P * (head_size * elem_bytes + 2 * 4), P = ceil(max_context_len / partition_size); -1 for
// arguments paged_attention_v1 refuses in any case (negative sizes, more than 65,535 sequences, heads or partitions,
// head_size past 256, elem_bytes outside [1, 8]).
__attribute__((visibility("default"))) int64_t paged_attention_workspace_bytes(int num_seqs, int num_heads,
                                                                              int head_size, int max_context_len,
                                                                              int partition_size, int elem_bytes);

// Return contract as mha_fwd: elapsed ms when stream_config.time_kernel_, 0 otherwise, -1 on an invalid or
// unsupported call (reason in mha_get_last_error()).
__attribute__((visibility("default"))) float paged_attention_v1(const paged_attention_args& args,
                                                                const ck_tile::stream_config& s);
__attribute__((visibility("default"))) float pa_fwd_asm(const paged_attention_args& args,
                                                        const ck_tile::stream_config& s);

} // namespace aiter
