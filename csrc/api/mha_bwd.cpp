// aiter::mha_bwd: validate the call, pick the backward instance whose head dims cover it (the asm family's for a
// use_asm_v3 call it covers, else ck's), get the fp32 dQ accumulator (and deterministic turn counters, or the asm
// pass's padded LSE / D rows) from the caller's workspace_alloc, and run preprocess + main + dQ conversion as one
// pass (csrc/ck/bwd_launch.cuh, csrc/asm/sm90_bwd.cuh). The library never allocates device memory itself.
// As in AITER HEAD, a use_asm_v3 call the asm family declines runs on ck, v3_api_check included (which answers 1
// without launching only when the asm family covers the call).

#include "mha_bwd.h"

#include "checks.h"
#include "error.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <variant>

namespace mha {
namespace {

bool has_dropout(const aiter::mha_bwd_args& a) { return a.p_drop > 0.f; }

std::string invalid_features(const aiter::mha_bwd_args& a)
{
    if (a.bias_type < 0 || a.bias_type > 2)
        return "bias_type must be 0 (none), 1 (elementwise) or 2 (alibi), got " + str(a.bias_type);
    if (a.has_dbias && a.bias_type != 1)
        return "dbias only exists when bias type is elementwise (bias_type 1)";
    if (std::string why = invalid_bias_or_dropout(a); !why.empty())
        return why;
    if (a.bias_type == 1 && a.has_dbias)
    {
        if (a.dbias_ptr == nullptr || !aligned(a.dbias_ptr, 2))
            return "has_dbias is set but dbias_ptr is null or not 2-byte aligned";
        if (a.stride_dbias < 0 || a.nhead_stride_dbias < 0 || a.batch_stride_dbias < 0)
            return "stride_dbias, nhead_stride_dbias and batch_stride_dbias must be >= 0";
    }
    if (a.p_drop > 0.f && !a.has_dropout) // AITER picks its kernel by has_dropout and would run without dropout
        return "p_drop is " + std::to_string(a.p_drop) + " but has_dropout is false; set has_dropout = p_drop > 0";
    if (has_dropout(a) && a.is_store_randval)
        if (std::string why = invalid_randval(a, "is_store_randval"); !why.empty())
            return why;
    if (a.d_sink_ptr != nullptr && a.sink_ptr == nullptr)
        return "d_sink_ptr needs sink_ptr (the forward's fp32 [nhead_q] sink logits)";
    for (auto [n, p] : {std::pair{"sink_ptr", a.sink_ptr}, std::pair{"d_sink_ptr", static_cast<const void*>(a.d_sink_ptr)}})
        if (!aligned(p, 4))
            return std::string(n) + " must be 4-byte aligned (fp32 [nhead_q])";
    return "";
}

// Arguments that are wrong whatever the build: a reason string, or "" when the call is well formed.
std::string invalid_argument(const aiter::mha_bwd_args& a)
{
    if (a.data_type != "fp16" && a.data_type != "bf16")
        return "data_type must be fp16 or bf16, got '" + a.data_type + "'";
    if (std::string why = invalid_shape(a); !why.empty())
        return why;
    if (a.is_group_mode && (a.max_seqlen_k < 0 || a.max_seqlen_k > kMaxSeqlen))
        return "max_seqlen_k must be in [0, " + str(kMaxSeqlen) + "], got " + str(a.max_seqlen_k);
    if (!(a.scale > 0.f) || std::isinf(a.scale))
        return "scale must be finite and > 0, got " + std::to_string(a.scale);
    if (std::string why = invalid_features(a); !why.empty())
        return why;
    if (!a.workspace_alloc)
        return "workspace_alloc callback is required (the fp32 dQ accumulator; the library never allocates)";

    for (auto [name, p] : {std::pair{"q_ptr", a.q_ptr}, std::pair{"k_ptr", a.k_ptr}, std::pair{"v_ptr", a.v_ptr},
                           std::pair{"do_ptr", a.do_ptr}})
        if (p == nullptr || !aligned(p, 16))
            return std::string(name) + " must be non-null and 16-byte aligned";
    for (auto [name, p] : {std::pair{"o_ptr", a.o_ptr}, std::pair{"dq_ptr", static_cast<const void*>(a.dq_ptr)},
                           std::pair{"dk_ptr", static_cast<const void*>(a.dk_ptr)},
                           std::pair{"dv_ptr", static_cast<const void*>(a.dv_ptr)}})
        if (p == nullptr || !aligned(p, 2))
            return std::string(name) + " must be non-null and 2-byte aligned";
    for (auto [name, p] : {std::pair{"lse_ptr", a.lse_ptr}, std::pair{"d_ptr", static_cast<const void*>(a.d_ptr)}})
        if (p == nullptr || !aligned(p, 4))
            return std::string(name) + " must be non-null and 4-byte aligned (fp32 [batch, nhead_q, seqlen_q])";

    struct Strides { const char* t; int row, head, batch, hdim; bool vec; };
    for (const Strides& s : {Strides{"q", a.stride_q, a.nhead_stride_q, a.batch_stride_q, a.hdim_q, true},
                             Strides{"k", a.stride_k, a.nhead_stride_k, a.batch_stride_k, a.hdim_q, true},
                             Strides{"v", a.stride_v, a.nhead_stride_v, a.batch_stride_v, a.hdim_v, true},
                             Strides{"do", a.stride_do, a.nhead_stride_do, a.batch_stride_do, a.hdim_v, true},
                             Strides{"o", a.stride_o, a.nhead_stride_o, a.batch_stride_o, a.hdim_v, false},
                             Strides{"dq", a.stride_dq, a.nhead_stride_dq, a.batch_stride_dq, a.hdim_q, false},
                             Strides{"dk", a.stride_dk, a.nhead_stride_dk, a.batch_stride_dk, a.hdim_q, false},
                             Strides{"dv", a.stride_dv, a.nhead_stride_dv, a.batch_stride_dv, a.hdim_v, false}})
        if (std::string why = invalid_strides(s.t, s.row, s.head, s.batch, s.hdim, s.vec, a.is_group_mode);
            !why.empty())
            return why;
    if (a.nhead_stride_lsed < 0 || (!a.is_group_mode && a.batch_stride_lsed < 0))
        return "nhead_stride_lsed and batch_stride_lsed must be >= 0";
    // what the kernels write: dQ [b, s_q, h, d], dK / dV [b, s_k, h, d] (nhead_q heads), D [b, h, s_q] (rows 1 apart,
    // the LSE's strides), dBias [b, h, s_q, s_k]; D must not be the LSE (it is written before the LSE is read)
    const bool g = a.is_group_mode;
    const int sq = g ? a.max_seqlen_q : a.seqlen_q, sk = g ? a.max_seqlen_k : a.seqlen_k;
    struct Out { const char* t; int rows, cols, row, head, batch; };
    for (const Out& o : {Out{"dq", sq, a.hdim_q, a.stride_dq, a.nhead_stride_dq, a.batch_stride_dq},
                         Out{"dk", sk, a.hdim_q, a.stride_dk, a.nhead_stride_dk, a.batch_stride_dk},
                         Out{"dv", sk, a.hdim_v, a.stride_dv, a.nhead_stride_dv, a.batch_stride_dv},
                         Out{"d (D = rowsum(dO * O), the lsed strides)", sq, 1, 1, a.nhead_stride_lsed,
                             a.batch_stride_lsed}})
        if (std::string why = overlapping_output(o.t, a.batch, o.rows, a.nhead_q, o.cols, o.row, o.head, o.batch, g);
            !why.empty())
            return why;
    // [b, h, s_q, s_k] outputs (dBias, rand_val); group mode [nhead_q, total_q, >= max_seqlen_k], rows physical
    // (their count is device data), so the row stride is checked against the widest row on its own
    auto score_sized = [&](const char* t, int row, int head, int batch) -> std::string {
        if (g && sq > 1 && row < sk)
            return std::string("in group mode stride_") + t + " (" + str(row) + ") must be >= max_seqlen_k (" +
                   str(sk) + "): " + t + " rows would overlap (a race)";
        return overlapping_output(t, a.batch, sq, a.nhead_q, sk, row, head, batch, g);
    };
    if (has_dropout(a) && a.is_store_randval)
        if (std::string why = score_sized("randval", a.stride_randval, a.nhead_stride_randval, a.batch_stride_randval);
            !why.empty())
            return why;
    if (a.bias_type == 1 && a.has_dbias)
        if (std::string why = score_sized("dbias", a.stride_dbias, a.nhead_stride_dbias, a.batch_stride_dbias);
            !why.empty())
            return why;
    if (a.d_ptr == a.lse_ptr)
        return "d_ptr must not be lse_ptr: D is written before the LSE is read";
    return "";
}

DType dtype_of(const std::string& s) { return s == "fp16" ? DType::fp16 : DType::bf16; }

bool arch_built(int cc) { return mha::arch_built(kBwdBuildInfo, cc); }

// The cheapest built instance with exactly `features` whose head dims cover the call's (smaller ones zero-padded),
// or null with a reason.
const BwdInstance* find_variant(DType dt, int hdim_q, int hdim_v, int features, std::string& missing,
                                Family family = Family::ck)
{
    const BwdInstance* best = nullptr;
    const BwdInstance* unbuilt = nullptr;
    for (int i = 0; i < kNumBwdInstances; ++i)
    {
        const BwdInstance& in = kBwdInstances[i];
        if (in.family != family || in.dtype != dt || in.features != features || in.hdim < hdim_q ||
            in.hdim_v < hdim_v)
            continue;
        const BwdInstance*& slot = in.launch ? best : unbuilt;
        if (slot == nullptr || in.hdim * in.hdim_v < slot->hdim * slot->hdim_v)
            slot = &in;
    }
    if (best == nullptr)
        missing = unbuilt ? "not in this build; rebuild with `python3 compile.py " +
                                std::string(unbuilt->compile_hint) +
                                "` merged into this build's options (a build holds exactly what its options select; "
                                "no options: every instance)"
                          : "no backward instance covers these head dims";
    return best;
}

// The leanest variant that implements what the call needs: "plain" (masks only), "alibi" or "dropout" when that is
// the only feature, else (or when those are not built) "full".
const BwdInstance* find_instance(DType dt, int hdim_q, int hdim_v, int needs, std::string& missing)
{
    std::string lean_missing;
    const bool lean_exists = needs == 0 || needs == kBwdAlibi || needs == kBwdDropout;
    if (lean_exists)
        if (const BwdInstance* lean = find_variant(dt, hdim_q, hdim_v, needs, lean_missing))
            return lean;
    const BwdInstance* full = find_variant(dt, hdim_q, hdim_v, kBwdBias | kBwdAlibi | kBwdDropout, missing);
    if (full == nullptr && lean_exists) // neither is built: the hint names the lean variant, which is all it needs
        missing = lean_missing;
    return full;
}

BwdParams make_params(const aiter::mha_bwd_args& a)
{
    BwdParams p{};
    p.q = a.q_ptr, p.k = a.k_ptr, p.v = a.v_ptr, p.o = a.o_ptr, p.dout = a.do_ptr;
    p.lse = static_cast<const float*>(a.lse_ptr);
    p.dsum = static_cast<float*>(a.d_ptr);
    p.dq = a.dq_ptr, p.dk = a.dk_ptr, p.dv = a.dv_ptr;
    p.q_row_stride = a.stride_q, p.q_head_stride = a.nhead_stride_q, p.q_batch_stride = a.batch_stride_q;
    p.k_row_stride = a.stride_k, p.k_head_stride = a.nhead_stride_k, p.k_batch_stride = a.batch_stride_k;
    p.v_row_stride = a.stride_v, p.v_head_stride = a.nhead_stride_v, p.v_batch_stride = a.batch_stride_v;
    p.o_row_stride = a.stride_o, p.o_head_stride = a.nhead_stride_o, p.o_batch_stride = a.batch_stride_o;
    p.do_row_stride = a.stride_do, p.do_head_stride = a.nhead_stride_do, p.do_batch_stride = a.batch_stride_do;
    p.dq_row_stride = a.stride_dq, p.dq_head_stride = a.nhead_stride_dq, p.dq_batch_stride = a.batch_stride_dq;
    p.dk_row_stride = a.stride_dk, p.dk_head_stride = a.nhead_stride_dk, p.dk_batch_stride = a.batch_stride_dk;
    p.dv_row_stride = a.stride_dv, p.dv_head_stride = a.nhead_stride_dv, p.dv_batch_stride = a.batch_stride_dv;
    p.lse_head_stride = a.nhead_stride_lsed, p.lse_batch_stride = a.batch_stride_lsed;
    p.batch = a.batch, p.nhead_q = a.nhead_q, p.nhead_k = a.nhead_k, p.head_ratio = a.nhead_q / a.nhead_k;
    p.seqlen_q = a.seqlen_q, p.seqlen_k = a.seqlen_k;
    p.max_seqlen_q = a.is_group_mode ? a.max_seqlen_q : a.seqlen_q;
    p.max_seqlen_k = a.is_group_mode ? a.max_seqlen_k : a.seqlen_k;
    p.hdim_q = a.hdim_q, p.hdim_v = a.hdim_v;
    p.scale = a.scale;
    p.deterministic = a.is_deterministic;
    p.sink = static_cast<const float*>(a.sink_ptr);
    p.d_sink = static_cast<float*>(a.d_sink_ptr);

    // the forward's mask: window_generic (3) is anchored bottom-right, like the ck forward
    if (a.mask_type != 0)
        p.mask = mask_params(a, 0);

    fill_sequences(p.seq, a);

    fill_bias_and_dropout(p.mod, p.drop, a);
    if (has_dropout(a) && a.is_store_randval) // a kernel of its own writes them (bwd_store_randval)
    {
        p.drop.randval = static_cast<uint8_t*>(a.rand_val_ptr);
        p.drop.randval_row_stride = a.stride_randval, p.drop.randval_head_stride = a.nhead_stride_randval;
        p.drop.randval_batch_stride = a.batch_stride_randval;
    }
    if (a.bias_type == 1 && a.has_dbias)
    {
        p.dbias = a.dbias_ptr;
        p.dbias_row_stride = a.stride_dbias, p.dbias_head_stride = a.nhead_stride_dbias;
        p.dbias_batch_stride = a.batch_stride_dbias;
    }
    return p;
}

// The asm (sm_90a) instance for a use_asm_v3 call that family covers, else null with the reason: batch mode without
// cu_seqlen_q / cu_seqlen_k, or group mode (seqstart, with seqlen_* / cu_seqlen_* logical lengths or not), any mask
// (none, causal or a sliding window, top-left or bottom-right), deterministic or not, no bias / ALiBi / dropout /
// sink logits, on an sm_90 GPU, head dims up to 128, and the tensor copies' alignment. (contract_refusal has passed.)
const BwdInstance* asm_instance(const aiter::mha_bwd_args& a, std::string& why_not)
{
    if (!a.use_asm_v3)
    {
        why_not = "use_asm_v3 is not set";
        return nullptr;
    }
    if (!a.is_group_mode && (a.cu_seqlen_q_ptr != nullptr || a.cu_seqlen_k_ptr != nullptr))
    {
        why_not = "batch-mode logical lengths (cu_seqlen_q / cu_seqlen_k) are not covered";
        return nullptr;
    }
    if (a.bias_type != 0 || has_dropout(a) || a.sink_ptr != nullptr)
    {
        why_not = "bias, ALiBi, dropout and sink logits are not covered";
        return nullptr;
    }
    if (!(why_not = sm90a_unavailable(kBwdBuildInfo)).empty())
        return nullptr;
    // the tensor copies of Q, K, V, dO: positive strides that are multiples of 8 elements (an extent-1 dimension's
    // stride is never used); the 4-byte stores of dQ / dK / dV: 4-byte aligned, even strides. (invalid_argument has
    // asked for 16-byte aligned q / k / v / do.) Group mode: rows are packed over the sequences, so every row stride
    // is used, and there is no batch stride.
    const auto stride_ok = asm_stride_ok;
    const bool g = a.is_group_mode;
    const int64_t rows_q = g ? 0 : a.seqlen_q, rows_k = g ? 0 : a.seqlen_k, batches = g ? 1 : a.batch;
    const bool copies_ok =
        stride_ok(a.stride_q, rows_q, 8) && stride_ok(a.stride_do, rows_q, 8) &&
        stride_ok(a.stride_k, rows_k, 8) && stride_ok(a.stride_v, rows_k, 8) &&
        stride_ok(a.nhead_stride_q, a.nhead_q, 8) && stride_ok(a.nhead_stride_do, a.nhead_q, 8) &&
        stride_ok(a.nhead_stride_k, a.nhead_k, 8) && stride_ok(a.nhead_stride_v, a.nhead_k, 8) &&
        stride_ok(a.batch_stride_q, batches, 8) && stride_ok(a.batch_stride_do, batches, 8) &&
        stride_ok(a.batch_stride_k, batches, 8) && stride_ok(a.batch_stride_v, batches, 8);
    bool out_ok = true;
    for (auto [ptr, row, head, batch, rows] :
         {std::tuple{static_cast<const void*>(a.dq_ptr), a.stride_dq, a.nhead_stride_dq, a.batch_stride_dq, rows_q},
          std::tuple{static_cast<const void*>(a.dk_ptr), a.stride_dk, a.nhead_stride_dk, a.batch_stride_dk, rows_k},
          std::tuple{static_cast<const void*>(a.dv_ptr), a.stride_dv, a.nhead_stride_dv, a.batch_stride_dv, rows_k}})
        out_ok = out_ok && aligned(ptr, 4) && stride_ok(row, rows, 2) && stride_ok(head, a.nhead_q, 2) &&
                 stride_ok(batch, batches, 2);
    if (!copies_ok || !out_ok)
    {
        why_not = "q / k / v / do need positive strides that are multiples of 8 elements, dq / dk / dv 4-byte "
                  "aligned pointers with positive even strides";
        return nullptr;
    }
    return find_variant(dtype_of(a.data_type), a.hdim_q, a.hdim_v, 0, why_not, Family::asm_v3);
}

// The argument contract, whatever the instance: the reason, or "" when the call is well formed.
std::string contract_refusal(const aiter::mha_bwd_args& args)
{
    if (args.is_group_mode && !args.pinned_host_alloc) // AITER's first check, with its message
        return "mha_bwd: group mode requires pinned_host_alloc callback";
    if (std::string why = invalid_argument(args); !why.empty())
        return "mha_bwd: invalid argument: " + why;
    return "";
}

// The asm instance a well-formed use_asm_v3 call runs on (covered, built, its shared memory fits the device), or
// null: the call then runs on ck (AITER's fallback), and needs no ck instance otherwise.
const BwdInstance* asm_choice(const aiter::mha_bwd_args& args)
{
    if (!args.use_asm_v3 || !contract_refusal(args).empty())
        return nullptr;
    std::string why_not;
    const BwdInstance* as = asm_instance(args, why_not);
    if (as == nullptr || !smem_unfit(as->name, as->smem_bytes).empty())
        return nullptr;
    // the workspace (mha_bwd) in 64-bit sizes
    const int rows = args.is_group_mode ? args.max_seqlen_q : args.seqlen_q;
    if (rows > 0 && asm_bwd_workspace_bytes(args.batch, args.nhead_q, rows, as->block_m, as->hdim,
                                            args.is_group_mode) == 0)
        return nullptr;
    return as;
}

// What mha_bwd checks before any CUDA call on the ck path: the argument contract, then the ck instance this build
// has for the call (in `in`). The reason, or "" when both pass.
std::string host_checks(const aiter::mha_bwd_args& args, const BwdInstance*& in)
{
    in = nullptr;
    if (std::string why = contract_refusal(args); !why.empty())
        return why;
    std::string missing;
    const int needs = (args.bias_type == 1 ? kBwdBias : 0) | (args.bias_type == 2 ? kBwdAlibi : 0) |
                      (has_dropout(args) ? kBwdDropout : 0);
    in = find_instance(dtype_of(args.data_type), args.hdim_q, args.hdim_v, needs, missing);
    if (in == nullptr)
        return "mha_bwd: no ck backward kernel for dtype=" + args.data_type + " hdim_q=" + str(args.hdim_q) +
               " hdim_v=" + str(args.hdim_v) + ": " + missing;
    return "";
}

// Every refusal mha_bwd makes before it asks for the workspace: host_checks, then the current device's arch and
// shared memory (queries only), then the workspace's size. The reason, or "" when the call would launch.
std::string refusal(const aiter::mha_bwd_args& args, const BwdInstance*& in)
{
    if (std::string why = host_checks(args, in); !why.empty())
        return why;
    int cc = 0;
    if (std::string why = current_cc(cc); !why.empty())
        return "mha_bwd: " + why;
    if (!arch_built(cc))
        return "mha_bwd: this library was built for " + std::string(kBwdBuildInfo.archs) + " but the GPU is sm_" +
               str(cc) + rebuild_hint(cc);
    if (std::string why = smem_unfit(in->name, in->smem_bytes); !why.empty())
        return "mha_bwd: " + why;
    const int64_t rows    = args.is_group_mode ? args.max_seqlen_q : args.seqlen_q; // as make_params
    const size_t q_blocks = size_t(args.batch) * size_t(args.nhead_q) * size_t((rows + in->block_m - 1) / in->block_m);
    if (q_blocks > SIZE_MAX / (size_t(in->block_m) * in->hdim * sizeof(float) + sizeof(int32_t)))
        return "mha_bwd: the dQ accumulator of " + str(int64_t(q_blocks)) + " query blocks (batch x nhead_q x "
               "max_seqlen_q / " + str(in->block_m) + ") does not fit 64-bit sizes";
    return "";
}

} // namespace
} // namespace mha

namespace aiter {

int mha_bwd_check(const mha_bwd_args& args)
{
    using namespace mha;
    mha_set_last_error("");
    if (asm_choice(args) != nullptr)
        return 0;
    const BwdInstance* in = nullptr;
    if (std::string why = refusal(args, in); !why.empty())
        return static_cast<int>(fail(why));
    return 0;
}

float mha_bwd(mha_bwd_args args, const ck_tile::stream_config& s)
{
    using namespace mha;
    mha_set_last_error("");
    // use_asm_v3: the asm family first (asm_choice); a call it declines runs on ck, as in AITER, v3_api_check
    // included
    if (const BwdInstance* as = asm_choice(args))
    {
        mha_set_last_kernel_name(as->name);
        if (args.v3_api_check)
            return 1.f;
        BwdParams p = make_params(args);
        // workspace: per (batch, head, query block) the fp32 dQ accumulator tile and the block's padded LSE and D
        // rows, in group mode also the sequences' tensor maps (asm_bwd_workspace_bytes, asm90::run_bwd_sm90)
        const size_t bytes =
            asm_bwd_workspace_bytes(p.batch, p.nhead_q, p.max_seqlen_q, as->block_m, as->hdim, p.seq.is_group);
        if (bytes > 0)
        {
            p.dq_acc = static_cast<float*>(args.workspace_alloc(bytes, false));
            if (p.dq_acc == nullptr)
                return fail("mha_bwd: workspace_alloc returned null for " + std::to_string(bytes) + " bytes");
            if (!aligned(p.dq_acc, 16))
                return fail("mha_bwd: workspace_alloc must return 16-byte aligned memory");
        }
        return launch_and_time(s, as->name, [&] { return as->launch(p, s.stream_id_); });
    }

    const BwdInstance* in = nullptr;
    if (std::string why = refusal(args, in); !why.empty())
        return fail(why);
    mha_set_last_kernel_name(in->name);

    BwdParams p = make_params(args);
    // workspace: fp32 dQ accumulator, one block_m x instance-hdim tile per (batch, head, query block) in the kernel's
    // fragment order (bwd_kernel.cuh, dq_acc_index), then (deterministic) one turn counter per (batch, head, query
    // block). Group mode sizes it by batch x max_seqlen_q as CK's upper bound does (total_q would need the host to
    // wait for seqstart_q). Not memset: the pass's first kernel zeroes the tiles and counters of the query blocks that
    // hold rows, which in group mode can be far fewer.
    const size_t q_blocks   = size_t(p.batch) * p.nhead_q * size_t((p.max_seqlen_q + in->block_m - 1) / in->block_m);
    const size_t acc_bytes  = q_blocks * in->block_m * in->hdim * sizeof(float);
    const size_t turn_bytes = args.is_deterministic ? q_blocks * sizeof(int32_t) : 0;
    const size_t bytes = acc_bytes + turn_bytes;
    char* ws = nullptr;
    if (bytes > 0)
    {
        ws = static_cast<char*>(args.workspace_alloc(bytes, false));
        if (ws == nullptr)
            return fail("mha_bwd: workspace_alloc returned null for " + std::to_string(bytes) + " bytes");
        if (!aligned(ws, 16))
            return fail("mha_bwd: workspace_alloc must return 16-byte aligned memory");
    }
    p.dq_acc  = reinterpret_cast<float*>(ws);
    p.dq_turn = turn_bytes > 0 ? reinterpret_cast<int32_t*>(ws + acc_bytes) : nullptr;

    return launch_and_time(s, in->name, [&] { return in->launch(p, s.stream_id_); });
}

} // namespace aiter
