#pragma once
// benchmark_mha_bwd's command line: AITER's flags with their defaults and help (spec 4.3) plus -flush_cache, decoded
// into BwdConfig: the forward problem the gradients belong to (ProblemConfig, bench_problem.h, shared with
// benchmark_mha_fwd: the same -s lists of group mode, -mask and -bias grammars) plus the backward's own switches, and
// the header line that starts the output (spec 4.4).

#include "bench_problem.h"

#include <sstream>
#include <string>

namespace bench {

inline ArgParser make_bwd_parser()
{
    ArgParser p;
    p.insert("v", "1", "weather do CPU validation or not")
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
        .insert("s_k", "-1", "seqlen_k, -1 means equal to s")
        .insert("d", "128", "head dim for q, k")
        .insert("d_v", "-1", "head dim for v, -1 means equal to d")
        .insert("scale", "0", "scale factor. 0 means equal to 1/sqrt(hdim)")
        .insert("iperm", "1",
                "permute input\n"
                "if true, will be b*h*s*d, else b*s*h*d")
        .insert("operm", "1", "permute output")
        .insert("bias", "n",
                "n or 0, no bias\n"
                "e(lementwise) or 1, elementwise bias with 1*1*s*s. e:1, 1*h*s*s. e:2, b*h*s*s\n"
                "a(libi) or 2, alibi with 1*h. a:1, b*h")
        .insert("dbias", "0", "output bias gradient or not")
        .insert("prec", "fp16", "data type. fp16 or bf16")
        .insert("mask", "0",
                "0: no mask, 1: top-left(same as 't'), 2:bottom-right(same as 'b')\n"
                "'t', top-left causal mask, 'b', bottom-r causal mask\n"
                "'t:l,r', top-left sliding window attn(swa) with FA style left right size\n"
                "'b:l,r', bottom-r sliding window attn(swa) with FA style left right size\n"
                "'xt:window_size', xformer style masking from top-left, window_size negative is causal, positive is swa\n"
                "'xb:window_size', xformer style masking from bottom-r, window_size negative is causal, positive is swa\n"
                "'g:y,x', generic attention mask coordinate with y/x size (only debug purpose for now)")
        .insert("kname", "0", "if set to 1 will print kernel name")
        .insert("init", "1", "init method. 0:random int, 1:random float, 2:trig float")
        .insert("seed", "11939", "random seed used for initializing input tensors. 0 for non-deterministic seed")
        .insert("p_drop", "0", "0~1 probability of dropout")
        .insert("drop_seed", "1", "seed for random number generator")
        .insert("drop_offset", "0", "offset for random number generator")
        .insert("drop_prefs", "0", "seed and offset values are present on GPU; 0 - host, 1 - device/GPU")
        .insert("timer", "gpu", "gpu:gpu timer, cpu:cpu timer")
        .insert("warmup", "10", "number of iterations before benchmark the kernel")
        .insert("repeat", "10", "number of iterations to benchmark the kernel")
        .insert("deterministic", "0",
                "1: bit-identical dq run to run (here: fp32 atomics in key-block order, AITER: multi-buffer reduction)")
        .insert("bwd_v3", "0", "read as a bool, as AITER: 1 tries the asm (sm90a) backward first; calls it does not "
                               "cover run on ck")
        .insert("v3_atomic_fp32", "1",
                "accepted; dq always accumulates in fp32 here (AITER: 0 uses fp16/bf16 atomics with bwd_v3=1)")
        .insert("v3_bf16_cvt", "1", "float to bf16 convert type when bwd_v3 is set to 1, 0:RTNE; 1:RTNA; 2:RTZ")
        .insert("v3_api_check", "0",
                "if set to 1, check whether the input scenarios is supported by the asm kernel.\n"
                "with -bwd_v3=1 a covered call prints 'v3 supported' without launching; otherwise the ck backward\n"
                "runs, as AITER HEAD's mha_bwd falls back")
        // ours, after AITER's flags
        .insert("flush_cache", "0", "1: sweep the L2 before every timed pass and time each pass alone (inputs read\n"
                                    "from DRAM, as inside a model); not an AITER flag");
    return p;
}

// Every flag, decoded: the forward problem (no soft-cap, no sink tokens: mha_bwd_args carries neither) and the
// backward's own.
struct BwdConfig : ProblemConfig
{
    bool dbias;
    bool deterministic;
    bool bwd_v3; // AITER reads it with get_bool: it becomes use_asm_v3
    bool v3_atomic_fp32;
    bool v3_api_check;
};

// kExitPass, or the exit code after saying what is wrong: kExitBadArgs for a value outside a flag's grammar,
// kExitFailed for an inconsistent problem (as AITER's run() returning false).
inline int read_bwd_config(const ArgParser& p, BwdConfig& c)
{
    c.prec       = p.get_str("prec");
    c.validation = p.get_int("v") != 0 ? 1 : 0; // AITER: any non-zero value validates on the host
    c.mode       = p.get_int("mode");
    c.batch      = p.get_int("b");
    c.nhead      = p.get_int("h");
    c.nhead_k    = p.get_int("h_k");
    if (c.nhead_k < 0)
        c.nhead_k = c.nhead;
    c.hdim_q = p.get_int("d");
    c.hdim_v = p.get_int("d_v");
    if (c.hdim_v < 0)
        c.hdim_v = c.hdim_q;
    c.scale_s = p.get_float("scale");
    if (c.scale_s == 0.f && c.hdim_q > 0)
        c.scale_s = 1.0f / std::sqrt(float(c.hdim_q));
    c.logits_soft_cap = 0.f;
    c.iperm           = p.get_bool("iperm");
    c.operm           = p.get_bool("operm");
    c.dbias           = p.get_bool("dbias");
    c.kname           = p.get_int("kname");
    c.seed            = p.get_uint32("seed");
    c.p_drop          = p.get_float("p_drop");
    c.drop_seed       = p.get_uint64("drop_seed");
    c.drop_offset     = p.get_uint64("drop_offset");
    c.drop_prefs      = p.get_bool("drop_prefs");
    c.gpu_timer       = p.get_str("timer") == "gpu";
    c.flush_cache     = p.get_bool("flush_cache");
    c.warmup          = p.get_int("warmup");
    c.repeat          = p.get_int("repeat");
    c.deterministic   = p.get_bool("deterministic");
    c.bwd_v3          = p.get_bool("bwd_v3");
    c.v3_atomic_fp32  = p.get_bool("v3_atomic_fp32");
    c.v3_bf16_cvt     = p.get_int("v3_bf16_cvt");
    c.v3_api_check    = p.get_bool("v3_api_check");

    if (!p.error().empty())
        return fail(kExitBadArgs, p.error());
    if (const int rc = check_common_flags(p, c); rc != kExitPass)
        return rc;
    if (const int rc = decode_problem_grammar(p, c); rc != kExitPass)
        return rc;
    using I = InitMethod;
    if (!decode_name(p.get_str("init"), {{"0", I::small_int}, {"1", I::symmetric_float}, {"2", I::trig_float}},
                     c.init))
        return fail(kExitBadArgs, "not supported init method: ", p.get_str("init"));
    if (c.dbias && c.bias.type != bias_enum::elementwise_bias)
        return fail(kExitFailed, "dbias only exists when bias type is elementwise");
    return check_problem(p, c);
}

// What mha_bwd_args cannot express; "" when the library is asked.
inline std::string unsupported_reason(const BwdConfig& c)
{
    if (c.mask.sink_size > 0)
        return "sink tokens (" + std::to_string(c.mask.sink_size) + ", the third -mask number): mha_bwd_args has no "
               "sink_size";
    return "";
}

// AITER's header, batch 0's lengths in s: (as benchmark_mha_fwd). s_randval as AITER prints it (p_drop > 0 with
// validation): mha_bwd stores its random values then (is_store_randval), and -v=1 checks them.
inline std::string header_line(const BwdConfig& c)
{
    std::ostringstream os;
    os << "[" << c.prec << "|" << (c.group() ? "group" : "batch") << "|" << io_layout(c.iperm, c.operm)
       << "] b:" << c.batch << ", h:" << c.nhead << "/" << c.nhead_k << ", s:" << c.seqlen_qs[0] << "/"
       << c.seqlen_ks[0] << ", d:" << c.hdim_q << "/" << c.hdim_v << ", scale:" << c.scale_s
       << ", bias:" << c.bias.str() << ", dbias:" << c.dbias << ", p_drop:" << c.p_drop
       << ", s_randval:" << (c.p_drop > 0.f && c.validation != 0)
       << ", deterministic:" << c.deterministic << ", mask:" << c.mask.str();
    return os.str();
}

} // namespace bench
