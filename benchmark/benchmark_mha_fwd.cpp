// benchmark_mha_fwd: AITER's forward benchmark and verifier on top of aiter::mha_fwd (include/mha_fwd.h, libmha_fwd.so).
// Same flags, defaults, header line, "ms / TFlops / GB/s / valid:y|n" output and exit codes as AITER's
// op_tests/cpp/mha/benchmark_mha_fwd.cpp (spec sections 4.1-4.5): 0 pass, -1 bad arguments or -?, -2 unsupported,
// invalid, failed validation or CUDA error, -3 unknown -prec. Validation: -v=1 against the host reference
// (csrc/reference/host_reference.h), -v=2 against the naive GPU kernel (csrc/reference/naive_attention.cu).

#include "arg_parser.h"
#include "mha_fwd.h"
#include "reference/host_reference.h"
#include "reference/naive_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr int kExitPass        = 0;
constexpr int kExitBadArgs     = -1;
constexpr int kExitFailed      = -2; // unsupported, invalid, validation failed, no GPU or CUDA error
constexpr int kExitUnknownPrec = -3;

#define BENCH_CHECK_CUDA(expr)                                                                                        \
    do                                                                                                                 \
    {                                                                                                                  \
        const cudaError_t bench_err_ = (expr);                                                                         \
        if (bench_err_ != cudaSuccess)                                                                                 \
        {                                                                                                              \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(bench_err_)); \
            return kExitFailed;                                                                                        \
        }                                                                                                              \
    } while (0)

bench::ArgParser make_parser()
{
    bench::ArgParser p;
    p.insert("v", "1", "0:no validation, 1:cpu validation, 2:gpu validation(experimental)")
        .insert("mode", "0", "kernel mode. 0:batch, 1:group")
        .insert("b", "2", "batch size")
        .insert("h", "8", "num of head, for q")
        .insert("h_k", "-1",
                "num of head, for k/v, -1 means equal to h\n"
                "if not equal to h, then this is GQA/MQA case")
        .insert("s", "3328",
                "seqlen_q. if group-mode, means the average value of seqlen_q\n"
                "total_seqlen_q = seqlen_q * batch, and seqlen_q per batch may vary\n"
                "also with \"-s=s0,s1,s2...\" comma seperated int to set per batch seqlen(group-mode)")
        .insert("s_k", "-1", "seqlen_k (including new key/value), -1 means equal to s")
        .insert("s_knew", "0",
                "seqlen_k for new key/value, 0 means not to use this at all; "
                "-1 to choose s_knew in [1, s] randomly.")
        .insert("s_kpad", "-1",
                "seqlen_k stride between 2 batches, currently used in group-mode only\n"
                "for kv-cache case, each batch [1,s,h,d]/[1,h,s,d] can have a stride\n"
                "along seqlen, instead of packed. same as xformer kv_padding")
        .insert("d", "128", "head dim for q, k")
        .insert("d_v", "-1", "head dim for v, -1 means equal to d")
        .insert("scale_s", "0", "scale factor of S. 0 means equal to 1/sqrt(hdim).")
        .insert("logits_soft_cap", "0", "attention logits soft capping value. 0 means disabled")
        .insert("qscale", "n",
                "n or 0, no scale\n"
                "pt or 1, per-tensor scale\n"
                "bs or 2, block scale")
        .insert("iperm", "1",
                "permute input\n"
                "if true, will be b*h*s*d, else b*s*h*d")
        .insert("operm", "1", "permute output")
        .insert("bias", "n",
                "n or 0, no bias\n"
                "e(lementwise) or 1, elementwise bias with 1*1*s*s. e:1, 1*h*s*s. e:2, b*h*s*s\n"
                "a(libi) or 2, alibi with 1*h. a:1, b*h")
        .insert("prec", "fp16", "data type. fp16/bf16 (fp8bf16 is accepted, not supported yet)")
        .insert("mask", "0",
                "0: no mask, 1: top-left(same as 't'), 2:bottom-right(same as 'b')\n"
                "'t', top-left causal mask, 'b', bottom-r causal mask\n"
                "'t:l,r', top-left sliding window attn(swa) with FA style left right size\n"
                "'b:l,r', bottom-r sliding window attn(swa) with FA style left right size\n"
                "'xt:window_size', xformer style masking from top-left, window_size negative is causal, positive is swa\n"
                "'xb:window_size', xformer style masking from bottom-r, window_size negative is causal, positive is swa\n"
                "'g:y,x', generic attention mask coordinate with y/x size (only debug purpose for now)")
        .insert("vlayout", "r", "r for row-major(seqlen*hdim), c for col-major(hdim*seqlen)")
        .insert("lse", "0", "0 not store lse, 1 store lse")
        .insert("kname", "0", "if set to 1 will print kernel name")
        .insert("init", "uf",
                "init method. ui, uniform random int, ni, normalized random int\n"
                "uf, uniform random float, nf, normalized random float, tf, trig float, uf:q (ufq), quantization")
        .insert("seed", "11939", "random seed used for initializing input tensors. 0 for non-deterministic seed")
        .insert("p_drop", "0", "0~1 probability of dropout")
        .insert("drop_seed", "1", "seed for random number generator")
        .insert("drop_offset", "0", "offset for random number generator")
        .insert("drop_prefs", "0", "seed and offset values are present on GPU; 0 - host, 1 - device/GPU")
        .insert("timer", "gpu", "gpu:gpu timer, cpu:cpu timer")
        .insert("rotary_dim", "0", "RoPE rotary dimension. rotary_dim <= 0 means not apply RoPE at all")
        .insert("rotary_interleaved", "1", "whether to apply interleaved RoPE")
        .insert("num_splits", "1", "# of splits for key/value. 0 to determine actual number by heuristic")
        .insert("page_block_size", "0", "paged-kvcache block size. 0 means not use paged-kvcahe")
        .insert("cache_batch_idx", "0", "whether to use index map to the kvcache")
        .insert("warmup", "10", "number of iterations before benchmark the kernel")
        .insert("repeat", "10", "number of iterations to benchmark the kernel")
        .insert("v3_bf16_cvt", "1",
                "float to bf16 convert type when fwd_v3 is set to 1, 0:RTNE; 1:RTNA; 2:RTZ\n"
                "accepted for compatibility; the NVIDIA kernels always round to nearest even")
        .insert("fwd_v3", "0", "if set to 1, some cases will call the fwd v3 kernel")
        .insert("is_v3_check", "0",
                "if set to 1, only ask whether the fwd v3 kernel covers the case, launching nothing:\n"
                "prints ', v3 supported' (exit 0) or ', v3 not supported' (exit -2)");
    return p;
}

// The rule the references apply. A generic (y, x) window (y, x >= 1) keeps column j of row i iff i - y < j < i + x,
// which is the top-left window (y - 1, x - 1).
reference::MaskSpec reference_mask(const bench::MaskInfo& m)
{
    if (m.type == mask_enum::window_generic)
        return reference::MaskSpec{int(mask_enum::mask_top_left), m.left - 1, m.right - 1};
    return reference::MaskSpec{int(m.type), m.left, m.right};
}

const char* qscale_str(quant_scale_enum q)
{
    return q == quant_scale_enum::no_scale ? "n" : q == quant_scale_enum::pertensor ? "pt" : "bs";
}

enum class InitMethod
{
    uniform_int,   // ui / 0: integers in [-3, 3]
    normal_int,    // ni: normal(0, sqrt 3) rounded, clamped to [-3, 3]
    uniform_float, // uf / 1: [0, 1)
    normal_float,  // nf: normal(0, sqrt 3)
    trig_float,    // tf / 2: cos(i)
    uniform_quant, // ufq / uf:q / 3: [-1, 1) (AITER: +-dtype max, meant for fp8 quantisation)
};

// Every flag, decoded. Sequence lengths take the first item of a comma list (batch mode has one length).
struct FwdConfig
{
    std::string prec;
    int validation; // 0 none, 1 host, 2 naive GPU
    int mode;
    int batch, nhead, nhead_k, seqlen_q, seqlen_k, seqlen_knew, seqlen_kpad, hdim_q, hdim_v;
    float scale_s, logits_soft_cap;
    quant_scale_enum qscale;
    bool iperm, operm;
    bench::BiasInfo bias;
    bench::MaskInfo mask;
    std::string vlayout;
    bool lse;
    int kname;
    InitMethod init;
    uint32_t seed;
    float p_drop;
    uint64_t drop_seed, drop_offset;
    bool drop_prefs;
    bool gpu_timer;
    int rotary_dim;
    bool rotary_interleaved;
    int num_splits, page_block_size;
    bool cache_batch_idx;
    int warmup, repeat;
    int v3_bf16_cvt;
    bool fwd_v3, is_v3_check;
};

int first_or(const std::vector<int32_t>& v, int fallback) { return v.empty() ? fallback : v[0]; }

// Says what is wrong on stderr and hands back the exit code.
template <typename... Parts>
int fail(int code, const Parts&... parts)
{
    (std::cerr << ... << parts) << std::endl;
    return code;
}

// kExitPass, or the exit code after saying what is wrong: kExitBadArgs for a value outside a flag's grammar,
// kExitFailed for an inconsistent problem (as AITER's run() returning false).
int read_config(const bench::ArgParser& p, FwdConfig& c)
{
    c.prec       = p.get_str("prec");
    c.validation = p.get_int("v");
    c.mode       = p.get_int("mode");
    c.batch      = p.get_int("b");
    c.nhead      = p.get_int("h");
    c.nhead_k    = p.get_int("h_k");
    if (c.nhead_k < 0)
        c.nhead_k = c.nhead;
    c.seqlen_q = first_or(p.get_int_vec("s"), 0);
    c.seqlen_k = first_or(p.get_int_vec("s_k"), -1);
    if (c.seqlen_k < 0)
        c.seqlen_k = c.seqlen_q;
    c.seqlen_knew = p.get_int("s_knew");
    c.seqlen_kpad = first_or(p.get_int_vec("s_kpad"), -1);
    c.hdim_q      = p.get_int("d");
    c.hdim_v      = p.get_int("d_v");
    if (c.hdim_v < 0)
        c.hdim_v = c.hdim_q;
    c.scale_s = p.get_float("scale_s");
    if (c.scale_s == 0.f && c.hdim_q > 0)
        c.scale_s = 1.0f / std::sqrt(float(c.hdim_q));
    c.logits_soft_cap    = p.get_float("logits_soft_cap");
    c.iperm              = p.get_bool("iperm");
    c.operm              = p.get_bool("operm");
    c.vlayout            = p.get_str("vlayout");
    c.lse                = p.get_bool("lse");
    c.kname              = p.get_int("kname");
    c.seed               = p.get_uint32("seed");
    c.p_drop             = p.get_float("p_drop");
    c.drop_seed          = p.get_uint64("drop_seed");
    c.drop_offset        = p.get_uint64("drop_offset");
    c.drop_prefs         = p.get_bool("drop_prefs");
    c.gpu_timer          = p.get_str("timer") == "gpu";
    c.rotary_dim         = p.get_int("rotary_dim");
    c.rotary_interleaved = p.get_bool("rotary_interleaved");
    c.num_splits         = p.get_int("num_splits");
    c.page_block_size    = p.get_int("page_block_size");
    c.cache_batch_idx    = p.get_bool("cache_batch_idx");
    c.warmup             = p.get_int("warmup");
    c.repeat             = p.get_int("repeat");
    c.v3_bf16_cvt        = p.get_int("v3_bf16_cvt");
    c.fwd_v3             = p.get_bool("fwd_v3");
    c.is_v3_check        = p.get_bool("is_v3_check");

    if (c.validation < 0 || c.validation > 2)
        return fail(kExitBadArgs, "-v must be 0, 1 or 2, got ", c.validation);
    if (c.mode != 0 && c.mode != 1)
        return fail(kExitBadArgs, "-mode must be 0 (batch) or 1 (group), got ", c.mode);
    if (!bench::MaskInfo::decode(p.get_str("mask"), c.mask))
        return fail(kExitBadArgs, "not supported mask: ", p.get_str("mask"));
    if (!bench::BiasInfo::decode(p.get_str("bias"), c.bias))
        return fail(kExitBadArgs, "not supported bias: ", p.get_str("bias"));
    using Q = quant_scale_enum;
    if (!bench::decode_name(p.get_str("qscale"),
                     {{"n", Q::no_scale}, {"0", Q::no_scale}, {"pt", Q::pertensor}, {"1", Q::pertensor},
                      {"bs", Q::blockscale}, {"2", Q::blockscale}},
                     c.qscale))
        return fail(kExitBadArgs, "not supported qscale: ", p.get_str("qscale"));
    using I = InitMethod;
    if (!bench::decode_name(p.get_str("init"),
                     {{"ui", I::uniform_int}, {"0", I::uniform_int}, {"ni", I::normal_int}, {"uf", I::uniform_float},
                      {"1", I::uniform_float}, {"nf", I::normal_float}, {"tf", I::trig_float}, {"2", I::trig_float},
                      {"ufq", I::uniform_quant}, {"uf:q", I::uniform_quant}, {"3", I::uniform_quant}},
                     c.init))
        return fail(kExitBadArgs, "not supported init method: ", p.get_str("init"));

    if (c.batch < 1 || c.nhead < 1 || c.nhead_k < 1 || c.seqlen_q < 0 || c.seqlen_k < 0 || c.hdim_q < 1 ||
        c.hdim_v < 1)
        return fail(kExitFailed, "b, h, h_k, d, d_v must be positive and s, s_k non-negative");
    if (c.nhead % c.nhead_k != 0)
        return fail(kExitFailed, "nhead:", c.nhead, " must be multiple of nhead_k:", c.nhead_k);
    if (c.warmup < 0 || c.repeat < 0)
        return fail(kExitFailed, "-warmup and -repeat must be non-negative");
    return kExitPass;
}

// What this build cannot run yet; "" when the library is asked. Each entry is a feature whose flag AITER accepts.
std::string unsupported_reason(const FwdConfig& c)
{
    if (c.prec == "fp8bf16")
        return "-prec=fp8bf16";
    if (c.mode != 0)
        return "group mode (-mode=1)";
    if (c.bias.type != bias_enum::no_bias)
        return "bias (-bias=" + c.bias.str() + ")";
    if (c.p_drop > 0.f)
        return "dropout (-p_drop>0)";
    if (c.logits_soft_cap > 0.f)
        return "logits soft cap (-logits_soft_cap>0)";
    if (c.qscale != quant_scale_enum::no_scale)
        return std::string("quantization scale (-qscale=") + qscale_str(c.qscale) + ")";
    if (c.num_splits > 1)
        return "split-kv (-num_splits>1)";
    if (c.page_block_size > 0)
        return "paged kv-cache (-page_block_size>0)";
    if (c.cache_batch_idx)
        return "kv-cache batch index (-cache_batch_idx=1)";
    if (c.vlayout != "r")
        return "column-major V (-vlayout=c)";
    if (c.seqlen_knew != 0)
        return "append-kv (-s_knew=" + std::to_string(c.seqlen_knew) + ")";
    if (c.rotary_dim > 0)
        return "rotary embedding (-rotary_dim>0)";
    return "";
}

std::string io_layout(bool iperm, bool operm)
{
    const char* in  = iperm ? "bhsd" : "bshd";
    const char* out = operm ? "bhsd" : "bshd";
    return iperm == operm ? std::string(in) : std::string(in) + "-" + out;
}

std::string header_line(const FwdConfig& c)
{
    std::ostringstream os;
    os << "[" << c.prec << "|" << (c.mode == 0 ? "batch" : "group") << "|" << io_layout(c.iperm, c.operm)
       << "] b:" << c.batch << ", h:" << c.nhead << "/" << c.nhead_k << ", s:" << c.seqlen_q << "/" << c.seqlen_k;
    if (c.mode == 1 && c.seqlen_kpad >= 0)
        os << "(" << c.seqlen_kpad << ")";
    os << ", d:" << c.hdim_q << "/" << c.hdim_v << ", scale_s:" << c.scale_s << ", bias:" << c.bias.str()
       << ", p_drop:" << c.p_drop << ", lse:" << c.lse << ", qscale:" << qscale_str(c.qscale)
       << ", mask:" << c.mask.str() << ", v:" << c.vlayout;
    if (c.num_splits > 1)
        os << ", num_splits:" << c.num_splits;
    if (c.page_block_size > 0)
        os << ", page_block_size:" << c.page_block_size;
    if (c.cache_batch_idx)
        os << ", cache_batch_idx:1";
    return os.str();
}

template <typename T>
struct DTypeTraits;
template <>
struct DTypeTraits<__half>
{
    static constexpr reference::NaiveDType naive = reference::NaiveDType::fp16;
    static constexpr double rtol = 1e-3, atol = 1e-3;
    static __half from_float(float x) { return __float2half(x); }
    static float to_float(__half x) { return __half2float(x); }
};
template <>
struct DTypeTraits<__nv_bfloat16>
{
    static constexpr reference::NaiveDType naive = reference::NaiveDType::bf16;
    static constexpr double rtol = 1e-2, atol = 1e-2;
    static __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
    static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
};

// A [batch, nhead, seqlen, hdim] tensor stored bhsd (perm) or bshd; strides per spec 1.7.
struct TensorLayout
{
    reference::Strides strides;
    int64_t elements;
};

TensorLayout make_layout(bool perm, int batch, int nhead, int seqlen, int hdim)
{
    const int64_t h = nhead, s = seqlen, d = hdim;
    return TensorLayout{{h * s * d, perm ? s * d : d, perm ? d : h * d}, int64_t(batch) * h * s * d};
}

bool fits_index(int64_t v) { return v <= std::numeric_limits<ck_tile::index_t>::max(); }

// Values rounded to T: `host` holds them as T for the upload, `exact` as float for the host reference.
template <typename T>
void fill_tensor(InitMethod method, uint32_t seed, std::vector<T>& host, std::vector<float>& exact)
{
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> uniform_int(-3, 3);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::uniform_real_distribution<float> symmetric(-1.f, 1.f);
    std::normal_distribution<float> normal(0.f, std::sqrt(3.f));
    for (size_t i = 0; i < host.size(); ++i)
    {
        float x = 0.f;
        switch (method)
        {
        case InitMethod::uniform_int: x = float(uniform_int(gen)); break;
        case InitMethod::normal_int: x = std::min(3.f, std::max(-3.f, std::round(normal(gen)))); break;
        case InitMethod::uniform_float: x = unit(gen); break;
        case InitMethod::normal_float: x = normal(gen); break;
        case InitMethod::trig_float: x = std::cos(float(i)); break;
        case InitMethod::uniform_quant: x = symmetric(gen); break;
        }
        host[i]  = DTypeTraits<T>::from_float(x);
        exact[i] = DTypeTraits<T>::to_float(host[i]);
    }
}

// Owns one device allocation; at least kMinBytes so that empty tensors (s_k = 0) still get a valid pointer.
class DeviceBuffer
{
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer()
    {
        if (ptr_ != nullptr)
            cudaFree(ptr_);
    }
    cudaError_t allocate(size_t bytes) { return cudaMalloc(&ptr_, std::max(bytes, kMinBytes)); }
    void* get() const { return ptr_; }

private:
    static constexpr size_t kMinBytes = 256;
    void* ptr_                        = nullptr;
};

// check_err: |out - ref| <= atol + rtol * |ref|; NaN always fails; infinities pass only when allow_infinity_ref and
// out equals ref. Writes `msg`, the first few mismatches and a summary to `log`. The slice is [h, s_q, cols] (cols = d_v
// for O, 1 for LSE), which names the mismatching elements.
bool check_slice(const float* out, const float* ref, int64_t n, int seqlen_q, int cols, double rtol, double atol,
                 bool allow_infinity_ref, const char* msg, std::ostream& log)
{
    constexpr int64_t kMaxListed = 5;
    int64_t errors               = 0;
    double max_err               = 0.0;
    for (int64_t i = 0; i < n; ++i)
    {
        const double o = out[i], r = ref[i];
        bool ok;
        if (std::isnan(o) || std::isnan(r))
            ok = false;
        else if (std::isinf(o) || std::isinf(r))
            ok = allow_infinity_ref && o == r;
        else
        {
            const double err = std::abs(o - r);
            max_err          = std::max(max_err, err);
            ok               = err <= atol + rtol * std::abs(r);
        }
        if (!ok)
        {
            if (errors == 0)
                log << msg << "\n";
            if (errors < kMaxListed)
            {
                log << "  out[h:" << i / (int64_t(seqlen_q) * cols) << ", s:" << (i / cols) % seqlen_q;
                if (cols > 1)
                    log << ", d:" << i % cols;
                log << "] != ref: " << o << " != " << r << "\n";
            }
            ++errors;
        }
    }
    if (errors > 0)
        log << std::setprecision(7) << "max err: " << max_err << ", number of errors: " << errors << ", "
            << 100.0 * double(errors) / double(n) << "% wrong values\n";
    return errors == 0;
}

// Compares batch by batch and stops at the first failing batch, as AITER does. out_o and ref_o are contiguous
// [b, h, s_q, d_v]; out_lse and ref_lse [b, h, s_q].
template <typename T>
bool validate(const FwdConfig& c, const std::vector<float>& out_o, const std::vector<float>& ref_o,
              const std::vector<float>& out_lse, const std::vector<float>& ref_lse, std::ostream& log)
{
    const int64_t o_per_batch   = int64_t(c.nhead) * c.seqlen_q * c.hdim_v;
    const int64_t lse_per_batch = int64_t(c.nhead) * c.seqlen_q;
    for (int b = 0; b < c.batch; ++b)
    {
        const char* what = nullptr;
        if (!check_slice(out_o.data() + b * o_per_batch, ref_o.data() + b * o_per_batch, o_per_batch, c.seqlen_q,
                         c.hdim_v, DTypeTraits<T>::rtol, DTypeTraits<T>::atol, false, "OUT Error: Incorrect results!",
                         log))
            what = "OUT";
        else if (c.lse && !check_slice(out_lse.data() + b * lse_per_batch, ref_lse.data() + b * lse_per_batch,
                                       lse_per_batch, c.seqlen_q, 1, DTypeTraits<T>::rtol, DTypeTraits<T>::atol, true,
                                       "LSE Error: Incorrect results!", log))
            what = "LSE";
        if (what != nullptr)
        {
            log << what << " mismatch found at batch: " << b << "\n\tseqlen_q: " << c.seqlen_q
                << "\n\tseqlen_k: " << c.seqlen_k << "\n";
            return false;
        }
    }
    return true;
}

// The four tensors of one problem, Q/K/V laid out by -iperm and O by -operm.
struct Layouts
{
    TensorLayout q, k, v, o;
    int64_t lse_elements; // [b, h, s_q]
};

Layouts make_layouts(const FwdConfig& c)
{
    return Layouts{make_layout(c.iperm, c.batch, c.nhead, c.seqlen_q, c.hdim_q),
                   make_layout(c.iperm, c.batch, c.nhead_k, c.seqlen_k, c.hdim_q),
                   make_layout(c.iperm, c.batch, c.nhead_k, c.seqlen_k, c.hdim_v),
                   make_layout(c.operm, c.batch, c.nhead, c.seqlen_q, c.hdim_v), int64_t(c.batch) * c.nhead * c.seqlen_q};
}

// Every field set explicitly; features this build does not run (bias, dropout, quantization, sink, varlen) get null
// pointers and zero strides. The caller has checked that every batch stride fits in int32.
aiter::mha_fwd_args make_fwd_args(const FwdConfig& c, const Layouts& l, const void* q, const void* k, const void* v,
                                  void* o, void* lse)
{
    aiter::mha_fwd_args args;
    args.use_asm_v3      = c.fwd_v3;
    args.v3_api_check    = c.is_v3_check;
    args.how_v3_bf16_cvt = c.v3_bf16_cvt;
    args.data_type       = c.prec;
    args.is_group_mode   = false;
    args.bias_type       = int(c.bias.type);
    args.has_lse         = c.lse;
    args.qscale_type     = int(c.qscale);
    args.has_sink        = false;

    args.q_ptr    = q;
    args.k_ptr    = k;
    args.v_ptr    = v;
    args.lse_ptr  = c.lse ? lse : nullptr;
    args.o_ptr    = o;
    args.bias_ptr = args.q_descale_ptr = args.k_descale_ptr = args.v_descale_ptr = nullptr;
    args.rand_val_ptr = nullptr;
    args.seqstart_q_ptr = args.seqstart_k_ptr = args.seqlen_q_ptr = args.seqlen_k_ptr = nullptr;
    args.cu_seqlen_q_ptr = args.cu_seqlen_k_ptr = nullptr;
    args.block_scale_seqstart_q_ptr = args.block_scale_seqstart_k_ptr = args.sink_ptr = nullptr;

    args.seqlen_q     = c.seqlen_q;
    args.seqlen_k     = c.seqlen_k;
    args.batch        = c.batch;
    args.max_seqlen_q = c.seqlen_q;
    args.hdim_q       = c.hdim_q;
    args.hdim_v       = c.hdim_v;
    args.nhead_q      = c.nhead;
    args.nhead_k      = c.nhead_k;

    args.scale_s         = c.scale_s;
    args.logits_soft_cap = c.logits_soft_cap;

    args.stride_q         = ck_tile::index_t(l.q.strides.row);
    args.stride_k         = ck_tile::index_t(l.k.strides.row);
    args.stride_v         = ck_tile::index_t(l.v.strides.row);
    args.stride_o         = ck_tile::index_t(l.o.strides.row);
    args.nhead_stride_q   = ck_tile::index_t(l.q.strides.head);
    args.nhead_stride_k   = ck_tile::index_t(l.k.strides.head);
    args.nhead_stride_v   = ck_tile::index_t(l.v.strides.head);
    args.nhead_stride_lse = c.seqlen_q;
    args.nhead_stride_o   = ck_tile::index_t(l.o.strides.head);
    args.batch_stride_q   = ck_tile::index_t(l.q.strides.batch);
    args.batch_stride_k   = ck_tile::index_t(l.k.strides.batch);
    args.batch_stride_v   = ck_tile::index_t(l.v.strides.batch);
    args.batch_stride_lse = c.nhead * c.seqlen_q; // <= batch_stride_o
    args.batch_stride_o   = ck_tile::index_t(l.o.strides.batch);
    args.stride_bias = args.nhead_stride_bias = args.batch_stride_bias = 0;
    args.stride_randval = args.nhead_stride_randval = args.batch_stride_randval = 0;
    args.nhead_stride_q_descale = args.nhead_stride_k_descale = args.nhead_stride_v_descale = 0;
    args.batch_stride_q_descale = args.batch_stride_k_descale = args.batch_stride_v_descale = 0;

    args.window_size_left  = c.mask.left;
    args.window_size_right = c.mask.right;
    args.sink_size         = 0;
    args.mask_type         = int(c.mask.type);
    args.min_seqlen_q      = 0;

    args.p_drop           = c.p_drop;
    args.s_randval        = false;
    args.drop_seed_offset = std::pair<uint64_t, uint64_t>{c.drop_seed, c.drop_offset};

    args.block_scale_size_q  = 128; // AITER's benchmark value; read only with -qscale=bs
    args.block_scale_size_kv = 128;
    return args;
}

// Reads the library's O (any layout) and LSE back as contiguous fp32 [b, h, s_q, d_v] and [b, h, s_q].
template <typename T>
int download_outputs(const FwdConfig& c, const Layouts& l, const DeviceBuffer& o_dev, const DeviceBuffer& lse_dev,
                     std::vector<float>& out_o, std::vector<float>& out_lse)
{
    std::vector<T> o_host(l.o.elements);
    out_o.resize(l.o.elements);
    out_lse.resize(l.lse_elements);
    BENCH_CHECK_CUDA(cudaMemcpy(o_host.data(), o_dev.get(), sizeof(T) * l.o.elements, cudaMemcpyDeviceToHost));
    BENCH_CHECK_CUDA(cudaMemcpy(out_lse.data(), lse_dev.get(), sizeof(float) * l.lse_elements, cudaMemcpyDeviceToHost));
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.nhead; ++h)
            for (int i = 0; i < c.seqlen_q; ++i)
            {
                const T* src = o_host.data() + b * l.o.strides.batch + h * l.o.strides.head + i * l.o.strides.row;
                float* dst   = out_o.data() + ((int64_t(b) * c.nhead + h) * c.seqlen_q + i) * c.hdim_v;
                for (int d = 0; d < c.hdim_v; ++d)
                    dst[d] = DTypeTraits<T>::to_float(src[d]);
            }
    return kExitPass;
}

// -v=2: the naive GPU kernel on the same device inputs, results copied back in the host reference's layout.
template <typename T>
int naive_reference(const FwdConfig& c, const Layouts& l, const void* q, const void* k, const void* v,
                    std::vector<float>& ref_o, std::vector<float>& ref_lse)
{
    DeviceBuffer o_dev, lse_dev;
    BENCH_CHECK_CUDA(o_dev.allocate(sizeof(float) * l.o.elements));
    BENCH_CHECK_CUDA(lse_dev.allocate(sizeof(float) * l.lse_elements));
    const reference::NaiveAttentionArgs a{
        DTypeTraits<T>::naive, q, k, v, l.q.strides, l.k.strides, l.v.strides, static_cast<float*>(o_dev.get()),
        static_cast<float*>(lse_dev.get()), c.batch, c.nhead, c.nhead_k, c.seqlen_q, c.seqlen_k, c.hdim_q, c.hdim_v,
        c.scale_s, reference_mask(c.mask)};
    BENCH_CHECK_CUDA(reference::naive_attention_fwd(a, nullptr));
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    BENCH_CHECK_CUDA(cudaMemcpy(ref_o.data(), o_dev.get(), sizeof(float) * l.o.elements, cudaMemcpyDeviceToHost));
    BENCH_CHECK_CUDA(cudaMemcpy(ref_lse.data(), lse_dev.get(), sizeof(float) * l.lse_elements, cudaMemcpyDeviceToHost));
    return kExitPass;
}

template <typename T>
int run(const FwdConfig& c)
{
    if (c.validation == 2 && c.hdim_v > reference::kNaiveMaxHdimV)
        return fail(kExitFailed, "-v=2: the naive GPU reference covers d_v <= ", reference::kNaiveMaxHdimV,
                    "; use -v=1");
    const Layouts l = make_layouts(c);
    for (const TensorLayout* t : {&l.q, &l.k, &l.v, &l.o}) // aiter::mha_fwd_args strides are int32
        if (!fits_index(t->strides.batch))
            return fail(kExitFailed, "a per-batch tensor of ", t->strides.batch,
                        " elements exceeds the int32 strides of aiter::mha_fwd_args");

    std::random_device random_device;
    const uint32_t seed = c.seed != 0 ? c.seed : random_device();
    std::vector<T> q_host(l.q.elements), k_host(l.k.elements), v_host(l.v.elements);
    std::vector<float> q_exact(l.q.elements), k_exact(l.k.elements), v_exact(l.v.elements);
    fill_tensor(c.init, seed, q_host, q_exact);
    fill_tensor(c.init, seed + 1, k_host, k_exact);
    fill_tensor(c.init, seed + 2, v_host, v_exact);

    DeviceBuffer q_dev, k_dev, v_dev, o_dev, lse_dev;
    BENCH_CHECK_CUDA(q_dev.allocate(sizeof(T) * l.q.elements));
    BENCH_CHECK_CUDA(k_dev.allocate(sizeof(T) * l.k.elements));
    BENCH_CHECK_CUDA(v_dev.allocate(sizeof(T) * l.v.elements));
    BENCH_CHECK_CUDA(o_dev.allocate(sizeof(T) * l.o.elements));
    BENCH_CHECK_CUDA(lse_dev.allocate(sizeof(float) * l.lse_elements));
    BENCH_CHECK_CUDA(cudaMemcpy(q_dev.get(), q_host.data(), sizeof(T) * l.q.elements, cudaMemcpyHostToDevice));
    BENCH_CHECK_CUDA(cudaMemcpy(k_dev.get(), k_host.data(), sizeof(T) * l.k.elements, cudaMemcpyHostToDevice));
    BENCH_CHECK_CUDA(cudaMemcpy(v_dev.get(), v_host.data(), sizeof(T) * l.v.elements, cudaMemcpyHostToDevice));
    // 0xFF bytes are NaN in fp16, bf16 and fp32: any element the kernel does not write fails validation.
    BENCH_CHECK_CUDA(cudaMemset(o_dev.get(), 0xFF, sizeof(T) * l.o.elements));
    BENCH_CHECK_CUDA(cudaMemset(lse_dev.get(), 0xFF, sizeof(float) * l.lse_elements));

    const aiter::mha_fwd_args args =
        make_fwd_args(c, l, q_dev.get(), k_dev.get(), v_dev.get(), o_dev.get(), lse_dev.get());
    std::cout << header_line(c) << std::flush;
    const ck_tile::stream_config stream{nullptr, true, c.kname, c.warmup, c.repeat, c.gpu_timer};
    const float ave_time = aiter::mha_fwd(args, stream);
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());

    if (c.is_v3_check)
    {
        const bool covered = ave_time > 0.f; // 1: covered, negative: not
        std::cout << (covered ? ", v3 supported" : ", v3 not supported") << std::endl;
        if (!covered)
            std::cerr << "reason: " << aiter::mha_get_last_error() << std::endl;
        return covered ? kExitPass : kExitFailed;
    }
    if (ave_time < 0.f)
    {
        std::cout << ", not supported yet" << std::endl;
        std::cerr << "reason: " << aiter::mha_get_last_error() << std::endl;
        return kExitFailed;
    }

    // FLOPs count Q*K^T and P*V; a mask halves them (AITER's convention for any mask). Bytes: one pass over Q, K, V, O.
    const double flop  = double(c.batch) * c.nhead *
                        (2.0 * c.seqlen_q * c.seqlen_k * c.hdim_q + 2.0 * c.seqlen_q * c.hdim_v * c.seqlen_k) *
                        (c.mask.type == mask_enum::no_mask ? 1.0 : 0.5);
    const double bytes = double(c.batch) * c.nhead * sizeof(T) *
                         (double(c.seqlen_q) * c.hdim_q + double(c.seqlen_k) * c.hdim_q +
                          double(c.hdim_v) * c.seqlen_k + double(c.seqlen_q) * c.hdim_v);
    std::cout << std::fixed << ", " << std::setprecision(3) << ave_time << " ms, " << std::setprecision(2)
              << flop / 1e9 / ave_time << " TFlops, " << std::setprecision(2) << bytes / 1e6 / ave_time << " GB/s"
              << std::flush;
    if (c.validation == 0)
    {
        std::cout << std::endl;
        return kExitPass;
    }

    std::vector<float> out_o, out_lse, ref_o(l.o.elements), ref_lse(l.lse_elements);
    if (const int rc = download_outputs<T>(c, l, o_dev, lse_dev, out_o, out_lse); rc != kExitPass)
        return rc;
    if (c.validation == 1)
    {
        const reference::HostAttentionProblem p{
            c.batch,      c.nhead,       c.nhead_k,      c.seqlen_q,    c.seqlen_k,     c.hdim_q,
            c.hdim_v,     c.scale_s,     reference_mask(c.mask),       q_exact.data(), l.q.strides,
            k_exact.data(), l.k.strides, v_exact.data(), l.v.strides,   ref_o.data(),   ref_lse.data()};
        reference::reference_attention_fwd(p);
    }
    else if (const int rc = naive_reference<T>(c, l, q_dev.get(), k_dev.get(), v_dev.get(), ref_o, ref_lse);
             rc != kExitPass)
        return rc;

    std::ostringstream log;
    const bool pass = validate<T>(c, out_o, ref_o, out_lse, ref_lse, log);
    std::cout << ", valid:" << (pass ? "y" : "n") << std::endl << log.str() << std::flush;
    return pass ? kExitPass : kExitFailed;
}

} // namespace

int main(int argc, char* argv[])
{
    bench::ArgParser parser = make_parser();
    if (!parser.parse(argc, argv))
        return kExitBadArgs;

    const std::string prec = parser.get_str("prec");
    if (prec != "fp16" && prec != "bf16" && prec != "fp8bf16")
    {
        std::cerr << "unsupported precision: " << prec << " (fp16, bf16, fp8bf16)" << std::endl;
        return kExitUnknownPrec;
    }

    FwdConfig config;
    if (const int rc = read_config(parser, config); rc != kExitPass)
        return rc;

    // Features this build does not have answer like an unsupported call, without touching the GPU.
    if (const std::string reason = unsupported_reason(config); !reason.empty())
    {
        std::cout << header_line(config) << ", not supported yet" << std::endl;
        std::cerr << "reason: " << reason << " is not supported yet" << std::endl;
        return kExitFailed;
    }

    int device_count        = 0;
    const cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess || device_count == 0)
    {
        std::cerr << "benchmark_mha_fwd: no CUDA GPU visible ("
                  << (error != cudaSuccess ? cudaGetErrorString(error) : "cudaGetDeviceCount returned 0") << ")"
                  << std::endl;
        return kExitFailed;
    }

    return prec == "bf16" ? run<__nv_bfloat16>(config) : run<__half>(config);
}
