#pragma once
// Host reference of the attention forward pass on fp32 inputs with double math, for every feature of the contract in
// include/mha_fwd.h: scale, soft-cap, elementwise bias or ALiBi, masks with sink tokens, the sink logit, softmax with
// LSE (natural log), dropout from the stored random values, P V; batch and group mode. The per-element rules come from
// attention_spec.h, which the naive GPU reference (naive_attention.cu) shares. A row that sees no key gets O = 0 and
// LSE = -inf (LSE = the sink logit when there is one).

#include "reference/attention_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

namespace reference {

// One (batch, head): every query row of it. `s` and `acc` are scratch of at least seqlen_k and hdim_v elements.
inline void reference_attention_fwd_head(const AttentionProblem& p, int b, int h, std::vector<double>& s,
                                         std::vector<double>& acc)
{
    constexpr double kNegInf = -std::numeric_limits<double>::infinity();
    const int seqlen_q = p.seqlen_q[b];
    const int seqlen_k = p.seqlen_k[b];
    const int hk       = h / (p.nhead_q / p.nhead_k);
    const float* q     = static_cast<const float*>(p.q) + element_offset(p.q_strides, p.seqstart_q, b, h, 0);
    const float* k     = static_cast<const float*>(p.k) + element_offset(p.k_strides, p.seqstart_k, b, hk, 0);
    const float* v     = static_cast<const float*>(p.v) + element_offset(p.v_strides, p.seqstart_k, b, hk, 0);
    const double slope = p.bias_type == kAlibi ? double(p.alibi_slopes[b * p.alibi_batch_stride + h]) : 0.0;

    for (int i = 0; i < seqlen_q; ++i)
    {
        const float* q_row  = q + i * p.q_strides.row;
        const float* bias   = p.bias_type == kElementwiseBias
                                  ? static_cast<const float*>(p.bias) +
                                        element_offset(p.bias_strides, p.seqstart_q, b, h, i)
                                  : nullptr;
        const uint8_t* rand = p.randval != nullptr
                                  ? p.randval + element_offset(p.randval_strides, p.seqstart_q, b, h, i)
                                  : nullptr;

        // logits of the visible keys; -inf marks a hidden one
        double row_max = kNegInf;
        for (int j = 0; j < seqlen_k; ++j)
        {
            s[j] = kNegInf;
            if (!p.mask.visible(i, j, seqlen_q, seqlen_k))
                continue;
            const float* k_row = k + j * p.k_strides.row;
            double dot         = 0.0;
            for (int d = 0; d < p.hdim_q; ++d)
                dot += double(q_row[d]) * double(k_row[d]);
            s[j]    = modified_score<double>(p, dot, bias != nullptr ? double(bias[j]) : 0.0, slope, i, j, seqlen_q,
                                          seqlen_k);
            row_max = std::max(row_max, s[j]);
        }
        const double sink = p.sink != nullptr ? double(p.sink[h]) : kNegInf;
        row_max           = std::max(row_max, sink);

        const int64_t out = packed_row(p, b, h, i);
        float* o_row      = p.o + out * p.hdim_v;
        if (row_max == kNegInf) // no visible key and no sink logit
        {
            std::fill(o_row, o_row + p.hdim_v, 0.0f);
            p.lse[out] = -std::numeric_limits<float>::infinity();
            continue;
        }

        double sum = sink != kNegInf ? std::exp(sink - row_max) : 0.0;
        for (int j = 0; j < seqlen_k; ++j)
            if (s[j] != kNegInf)
                sum += std::exp(s[j] - row_max);
        const double lse = row_max + std::log(sum);

        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < seqlen_k; ++j)
        {
            if (s[j] == kNegInf)
                continue;
            double prob = std::exp(s[j] - lse);
            if (rand != nullptr)
                prob = apply_dropout(p, prob, rand[j]);
            const float* v_row = v + j * p.v_strides.row;
            for (int d = 0; d < p.hdim_v; ++d)
                acc[d] += prob * double(v_row[d]);
        }
        for (int d = 0; d < p.hdim_v; ++d)
            o_row[d] = float(acc[d]);
        p.lse[out] = float(lse);
    }
}

// Runs the (batch, head) pairs on up to `num_threads` host threads (0: one per hardware thread).
inline void reference_attention_fwd(const AttentionProblem& p, unsigned num_threads = 0)
{
    const int64_t num_pairs = int64_t(p.batch) * p.nhead_q;
    int max_seqlen_k        = 0;
    for (int b = 0; b < p.batch; ++b)
        max_seqlen_k = std::max(max_seqlen_k, p.seqlen_k[b]);

    if (num_threads == 0)
        num_threads = std::max(1u, std::thread::hardware_concurrency());
    num_threads = unsigned(std::min<int64_t>(num_threads, std::max<int64_t>(num_pairs, 1)));

    std::vector<std::thread> workers;
    for (unsigned t = 0; t < num_threads; ++t)
        workers.emplace_back([&p, t, num_threads, num_pairs, max_seqlen_k]() {
            std::vector<double> s(std::max(max_seqlen_k, 1)), acc(std::max(p.hdim_v, 1));
            for (int64_t pair = t; pair < num_pairs; pair += num_threads)
                reference_attention_fwd_head(p, int(pair / p.nhead_q), int(pair % p.nhead_q), s, acc);
        });
    for (auto& w : workers)
        w.join();
}

} // namespace reference
