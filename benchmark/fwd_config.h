#pragma once
// benchmark_mha_fwd's command line: AITER's flags with their defaults and help (spec 4.2) plus -init_sink and
// -flush_cache, decoded into FwdConfig with the per-batch sequence lengths resolved (group mode draws them like CK's
// benchmark, from -seed), the features this build does not run yet, and the header line that starts every output
// line (spec 4.4).

#include "bench_problem.h"

#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

inline ArgParser make_fwd_parser()
{
    ArgParser p;
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
                "'t:l,r,s' / 'b:l,r,s', the same with the first s keys kept as sink tokens\n"
                "'xt:window_size', xformer style masking from top-left, window_size negative is causal, positive is swa\n"
                "'xb:window_size', xformer style masking from bottom-r, window_size negative is causal, positive is swa\n"
                "'g:y,x', generic attention mask coordinate with y/x size (only debug purpose for now)")
        .insert("vlayout", "r", "r for row-major(seqlen*hdim), c for col-major(hdim*seqlen)")
        .insert("lse", "0", "0 not store lse, 1 store lse")
        .insert("kname", "0", "if set to 1 will print kernel name")
        .insert("init", "uf",
                "init method. ui, uniform random int, ni, normalized random int\n"
                "uf, uniform random float, nf, normalized random float, tf, trig float, uf:q (ufq), quantization")
        .insert("init_sink", "0", "1: random fp32 sink logit per head in [-2, 6] (attention sinks), 0: none")
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
                "prints ', v3 supported' (exit 0) or ', v3 not supported' (exit -2)")
        // ours, after AITER's flags
        .insert("flush_cache", "0", "1: sweep the L2 before every timed pass and time each pass alone (inputs read\n"
                                    "from DRAM, as inside a model); not an AITER flag");
    return p;
}

inline const char* qscale_str(quant_scale_enum q)
{
    return q == quant_scale_enum::no_scale ? "n" : q == quant_scale_enum::pertensor ? "pt" : "bs";
}

// Every flag, decoded: the shared ones (bench_problem.h) and the forward's own.
struct FwdConfig : ProblemConfig
{
    int seqlen_knew;
    quant_scale_enum qscale;
    std::string vlayout;
    bool lse;
    bool init_sink;
    int rotary_dim;
    bool rotary_interleaved;
    int num_splits, page_block_size;
    bool cache_batch_idx;
    bool fwd_v3, is_v3_check;

    bool has_sink() const { return init_sink || mask.sink_size > 0; }
    // AITER's routing: split-KV or a KV cache (paged or batch-indexed) goes to mha_fwd_splitkv
    bool use_kvcache() const { return page_block_size > 0 || cache_batch_idx; }
    bool use_splitkv() const { return num_splits != 1 || use_kvcache(); }
};

// kExitPass, or the exit code after saying what is wrong: kExitBadArgs for a value outside a flag's grammar,
// kExitFailed for an inconsistent problem (as AITER's run() returning false).
inline int read_fwd_config(const ArgParser& p, FwdConfig& c)
{
    c.prec       = p.get_str("prec");
    c.validation = p.get_int("v");
    c.mode       = p.get_int("mode");
    c.batch      = p.get_int("b");
    c.nhead      = p.get_int("h");
    c.nhead_k    = p.get_int("h_k");
    if (c.nhead_k < 0)
        c.nhead_k = c.nhead;
    c.seqlen_knew = p.get_int("s_knew");
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
    c.init_sink          = p.get_bool("init_sink");
    c.seed               = p.get_uint32("seed");
    c.p_drop             = p.get_float("p_drop");
    c.drop_seed          = p.get_uint64("drop_seed");
    c.drop_offset        = p.get_uint64("drop_offset");
    c.drop_prefs         = p.get_bool("drop_prefs");
    c.gpu_timer          = p.get_str("timer") == "gpu";
    c.flush_cache        = p.get_bool("flush_cache");
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

    if (!p.error().empty())
        return fail(kExitBadArgs, p.error());
    if (const int rc = check_common_flags(p, c); rc != kExitPass)
        return rc;
    if (c.validation < 0 || c.validation > 2)
        return fail(kExitBadArgs, "-v must be 0, 1 or 2, got ", c.validation);
    if (c.vlayout != "r" && c.vlayout != "c")
        return fail(kExitBadArgs, "-vlayout must be r or c, got ", c.vlayout);
    if (const int rc = decode_problem_grammar(p, c); rc != kExitPass)
        return rc;
    using Q = quant_scale_enum;
    if (!decode_name(p.get_str("qscale"),
                     {{"n", Q::no_scale}, {"0", Q::no_scale}, {"pt", Q::pertensor}, {"1", Q::pertensor},
                      {"bs", Q::blockscale}, {"2", Q::blockscale}},
                     c.qscale))
        return fail(kExitBadArgs, "not supported qscale: ", p.get_str("qscale"));
    using I = InitMethod;
    if (!decode_name(p.get_str("init"),
                     {{"ui", I::uniform_int}, {"0", I::uniform_int}, {"ni", I::normal_int}, {"uf", I::uniform_float},
                      {"1", I::uniform_float}, {"nf", I::normal_float}, {"tf", I::trig_float}, {"2", I::trig_float},
                      {"ufq", I::uniform_quant}, {"uf:q", I::uniform_quant}, {"3", I::uniform_quant}},
                     c.init))
        return fail(kExitBadArgs, "not supported init method: ", p.get_str("init"));
    return check_problem(p, c);
}

// What this build cannot run yet; "" when the library is asked. Each entry is a feature whose flag AITER accepts.
inline std::string unsupported_reason(const FwdConfig& c)
{
    if (c.prec == "fp8bf16")
        return "-prec=fp8bf16";
    if (c.qscale != quant_scale_enum::no_scale)
        return std::string("quantization scale (-qscale=") + qscale_str(c.qscale) + ")";
    if (c.init_sink && c.use_splitkv())
        return "sink logits (-init_sink=1) with split-kv / kv-cache (mha_fwd_splitkv_args has no sink_ptr)";
    if (c.vlayout != "r")
        return "column-major V (-vlayout=c)";
    return "";
}

// AITER's header, batch 0's lengths in s:; sinks (not in AITER) append ", sink:<sink_size>[+logit]".
inline std::string header_line(const FwdConfig& c)
{
    std::ostringstream os;
    os << "[" << c.prec << "|" << (c.group() ? "group" : "batch") << "|" << io_layout(c.iperm, c.operm)
       << "] b:" << c.batch << ", h:" << c.nhead << "/" << c.nhead_k << ", s:" << c.seqlen_qs[0] << "/"
       << c.seqlen_ks[0];
    if (!c.seqlen_kpads.empty())
        os << "(" << c.seqlen_kpads[0] << ")";
    os << ", d:" << c.hdim_q << "/" << c.hdim_v << ", scale_s:" << c.scale_s << ", bias:" << c.bias.str()
       << ", p_drop:" << c.p_drop << ", lse:" << c.lse << ", qscale:" << qscale_str(c.qscale)
       << ", mask:" << c.mask.str() << ", v:" << c.vlayout;
    if (c.has_sink())
        os << ", sink:" << c.mask.sink_size << (c.init_sink ? "+logit" : "");
    if (c.num_splits > 1)
        os << ", num_splits:" << c.num_splits;
    if (c.page_block_size > 0)
        os << ", page_block_size:" << c.page_block_size;
    if (c.cache_batch_idx)
        os << ", cache_batch_idx:1";
    return os.str();
}

} // namespace bench
