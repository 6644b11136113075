#pragma once
// SeqInfo, shared by the forward and backward kernels.

#include "../common/fwd_params.h"

namespace mha::ck {

// Where one batch's rows live and how many there are (batch or group mode, see SeqParams).
// The longest length the kernels take (checks.h kMaxSeqlen: lengths round up to whole blocks in 32 bits).
constexpr int kMaxDeviceSeqlen = 2147483647 - 4095;

struct SeqInfo
{
    int seqlen_q, seqlen_k;
    int64_t q_row0, k_row0; // group mode: physical start rows; batch mode: 0

    template <typename Params> // FwdParams or BwdParams
    __device__ __forceinline__ SeqInfo(const Params& p, int b)
    {
        const SeqParams& s = p.seq;
        if (s.is_group)
        {
            q_row0   = s.seqstart_q[b];
            k_row0   = s.seqstart_k ? s.seqstart_k[b] : 0; // null: batch-prefill pages (apply_kv_cache)
            seqlen_q = s.seqlen_q ? s.seqlen_q[b]
                                  : (s.cu_seqlen_q ? s.cu_seqlen_q[b + 1] - s.cu_seqlen_q[b]
                                                   : s.seqstart_q[b + 1] - s.seqstart_q[b]);
            seqlen_k = s.seqlen_k ? s.seqlen_k[b]
                                  : (s.cu_seqlen_k ? s.cu_seqlen_k[b + 1] - s.cu_seqlen_k[b]
                                                   : (s.seqstart_k ? s.seqstart_k[b + 1] - s.seqstart_k[b] : 0));
            // device data: a negative length (a decreasing seqstart, a bad count) is an empty batch, a huge one is
            // cut to what the kernels' 32-bit block arithmetic takes (a split range of a negative count overflows)
            seqlen_q = min(max(0, seqlen_q), kMaxDeviceSeqlen);
            seqlen_k = min(max(0, seqlen_k), kMaxDeviceSeqlen);
        }
        else
        {
            // logical lengths from cu_seqlen_q / k are device data: clamped to the padded lengths, a batch's slab
            q_row0 = k_row0 = 0;
            seqlen_q = s.cu_seqlen_q ? max(0, min(s.cu_seqlen_q[b + 1] - s.cu_seqlen_q[b], p.seqlen_q)) : p.seqlen_q;
            seqlen_k = s.cu_seqlen_k ? max(0, min(s.cu_seqlen_k[b + 1] - s.cu_seqlen_k[b], p.seqlen_k)) : p.seqlen_k;
        }
    }

    // Split-KV / batch-prefill: key counts come from the KV cache (paged K/V has no physical key rows to offset).
    // They are device data, so each is clamped to what the call's host-side values allow: a batch-mode count to
    // seqlen_k (the size masks, bias and rand_val were checked against), a group-mode one over a block table to what
    // a table row addresses (batch mode: the host checked seqlen_k against it).
    __device__ __forceinline__ void apply_kv_cache(const FwdParams& p, int b)
    {
        const KvCacheParams& kv = p.kv;
        if (kv.page_indptr != nullptr)
        {
            // SGLang's page table; without kv_last_page_lens (page size 1) every last page is full
            const int pages = kv.page_indptr[b + 1] - kv.page_indptr[b];
            const int last  = kv.last_page_lens != nullptr ? min(kv.last_page_lens[b], kv.page_size) : kv.page_size;
            const int64_t keys = pages > 0 ? int64_t(kv.page_size) * (pages - 1) + last : 0;
            seqlen_k = int(max(int64_t(0), min(keys, int64_t(p.seq.is_group ? kMaxDeviceSeqlen : p.seqlen_k))));
        }
        else if (!p.seq.is_group && kv.seqlen_k != nullptr) // clamped to the cache's length (block-table row)
            seqlen_k = max(0, min(kv.seqlen_k[b], p.seqlen_k));
        else if (p.seq.is_group && kv.block_table != nullptr)
            seqlen_k = int(max(int64_t(0), min(min(int64_t(seqlen_k), kv.block_table_batch_stride * kv.page_size),
                                               int64_t(kMaxDeviceSeqlen))));
        if (kv.page_size > 0)
            k_row0 = 0;
    }
};

} // namespace mha::ck
