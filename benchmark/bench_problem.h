#pragma once
// The attention problem both MHA benchmarks set up, whichever pass they time: the flags they share decoded into
// ProblemConfig (fwd_config.h and bwd_config.h extend it), the per-batch sequence lengths of batch and group mode, where
// every forward tensor lives (ProblemLayout, spec 1.7) and the host / naive references' view of the call
// (make_reference_problem). benchmark_mha_fwd validates O and LSE with it; benchmark_mha_bwd builds O and LSE with it.

#include "arg_parser.h"
#include "bench_common.h"
#include "reference/attention_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

// The flags of the forward problem, as both benchmarks decode them.
struct ProblemConfig
{
    std::string prec;
    int validation; // 0 none, 1 host, 2 naive GPU (forward only)
    int mode;       // 0 batch, 1 group
    int batch, nhead, nhead_k, hdim_q, hdim_v;
    // Logical lengths per batch; kpad: physical K rows per batch (group mode with -s_kpad only, else empty).
    std::vector<int32_t> seqlen_qs, seqlen_ks, seqlen_kpads;
    float scale_s, logits_soft_cap;
    bool iperm, operm;
    BiasInfo bias;
    MaskInfo mask;
    int kname;
    InitMethod init;
    uint32_t seed; // resolved: never 0
    float p_drop;
    uint64_t drop_seed, drop_offset;
    bool drop_prefs;
    bool gpu_timer;
    bool flush_cache; // stream_config::flush_cache_ (not an AITER flag): the L2 is swept before each timed pass
    int warmup, repeat;
    int v3_bf16_cvt;

    bool group() const { return mode == 1; }
};

// Says what is wrong on stderr and hands back the exit code.
template <typename... Parts>
int fail(int code, const Parts&... parts)
{
    (std::cerr << ... << parts) << std::endl;
    return code;
}

// Batch mode: every batch has the first -s / -s_k value. Group mode: CK's generate_missing_seqlens (bench_common.h),
// with -s_kpad (when the benchmark has that flag) bounding the generated s_k.
inline int resolve_seqlens(const ArgParser& p, ProblemConfig& c, std::mt19937& rng)
{
    const std::vector<int32_t> s_list = p.get_int_vec("s"), sk_list = p.get_int_vec("s_k");
    const std::vector<int32_t> kpad_list = p.has("s_kpad") ? p.get_int_vec("s_kpad") : std::vector<int32_t>{};
    if (!p.error().empty())
        return fail(kExitBadArgs, p.error());
    if (s_list.empty() || sk_list.empty())
        return fail(kExitBadArgs, "-s and -s_k need at least one length");
    // A length no batch would use is refused (CK drops it silently): batch mode takes one -s / -s_k value, group
    // mode one per batch, and -s_k / -s_kpad pair with the -s entries by index.
    if (!c.group() && (s_list.size() > 1 || sk_list.size() > 1))
        return fail(kExitBadArgs, "batch mode takes one -s and one -s_k length (lists are for -mode=1), got -s=",
                    p.get_str("s"), " -s_k=", p.get_str("s_k"));
    if (c.group())
    {
        const size_t listed = std::min<size_t>(s_list.size(), size_t(std::max(c.batch, 1)));
        if (s_list.size() > size_t(std::max(c.batch, 1)))
            return fail(kExitBadArgs, "-s lists ", s_list.size(), " lengths for ", c.batch, " batches");
        if (sk_list.size() > listed)
            return fail(kExitBadArgs, "-s_k may list at most as many lengths as -s (", listed, "), got ",
                        sk_list.size());
        if (kpad_list.size() > listed)
            return fail(kExitBadArgs, "-s_kpad may list at most as many lengths as -s (", listed, "), got ",
                        kpad_list.size());
    }
    if (!c.group())
    {
        const int32_t s  = s_list.empty() ? 0 : s_list[0];
        const int32_t sk = sk_list.empty() || sk_list[0] < 0 ? s : sk_list[0];
        c.seqlen_qs.assign(size_t(c.batch), s);
        c.seqlen_ks.assign(size_t(c.batch), sk);
        return s < 0 ? fail(kExitFailed, "s must be non-negative") : kExitPass;
    }
    for (int32_t s : s_list)
        if (s < 0)
            return fail(kExitFailed, "s must be non-negative");
    // CK's generate_missing_seqlens: each listed -s length comes with the -s_k (and -s_kpad) entry of its index, a
    // shorter list's last entry repeated (s_k < 0: s_k = s); the batches past the -s list get -s's last length each
    // (generate_seqlens bounded by it moves nothing) and -s_k's last on average, moved at random (bounded by the last
    // -s_kpad). The totals are bounded before anything is generated: the row starts are int32.
    const std::vector<int32_t> qv = s_list.empty() ? std::vector<int32_t>{0} : s_list;
    auto at = [](const std::vector<int32_t>& v, int i) {
        return v.empty() ? -1 : v[size_t(std::min<int>(i, int(v.size()) - 1))];
    };
    const int listed = std::min<int>(int(qv.size()), c.batch), rest = c.batch - listed;
    std::vector<int32_t> sq, sk, kp;
    for (int i = 0; i < listed; ++i)
    {
        sq.push_back(qv[size_t(i)]);
        sk.push_back(at(sk_list, i) < 0 ? qv[size_t(i)] : at(sk_list, i));
        kp.push_back(at(kpad_list, i));
    }
    auto start_len = [](int32_t avg, int32_t hi) { // generate_seqlens' first value
        return std::clamp(avg, 1, hi > 0 ? std::max(hi, 1) : std::numeric_limits<int32_t>::max());
    };
    int64_t total_q = int64_t(rest) * start_len(sq.back(), sq.back());
    int64_t total_k    = int64_t(rest) * start_len(sk.back(), kp.back());
    int64_t total_kpad = int64_t(rest) * std::max(kp.back(), 0);
    for (int i = 0; i < listed; ++i)
        total_q += sq[size_t(i)], total_k += sk[size_t(i)], total_kpad += std::max(kp[size_t(i)], 0);
    if (std::max({total_q, total_k, total_kpad}) > std::numeric_limits<int32_t>::max())
        return fail(kExitFailed, "group mode: the query / key / padded key lengths add up to ", total_q, " / ", total_k,
                    " / ", total_kpad, "; each total must stay below 2^31 (int32 seqstart)");
    if (rest > 0)
    {
        const std::vector<int32_t> rem_q = generate_seqlens(rest, sq.back(), 1, sq.back(), rng);
        const std::vector<int32_t> rem_k = generate_seqlens(rest, sk.back(), 1, kp.back(), rng);
        sq.insert(sq.end(), rem_q.begin(), rem_q.end());
        sk.insert(sk.end(), rem_k.begin(), rem_k.end());
        kp.resize(size_t(c.batch), kp.back());
    }
    c.seqlen_qs = sq, c.seqlen_ks = sk;
    if (!kpad_list.empty() && kpad_list[0] >= 0) // physical K rows per batch; a batch's -1: none beyond its keys
    {
        c.seqlen_kpads = kp;
        for (int b = 0; b < c.batch; ++b)
        {
            if (c.seqlen_kpads[size_t(b)] < 0)
                c.seqlen_kpads[size_t(b)] = sk[size_t(b)];
            if (c.seqlen_kpads[size_t(b)] < sk[size_t(b)])
                return fail(kExitFailed, "kpad must be greater than or equal to seqlen for k");
        }
    }
    return kExitPass;
}

// The flags both benchmarks read the same way whose values CK took without a check: -timer (anything but "gpu" was
// the host timer), -repeat (0 timed one pass, printed as if none), -v3_bf16_cvt.
inline int check_common_flags(const ArgParser& p, const ProblemConfig& c)
{
    if (p.get_str("timer") != "gpu" && p.get_str("timer") != "cpu")
        return fail(kExitBadArgs, "-timer must be gpu or cpu, got ", p.get_str("timer"));
    if (c.repeat < 1)
        return fail(kExitBadArgs, "-repeat must be >= 1 (the timed passes), got ", c.repeat);
    if (c.v3_bf16_cvt < 0 || c.v3_bf16_cvt > 2)
        return fail(kExitBadArgs, "-v3_bf16_cvt must be 0 (RTNE), 1 (RTNA) or 2 (RTZ), got ", c.v3_bf16_cvt);
    return kExitPass;
}

// The shared value grammars: -mode, -mask, -bias (kExitBadArgs when one is outside its grammar).
inline int decode_problem_grammar(const ArgParser& p, ProblemConfig& c)
{
    if (c.mode != 0 && c.mode != 1)
        return fail(kExitBadArgs, "-mode must be 0 (batch) or 1 (group), got ", c.mode);
    if (!MaskInfo::decode(p.get_str("mask"), c.mask))
        return fail(kExitBadArgs, "not supported mask: ", p.get_str("mask"));
    if (!BiasInfo::decode(p.get_str("bias"), c.bias) || c.bias.rank_info < 0 ||
        c.bias.rank_info > (c.bias.type == bias_enum::alibi ? 1 : 2))
        return fail(kExitBadArgs, "not supported bias: ", p.get_str("bias"));
    return kExitPass;
}

// The elements of Q, K, V and O (and a bias) in double precision, from the lengths alone: bounds a problem before
// any int64 layout arithmetic (make_problem_layout) runs on it. K rows count the -s_kpad padding in group mode.
struct ProblemSize
{
    double q, k, v, o, bias;
};

inline ProblemSize problem_size(const ProblemConfig& c)
{
    double rows_q = 0, rows_k = 0, max_k = 0;
    for (size_t b = 0; b < c.seqlen_qs.size(); ++b)
    {
        const double k = c.seqlen_kpads.empty() ? c.seqlen_ks[b] : c.seqlen_kpads[b];
        rows_q += c.seqlen_qs[b], rows_k += k, max_k = std::max(max_k, k);
    }
    ProblemSize z;
    z.q    = rows_q * c.nhead * c.hdim_q;
    z.k    = rows_k * c.nhead_k * c.hdim_q;
    z.v    = rows_k * c.nhead_k * c.hdim_v;
    z.o    = rows_q * c.nhead * c.hdim_v;
    z.bias = c.bias.type == bias_enum::elementwise_bias ? rows_q * c.nhead * max_k : 0;
    return z;
}

// The shared consistency checks (kExitFailed, as AITER's run() returning false), then -seed and the lengths.
inline int check_problem(const ArgParser& p, ProblemConfig& c)
{
    if (c.batch < 1 || c.nhead < 1 || c.nhead_k < 1 || c.hdim_q < 1 || c.hdim_v < 1)
        return fail(kExitFailed, "b, h, h_k, d, d_v must be positive");
    if (c.batch > 65535 || c.nhead > 65535) // the library's limits, checked before any per-batch host array
        return fail(kExitFailed, "b and h must be <= 65535, got ", c.batch, " and ", c.nhead);
    if (c.nhead % c.nhead_k != 0)
        return fail(kExitFailed, "nhead:", c.nhead, " must be multiple of nhead_k:", c.nhead_k);
    if (c.warmup < 0)
        return fail(kExitFailed, "-warmup must be non-negative");
    if (c.p_drop < 0.f || c.p_drop > 1.f)
        return fail(kExitFailed, "The value of p_drop should be 0~1");

    if (c.seed == 0)
        c.seed = std::random_device{}();
    std::mt19937 rng(c.seed); // the sequence lengths come first from -seed, as in CK
    if (const int rc = resolve_seqlens(p, c, rng); rc != kExitPass)
        return rc;
    // the layouts' element counts and offsets are int64: a problem past 2^62 elements in one tensor is refused here
    const ProblemSize z = problem_size(c);
    if (std::max({z.q, z.k, z.v, z.o, z.bias}) > 4.6e18)
        return fail(kExitFailed, "a tensor of this problem would hold more than 2^62 elements");
    return kExitPass;
}

inline std::string io_layout(bool iperm, bool operm)
{
    const char* in  = iperm ? "bhsd" : "bshd";
    const char* out = operm ? "bhsd" : "bshd";
    return iperm == operm ? std::string(in) : std::string(in) + "-" + out;
}

inline std::string str(const std::vector<int32_t>& v)
{
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < v.size(); ++i)
        os << (i ? ", " : "") << v[i];
    os << "]";
    return os.str();
}

// A [batch, nhead, seqlen, hdim] tensor stored bhsd (perm) or bshd; strides per spec 1.7.
struct TensorLayout
{
    reference::Strides strides;
    int64_t elements;
};

inline TensorLayout make_layout(bool perm, int batch, int nhead, int seqlen, int hdim)
{
    const int64_t h = nhead, s = seqlen, d = hdim;
    return TensorLayout{{h * s * d, perm ? s * d : d, perm ? d : h * d}, int64_t(batch) * h * s * d};
}

// Where every tensor of the forward problem lives. Batch mode: shape [b, h, s, d] with the common lengths; group
// mode: shape [1, h, total, d], batch b starting at row seqstart[b]. Bias and randval are [shape_b, h, shape_s_q,
// max_s_k] (bias broadcast over batch / head by rank), LSE [shape_b, h, shape_s_q]. The references' outputs are packed
// (attention_spec.h): batch b's rows start at out_start[b].
struct ProblemLayout
{
    std::vector<int32_t> seqstart_q, seqstart_k; // [b + 1] physical first rows (group mode: K rows step by kpad)
    std::vector<int32_t> out_start;              // [b + 1] cumulative seqlen_q
    int shape_batch, shape_seqlen_q, shape_seqlen_k, max_seqlen_q, max_seqlen_k;
    TensorLayout q, k, v, o, bias, randval;
    reference::Strides lse;
    int64_t lse_elements;
};

inline ProblemLayout make_problem_layout(const ProblemConfig& c)
{
    ProblemLayout l;
    l.out_start  = cumulative(c.seqlen_qs);
    l.seqstart_q = l.out_start;
    l.seqstart_k = cumulative(c.seqlen_kpads.empty() ? c.seqlen_ks : c.seqlen_kpads);
    l.shape_batch    = c.group() ? 1 : c.batch;
    l.shape_seqlen_q = c.group() ? l.seqstart_q.back() : c.seqlen_qs[0];
    l.shape_seqlen_k = c.group() ? l.seqstart_k.back() : c.seqlen_ks[0];
    l.max_seqlen_q   = *std::max_element(c.seqlen_qs.begin(), c.seqlen_qs.end());
    l.max_seqlen_k   = *std::max_element(c.seqlen_ks.begin(), c.seqlen_ks.end());

    l.q = make_layout(c.iperm, l.shape_batch, c.nhead, l.shape_seqlen_q, c.hdim_q);
    l.k = make_layout(c.iperm, l.shape_batch, c.nhead_k, l.shape_seqlen_k, c.hdim_q);
    l.v = make_layout(c.iperm, l.shape_batch, c.nhead_k, l.shape_seqlen_k, c.hdim_v);
    l.o = make_layout(c.operm, l.shape_batch, c.nhead, l.shape_seqlen_q, c.hdim_v);

    const int64_t h = c.nhead, sq = l.shape_seqlen_q, sk = l.max_seqlen_k;
    const int rank  = c.bias.type == bias_enum::elementwise_bias ? c.bias.rank_info : 0;
    l.bias    = TensorLayout{{rank == 2 ? h * sq * sk : 0, rank >= 1 ? sq * sk : 0, sk},
                             (rank == 2 ? l.shape_batch : 1) * (rank >= 1 ? h : 1) * sq * sk};
    l.randval = TensorLayout{{h * sq * sk, sq * sk, sk}, l.shape_batch * h * sq * sk};
    l.lse     = reference::Strides{h * sq, sq, 1};
    l.lse_elements = l.shape_batch * h * sq;
    return l;
}

// The benchmark checked every stride the library reads; the batch strides of group mode are not read and become 0
// when they would not fit.
inline ck_tile::index_t idx(int64_t v) { return fits_index(v) ? ck_tile::index_t(v) : 0; }

// Where the arrays a reference reads live: host memory for -v=1 (fp32 copies of the inputs), device memory for -v=2.
struct ReferenceArrays
{
    const int32_t *seqlen_q, *seqlen_k, *out_start, *seqstart_q, *seqstart_k; // seqstart_*: nullptr in batch mode
    const void *q, *k, *v, *bias;
    const float *alibi_slopes, *sink;
    const uint8_t* randval;
    float *o, *lse;
};

// The references' view of the call: shapes, strides and features from the config, arrays from `a`.
inline reference::AttentionProblem make_reference_problem(const ProblemConfig& c, const ProblemLayout& l,
                                                          const ReferenceArrays& a)
{
    reference::AttentionProblem p{};
    p.batch = c.batch, p.nhead_q = c.nhead, p.nhead_k = c.nhead_k, p.hdim_q = c.hdim_q, p.hdim_v = c.hdim_v;
    p.max_seqlen_q = l.max_seqlen_q;
    p.seqlen_q = a.seqlen_q, p.seqlen_k = a.seqlen_k, p.out_start = a.out_start;
    p.seqstart_q = a.seqstart_q, p.seqstart_k = a.seqstart_k;
    p.q = a.q, p.k = a.k, p.v = a.v;
    p.q_strides = l.q.strides, p.k_strides = l.k.strides, p.v_strides = l.v.strides;
    p.scale   = c.scale_s;
    p.softcap = c.logits_soft_cap;
    // window_generic: the library anchors (left, right) = (y, x) bottom-right, as CK's device code
    p.mask      = reference::MaskSpec{int(c.mask.type), c.mask.left, c.mask.right, c.mask.sink_size};
    p.bias_type = int(c.bias.type);
    p.bias = a.bias, p.bias_strides = l.bias.strides;
    p.alibi_slopes       = a.alibi_slopes;
    p.alibi_batch_stride = c.bias.rank_info == 1 ? c.nhead : 0;
    p.sink               = a.sink;
    if (c.p_drop > 0.f)
    {
        const float keep  = 1.f - c.p_drop; // fp32, as the library computes the threshold
        p.randval         = a.randval;
        p.randval_strides = l.randval.strides;
        p.keep_threshold  = uint8_t(std::floor(keep * 255.f));
        p.rp_keep         = 1.f / keep;
    }
    p.o   = a.o;
    p.lse = a.lse;
    return p;
}

// After the timed call, the two ways a run ends before its performance line, as AITER prints them: the answer to
// the asm-coverage check (-is_v3_check / -v3_api_check) and an unsupported call (`unsupported` is the benchmark's
// exact text; the library's reason goes to stderr). `reason` is aiter::mha_get_last_error. Returns the exit code,
// or nothing when ave_time is a timing to report.
inline std::optional<int> end_before_timing(float ave_time, bool v3_check, const char* unsupported,
                                            const char* (*reason)())
{
    if (v3_check)
    {
        const bool covered = ave_time > 0.f; // 1: covered, negative: not
        std::cout << (covered ? ", v3 supported" : ", v3 not supported") << std::endl;
        if (!covered)
            std::cerr << "reason: " << reason() << std::endl;
        return covered ? kExitPass : kExitFailed;
    }
    if (ave_time < 0.f)
    {
        std::cout << unsupported << std::endl;
        std::cerr << "reason: " << reason() << std::endl;
        return kExitFailed;
    }
    return std::nullopt;
}

} // namespace bench
