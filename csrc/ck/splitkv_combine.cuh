#pragma once
// Split-KV combine: merges the fp32 partials (O_s normalised by its own sum, LSE_s) of every split into O and LSE:
//   LSE = log(sum_s exp(LSE_s)) [+ the sink logit],  O = sum_s exp(LSE_s - LSE) * O_s.
// One warp per (query row, head): lanes split the LSE reduction over the splits, then the hdim_v columns.

#include "../common/fwd_params.h"

#include <cmath>

namespace mha::ck {

constexpr int kCombineRowsPerCta = 4; // warps per CTA, one query row each
constexpr int kMaxSplits         = 128;

template <typename Element>
__global__ void __launch_bounds__(32 * kCombineRowsPerCta) splitkv_combine_kernel(const __grid_constant__ FwdParams p)
{
    __shared__ float s_lse[kCombineRowsPerCta][kMaxSplits];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, b = blockIdx.z;
    const int q = blockIdx.x * kCombineRowsPerCta + warp;
    const SeqParams& sq = p.seq;
    int seqlen_q = p.seqlen_q;
    int64_t row0 = 0;
    if (sq.is_group)
    {
        row0 = sq.seqstart_q[b];
        seqlen_q = sq.seqlen_q ? sq.seqlen_q[b]
                               : (sq.cu_seqlen_q ? sq.cu_seqlen_q[b + 1] - sq.cu_seqlen_q[b]
                                                 : sq.seqstart_q[b + 1] - sq.seqstart_q[b]);
    }
    else if (sq.cu_seqlen_q)
        seqlen_q = sq.cu_seqlen_q[b + 1] - sq.cu_seqlen_q[b];
    if (q >= seqlen_q)
        return;

    const SplitParams& sp = p.split;
    const int n = sp.num_splits;
    const int64_t lse_row = (sq.is_group ? 0 : b * sp.lse_acc_batch_stride) + h * sp.lse_acc_head_stride + row0 + q;
    float m = -INFINITY;
    for (int s = lane; s < n; s += 32)
    {
        const float l = sp.lse_acc[s * sp.lse_acc_split_stride + lse_row];
        s_lse[warp][s] = l;
        m = fmaxf(m, l);
    }
    for (int o = 16; o > 0; o /= 2)
        m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    float sum = 0.f;
    for (int s = lane; s < n; s += 32)
        sum += m == -INFINITY ? 0.f : expf(s_lse[warp][s] - m);
    for (int o = 16; o > 0; o /= 2)
        sum += __shfl_xor_sync(0xffffffff, sum, o);
    __syncwarp();

    float lse = m == -INFINITY ? -INFINITY : m + logf(sum);
    float out_scale = 1.f; // exp(lse_of_keys - lse_with_sink)
    if (p.mod.sink != nullptr)
    {
        const float sink = p.mod.sink[h];
        if (sink != -INFINITY)
        {
            const float hi = fmaxf(lse, sink);
            const float tot = hi + logf((lse == -INFINITY ? 0.f : expf(lse - hi)) + expf(sink - hi));
            out_scale = lse == -INFINITY ? 0.f : expf(lse - tot);
            lse = tot;
        }
    }
    const float lse_keys = out_scale > 0.f ? lse + logf(out_scale) : -INFINITY; // normaliser of the partials

    const int64_t o_row = (sq.is_group ? 0 : b * sp.o_acc_batch_stride) + h * sp.o_acc_head_stride +
                          (row0 + q) * sp.o_acc_row_stride;
    Element* out = static_cast<Element*>(p.o) + (sq.is_group ? row0 * p.o_row_stride : b * p.o_batch_stride) +
                   h * p.o_head_stride + int64_t(q) * p.o_row_stride;
    for (int c = lane; c < p.hdim_v; c += 32)
    {
        float acc = 0.f;
        if (lse_keys != -INFINITY)
            for (int s = 0; s < n; ++s)
            {
                const float l = s_lse[warp][s];
                if (l != -INFINITY)
                    acc += expf(l - lse_keys) * sp.o_acc[s * sp.o_acc_split_stride + o_row + c];
            }
        out[c] = static_cast<Element>(acc * out_scale);
    }
    if (p.lse != nullptr && lane == 0)
        p.lse[h * p.lse_head_stride + (sq.is_group ? row0 : b * p.lse_batch_stride) + q] = lse;
}

} // namespace mha::ck
