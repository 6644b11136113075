#pragma once
// SeqInfo, shared by the forward and backward kernels.

#include "../common/fwd_params.h"

namespace mha::ck {

// Where one batch's rows live and how many there are (batch or group mode, see SeqParams).
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
    __device__ __forceinline__ void apply_kv_cache(const FwdParams& p, int b)
    {
        const KvCacheParams& kv = p.kv;
        if (kv.page_indptr != nullptr)
        {
            const int pages = kv.page_indptr[b + 1] - kv.page_indptr[b];
            seqlen_k = pages > 0 ? kv.page_size * (pages - 1) + min(kv.last_page_lens[b], kv.page_size) : 0;
        }
        else if (!p.seq.is_group && kv.seqlen_k != nullptr) // clamped to the cache's length (block-table row)
            seqlen_k = max(0, min(kv.seqlen_k[b], p.seqlen_k));
        if (kv.page_size > 0)
            k_row0 = 0;
    }
};

} // namespace mha::ck
