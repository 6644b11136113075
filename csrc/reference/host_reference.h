#pragma once
// Host reference of the attention forward pass, in fp32 storage with double accumulation: O = softmax(scale*Q*K^T) V
// and LSE = log(sum(exp(scale*Q*K^T))) (natural log), per (batch, head) or for a whole batch with MQA/GQA head mapping.
// Written independently of csrc/common/mask.h; naive_attention.cu shares MaskSpec with this file. A query row whose
// keys are all masked (or s_k == 0) has no softmax: its O row is 0 and its LSE is -inf, the convention the benchmark checks.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#ifdef __CUDACC__
#define REFERENCE_HOST_DEVICE __host__ __device__
#else
#define REFERENCE_HOST_DEVICE
#endif

namespace reference {

// mask_type as in aiter::mha_fwd_args: 0 none, 1 top-left, 2 bottom-right; (left, right) FA-style window sizes, < 0
// meaning unbounded, so causal is (-1, 0).
struct MaskSpec
{
    int type  = 0;
    int left  = -1;
    int right = -1;

    // The diagonal of row `row` sits at column row (top-left) or row + seqlen_k - seqlen_q (bottom-right); a column is
    // visible when it lies within `left` columns before and `right` columns after it.
    REFERENCE_HOST_DEVICE bool visible(int row, int col, int seqlen_q, int seqlen_k) const
    {
        if (type == 0)
            return true;
        const int64_t diag = int64_t(row) + (type == 2 ? int64_t(seqlen_k) - seqlen_q : 0);
        return (left < 0 || col >= diag - left) && (right < 0 || col <= diag + right);
    }
};

// One (batch, head): q [seqlen_q, hdim_q], k [seqlen_k, hdim_q], v [seqlen_k, hdim_v], each with a row stride in
// elements and a contiguous last dim. Writes o [seqlen_q, hdim_v] contiguous and lse [seqlen_q].
inline void reference_attention_fwd_head(const float* q, int64_t q_row_stride, const float* k, int64_t k_row_stride,
                                         const float* v, int64_t v_row_stride, int seqlen_q, int seqlen_k, int hdim_q,
                                         int hdim_v, float scale, MaskSpec mask, float* o, float* lse)
{
    std::vector<double> s(seqlen_k > 0 ? seqlen_k : 1);
    std::vector<double> acc(hdim_v > 0 ? hdim_v : 1);
    for (int i = 0; i < seqlen_q; ++i)
    {
        const float* q_row = q + i * q_row_stride;
        double row_max     = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < seqlen_k; ++j)
        {
            if (!mask.visible(i, j, seqlen_q, seqlen_k))
            {
                s[j] = -std::numeric_limits<double>::infinity();
                continue;
            }
            const float* k_row = k + j * k_row_stride;
            double dot         = 0.0;
            for (int d = 0; d < hdim_q; ++d)
                dot += double(q_row[d]) * double(k_row[d]);
            s[j]    = double(scale) * dot;
            row_max = std::max(row_max, s[j]);
        }

        float* o_row = o + int64_t(i) * hdim_v;
        if (row_max == -std::numeric_limits<double>::infinity()) // every key masked, or no keys at all
        {
            std::fill(o_row, o_row + hdim_v, 0.0f);
            lse[i] = -std::numeric_limits<float>::infinity();
            continue;
        }

        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0.0;
        for (int j = 0; j < seqlen_k; ++j)
        {
            if (s[j] == -std::numeric_limits<double>::infinity())
                continue;
            const double p     = std::exp(s[j] - row_max);
            const float* v_row = v + j * v_row_stride;
            sum += p;
            for (int d = 0; d < hdim_v; ++d)
                acc[d] += p * double(v_row[d]);
        }
        for (int d = 0; d < hdim_v; ++d)
            o_row[d] = float(acc[d] / sum);
        lse[i] = float(row_max + std::log(sum));
    }
}

// Element strides of a [batch, head, row, dim] view whose dim is contiguous.
struct Strides
{
    int64_t batch;
    int64_t head;
    int64_t row;
};

// A whole batch-mode problem. Query head h reads key/value head h / (nhead_q / nhead_k). Outputs are contiguous fp32:
// o [batch, nhead_q, seqlen_q, hdim_v], lse [batch, nhead_q, seqlen_q].
struct HostAttentionProblem
{
    int batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q, hdim_v;
    float scale;
    MaskSpec mask;
    const float* q;
    Strides q_strides;
    const float* k;
    Strides k_strides;
    const float* v;
    Strides v_strides;
    float* o;
    float* lse;
};

// Runs the (batch, head) pairs on up to `num_threads` host threads (0: one per hardware thread).
inline void reference_attention_fwd(const HostAttentionProblem& p, unsigned num_threads = 0)
{
    const int64_t num_pairs = int64_t(p.batch) * p.nhead_q;
    const int head_ratio    = p.nhead_q / p.nhead_k;

    auto run_pair = [&p, head_ratio](int64_t pair) {
        const int b  = int(pair / p.nhead_q);
        const int h  = int(pair % p.nhead_q);
        const int hk = h / head_ratio;
        reference_attention_fwd_head(p.q + b * p.q_strides.batch + h * p.q_strides.head, p.q_strides.row,
                                     p.k + b * p.k_strides.batch + hk * p.k_strides.head, p.k_strides.row,
                                     p.v + b * p.v_strides.batch + hk * p.v_strides.head, p.v_strides.row, p.seqlen_q,
                                     p.seqlen_k, p.hdim_q, p.hdim_v, p.scale, p.mask,
                                     p.o + pair * p.seqlen_q * p.hdim_v, p.lse + pair * p.seqlen_q);
    };

    if (num_threads == 0)
        num_threads = std::max(1u, std::thread::hardware_concurrency());
    num_threads = unsigned(std::min<int64_t>(num_threads, std::max<int64_t>(num_pairs, 1)));

    std::vector<std::thread> workers;
    for (unsigned t = 0; t < num_threads; ++t)
        workers.emplace_back([&run_pair, t, num_threads, num_pairs]() {
            for (int64_t pair = t; pair < num_pairs; pair += num_threads)
                run_pair(pair);
        });
    for (auto& w : workers)
        w.join();
}

} // namespace reference
