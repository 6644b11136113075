// Checks the host backward reference (csrc/reference/host_reference_bwd.h) against central finite differences of the
// loss sum(dO * O) on random problems: batch and group mode, GQA, every mask kind with windows and sink tokens,
// soft-cap, elementwise bias (dBias), ALiBi, sink logits and dropout from fixed random values. Prints one line per
// case and "reference_bwd_check: N cases ok" or the first mismatch; exits non-zero on a mismatch.
#include "reference/host_reference_bwd.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace reference;

struct Case
{
    const char* name;
    bool group;
    int batch, hq, hk, dq, dv;
    std::vector<int> sq, sk;
    MaskSpec mask;
    float softcap;
    int bias_type;
    bool sink, dropout;
};

static bool run_case(const Case& c, uint32_t seed)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    const int b = c.batch;
    std::vector<int32_t> sq(c.sq.begin(), c.sq.end()), sk(c.sk.begin(), c.sk.end());
    std::vector<int32_t> qs(b + 1, 0), ks(b + 1, 0);
    for (int i = 0; i < b; ++i)
        qs[i + 1] = qs[i] + sq[i], ks[i + 1] = ks[i] + sk[i];
    int max_q = 0, max_k = 0;
    for (int i = 0; i < b; ++i)
        max_q = std::max(max_q, sq[i]), max_k = std::max(max_k, sk[i]);
    // bhsd storage; group mode: [1, h, total, d]
    const int rows_q = c.group ? qs[b] : max_q, rows_k = c.group ? ks[b] : max_k, nb = c.group ? 1 : b;
    auto fill = [&](size_t n) {
        std::vector<float> v(n);
        for (auto& x : v)
            x = uni(gen);
        return v;
    };
    std::vector<float> q = fill(size_t(nb) * c.hq * rows_q * c.dq), k = fill(size_t(nb) * c.hk * rows_k * c.dq),
                       v = fill(size_t(nb) * c.hk * rows_k * c.dv), bias = fill(size_t(nb) * c.hq * rows_q * max_k),
                       sink = fill(c.hq), slopes(c.hq);
    for (int h = 0; h < c.hq; ++h)
        slopes[h] = 0.1f * (h + 1);
    std::vector<uint8_t> randval(size_t(nb) * c.hq * rows_q * max_k);
    for (auto& r : randval)
        r = uint8_t(gen() & 255);

    AttentionProblem p{};
    p.batch = b, p.nhead_q = c.hq, p.nhead_k = c.hk, p.hdim_q = c.dq, p.hdim_v = c.dv, p.max_seqlen_q = max_q;
    p.seqlen_q = sq.data(), p.seqlen_k = sk.data(), p.out_start = qs.data();
    p.seqstart_q = c.group ? qs.data() : nullptr, p.seqstart_k = c.group ? ks.data() : nullptr;
    p.q = q.data(), p.k = k.data(), p.v = v.data();
    p.q_strides = {int64_t(c.hq) * rows_q * c.dq, int64_t(rows_q) * c.dq, c.dq};
    p.k_strides = {int64_t(c.hk) * rows_k * c.dq, int64_t(rows_k) * c.dq, c.dq};
    p.v_strides = {int64_t(c.hk) * rows_k * c.dv, int64_t(rows_k) * c.dv, c.dv};
    p.scale = 1.f / std::sqrt(float(c.dq)), p.softcap = c.softcap, p.mask = c.mask;
    p.bias_type = c.bias_type, p.bias = bias.data();
    p.bias_strides = {int64_t(c.hq) * rows_q * max_k, int64_t(rows_q) * max_k, max_k};
    p.alibi_slopes = slopes.data(), p.alibi_batch_stride = 0;
    p.sink = c.sink ? sink.data() : nullptr;
    p.randval = c.dropout ? randval.data() : nullptr;
    p.randval_strides = p.bias_strides;
    p.keep_threshold = 178, p.rp_keep = 1.f / 0.7f;

    const int64_t out_rows = int64_t(c.hq) * qs[b], key_rows = int64_t(c.hq) * ks[b];
    std::vector<float> dout = fill(size_t(out_rows) * c.dv), dq(size_t(out_rows) * c.dq), dk(size_t(key_rows) * c.dq),
                       dv(size_t(key_rows) * c.dv), dbias(size_t(out_rows) * std::max(max_k, 1));
    const AttentionGrads g{dout.data(), ks.data(), dq.data(), dk.data(), dv.data(),
                           c.bias_type == kElementwiseBias ? dbias.data() : nullptr, std::max(max_k, 1)};
    reference_attention_bwd(p, g);

    // central differences on a few random elements of each input
    const float eps = 1.f / 1024;
    double worst = 0.0;
    auto check = [&](std::vector<float>& x, size_t idx, double analytic, const char* what) {
        const float x0 = x[idx];
        x[idx] = x0 + eps;
        const double up = reference_attention_loss(p, dout.data()), h_up = double(x[idx]) - x0;
        x[idx] = x0 - eps;
        const double down = reference_attention_loss(p, dout.data()), h_down = x0 - double(x[idx]);
        x[idx] = x0;
        const double fd  = (up - down) / (h_up + h_down);
        const double err = std::fabs(fd - analytic) / (1e-3 + std::fabs(analytic));
        worst = std::max(worst, err);
        if (std::fabs(fd - analytic) > 2e-5 + 2e-4 * std::fabs(analytic))
        {
            std::printf("%s: d%s[%zu] analytic %.9g finite difference %.9g MISMATCH\n", c.name, what, idx, analytic, fd);
            return false;
        }
        return true;
    };
    // index helpers: (b, h, row, d) of the bhsd storage <-> packed gradient rows
    auto phys_q = [&](int bb, int h, int i) { return c.group ? qs[bb] + i : i; };
    auto phys_k = [&](int bb, int j) { return c.group ? ks[bb] + j : j; };
    std::uniform_int_distribution<int> pick_b(0, b - 1);
    bool ok = true;
    for (int t = 0; t < 6 && ok; ++t)
    {
        const int bb = pick_b(gen);
        if (sq[bb] == 0 || sk[bb] == 0)
            continue;
        const int h = int(gen() % c.hq), hk = h / (c.hq / c.hk);
        const int i = int(gen() % sq[bb]), j = int(gen() % sk[bb]);
        const int d1 = int(gen() % c.dq), d2 = int(gen() % c.dv);
        const int sb = c.group ? 0 : bb;
        const size_t qi = ((size_t(sb) * c.hq + h) * rows_q + phys_q(bb, h, i)) * c.dq + d1;
        ok &= check(q, qi, dq[packed_row(p, bb, h, i) * c.dq + d1], "q");
        // dK / dV of a KV head: the sum over the query heads of its group
        double dk_sum = 0.0, dv_sum = 0.0;
        for (int hh = hk * (c.hq / c.hk); hh < (hk + 1) * (c.hq / c.hk); ++hh)
        {
            const int64_t key = int64_t(c.hq) * ks[bb] + int64_t(hh) * sk[bb] + j;
            dk_sum += dk[key * c.dq + d1], dv_sum += dv[key * c.dv + d2];
        }
        const size_t ki = ((size_t(sb) * c.hk + hk) * rows_k + phys_k(bb, j)) * c.dq + d1;
        const size_t vi = ((size_t(sb) * c.hk + hk) * rows_k + phys_k(bb, j)) * c.dv + d2;
        ok = ok && check(k, ki, dk_sum, "k") && check(v, vi, dv_sum, "v");
        if (ok && c.bias_type == kElementwiseBias)
        {
            const size_t bi = ((size_t(sb) * c.hq + h) * rows_q + phys_q(bb, h, i)) * max_k + j;
            ok = check(bias, bi, dbias[packed_row(p, bb, h, i) * g.dbias_width + j], "bias");
        }
    }
    std::printf("%s: %s (worst relative error %.2e)\n", c.name, ok ? "ok" : "FAIL", worst);
    return ok;
}

int main()
{
    const MaskSpec none{}, causal_tl{1, -1, 0, 0}, causal_br{2, -1, 0, 0}, window{3, 5, 2, 0}, sinks{1, 4, 0, 2};
    const Case cases[] = {
        {"batch plain", false, 2, 2, 2, 16, 16, {7, 7}, {9, 9}, none, 0.f, kNoBias, false, false},
        {"batch gqa causal", false, 2, 4, 2, 16, 24, {6, 6}, {11, 11}, causal_br, 0.f, kNoBias, false, false},
        {"group top-left causal", true, 3, 2, 1, 8, 8, {5, 0, 9}, {7, 4, 9}, causal_tl, 0.f, kNoBias, false, false},
        {"window + bias", false, 1, 2, 2, 16, 16, {10}, {12}, window, 0.f, kElementwiseBias, false, false},
        {"soft-cap + alibi", true, 2, 3, 3, 8, 16, {6, 4}, {8, 10}, causal_br, 2.f, kAlibi, false, false},
        {"sink tokens + sink logits", false, 2, 2, 1, 16, 8, {9, 9}, {9, 9}, sinks, 0.f, kNoBias, true, false},
        {"dropout + bias + gqa", true, 2, 4, 1, 16, 16, {7, 5}, {9, 6}, none, 0.f, kElementwiseBias, false, true},
        {"everything", false, 2, 4, 2, 8, 8, {8, 8}, {13, 13}, window, 3.f, kElementwiseBias, true, true},
    };
    int n = 0;
    for (const Case& c : cases)
    {
        if (!run_case(c, 1234u + n))
            return 1;
        ++n;
    }
    std::printf("reference_bwd_check: %d cases ok\n", n);
    return 0;
}
