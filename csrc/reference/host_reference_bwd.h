#pragma once
// Host reference of the attention backward pass (groundwork for aiter::mha_bwd and benchmark_mha_bwd -v=1): given
// the forward problem (attention_spec.h; fp32 inputs, double math) and dO, the gradients dQ, dK, dV and, with an
// elementwise bias, dBias. Per (batch, query head), with P = softmax(S) and the dropout factor f (1 / (1 - p_drop) for
// kept elements, 0 for dropped ones, 1 without dropout):
//   O = (P f) V,  D_i = dO_i . O_i,  dV_j += P_ij f_ij dO_i,  dS_ij = P_ij (f_ij dO_i . V_j - D_i),
//   dBias_ij = dS_ij,  dX_ij = dS_ij (1 - tanh^2(X_ij / cap)) with soft-cap (X = scale * q.k) else dS_ij,
//   dQ_i += scale * dX_ij K_j,  dK_j += scale * dX_ij Q_i.
// ALiBi slopes and sink logits are constants (no gradient); a sink still joins the softmax denominator. dK / dV are
// per query head, as AITER's mha_bwd returns them (the caller reduces the heads that share a KV head).

#include "reference/attention_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace reference {

// Packed gradient layouts (rows of (b, h) in the order of packed_row):
//   dout, dq:  row nhead_q * out_start[b] + h * seqlen_q[b] + i        (x hdim_v / hdim_q)
//   dk, dv:    row nhead_q * key_start[b] + h * seqlen_k[b] + j        (x hdim_q / hdim_v), per query head
//   dbias:     row packed_row(b, h, i), column j < seqlen_k[b], row width dbias_width (nullptr: not computed)
struct AttentionGrads
{
    const float* dout;
    const int32_t* key_start; // [batch + 1] cumulative seqlen_k
    float* dq;
    float* dk;
    float* dv;
    float* dbias;
    int dbias_width;
    // Optional, to compare like for like with a kernel (AITER's reference does the same): o, the packed O the kernel
    // read (rounded to its dtype), gives D_i = dO_i . O_i in place of the exact O; round, the kernel's rounding of
    // P f and dS to its input type before the dV / dQ / dK products (dBias stays unrounded).
    const float* o          = nullptr;
    float (*round)(float)   = nullptr;
};

namespace detail {

// S (modified scores, -inf where hidden), the pre-soft-cap scaled dots X and the row LSE of one query row.
inline double row_scores(const AttentionProblem& p, int b, int h, int i, std::vector<double>& s, std::vector<double>& x)
{
    constexpr double kNegInf = -std::numeric_limits<double>::infinity();
    const int seqlen_q = p.seqlen_q[b], seqlen_k = p.seqlen_k[b];
    const int hk       = h / (p.nhead_q / p.nhead_k);
    const float* q     = static_cast<const float*>(p.q) + element_offset(p.q_strides, p.seqstart_q, b, h, i);
    const float* k     = static_cast<const float*>(p.k) + element_offset(p.k_strides, p.seqstart_k, b, hk, 0);
    const float* bias  = p.bias_type == kElementwiseBias
                             ? static_cast<const float*>(p.bias) + element_offset(p.bias_strides, p.seqstart_q, b, h, i)
                             : nullptr;
    const double slope = p.bias_type == kAlibi ? double(p.alibi_slopes[b * p.alibi_batch_stride + h]) : 0.0;
    double row_max     = p.sink != nullptr ? double(p.sink[h]) : kNegInf;
    for (int j = 0; j < seqlen_k; ++j)
    {
        s[j] = x[j] = kNegInf;
        if (!p.mask.visible(i, j, seqlen_q, seqlen_k))
            continue;
        double dot = 0.0;
        for (int d = 0; d < p.hdim_q; ++d)
            dot += double(q[d]) * double(k[j * p.k_strides.row + d]);
        x[j]    = double(p.scale) * dot;
        s[j]    = modified_score<double>(p, dot, bias ? double(bias[j]) : 0.0, slope, i, j, seqlen_q, seqlen_k);
        row_max = std::max(row_max, s[j]);
    }
    if (row_max == kNegInf)
        return kNegInf;
    double sum = p.sink != nullptr ? std::exp(double(p.sink[h]) - row_max) : 0.0;
    for (int j = 0; j < seqlen_k; ++j)
        if (s[j] != kNegInf)
            sum += std::exp(s[j] - row_max);
    return row_max + std::log(sum);
}

inline double dropout_factor(const AttentionProblem& p, int b, int h, int i, int j)
{
    if (p.randval == nullptr)
        return 1.0;
    const uint8_t r = p.randval[element_offset(p.randval_strides, p.seqstart_q, b, h, i) + j];
    return r <= p.keep_threshold ? double(p.rp_keep) : 0.0;
}

} // namespace detail

// sum over every output element of dO * O, in double: the loss whose gradients reference_attention_bwd returns
// (tests check those against finite differences of it).
inline double reference_attention_loss(const AttentionProblem& p, const float* dout)
{
    int max_k = 1;
    for (int b = 0; b < p.batch; ++b)
        max_k = std::max(max_k, p.seqlen_k[b]);
    std::vector<double> s(max_k), x(max_k);
    double loss = 0.0;
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.nhead_q; ++h)
        {
            const int hk   = h / (p.nhead_q / p.nhead_k);
            const float* v = static_cast<const float*>(p.v) + element_offset(p.v_strides, p.seqstart_k, b, hk, 0);
            for (int i = 0; i < p.seqlen_q[b]; ++i)
            {
                const double lse = detail::row_scores(p, b, h, i, s, x);
                if (lse == -std::numeric_limits<double>::infinity())
                    continue;
                const float* g = dout + packed_row(p, b, h, i) * p.hdim_v;
                for (int j = 0; j < p.seqlen_k[b]; ++j)
                {
                    if (s[j] == -std::numeric_limits<double>::infinity())
                        continue;
                    const double w = std::exp(s[j] - lse) * detail::dropout_factor(p, b, h, i, j);
                    for (int d = 0; d < p.hdim_v; ++d)
                        loss += w * double(v[j * p.v_strides.row + d]) * double(g[d]);
                }
            }
        }
    return loss;
}

inline void reference_attention_bwd(const AttentionProblem& p, const AttentionGrads& g)
{
    constexpr double kNegInf = -std::numeric_limits<double>::infinity();
    int max_k = 1;
    for (int b = 0; b < p.batch; ++b)
        max_k = std::max(max_k, p.seqlen_k[b]);
    std::vector<double> s(max_k), x(max_k), o(std::max(p.hdim_v, 1)), dq(std::max(p.hdim_q, 1));
    for (int b = 0; b < p.batch; ++b)
        for (int h = 0; h < p.nhead_q; ++h)
        {
            const int seqlen_q = p.seqlen_q[b], seqlen_k = p.seqlen_k[b];
            const int hk       = h / (p.nhead_q / p.nhead_k);
            const float* k     = static_cast<const float*>(p.k) + element_offset(p.k_strides, p.seqstart_k, b, hk, 0);
            const float* v     = static_cast<const float*>(p.v) + element_offset(p.v_strides, p.seqstart_k, b, hk, 0);
            const int64_t key0 = int64_t(p.nhead_q) * g.key_start[b] + int64_t(h) * seqlen_k;
            std::vector<double> dk(size_t(seqlen_k) * p.hdim_q, 0.0), dv(size_t(seqlen_k) * p.hdim_v, 0.0);
            for (int i = 0; i < seqlen_q; ++i)
            {
                const int64_t row = packed_row(p, b, h, i);
                const float* q    = static_cast<const float*>(p.q) + element_offset(p.q_strides, p.seqstart_q, b, h, i);
                const float* go   = g.dout + row * p.hdim_v;
                std::fill(dq.begin(), dq.end(), 0.0);
                const double lse = detail::row_scores(p, b, h, i, s, x);
                if (lse != kNegInf)
                {
                    // O_i and D_i = dO_i . O_i
                    std::fill(o.begin(), o.end(), 0.0);
                    for (int j = 0; j < seqlen_k; ++j)
                        if (s[j] != kNegInf)
                        {
                            const double w = std::exp(s[j] - lse) * detail::dropout_factor(p, b, h, i, j);
                            for (int d = 0; d < p.hdim_v; ++d)
                                o[d] += w * double(v[j * p.v_strides.row + d]);
                        }
                    double D = 0.0;
                    for (int d = 0; d < p.hdim_v; ++d)
                        D += double(go[d]) * (g.o != nullptr ? double(g.o[row * p.hdim_v + d]) : o[d]);
                    for (int j = 0; j < seqlen_k; ++j)
                    {
                        double ds = 0.0;
                        if (s[j] != kNegInf)
                        {
                            const double prob = std::exp(s[j] - lse);
                            const double f    = detail::dropout_factor(p, b, h, i, j);
                            double dz         = 0.0;
                            const double pf = g.round != nullptr ? double(g.round(float(prob * f))) : prob * f;
                            for (int d = 0; d < p.hdim_v; ++d)
                            {
                                dz += double(go[d]) * double(v[j * p.v_strides.row + d]);
                                dv[size_t(j) * p.hdim_v + d] += pf * double(go[d]);
                            }
                            ds = prob * (f * dz - D);
                        }
                        if (g.dbias != nullptr)
                            g.dbias[row * g.dbias_width + j] = float(ds);
                        if (ds == 0.0)
                            continue;
                        double dx = g.round != nullptr ? double(g.round(float(ds))) : ds;
                        if (p.softcap > 0.f)
                        {
                            const double t = std::tanh(x[j] / double(p.softcap));
                            dx *= 1.0 - t * t;
                        }
                        const double c = double(p.scale) * dx;
                        for (int d = 0; d < p.hdim_q; ++d)
                        {
                            dq[d] += c * double(k[j * p.k_strides.row + d]);
                            dk[size_t(j) * p.hdim_q + d] += c * double(q[d]);
                        }
                    }
                }
                else if (g.dbias != nullptr)
                    std::fill(g.dbias + row * g.dbias_width, g.dbias + row * g.dbias_width + seqlen_k, 0.0f);
                for (int d = 0; d < p.hdim_q; ++d)
                    g.dq[row * p.hdim_q + d] = float(dq[d]);
            }
            for (int j = 0; j < seqlen_k; ++j)
            {
                for (int d = 0; d < p.hdim_q; ++d)
                    g.dk[(key0 + j) * p.hdim_q + d] = float(dk[size_t(j) * p.hdim_q + d]);
                for (int d = 0; d < p.hdim_v; ++d)
                    g.dv[(key0 + j) * p.hdim_v + d] = float(dv[size_t(j) * p.hdim_v + d]);
            }
        }
}

} // namespace reference
