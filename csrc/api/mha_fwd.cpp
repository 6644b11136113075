// aiter::mha_fwd and the other forward entry points: validate every argument before anything launches, translate
// aiter::mha_fwd_args into the kernels' FwdParams, and pick an instance from the generated tables (asm first when
// use_asm_v3 asks for it, else ck). The only file that knows both kernel families.

#include "mha_fwd.h"

#include "../common/fwd_params.h"
#include "checks.h"
#include "decode_occupancy.h"
#include "error.h"
#include "launch.h"
#include "merge_counters.h"
#include "registry.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

namespace mha {
namespace {

constexpr float kLog2e       = 1.4426950408889634f;
constexpr int kMaxKvRowStride = 1 << 24; // 127 rows * stride + hdim fits the kernels' 32-bit in-block offsets

// splitkv_tiles in csrc/codegen/generate.py: a 16-row decode tile with 32-key blocks (six one-warp CTAs per SM on
// sm_90, FwdKernelTraits::kDecodeSmemBudget) and a 64 x 64 prefill tile (two per SM).
constexpr int kDecodeBlockM = 16, kPrefillBlockM = 64, kDecodeBlockN = 32, kPrefillBlockN = 64;
constexpr int kDecodeCtasPerSm = 6, kPrefillCtasPerSm = 2;
// mha_fwd packs the query heads of a KV head into the split-KV tiles up to this many rows (mha_fwd below)
constexpr int kPackedFwdMaxRows = 4 * kPrefillBlockM;
// Decode CTAs per SM the split count aims for within one wave: about four one-warp CTAs per SM already read at full
// bandwidth (H200, d128, 128k keys, b=16: 4 splits = 512 CTAs 4.65 TB/s, 6 splits = 768 CTAs 4.50), and fewer
// splits mean less partial traffic for the combine pass.
constexpr int kDecodeFillPerSm = 4;

int split_block_m(int64_t rows) { return rows <= kDecodeBlockM ? kDecodeBlockM : kPrefillBlockM; }

// Query heads of one KV head share a tile when nothing per-head touches the scores, and the packed tile's rows
// (max_q x the ratio, counted in 32 bits by the kernels) stay under 2^30; past that each query head is its own tile.
// Keep it so: in a packed tile the kernels index sink logits by the tile's head (the KV head) and pass bias / ALiBi
// the tile row, not the query position, so a packed call with bias, ALiBi or sink_ptr would be silently wrong (bias
// types pack nothing here; mha_fwd does not pack a call with sink_ptr; the split-KV structs have none).
int pack_ratio(int nhead_q, int nhead_k, int bias_type, int max_q)
{
    // (a public heuristic query passes unchecked head counts: anything but a valid GQA ratio packs nothing)
    const int r = bias_type == 0 && nhead_k >= 1 && nhead_q >= nhead_k && nhead_q % nhead_k == 0 ? nhead_q / nhead_k
                                                                                             : 1;
    return int64_t(max_q) * r < (int64_t(1) << 30) ? r : 1;
}

// Features the API accepts but no kernel implements yet: a reason string, or "" when the call is in scope.
std::string unsupported_feature(const aiter::mha_fwd_args& a)
{
    if (a.data_type != "fp16" && a.data_type != "bf16")
        return "data_type '" + a.data_type + "' is not supported yet (fp16, bf16)";
    if (a.qscale_type != 0)
        return "qscale_type " + str(a.qscale_type) + " (fp8 descales) is not supported yet";
    return "";
}

bool has_dropout(const aiter::mha_fwd_args& a) { return a.p_drop > 0.f; }

// True when the call needs a "full" instance (anything beyond scale, mask and LSE).
bool needs_full(const aiter::mha_fwd_args& a)
{
    return a.logits_soft_cap > 0.f || a.bias_type != 0 || has_dropout(a) ||
           (a.has_sink && (a.sink_ptr != nullptr || (a.sink_size > 0 && a.mask_type != 0)));
}

// The instance features the call needs: 0 (plain), kFwdAlibi when ALiBi is its only feature, kFwdDropout when
// dropout is, else kFwdFull.
int needed_features(const aiter::mha_fwd_args& a)
{
    if (!needs_full(a))
        return 0;
    aiter::mha_fwd_args rest = a;
    rest.bias_type = 0;
    if (a.bias_type == 2 && !needs_full(rest))
        return kFwdAlibi;
    rest        = a;
    rest.p_drop = 0.f;
    return has_dropout(a) && !needs_full(rest) ? kFwdDropout : kFwdFull;
}

std::string invalid_features(const aiter::mha_fwd_args& a)
{
    if (std::string why = invalid_bias_or_dropout(a); !why.empty())
        return why;
    if (has_dropout(a) && a.s_randval)
        if (std::string why = invalid_randval(a, "s_randval"); !why.empty())
            return why;
    if (!(a.logits_soft_cap >= 0.f) || std::isinf(a.logits_soft_cap))
        return "logits_soft_cap must be finite and >= 0, got " + std::to_string(a.logits_soft_cap);
    if (!a.has_sink && (a.sink_ptr != nullptr || a.sink_size > 0))
        return "sink_ptr / sink_size are set but has_sink is false";
    if (a.has_sink && a.sink_size < 0)
        return "sink_size must be >= 0, got " + str(a.sink_size);
    if (a.has_sink && a.sink_ptr != nullptr && !aligned(a.sink_ptr, 4))
        return "sink_ptr must be 4-byte aligned (fp32 [nhead_q])";
    return "";
}

// Arguments that are wrong whatever the build: a reason string, or "" when the call is well formed.
std::string invalid_argument(const aiter::mha_fwd_args& a)
{
    if (std::string why = invalid_shape(a); !why.empty())
        return why;
    if (a.bias_type < 0 || a.bias_type > 2)
        return "bias_type must be 0 (none), 1 (elementwise) or 2 (alibi), got " + str(a.bias_type);
    if (a.qscale_type < 0 || a.qscale_type > 2)
        return "qscale_type must be 0, 1 or 2, got " + str(a.qscale_type);
    if (!(a.scale_s > 0.f) || std::isinf(a.scale_s))
        return "scale_s must be finite and > 0, got " + std::to_string(a.scale_s);
    if (std::string why = invalid_features(a); !why.empty())
        return why;

    if (a.q_ptr == nullptr || a.o_ptr == nullptr)
        return "q_ptr and o_ptr must not be null";
    if (a.k_ptr == nullptr || a.v_ptr == nullptr)
        return "k_ptr and v_ptr must not be null";
    if (a.has_lse && a.lse_ptr == nullptr)
        return "has_lse is set but lse_ptr is null";
    for (auto [name, p] : {std::pair{"q_ptr", a.q_ptr}, std::pair{"k_ptr", a.k_ptr}, std::pair{"v_ptr", a.v_ptr},
                           std::pair{"o_ptr", static_cast<const void*>(a.o_ptr)}})
        if (!aligned(p, 16))
            return std::string(name) + " must be 16-byte aligned";
    if (a.has_lse && !aligned(a.lse_ptr, 4))
        return "lse_ptr must be 4-byte aligned";

    struct Strides { const char* t; int row, head, batch, hdim; };
    for (const Strides& s : {Strides{"q", a.stride_q, a.nhead_stride_q, a.batch_stride_q, a.hdim_q},
                             Strides{"k", a.stride_k, a.nhead_stride_k, a.batch_stride_k, a.hdim_q},
                             Strides{"v", a.stride_v, a.nhead_stride_v, a.batch_stride_v, a.hdim_v},
                             Strides{"o", a.stride_o, a.nhead_stride_o, a.batch_stride_o, a.hdim_v}})
        if (std::string why = invalid_strides(s.t, s.row, s.head, s.batch, s.hdim, true, a.is_group_mode);
            !why.empty())
            return why;
    // The kernels address K / V key blocks (up to 128 rows) with 32-bit offsets inside the block.
    if (a.stride_k >= kMaxKvRowStride || a.stride_v >= kMaxKvRowStride)
        return "stride_k and stride_v must be below 2^24 elements (the kernels address a key block with 32-bit "
               "offsets), got " + str(a.stride_k) + ", " + str(a.stride_v) +
               "; a layout with the sequence outside the batch (sbhd) reaches this: pass bshd / bhsd K and V";
    if (a.has_lse && (a.nhead_stride_lse < 0 || (!a.is_group_mode && a.batch_stride_lse < 0)))
        return "nhead_stride_lse and batch_stride_lse must be >= 0";
    // what the kernels write: O [b, s_q, h, d_v], LSE [b, h, s_q] (rows 1 apart), randval [b, h, s_q, s_k]
    const int max_q = a.is_group_mode ? a.max_seqlen_q : a.seqlen_q;
    const bool g = a.is_group_mode;
    if (std::string why = overlapping_output("o", a.batch, max_q, a.nhead_q, a.hdim_v, a.stride_o, a.nhead_stride_o,
                                             a.batch_stride_o, g);
        !why.empty())
        return why;
    if (a.has_lse)
        if (std::string why = overlapping_output("lse", a.batch, max_q, a.nhead_q, 1, 1, a.nhead_stride_lse,
                                                 a.batch_stride_lse, g);
            !why.empty())
            return why;
    if (a.p_drop > 0.f && a.s_randval && !g) // group mode: each batch's key count is device data
        if (std::string why = overlapping_output("rand_val", a.batch, a.seqlen_q, a.nhead_q, a.seqlen_k,
                                                 a.stride_randval, a.nhead_stride_randval, a.batch_stride_randval, g);
            !why.empty())
            return why;
    return "";
}

DType dtype_of(const std::string& s) { return s == "fp16" ? DType::fp16 : DType::bf16; }

FwdParams make_params(const aiter::mha_fwd_args& a)
{
    FwdParams p{};
    p.q = a.q_ptr;
    p.k = a.k_ptr;
    p.v = a.v_ptr;
    p.o = a.o_ptr;
    p.lse = a.has_lse ? static_cast<float*>(a.lse_ptr) : nullptr;
    p.q_row_stride = a.stride_q, p.q_head_stride = a.nhead_stride_q, p.q_batch_stride = a.batch_stride_q;
    p.k_row_stride = a.stride_k, p.k_head_stride = a.nhead_stride_k, p.k_batch_stride = a.batch_stride_k;
    p.v_row_stride = a.stride_v, p.v_head_stride = a.nhead_stride_v, p.v_batch_stride = a.batch_stride_v;
    p.o_row_stride = a.stride_o, p.o_head_stride = a.nhead_stride_o, p.o_batch_stride = a.batch_stride_o;
    p.lse_head_stride = a.nhead_stride_lse, p.lse_batch_stride = a.batch_stride_lse;
    p.batch = a.batch, p.nhead_q = a.nhead_q, p.nhead_k = a.nhead_k, p.head_ratio = a.nhead_q / a.nhead_k;
    p.seqlen_q = a.seqlen_q, p.seqlen_k = a.seqlen_k, p.hdim_q = a.hdim_q, p.hdim_v = a.hdim_v;
    p.max_seqlen_q = a.is_group_mode ? a.max_seqlen_q : a.seqlen_q;
    p.scale = a.scale_s;
    p.scale_log2 = a.scale_s * kLog2e;

    // window_generic (3): CK's device treats its (left, right) as a bottom-right window
    if (a.mask_type != 0)
        p.mask = mask_params(a, a.has_sink ? a.sink_size : 0);

    fill_sequences(p.seq, a);
    p.seq.min_seqlen_q = a.min_seqlen_q;

    ScoreModParams& m = p.mod;
    m.softcap = a.logits_soft_cap;
    if (a.has_sink)
        m.sink = static_cast<const float*>(a.sink_ptr);
    DropoutParams& d = p.drop;
    fill_bias_and_dropout(m, d, a);
    if (has_dropout(a) && a.s_randval)
    {
        d.randval = static_cast<uint8_t*>(a.rand_val_ptr);
        d.randval_row_stride = a.stride_randval, d.randval_head_stride = a.nhead_stride_randval;
        d.randval_batch_stride = a.batch_stride_randval;
    }
    return p;
}

bool arch_built(int cc) { return mha::arch_built(kBuildInfo, cc); }

// The instance of `family` that serves the call: the cheapest built one whose head dims cover both of the call's
// (smaller ones zero-padded), of the right variant. Null with a reason in `missing` when none is built: the cheapest
// such instance the generator knows and the compile.py options that add it, or that no instance covers the call.
// split_block_m: split-KV instances only, the tile height wanted (16 decode, 64 prefill).
const FwdInstance* find_instance(Family family, DType dt, int hdim_q, int hdim_v, int features, std::string& missing,
                                 bool split = false, int split_block_m = 0)
{
    const FwdInstance* best    = nullptr;
    const FwdInstance* unbuilt = nullptr;
    for (int i = 0; i < kNumFwdInstances; ++i)
    {
        const FwdInstance& in = kFwdInstances[i];
        if (in.family != family || in.dtype != dt || in.features != features || in.split != split ||
            (split && in.block_m != split_block_m) || in.hdim < hdim_q || in.hdim_v < hdim_v)
            continue;
        const FwdInstance*& slot = in.launch != nullptr ? best : unbuilt;
        if (slot == nullptr || in.hdim + in.hdim_v < slot->hdim + slot->hdim_v)
            slot = &in;
    }
    if (best != nullptr)
        return best;
    if (unbuilt != nullptr)
        missing = std::string("instance ") + unbuilt->name + " is not in this build; rebuild with `python3 compile.py " +
                  unbuilt->compile_hint + "` merged into this build's options (a build holds exactly what its "
                  "options select; no options: every instance)";
    else
        missing = "no instance covers head dims " + str(hdim_q) + "/" + str(hdim_v);
    return nullptr;
}

// The ck instance for a call needing `features` (needed_features) of the forward (split false) or of split-KV tile
// height `block_m`: the lean one of exactly those features (forward "alibi" / "dropout"; split-KV "plain" decode tiles,
// generate.py SPLIT_PLAIN_DIMS) when it is built and no larger than the full one that covers the call (the dropout
// variant exists at d128 only: a d64 call runs the d64 full instance, not the d128 dropout one zero-padded), else the
// full one; null with the reason in `missing` when neither is built (both build options named).
const FwdInstance* find_lean_or_full(DType dt, int hdim_q, int hdim_v, int features, std::string& missing,
                                     bool split = false, int block_m = 0)
{
    const FwdInstance* full = find_instance(Family::ck, dt, hdim_q, hdim_v, kFwdFull, missing, split, block_m);
    if (features == kFwdFull)
        return full;
    std::string lean_missing;
    const FwdInstance* lean = find_instance(Family::ck, dt, hdim_q, hdim_v, features, lean_missing, split, block_m);
    if (lean != nullptr && (full == nullptr || lean->hdim + lean->hdim_v <= full->hdim + full->hdim_v))
        return lean;
    if (full == nullptr && lean_missing.rfind("instance ", 0) == 0) // neither built: either would serve
        missing += "; or, for this call, " + lean_missing;
    return full;
}

// The asm instance that would run this call, or nullptr with the reason in `why_not`. The asm family covers
// no mask, causal masks and sliding windows of either corner (the kernel takes each sequence's diagonal from its
// own lengths; sink tokens go to ck, through needs_full), in batch and group mode, on sm_90 only.
const FwdInstance* asm_instance(const aiter::mha_fwd_args& a, DType dt, std::string& why_not)
{
    if (!a.use_asm_v3)
    {
        why_not = "use_asm_v3 is not set";
        return nullptr;
    }
    const bool g = a.is_group_mode;
    if (!(why_not = sm90a_unavailable(kBuildInfo)).empty())
        return nullptr;
    if (needs_full(a))
    {
        why_not = "bias, dropout, soft-cap and sinks are not covered";
        return nullptr;
    }
    // GQA decode and short chunks: the packed tile below reads K / V once per KV head; the asm tile would read them
    // once per query head, in 128-row tiles of mostly absent rows
    {
        const int max_q = g ? a.max_seqlen_q : a.seqlen_q;
        const int pack  = pack_ratio(a.nhead_q, a.nhead_k, a.bias_type, max_q);
        if (pack > 1 && int64_t(max_q) * pack <= kPackedFwdMaxRows)
        {
            why_not = "GQA calls of at most " + str(kPackedFwdMaxRows) + " packed rows per KV head run on ck's packed "
                      "tile, which reads K / V once per KV head";
            return nullptr;
        }
    }
    // the persistent grid's work list is 32-bit (csrc/asm/sm90_fwd.cuh, TileSchedule): 128-row tiles x heads x batches
    // below 2^31 (only strides that overlap rows can describe more)
    {
        const int64_t rows  = g ? a.max_seqlen_q : a.seqlen_q;
        const int64_t tiles = (rows + 127) / 128 * int64_t(a.nhead_q) * a.batch;
        if (tiles >= (int64_t(1) << 31))
        {
            why_not = "more than 2^31 - 1 tiles of 128 rows (got " + str(tiles) + ")";
            return nullptr;
        }
    }
    // the tensor copies: 16-byte aligned bases and positive strides that are multiples of 16 bytes (an extent-1
    // dimension's stride is never used: broadcast K / V with stride 0 go to ck; group mode has no batch stride and
    // rows of every sequence); the epilogue's stores of O (16 bytes where its rows are 16-byte aligned, which
    // invalid_argument asks of every call, else 4). invalid_argument already asks most of this of every call; the copy
    // engine needs all of it.
    auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const auto stride_ok = asm_stride_ok;
    const int rows_q = g ? 2 : a.seqlen_q, rows_k = g ? 2 : a.seqlen_k, batches = g ? 1 : a.batch;
    const bool copies_ok =
        aligned16(a.q_ptr) && aligned16(a.k_ptr) && aligned16(a.v_ptr) && stride_ok(a.stride_q, rows_q, 8) &&
        stride_ok(a.stride_k, rows_k, 8) && stride_ok(a.stride_v, rows_k, 8) &&
        stride_ok(a.nhead_stride_q, a.nhead_q, 8) &&
        stride_ok(a.nhead_stride_k, a.nhead_k, 8) && stride_ok(a.nhead_stride_v, a.nhead_k, 8) &&
        stride_ok(a.batch_stride_q, batches, 8) && stride_ok(a.batch_stride_k, batches, 8) &&
        stride_ok(a.batch_stride_v, batches, 8);
    const bool out_ok = reinterpret_cast<uintptr_t>(a.o_ptr) % 4 == 0 && stride_ok(a.stride_o, rows_q, 2) &&
                        stride_ok(a.nhead_stride_o, a.nhead_q, 2) && stride_ok(a.batch_stride_o, batches, 2);
    if (!copies_ok || !out_ok)
    {
        why_not = "q / k / v need 16-byte aligned pointers and positive strides that are multiples of 8 elements, o "
                  "4-byte aligned with positive even strides";
        return nullptr;
    }
    return find_instance(Family::asm_v3, dt, a.hdim_q, a.hdim_v, 0, why_not);
}

} // namespace
} // namespace mha

namespace aiter {

float mha_fwd(mha_fwd_args args, const ck_tile::stream_config& s)
{
    using namespace mha;
    mha_set_last_error("");
    if (std::string why = invalid_argument(args); !why.empty())
        return fail("mha_fwd: invalid argument: " + why);
    if (std::string why = unsupported_feature(args); !why.empty())
        return fail("mha_fwd: " + why);

    const DType dt = dtype_of(args.data_type);
    const bool nothing_to_do = args.is_group_mode ? args.max_seqlen_q == 0 : args.seqlen_q == 0;

    // asm ("v3") first when asked for, as AITER does; v3_api_check only answers whether it would run.
    if (args.use_asm_v3 || args.v3_api_check)
    {
        std::string why_not;
        const FwdInstance* in = asm_instance(args, dt, why_not);
        if (args.v3_api_check)
        {
            if (in == nullptr)
                return fail("mha_fwd: v3_api_check: the asm (sm90a) family does not cover this call: " + why_not);
            mha_set_last_kernel_name(in->name);
            return 1.f;
        }
        if (in != nullptr)
        {
            mha_set_last_kernel_name(in->name);
            if (nothing_to_do)
                return 0.f;
            if (std::string why = smem_unfit(in->name, in->smem_bytes); !why.empty())
                return fail("mha_fwd: " + why);
            const FwdParams p = make_params(args);
            return launch_and_time(s, in->name, [&] { return in->launch(p, s.stream_id_); });
        }
        // otherwise fall back to ck
    }

    std::string missing;
    // Decode shapes (the query heads of a KV head packed into <= 16 rows) run on the split-KV decode tile with one
    // split, and up to kPackedFwdMaxRows packed rows (speculative-decode steps, short chunks) on its 64 x 64 prefill
    // tile, a CTA per 64 rows: K and V are read once per KV head (the row blocks' copies mostly from the L2) instead
    // of once per query head. Per-head score terms (bias, ALiBi, sink logits) and dropout keep the prefill kernel.
    // 32 query / 8 KV heads, d128, bf16, KV GB/s, the prefill kernel (a 128-row tile per query head) -> the packed
    // tile: H200 (GPU-4b89e5a0) 8 queries b=32 1k / 8k / 32k 645 / 721 / 729 -> 2875 / 3539 / 3960, b=64 663 / 726 /
    // 732 -> 3055 / 3788 / 4006, b=8 597 / 702 / 723 -> 1063 / 1402 / 1450, b=1 111 / 135 / 138 -> 136 / 176 / 182;
    // 5 and 16 queries alike (b=64 8k 726 -> 3799 / 3757). H100 (GPU-9dd55fb9) b=32 1k / 8k / 32k: 17 queries 651 /
    // 722 / 738 -> 1557 / 1874 / 2001, 32 queries 646 / 722 / 735 -> 1528 / 1871 / 1997, 48 queries 643 / 726 / 737
    // -> 1041 / 1285 / 1386, 64 queries 641 / 725 / 731 -> 800 / 968 / 1052; b=8 8k 17 / 64 queries 706 / 705 ->
    // 1393 / 903; b=1 8k 135 -> 175 at every count.
    const int max_q = args.is_group_mode ? args.max_seqlen_q : args.seqlen_q;
    const int pack  = pack_ratio(args.nhead_q, args.nhead_k, args.bias_type, max_q);
    if (pack > 1 && !has_dropout(args) && !(args.has_sink && args.sink_ptr) && !args.v3_api_check &&
        int64_t(max_q) * pack <= kPackedFwdMaxRows)
    {
        std::string ignored;
        if (const FwdInstance* dec = find_lean_or_full(dt, args.hdim_q, args.hdim_v, needed_features(args), ignored,
                                                       true, split_block_m(int64_t(max_q) * pack)))
        {
            int cc = 0;
            if (current_cc(cc).empty() && arch_built(cc) && smem_unfit(dec->name, dec->smem_bytes).empty())
            {
                mha_set_last_kernel_name(dec->name);
                if (nothing_to_do)
                    return 0.f;
                FwdParams p = make_params(args);
                p.split.num_splits = 1;
                p.split.pack_ratio = pack;
                p.split.cc = cc;
                return launch_and_time(s, dec->name, [&] { return dec->launch(p, s.stream_id_); });
            }
        }
    }
    // ALiBi-only and dropout-only calls: the lean instance or the full one (find_lean_or_full); plain calls: the plain
    // instance whenever it is built
    const int features = needed_features(args);
    const FwdInstance* in = features == 0 ? find_instance(Family::ck, dt, args.hdim_q, args.hdim_v, 0, missing)
                                          : find_lean_or_full(dt, args.hdim_q, args.hdim_v, features, missing);
    if (in == nullptr && features == 0) // "full" serves every call: a build without "plain" (--variants full)
    {
        std::string ignored;
        in = find_instance(Family::ck, dt, args.hdim_q, args.hdim_v, kFwdFull, ignored);
    }
    if (in == nullptr)
        return fail("mha_fwd: no ck forward kernel for dtype=" + args.data_type + " hdim_q=" + str(args.hdim_q) +
                    " hdim_v=" + str(args.hdim_v) + ": " + missing);
    int cc = 0;
    if (std::string why = current_cc(cc); !why.empty())
        return fail("mha_fwd: " + why);
    if (!arch_built(cc))
        return fail("mha_fwd: this library was built for " + std::string(kBuildInfo.archs) +
                    " but the GPU is sm_" + str(cc) + rebuild_hint(cc));

    mha_set_last_kernel_name(in->name);
    if (nothing_to_do)
        return 0.f; // nothing to compute; O and LSE are empty
    if (std::string why = smem_unfit(in->name, in->smem_bytes); !why.empty())
        return fail("mha_fwd: " + why);
    const FwdParams p = make_params(args);
    return launch_and_time(s, in->name, [&] { return in->launch(p, s.stream_id_); });
}


} // namespace aiter

// ---------------------------------------------------------------------------------------------------------------
// Split-KV / paged KV (mha_fwd_splitkv) and SGLang-style paged prefill (mha_batch_prefill). Both run on the kSplit
// instances. Their arguments are first mapped onto mha_fwd_args so that every check and every derived parameter is
// the forward's; the KV-cache and split fields are checked and added on top.
// ---------------------------------------------------------------------------------------------------------------
namespace mha {
namespace {

// What the split rules read about the current device on every split-KV call, queried once per device:
// cudaDevAttrMemoryClockRate is not a cached attribute, and querying it on every call made a decode step host-bound
// (eighteenth session, docs/decode_log.md).
struct DeviceFacts
{
    int sms          = 132; // SM count (132 when the query failed)
    double sm90_gbps = 0.0; // peak DRAM GB/s of an sm_90 GPU, 0 for others or when the query failed
};

const DeviceFacts& device_facts()
{
    constexpr int kMaxDevices = 64;
    static DeviceFacts facts[kMaxDevices];
    static std::once_flag once[kMaxDevices];
    static const DeviceFacts none{};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices)
    {
        (void)cudaGetLastError();
        return none;
    }
    std::call_once(once[dev], [dev] {
        int sms = 0, major = 0, khz = 0, bits = 0;
        DeviceFacts f;
        const bool got_sms = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
        // peak DRAM bandwidth from the memory clock and bus width (double data rate)
        const bool got_bw = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                            cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
                            cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess;
        if (!got_sms || !got_bw)
            (void)cudaGetLastError(); // only our failed query's error: a caller's pending one is left alone
        if (got_sms && sms > 0)
            f.sms = sms;
        if (got_bw && major == 9)
            f.sm90_gbps = 2.0 * khz * 1e3 * (bits / 8) / 1e9;
        facts[dev] = f;
    });
    return facts[dev];
}

int sm_count()
{
    return device_facts().sms;
}

// The current device's peak DRAM bandwidth in GB/s when it is an sm_90 GPU (where the lean split rule below was
// measured), else 0 (also without a GPU).
double sm90_dram_peak_gbps()
{
    return device_facts().sm90_gbps;
}

// FlashAttention-2's rule, restated for our CTAs: with `ctas` CTAs per split and two CTAs resident per SM, pick the
// fewest splits whose last wave is at least 85% as full as the best choice's; splits that give the same number of
// key blocks per split as one split fewer are skipped.
int splits_heuristic(int ctas, int n_blocks, int sms, int ctas_per_sm, bool full_enough_at_80 = true)
{
    const int slots = ctas_per_sm * sms;
    if ((full_enough_at_80 && ctas >= slots * 4 / 5) || n_blocks <= 1)
        return 1;
    const int max_splits = std::min({kMaxSplits, n_blocks, slots});
    auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
    auto eligible = [&](int s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); };
    auto efficiency = [&](int s) {
        const float waves = float(ctas) * s / slots;
        return waves / std::ceil(waves);
    };
    float best = 0.f;
    for (int s = 1; s <= max_splits; ++s)
        if (eligible(s))
            best = std::max(best, efficiency(s));
    for (int s = 1; s <= max_splits; ++s)
        if (eligible(s) && efficiency(s) >= 0.85f * best)
            return s;
    return 1;
}

// The decode tile is memory-bound: a wave of CTAs reads at full bandwidth once every SM holds a few, so when the
// CTAs fit in one wave the splits fill `slots` (kDecodeFillPerSm per SM) as far as the key blocks allow, then come
// down to the fewest splits with the same key blocks per split (worked numbers above mha_fwd_splitkv_num_splits).
int decode_splits(int ctas, int n_blocks, int slots)
{
    const int s   = std::max(1, std::min({kMaxSplits, n_blocks, slots / std::max(ctas, 1)}));
    const int per = (n_blocks + s - 1) / s;
    return (n_blocks + per - 1) / per;
}

// GPUs with less DRAM bandwidth than kLeanDecodeMaxGbps (H100 SXM: 3.35 TB/s) read a dense decode grid of
// kLeanDecodeMinTiles tiles or more fastest with fewer key streams: splits fill kLeanDecodeWarpsPerSm per SM
// (a split is one warp streaming its key blocks) instead of kDecodeFillPerSm, except in a grid of about one tile
// per SM (0.9 to 1), where four per tile stay the best (b=16 1k: 2 splits -2%). Measured on H100 (132 SMs, 32 query
// / 8 KV heads, d128, one query, L2 swept, KV GB/s at 2k / 8k / 32k keys, bhsd and bshd; docs/decode_log.md):
// b=8 (64 tiles) 8 -> 4 splits +0.6 to +3.8%, b=10 6 -> 3 +6 to +9% (8k), b=12 5 -> 3 +4.8 to +8.2%, b=14 4 -> 2
// +0.5 to +3.8% (8k), b=20 3 -> 1 +1.7 to +4% (now in the band below), b=24 2 -> 1 +1.4 to +6%, b=32 2 -> 1 -1.2
// to +1.9%. The general rule was tuned on H200 (4.8 TB/s), whose DRAM needs more bytes in flight. sm_90 only.
// On the same GPUs a dense grid of a little more than one tile per SM (1 to 4/3, "the band") reads best with 2
// splits at every head dim, where the general rule gives 3 (H100, 8k keys, b=17 to 22: d64 b=18-21 +7 to +15%,
// b=17 / b=22 -3% / -2%; d128 b=19 / b=20 +9.6% / +1.4% over the lean rule's 1, +8.6% / +6% at 2k, b=21 / b=22
// even; d256 +10 to +44%); the lean rule gives way to it.
constexpr double kLeanDecodeMaxGbps  = 4000.0;
constexpr int kLeanDecodeMinTiles    = 64;
constexpr float kLeanDecodeWarpsPerSm = 2.25f;

// An sm_90 GPU under kLeanDecodeMaxGbps (H100 class), where the decode split rules below were measured.
bool lean_decode_gpu()
{
    const double gbps = sm90_dram_peak_gbps();
    return gbps > 0.0 && gbps < kLeanDecodeMaxGbps;
}

// Head dim 64 (dense) reads best with every slot filled: a d64 warp does a d128 warp's per-block work for half the
// bytes, so it takes more warps per SM to keep the DRAM busy. In a grid of 66 to 132 tiles (H100) the splits fill
// kDecodeCtasPerSm per SM instead of kDecodeFillPerSm, at most 8 (a cluster's), and more splits than one CTA's warps
// hold (kDecodeCtasPerSm: 7 or 8 run as a cluster of one-warp CTAs) only while those clusters fit on the GPU at once
// (decode_clusters_per_wave: 96 clusters of 8 and 105 of 7 on an H100 SXM): one tile more and the grid ran a second
// wave (b=13, 8 splits: -9 to -14%). H100, 32 q / 8 KV heads, L2 swept, KV GB/s, two passes, general -> fill at 8k /
// 16k / 32k: b=9 7 -> 8 splits within 0.4%, b=10 6 -> 8 +4.8 / +7.1 / +9.0%, b=11 6 -> 8 +12.2% (16k), b=12 5 -> 8
// +7.9 / +11.1 / +13.5%, b=13 5 -> 7 +2.0 / - / +3.9%, b=14 4 -> 6 +0.7 / +1.7 / +2.4%, b=15 4 -> 6 +1.8 / +2.8 /
// +1.4%, b=16 4 -> 6 +0.9 / +1.8 / -1.8% (another H100: -0.6 / - / +0.5%); at 4k b=10 / b=11 / b=12 +1.5 / +1.4 /
// +5.7%. 64 query heads per 8 KV heads (8-row tiles) the same: b=10 / 12 +7.0 / +11.3% (16k).
//
// A paged cache (block table) with head dim 128 or 256 reads best with 3 splits from 80 tiles to 0.9 per SM, where
// the lean rule gives 2 past 99 tiles and its 4 at b=8 / b=9 lost (page 16: -1.6 / -0.9%), and with the two-split
// band. H100, d128, page 16 / page 128, 8k / 32k, general -> 3 splits: b=10 (6) +4.5 / +4.9%, page 128 +5.1 / +8.0%;
// b=11 (6) +8.4 / +9.2%; b=12 (5) +6.8 / +9.0%, page 128 +6.2 / +6.2%; b=13 (5) +4.0 / +4.1%; b=14 (4) +5.1 / +2.3%,
// page 128 +1.5 / +1.4%. Band, general 3 -> 2: b=17 +6.4 / +7.8%, b=18 +9.9 / +11.1%, b=19 +9.4 / +10.3%, b=20 +8.7 /
// +8.0% (page 128 +3.7 / +3.4%), b=21 +5.2 / +2.6%, b=22 +4.3 / +0.6%. d256, page 16, 8k: b=12 +8.9%, b=14 +4.8%, b=10
// -0.9%, band b=20 +26.6%. d64 paged keeps the general rule (band b=20 -2.5%).
//
// Head dim 128, dense or paged, from 80 tiles to 3/2 per SM: enough splits for kLateRefillWarpsPerSm decode warps
// per SM, ceil(3 SMs / tiles), ahead of the band, lean and three-split rules. At that many warps each warp's ring
// refills late (ring_flags_for below), and the count then beats those rules' fewer, longer streams. H100, 32 q / 8 KV
// heads, KV GB/s, two passes, the rules' count -> this one (splits), dense 2k / 8k / 32k: b=10 3 -> 5 - / +0.8% / -,
// b=11 3 -> 5 +0.5% (8k), b=12 3 -> 5 +2.1 / +0.6 / +0.9%, b=13 2 -> 4 +3.4 / +2.4 / +1.7%, b=14 2 -> 4 +2.2 / +2.7 /
// +1.5%, b=17 2 -> 3 +0.5% (8k), b=18 2 -> 3 -0.8 / +0.5 / +1.3%, b=19 2 -> 3 +2.3% (8k), b=20 2 -> 3 +0.7 / +2.9 /
// +4.5%, b=21 2 -> 3 +6.1% (8k), b=22 2 -> 3 +4.1 / +5.4 / +6.0%, b=23 1 -> 3 +1.5% (8k), b=24 1 -> 3 +1.3 / +1.3 /
// -0.5% (4 splits +3% at 8k / 32k, a second wave of four-warp CTAs); b=15 / 16 keep 4. Paged (page 16), 8k / 32k: b=10
// 3 -> 5 +1.3 / +1.1%, b=11 +1.4% (8k), b=12 +0.9 / -0.1%, b=13 3 -> 4 -0.2% (8k), b=14 +0.0 / +0.5%, b=17 2 -> 3
// -0.4% (8k), b=18 +0.3 / -0.2%, b=20 +0.9 / +2.6%, b=22 +3.2 / +4.7%. Not d256: its warps take 75 KB, so 3 splits at
// b=18 / 20 left a second wave (-28% / -20%).
constexpr int kLateRefillWarpsPerSm = 3;
constexpr int kThreeWarpsMinTiles   = 80;

// Head dim 128, dense, from 5/2 tiles per SM up to the decode branch's limit (kDecodeCtasPerSm per SM) and from
// kFourWarpsMinKeys keys: 4 splits, so each tile is one CTA of four warp splits (the warps take the tile's key blocks
// in turn: one 128-key window of the tile at a time, cuDNN's order) instead of the lean rule's single one-warp CTA
// per tile (four tiles' streams per SM). The grid then runs in waves of one CTA per SM (512 tiles: 3.9 waves) and
// still reads faster. Twenty-fifth session, two H100s, 32 q / 8 KV heads, L2 swept, KV GB/s, two passes each, lean
// 1 split -> 4: bhsd b=48 8k 3010-3018 -> 3072-3078, b=64 4k 3034-3040 -> 3074-3078, 8k 3056-3062 -> 3116-3120, 32k
// 3083-3088 -> 3145-3150, 128k 3095-3100 -> 3117-3134, b=96 8k 2947-2959 -> 3115-3118; bshd b=48 8k 3061-3071 ->
// 3107-3112, b=64 4k 3062-3068 -> 3063-3065, 8k 3088-3099 -> 3124-3128, 32k 3099-3106 -> 3141-3146, 128k 3110-3111 ->
// 3131-3133, b=96 8k 3084 -> 3137-3140; 64 q / 8 KV heads (8-row tiles) b=64 8k +1.8%. Below the bounds bshd lost:
// b=33 8k (2 tiles per SM) -0.7% (bhsd +1.8%), b=40 4k -1.5% (bhsd even), b=64 1k -1.1% (bhsd +1%), b=32 8k -0.9%
// (bhsd +1.8%). 2 splits lost (b=64 8k-128k -2 to -4%).
// Past the decode branch (more than kDecodeCtasPerSm tiles per SM) the same 4 splits replace the wave rule's one or
// two (one-warp CTAs, six per SM). Twenty-sixth session, H100, KV GB/s, two passes, bhsd / bshd, wave rule -> 4:
// b=128 (2 splits) 4k 3093-3098 / 3104-3110 -> 3118-3119 / 3117-3118, 8k 3100-3104 / 3099-3108 -> 3130-3131 /
// 3153, 16k 3107-3110 / 3068-3096 -> 3144-3145 / 3153-3157, 32k 3110-3113 / 3089-3095 -> 3151-3152 / 3160, b=136
// (2) 4k even / -0.5%, 8k +0.4 / +0.6%, b=300 (2) 8k +0.3 / +0.8%; b=192 (1) 8k 2973-2975 / 3091-3093 ->
// 3140-3141 / 3158-3162, b=256 (1) 8k 2949-2950 / 3050-3053 -> 3136-3137 / 3158-3159, 32k 2944-2945 / 2963-2969 ->
// 3142-3143 / 3146-3149, b=264 (1) 8k +5.9 / +3.2%, b=512 (1) 8k 2976 / 3096-3100 -> 3145 / 3169-3170. Where the
// wave rule takes more, it stays: b=100 (6) 4k / 32k -3.3 / -2.3% with 4 (a last wave of 8 four-warp CTAs), b=104
// (5) 8k +1.6%, b=120 / b=160 / b=200 (3) -0.7 to +1.1%.
constexpr int kFourWarpsMinKeys = 4096;

// Which of those rules a call may take, all for tiles of at most 8 rows (the transposed decode step, where they were
// measured) on sm_90 GPUs under kLeanDecodeMaxGbps: a dense cache the two-split band at every head dim, the lean rule
// at head dim 128 or 256 (measured there: d256, H100, 2k / 8k / 32k, both layouts, two passes: b=8 +0.6 to +2.9%,
// b=10 +0.8 to +3.2%, b=12 +7.1 to +9.9%, b=14 -2.6 to +0.5%, b=24 -1.0 to +2.8%, b=32 -0.4 to +1.3%) and the fill at
// head dim 64, the four-warp tiles at head dim 128; a paged cache the band and 3 splits at head dim 128 or 256. Others
// keep the general rule.
struct SplitRules
{
    bool band = false;       // more tiles than SMs, at most 4/3 of them: 2 splits
    bool lean = false;       // dense, kLeanDecodeMinTiles+ tiles: kLeanDecodeWarpsPerSm splits per SM
    bool paged_three = false; // paged, kPagedThreeMinTiles tiles to 0.9 per SM: 3 splits
    bool fill = false;       // dense d64, up to one tile per SM: kDecodeCtasPerSm splits per SM, clusters in one wave
    bool three_warps = false; // d128, kThreeWarpsMinTiles to 3/2 tiles per SM: kLateRefillWarpsPerSm warps per SM
    bool four_warps = false;  // dense d128, 5/2+ tiles per SM, kFourWarpsMinKeys+ keys: 4 splits (past the branch:
                              // where the wave rule gives 1 or 2)
};
constexpr int kPagedThreeMinTiles = 80;

SplitRules split_rules(int hdim_q, int hdim_v, bool paged)
{
    const bool wide = hdim_q == hdim_v && (hdim_q == 128 || hdim_q == 256);
    const bool d64  = hdim_q == 64 && hdim_v == 64;
    SplitRules r;
    r.band        = !paged || wide;
    r.lean        = !paged && wide;
    r.paged_three = paged && wide;
    r.fill        = !paged && d64;
    r.three_warps = hdim_q == 128 && hdim_v == 128;
    r.four_warps  = !paged && r.three_warps;
    return r;
}

// block_m: the split tile's height (0: split_block_m's, by the rows; kDecodeBlockM for the row blocks of a
// speculative-decode step, spec_decode_rows below)
int num_splits_for(int batch, int nhead_q, int nhead_k, int max_seqlen_q, int max_seqlen_k, int bias_type,
                   SplitRules rules = SplitRules{}, int block_m = 0)
{
    if (batch < 1 || nhead_q < 1 || nhead_k < 1 || nhead_q % nhead_k || max_seqlen_q < 1 || max_seqlen_k < 1)
        return 1;
    const int pack  = pack_ratio(nhead_q, nhead_k, bias_type, max_seqlen_q);
    const int64_t rows = int64_t(max_seqlen_q) * pack;
    const int bm = block_m > 0 ? block_m : split_block_m(rows);
    const int64_t ctas = int64_t(batch) * (pack > 1 ? nhead_k : nhead_q) * ((rows + bm - 1) / bm);
    const bool decode = bm == kDecodeBlockM;
    const int bn = decode ? kDecodeBlockN : kPrefillBlockN;
    const int n_blocks = int((int64_t(max_seqlen_k) + bn - 1) / bn);
    const int sms = sm_count();
    if (decode && ctas <= int64_t(kDecodeCtasPerSm) * sms)
    {
        const int general = decode_splits(int(ctas), n_blocks, kDecodeFillPerSm * sms);
        const bool any =
            rules.band || rules.lean || rules.paged_three || rules.fill || rules.three_warps || rules.four_warps;
        if (any && rows <= 8 && lean_decode_gpu())
        {
            if (rules.three_warps && ctas >= kThreeWarpsMinTiles && ctas * 2 <= int64_t(sms) * 3)
                return decode_splits(int(ctas), n_blocks, int(kLateRefillWarpsPerSm * sms + ctas - 1));
            if (rules.four_warps && ctas * 2 >= int64_t(sms) * 5 && max_seqlen_k >= kFourWarpsMinKeys)
                return decode_splits(int(ctas), n_blocks, int(4 * ctas));
            if (rules.band && ctas > sms && ctas * 3 <= int64_t(sms) * 4)
                return decode_splits(int(ctas), n_blocks, int(2 * ctas));
            const bool one_per_sm = ctas * 10 >= int64_t(sms) * 9 && ctas <= sms;
            if (rules.lean && ctas >= kLeanDecodeMinTiles && !one_per_sm)
                return decode_splits(int(ctas), n_blocks, int(kLeanDecodeWarpsPerSm * sms));
            if (rules.paged_three && ctas >= kPagedThreeMinTiles && ctas * 10 < int64_t(sms) * 9)
                return decode_splits(int(ctas), n_blocks, int(3 * ctas));
            if (rules.fill && ctas <= sms)
            {
                int s = decode_splits(int(ctas), n_blocks,
                                      int(std::min<int64_t>(int64_t(kDecodeCtasPerSm) * sms,
                                                            kClusterMergeMaxSplits * ctas)));
                while (s > kDecodeCtasPerSm && ctas > decode_clusters_per_wave(s, kDecodeSmemBudgetDefault))
                    s = decode_splits(int(ctas), n_blocks, int((s - 1) * ctas));
                return std::max(s, general);
            }
        }
        // Tiles of 9 to 16 rows (3 or 4 queries of 4 packed heads: a speculative-decode step, on the transposed step
        // of 16 rows, sm_90) read best with at most a cluster's 8 splits, merged in it, instead of more merged in the
        // split grid, where the cache is at most 32 blocks (1k keys) or 8 splits put 1.5 or more split CTAs on each
        // SM (2.5 on H200-class GPUs). H100, 4 queries of 32 query / 8 KV heads, d128, KV GB/s at 1k / 4k / 16k keys,
        // general -> 8 splits: b=4 (16) 824 / 1874 / 2684 -> 1083 / 2157 / 2715, b=6 (11) 1021 / 2090 / 2755 -> 1422
        // / 2352 / 2807, 1k: b=1 (32) 265 -> 283, b=2 (32) 466 -> 560, b=3 (16) 695 -> 834; longer caches of fewer
        // tiles keep the general count (b=1 4k / 16k 814 / 1855 against 573 / 801, b=2 16k 2341 against 1594, b=3 16k
        // 2442 against 2357). Paged caches too (pages of 16 / 128): b=4 1k / 4k / 16k 815 / 1837 / 2626 -> 1028 /
        // 2040 / 2678 and 815 / 1808 / 2648 -> 1055 / 2016 / 2726, b=6 1k 999 -> 1367, b=2 1k 456 -> 534. H200
        // (GPU-757fcf72, the same shapes): b=4 16k 3558 -> 3124 (paged 16 3568 -> 2731) and 4k 2288 -> 2271, hence
        // its 2.5, while b=6 1k / 4k / 16k 1153 / 2569 / 3787 -> 1609 / 3014 / 3997 (paged 1118 / 2574 / 3711 ->
        // 1518 / 3028 / 3932) and 1k b=1 / 2 / 3 / 4 265 / 486 / 731 / 903 -> 296 / 579 / 852 / 1110 (paged +4 to
        // +18%).
        if (const double gbps = sm90_dram_peak_gbps();
            rules.three_warps && rows > 8 && general > kClusterMergeMaxSplits && gbps > 0.0 &&
            (n_blocks <= 32 ||
             ctas * kClusterMergeMaxSplits * 2 >= int64_t(sms) * (gbps < kLeanDecodeMaxGbps ? 3 : 5)))
            return decode_splits(int(ctas), n_blocks, int(kClusterMergeMaxSplits * ctas));
        return general;
    }
    // past one decode wave, balance the waves (a 1.3-wave grid reads its last 0.3 at a fraction of the bandwidth)
    const int waves = splits_heuristic(int(std::min<int64_t>(ctas, 1 << 30)), n_blocks, sms,
                                       decode ? kDecodeCtasPerSm : kPrefillCtasPerSm, !decode);
    // the four-warp tiles past the branch too, where the waves of one-warp CTAs take one or two splits
    if (decode && rules.four_warps && rows <= 8 && waves <= 2 && max_seqlen_k >= kFourWarpsMinKeys &&
        int64_t(batch) * 4 <= kMaxGridYZ && lean_decode_gpu())
        return decode_splits(1, n_blocks, 4);
    return waves;
}

// Speculative-decode steps of 17 to kSpecDecodeMaxRows packed rows per KV head (5 to 16 queries of 4 query heads per
// KV head; 17 to 64 queries without packing) split over the keys run on the decode tile in 16-row blocks, one CTA
// per row block and split, each the transposed step of 16 rows (fwd_kernel<Kt, 2>), instead of on the 64 x 64
// prefill tile, where each split's keys are short: the row blocks of a split read the same K / V blocks at about the
// same time, so the DRAM reads them once and the L2 serves the others, but that L2 traffic (two to four times the
// DRAM's) caps them below what the prefill tile reaches on long splits. sm_90 GPUs and head dims up to 128 (the
// transposed step's instances). Measured on an H200 (GPU-7c520d74; 32 query / 8 KV heads, d128, bhsd, KV GB/s,
// benchmark_mha_fwd with the L2 flushed, prefill tile -> row blocks at the same or the decode tile's split count):
// - two row blocks (8 queries): b=1 1k / 8k / 32k / 128k 249 / 1258 / 2309 / 2942 -> 291 / 1324 / 2486 / 3118; b=4
//   1k / 2k / 8k / 32k 702 / 1178 / 2232 / 2841 -> 1061 / 1622 / 2592 / 3136, 128k (16k keys per split) 3729 ->
//   3445; b=8 2k / 8k 1850 / 2895 -> 2313 / 3080, 32k (8k per split) 3445 -> 3388; b=16 1k / 2k / 8k 1633 / 2267 /
//   3096 -> 2253 / 2738 / 3213, 32k / 128k 3677 / 3968 -> 3465 / 3542. 5 and 6 queries alike (b=16 32k 3733 -> 3468);
// - three or four row blocks (12 or 16 queries): 1k b=1 212 / 168 -> 285 / 282, b=4 565 / 462 -> 882 / 875, b=16
//   1392 / 1202 -> 1972 / 1251; 2k b=1 342 / 276 -> 390 / 412, b=4 1042 / 909 -> 1158 / 1165, b=16 (1k per split)
//   2036 / 1832 -> 2344 / 1452; 4k b=1 613 / 509 -> 663 / 658, b=4 (800-1000 per split) 1539 / 1392 -> 1414 / 1405,
//   b=16 2572 / 2410 -> 2519 / 1575; 8k b=4 2104 / 1973 -> 1577 / 1566.
// Hence row blocks up to kSpecRowBlockKeys2 keys per split for two of them, kSpecRowBlockKeys4 for three or four.
// On an H100 (GPU-14122fca, the same shapes, two passes) two row blocks lost with 8 splits of 2048 keys or more (b=4
// 16k / 32k 2490 / 2761 -> 2085-2155 / 1844-1986, b=2 32k 2487 -> 1700, b=1 128k 2757 -> 2710) and won with 4 or
// fewer splits of up to 4096 keys (b=8 8k / 16k 2513 / 2790 -> 2746 / 2905, b=16 8k 2726 -> 2903) or splits of up to
// 1024 (b=1 8k / 32k 1184 / 2093 -> 1272 / 2245; b=4 8k even): on H100-class GPUs two row blocks take
// kSpecRowBlockKeysLean keys per split, or kSpecRowBlockKeys2 with at most 4 splits.
constexpr int kSpecDecodeMaxRows = 64;
constexpr int kSpecRowBlockKeys2 = 4096, kSpecRowBlockKeys4 = 512, kSpecRowBlockKeysLean = 1024;

bool spec_decode_rows(int64_t rows, int hdim_q, int hdim_v)
{
    return rows > kDecodeBlockM && rows <= kSpecDecodeMaxRows && hdim_q <= 128 && hdim_v <= 128 &&
           sm90_dram_peak_gbps() > 0.0;
}

// Whether `splits` splits of a `max_k`-key cache are short enough for the row blocks of a `rows`-row tile (above).
bool spec_row_blocks_pay(int64_t rows, int max_k, int splits)
{
    if (splits < 2)
        return false;
    const int64_t blocks = (int64_t(max_k) + kDecodeBlockN - 1) / kDecodeBlockN;
    const int64_t keys   = (blocks + splits - 1) / splits * kDecodeBlockN;
    if (rows > 2 * kDecodeBlockM)
        return keys <= kSpecRowBlockKeys4;
    if (lean_decode_gpu())
        return keys <= kSpecRowBlockKeysLean || (splits <= 4 && keys <= kSpecRowBlockKeys2);
    return keys <= kSpecRowBlockKeys2;
}

struct SplitChoice
{
    int splits;
    int block_m; // the split tile's height: kDecodeBlockM or kPrefillBlockM
};

// num_splits = 0 resolved for a call (mha_fwd_splitkv, the nine-argument mha_fwd_splitkv_num_splits), with the tile
// it runs on: the decode tile's row blocks for a speculative-decode step where the count that tile's rules give it
// splits the cache short enough (by the shape alone: a call given a count > 1 takes the same tile), else the tile
// and count by the rows.
SplitChoice resolve_splits(int batch, int nhead_q, int nhead_k, int max_q, int max_k, int bias_type, int hdim_q,
                           int hdim_v, bool paged)
{
    const SplitRules rules = split_rules(hdim_q, hdim_v, paged);
    const int pack = pack_ratio(nhead_q, nhead_k, bias_type, max_q);
    const int64_t rows = int64_t(max_q) * pack;
    if (batch >= 1 && nhead_k >= 1 && max_q >= 1 && spec_decode_rows(rows, hdim_q, hdim_v))
    {
        // CTAs per split; only grids of one decode wave (b=64, 8 queries, 2 splits of row blocks: 2373 / 2752 at 1k
        // / 8k on the H100 against 2551 / 3039 for one split of the prefill tile), and 2 splits where the rules give
        // 1 and they fit (b=16 1k, 12 queries: 1283 -> 1946 on the H100, 1403 -> 1972 on the H200)
        const int64_t blocks = (rows + kDecodeBlockM - 1) / kDecodeBlockM;
        const int64_t ctas   = int64_t(batch) * (pack > 1 ? nhead_k : nhead_q) * blocks;
        const int64_t wave = int64_t(kDecodeCtasPerSm) * sm_count();
        if (ctas <= wave)
        {
            int s = num_splits_for(batch, nhead_q, nhead_k, max_q, max_k, bias_type, rules, kDecodeBlockM);
            if (s == 1 && 2 * ctas <= wave && max_k > kDecodeBlockN)
                s = 2;
            if (spec_row_blocks_pay(rows, max_k, s))
                return {s, kDecodeBlockM};
        }
    }
    return {num_splits_for(batch, nhead_q, nhead_k, max_q, max_k, bias_type, rules), split_block_m(rows)};
}

// The decode ring's schedule (SplitParams::ring_flags, fwd_kernel.cuh) for a split-KV call of `tiles` tiles of
// `rows` rows and `splits` splits, on sm_90 GPUs under kLeanDecodeMaxGbps (H100, where it was measured; faster ones
// below the list), for tiles of at most 8 rows at head dim 128 or 256 (d64 was mixed: b=16 1k -1.5%, 8k
// +1.2%; other head dims were not measured):
// - kRingLateRefill once the grid has kLateRefillWarpsPerSm decode warps per SM or more (one per split and tile):
//   each warp then keeps one 32-key block queued at the DRAM instead of two while it waits, and the SMs' loops end
//   closer together (per-CTA stamps, b=16 8k: loop ends p10 / p50 / max 133 / 172 / 175 us -> 168 / 170 / 174). With
//   fewer warps the DRAM starves: b=8 4k (256 warps) -3%, b=32 2k -4%;
// - kRingInterleave for a dense cache: the warp splits of a CTA take the tile's key blocks in turn (the CTA reads one
//   window of the tile at a time); a paged one keeps contiguous ranges (page 16, b=16 8k: -2.6% interleaved).
// Measured (H100, d128, 32 query / 8 KV heads, KV GB/s, three passes, same call, default -> both): b=16 1k
// 2250-2262 -> 2273-2305, 2k 2626-2645 -> 2655-2662, 4k 2839-2859 -> 2864-2877, 8k 2983-2987 -> 2966-2971, 32k
// 3064-3073 -> 3101-3107; late refill alone b=1 128k 2870-2884 -> 2906-2914, b=64 8k 3061 -> 3075; interleave alone
// b=8 4k 2591-2600 -> 2626-2635; bshd b=16 8k 2944-2961 -> 3022-3031; d256 b=16 1k 2561-2594 -> 2617-2620, 8k
// +0.3%.
// - kRingEarly on every GPU: a warp's first block leaves at kernel entry where the launcher finds it follows from
//   the kernel parameters alone (fwd_launch.cuh, early_first_block_ok: dense batch-mode caches without per-batch key
//   counts), instead of after the ~1.4 us setup. Per-CTA stamps, H100 b=16 1k: first copies 1.57 -> 0.67 us after
//   the CTA start, first block landed 4.99 -> 4.26, last CTA end 24.86 -> 24.10. Same call, KV GB/s, two passes:
//   warp splits b=16 1k 2272-2290 -> 2346-2357 (+3%), 2k +1.5%, 8k +0.5%, b=8 4k +1%, b=12 / b=20 8k, 32k even;
//   grid splits (one-warp CTAs, twentieth session) b=1 1k 335-339 -> 351-352 (+4%), 8k 1545-1550 -> 1579-1581
//   (+2%), 32k 2461-2472 -> 2488-2491 (+1%), 128k +0.2%, b=2 8k 2038-2040 -> 2079-2092 (+2-2.6%), b=4 4k 2021-2040
//   -> 2042-2070; one split (b=32 2k, b=64 1k / 8k) even. Paged caches (block tables, pages of 2^k keys) and
//   per-batch key counts too (kRingEarlyTables: the count and the page ids loaded at entry): page 16, b=1 1k
//   322-325 -> 345-346 (+7%), 8k +0.8%, b=16 1k +0.5%; page 128 b=1 1k +3.5%, 8k +1.5%.
// - kRingL2Promo256 at head dim 128: the K / V copies' L2 fills promoted to 256 bytes (the two 128-byte halves of a
//   d128 row), against 128 (twenty-first session, H100, same call, three passes, KV GB/s): b=16 32k 3104-3112 ->
//   3130-3135, 128k 3116-3122 -> 3132-3135, b=64 32k 3073-3080 -> 3089-3091, 8k 3051-3054 -> 3059-3063, 1k +0.3-0.6%;
//   b=16 1k / 8k, b=1 8k-128k and page 16 even to +1%. (The twelfth session's H100: b=1 128k +1%; H200 above 4000
//   GB/s: -11% at b=64 32k, decode_ring.cuh.)
// GPUs at or above kLeanDecodeMaxGbps (H200) take kRingEarly and, at head dim 128, kRingInterleave where the cache
// is dense with each head's key rows back to back (bhsd: stride_k == hdim_q, stride_v == hdim_v) and a tile has 2 to
// 4 splits (the warps of one CTA). Without it a warp split there reads one contiguous range of the head's keys, and
// the CTA's four streams sit 1/4 of the cache apart; in turn they read one window. Twenty-second session, H200, same
// call, two passes, KV GB/s, default -> interleaved: bhsd b=16 1k 3031-3058 -> 3032-3054, 2k 3476-3528 ->
// 3689-3726 (+6%), 4k 4011-4024 -> 4123-4132, 8k 4297-4307 -> 4361-4378, 16k 4483-4486 -> 4529-4532, 32k even,
// b=20 (3 splits) 8k 3847-3873 -> 3891-3899, b=24 (2) 8k 4275-4291 -> 4370-4372, b=32 (2) 4k 4287-4293 ->
// 4331-4342; b=12 (5 splits) 4k / 16k -0.4 to -1.8%, b=8 / b=4 / b=2 8k and b=40 2k (cluster, grid or no
// splits) even. In bshd (key rows h_k x d apart) it lost: b=16 2k 3745-3751 -> 3628-3733, b=12 4k -2%, b=20 8k
// -1.6%, b=16 8k even. L2 promotion to 256 bytes there: b=16 8k 4307 -> 3925-3967, 32k 4597 -> 4109-4134 (-10%);
// late refill: b=16 2k 3429-3528 -> 3272, b=1 32k 3229-3250 -> 3079-3091.
// The same there for splits that are CTAs (kRingInterleaveGrid: one-warp CTAs of a cluster or of the grid) at 32
// splits or more, or at 8 or more with at most 32 key blocks each: the tile's splits, which run at once, then read
// one window of it instead of ranges 1/S of the cache apart. Same method, three passes: b=1 32k (64 splits)
// 3164-3213 -> 3288-3329 (+3.7%), 64k 3773-3794 -> 3820-3857, 128k 4088-4101 -> 4154-4155, b=2 32k 3763-3795 ->
// 3780-3862, b=4 8k 3241-3247 -> 3288-3323, b=8 8k (8 splits, a cluster) 3915-3931 -> 4000-4018, b=3 16k 3520-3546
// -> 3583-3602, b=6 8k, b=2 128k +0.4%, b=1 8k / 16k even. Longer ranges per split lost: b=4 32k / 128k (16
// splits of 64 / 256 blocks) -1%, b=8 32k even; bshd b=1 32k -1.1%, b=4 8k -1.5% (128k +1%).
// H100 (under kLeanDecodeMaxGbps) takes kRingInterleaveGrid under the same split rule in both layouts (forced flags,
// same call, two passes, KV GB/s, its default -> with it): bhsd b=1 32k 2488-2489 -> 2526-2546, b=2 32k 2770-2777
// -> 2830-2831, b=1 8k / 128k and b=4 8k even (within +-0.9%); bshd b=1 128k 2924-2928 -> 2964-2969, b=2 32k 2803
// -> 2833, b=1 32k / b=4 8k even.
// Those GPUs also take kRingHeadPairs (clusters of the CTAs of two KV heads, placement only: fwd_launch.cuh) for a
// dense d128 cache whose heads sit side by side in each key row (bshd: nhead_stride == hdim), in a grid of about
// one tile per SM (0.9 to 1) with 2 to 4 warp splits, from kHeadPairsMinKeys keys. The two CTAs then start together
// and read the adjacent 256-byte slices of the same 2 KB rows at about the same time. Twenty-fourth session, H200,
// bshd, same call, KV GB/s (passes), default -> clusters of 2 along the heads: b=16 4k 4125-4143 -> 4134-4166, 8k
// 4364-4368 -> 4391-4396, 16k 4495-4511 -> 4523-4541, 32k 4552-4562 -> 4614, 128k 4631-4634 -> 4676-4680 (+1%);
// 1k 3067-3111 -> 3060-3087 and 2k 3645-3761 -> 3641-3777 (hence the bound); b=12 8k (5 splits, 96 tiles) -0.4%,
// b=20 8k (3 splits, 160 tiles) -0.3%, b=8 8k (8) even; bhsd b=16 8k -0.7%, 32k even. Clusters of 4 or 8 did not
// all fit at once (152 KB CTAs): -28%. Two more H200s: b=15 8k 4237-4246 -> 4284-4291, b=16 8k +0.4 to +0.8%,
// 32k +0.9 to +1.3%, 128k +0.1 to +0.9%. On H100 (bshd b=16, its own flags) 32k / 128k -0.3%, the rest even.
// MHA_DECODE_RING=<bits> in the environment forces the flags (A/Bs).
constexpr int64_t kHeadPairsMinKeys = 4096;

int32_t ring_flags_for(int64_t tiles, int splits, int64_t rows, bool paged, int hdim_q, int hdim_v,
                       bool rows_contiguous, bool heads_adjacent, int64_t seqlen_k)
{
    static const int forced = [] {
        const char* e = std::getenv("MHA_DECODE_RING");
        return e && *e ? std::atoi(e) : -1;
    }();
    if (forced >= 0)
        return forced & (kRingLateRefill | kRingInterleave | kRingEarly | kRingL2Promo256 | kRingInterleaveGrid |
                         kRingHeadPairs);
    // Tiles of 9 to 16 rows (the transposed step of 16 rows, fwd_launch.cuh) take the rules below on the GPUs they
    // were measured on (H100, 4 queries of 32 query / 8 KV heads, d128, KV GB/s, kRingEarly alone -> these flags):
    // b=16 1k / 8k / 32k 2157 / 2960 / 3042 -> 2215 / 2941 / 3117, b=4 (16 splits) 8k / 32k 2321 / 2840 -> 2300 /
    // 2866, b=1 and one split (b=64) within 1%.
    if (rows > 16 || (rows > 8 && !lean_decode_gpu()) || hdim_q != hdim_v || (hdim_q != 128 && hdim_q != 256))
        return kRingEarly;
    // CTA splits that read one window of the tile at a time (kRingInterleaveGrid, both GPU classes, d128 dense)
    const int64_t per = ((seqlen_k + kDecodeBlockN - 1) / kDecodeBlockN + splits - 1) / splits;
    const bool grid_il = !paged && hdim_q == 128 && (splits >= 32 || (splits >= 8 && per <= 32));
    if (const double gbps = sm90_dram_peak_gbps(); !(gbps > 0.0 && gbps < kLeanDecodeMaxGbps))
    {
        if (gbps > 0.0 && heads_adjacent && !paged && hdim_q == 128 && splits >= 2 && splits <= 4 &&
            seqlen_k >= kHeadPairsMinKeys && tiles * 10 >= int64_t(sm_count()) * 9 && tiles <= sm_count())
            return kRingEarly | kRingHeadPairs;
        if (!(gbps > 0.0) || !rows_contiguous || paged || hdim_q != 128)
            return kRingEarly;
        if (splits >= 2 && splits <= 4)
            return kRingEarly | kRingInterleave;
        return grid_il ? kRingEarly | kRingInterleave | kRingInterleaveGrid : kRingEarly;
    }
    int32_t flags = kRingEarly | (paged ? 0 : kRingInterleave) | (hdim_q == 128 ? kRingL2Promo256 : 0) |
                    (grid_il ? kRingInterleaveGrid : 0);
    if (tiles * splits >= int64_t(kLateRefillWarpsPerSm) * sm_count())
        flags |= kRingLateRefill;
    return flags;
}

// The forward arguments a split-KV call corresponds to (K/V strides keep their meaning inside a page).
aiter::mha_fwd_args fwd_args_of(const aiter::mha_fwd_splitkv_args& a, const std::string& dtype, bool group,
                                int bias_type, bool has_lse, bool has_sink)
{
    aiter::mha_fwd_args f{};
    f.data_type = dtype, f.is_group_mode = group, f.bias_type = bias_type, f.has_lse = has_lse;
    f.has_sink = has_sink;
    f.q_ptr = a.q_ptr, f.k_ptr = a.k_ptr, f.v_ptr = a.v_ptr, f.bias_ptr = a.bias_ptr;
    f.lse_ptr = a.lse_ptr, f.o_ptr = a.o_ptr;
    f.seqstart_q_ptr = a.seqstart_q_ptr, f.seqstart_k_ptr = a.seqstart_k_ptr;
    f.seqlen_q = a.seqlen_q, f.seqlen_k = a.seqlen_k, f.batch = a.batch, f.max_seqlen_q = a.max_seqlen_q;
    f.hdim_q = a.hdim_q, f.hdim_v = a.hdim_v, f.nhead_q = a.nhead_q, f.nhead_k = a.nhead_k;
    f.scale_s = a.scale_s, f.logits_soft_cap = a.logits_soft_cap;
    f.stride_q = a.stride_q, f.stride_k = a.stride_k, f.stride_v = a.stride_v, f.stride_bias = a.stride_bias;
    f.stride_o = a.stride_o;
    f.nhead_stride_q = a.nhead_stride_q, f.nhead_stride_k = a.nhead_stride_k, f.nhead_stride_v = a.nhead_stride_v;
    f.nhead_stride_bias = a.nhead_stride_bias, f.nhead_stride_lse = a.nhead_stride_lse;
    f.nhead_stride_o = a.nhead_stride_o;
    f.batch_stride_q = a.batch_stride_q, f.batch_stride_k = a.batch_stride_k, f.batch_stride_v = a.batch_stride_v;
    f.batch_stride_bias = a.batch_stride_bias, f.batch_stride_lse = a.batch_stride_lse;
    f.batch_stride_o = a.batch_stride_o;
    f.window_size_left = a.window_size_left, f.window_size_right = a.window_size_right;
    f.sink_size = a.sink_size; // without has_sink, a sink_size > 0 is an error (invalid_argument), as in mha_fwd
    f.mask_type = a.mask_type;
    f.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    return f;
}

aiter::mha_fwd_args fwd_args_of(const aiter::mha_batch_prefill_args& a, const std::string& dtype, bool group,
                                int bias_type, bool has_lse)
{
    aiter::mha_fwd_args f{};
    f.data_type = dtype, f.is_group_mode = group, f.bias_type = bias_type, f.has_lse = has_lse;
    f.has_sink = a.sink_size != 0; // a negative sink_size is then an error (invalid_argument)
    f.q_ptr = a.q_ptr, f.k_ptr = a.k_ptr, f.v_ptr = a.v_ptr, f.bias_ptr = a.bias_ptr;
    f.rand_val_ptr = a.rand_val_ptr, f.lse_ptr = a.lse_ptr, f.o_ptr = a.o_ptr;
    f.seqstart_q_ptr = a.seqstart_q_ptr;
    f.seqstart_k_ptr = group ? a.seqstart_q_ptr : nullptr; // stands in for the check; K rows come from the pages
    f.seqlen_q = a.seqlen_q, f.seqlen_k = a.seqlen_k, f.batch = a.batch, f.max_seqlen_q = a.max_seqlen_q;
    f.hdim_q = a.hdim_q, f.hdim_v = a.hdim_v, f.nhead_q = a.nhead_q, f.nhead_k = a.nhead_k;
    f.scale_s = a.scale_s, f.logits_soft_cap = a.logits_soft_cap;
    f.stride_q = a.stride_q, f.stride_k = a.stride_k, f.stride_v = a.stride_v, f.stride_bias = a.stride_bias;
    f.stride_randval = a.stride_randval, f.stride_o = a.stride_o;
    f.nhead_stride_q = a.nhead_stride_q, f.nhead_stride_k = a.nhead_stride_k, f.nhead_stride_v = a.nhead_stride_v;
    f.nhead_stride_bias = a.nhead_stride_bias, f.nhead_stride_randval = a.nhead_stride_randval;
    f.nhead_stride_lse = a.nhead_stride_lse, f.nhead_stride_o = a.nhead_stride_o;
    f.batch_stride_q = a.batch_stride_q, f.batch_stride_k = a.batch_stride_k, f.batch_stride_v = a.batch_stride_v;
    f.batch_stride_bias = a.batch_stride_bias, f.batch_stride_randval = a.batch_stride_randval;
    f.batch_stride_lse = a.batch_stride_lse, f.batch_stride_o = a.batch_stride_o;
    f.window_size_left = a.window_size_left, f.window_size_right = a.window_size_right;
    f.sink_size = a.sink_size, f.mask_type = a.mask_type;
    f.p_drop = a.p_drop, f.s_randval = a.s_randval, f.drop_seed_offset = a.drop_seed_offset;
    return f;
}

// Whether a split-KV call's splits may merge inside the split grid (mha_fwd_splitkv): `no_merge` says why not ("" when
// they may), `tiles` counters are then taken just before the launch (a call that fails its checks takes none), and
// `required` (MHA_SPLITKV_MERGE=grid) makes a call that cannot merge there an error.
struct GridMerge
{
    std::string no_merge;
    int64_t tiles = 0;  // tiles x row blocks: one counter each
    int64_t ctas  = 0;  // the split grid's CTAs, which must all be resident at once
    bool required = false;
};

// Checks shared by both entry points once the forward checks passed; launches the kSplit instance.
// block_m: the split tile's height (kDecodeBlockM or kPrefillBlockM); a build without the decode instance runs a
// speculative-decode step's rows on the prefill tile.
float run_split(const char* api, const aiter::mha_fwd_args& f, FwdParams& p, const ck_tile::stream_config& s,
                int block_m, const GridMerge* merge = nullptr)
{
    const std::string who = api;
    if (std::string why = unsupported_feature(f); !why.empty())
        return fail(who + ": " + why);
    if (p.kv.page_size > 0 && (f.stride_k >= kMaxKvRowStride || f.stride_v >= kMaxKvRowStride))
        return fail(who + ": invalid argument: stride_k and stride_v must be below 2^24 elements");
    // paged K/V: batch_stride_k / _v are page strides, read in group mode too (the forward checks skip them there)
    if (p.kv.page_size > 0 && (f.batch_stride_k < 0 || f.batch_stride_v < 0 || f.batch_stride_k % kVecElems ||
                               f.batch_stride_v % kVecElems))
        return fail(who + ": invalid argument: batch_stride_k and batch_stride_v (the page strides) must be "
                    "non-negative multiples of 8 elements, got " + str(f.batch_stride_k) + ", " + str(f.batch_stride_v));
    if (int64_t(p.batch) * p.split.num_splits > kMaxGridYZ)
        return fail(who + ": invalid argument: batch * num_splits must be <= " + str(kMaxGridYZ) + ", got " +
                    str(int64_t(p.batch) * p.split.num_splits));
    std::string missing;
    const int max_q = f.is_group_mode ? f.max_seqlen_q : f.seqlen_q;
    const int features = needed_features(f);
    const FwdInstance* in = find_lean_or_full(dtype_of(f.data_type), f.hdim_q, f.hdim_v, features, missing, true,
                                              block_m);
    if (in == nullptr && block_m == kDecodeBlockM && int64_t(max_q) * p.split.pack_ratio > kDecodeBlockM)
        in = find_lean_or_full(dtype_of(f.data_type), f.hdim_q, f.hdim_v, features, missing, true, kPrefillBlockM);
    if (in == nullptr)
        return fail(who + ": no split-KV kernel for dtype=" + f.data_type + " hdim_q=" + str(f.hdim_q) +
                    " hdim_v=" + str(f.hdim_v) + ": " + missing);
    int cc = 0;
    if (std::string why = current_cc(cc); !why.empty())
        return fail(who + ": " + why);
    if (!arch_built(cc))
        return fail(who + ": this library was built for " + std::string(kBuildInfo.archs) + " but the GPU is sm_" +
                    str(cc) + rebuild_hint(cc));
    aiter::mha_set_last_kernel_name(in->name);
    if ((f.is_group_mode ? f.max_seqlen_q : f.seqlen_q) == 0)
        return 0.f;
    if (std::string why = smem_unfit(in->name, in->smem_bytes); !why.empty())
        return fail(who + ": " + why);
    if (merge != nullptr)
    {
        std::string why = merge->no_merge;
        // Every CTA of the split grid resident at once: at most kDecodeCtasPerSm per SM, fewer where the
        // instance's shared memory says so (d256: 5; unknown: kDecodeCtasPerSm, and the cooperative launch tells).
        const int known  = decode_ctas_per_sm(*in->smem_bytes);
        const int per_sm = known > 0 ? std::min(known, kDecodeCtasPerSm) : kDecodeCtasPerSm;
        if (why.empty() && merge->ctas > int64_t(per_sm) * sm_count())
            why = "more split CTAs than fit on the GPU at once (" + str(per_sm) + " of this instance per SM)";
        if (why.empty() && (p.split.merge_counters = merge_counters_for(p.split.o_acc, s.stream_id_, merge->tiles)) ==
                               nullptr)
            why = "no arrival counters left for this call (every (o_acc, stream) slot is taken, or the call has more "
                  "than 1024 tiles x row blocks)";
        if (merge->required && !why.empty())
            return fail(who + ": MHA_SPLITKV_MERGE=grid, but the splits cannot merge inside the split grid: " + why);
    }
    p.split.cc = cc; // the launcher picks the decode ring and programmatic launches without asking again
    return launch_and_time(s, in->name, [&] { return in->launch(p, s.stream_id_); });
}

std::string invalid_page_table(int page_size, const void* table, const char* table_name)
{
    if (page_size < 1)
        return "page_block_size must be >= 1, got " + str(page_size);
    if (table == nullptr || !aligned(table, 4))
        return std::string(table_name) + " must be a 4-byte aligned int32 array when page_block_size > 0";
    return "";
}

} // namespace
} // namespace mha

namespace aiter {

int mha_fwd_splitkv_num_splits(int batch, int nhead_q, int nhead_k, int max_seqlen_q, int max_seqlen_k,
                               int bias_type)
{
    // the general rule's count, or the head-dim-64 fill's or head-dim-128 rule's where those take more: every rule's
    // count is at most this
    int most = 0;
    for (const int bm : {0, mha::kDecodeBlockM}) // by the rows, and a speculative-decode step's row blocks
        most = std::max({most, mha::num_splits_for(batch, nhead_q, nhead_k, max_seqlen_q, max_seqlen_k, bias_type,
                                                   mha::SplitRules{}, bm),
                         mha::num_splits_for(batch, nhead_q, nhead_k, max_seqlen_q, max_seqlen_k, bias_type,
                                             mha::split_rules(64, 64, false), bm),
                         mha::num_splits_for(batch, nhead_q, nhead_k, max_seqlen_q, max_seqlen_k, bias_type,
                                             mha::split_rules(128, 128, false), bm)});
    for (const int d : {64, 128}) // and the count a speculative-decode step's row blocks take
        most = std::max(most, mha::resolve_splits(batch, nhead_q, nhead_k, max_seqlen_q, max_seqlen_k, bias_type, d,
                                                  d, false).splits);
    return most;
}

int mha_fwd_splitkv_num_splits(int batch, int nhead_q, int nhead_k, int max_seqlen_q, int max_seqlen_k,
                               int bias_type, int hdim_q, int hdim_v, bool paged)
{
    return mha::resolve_splits(batch, nhead_q, nhead_k, max_seqlen_q, max_seqlen_k, bias_type, hdim_q, hdim_v, paged)
        .splits;
}

float mha_fwd_splitkv(mha_fwd_splitkv_args args, const ck_tile::stream_config& stream_config,
                      std::string q_dtype_str, bool is_group_mode, mask_enum mask_type, bias_enum bias_type,
                      bool has_lse, bool has_sink)
{
    using namespace mha;
    mha_set_last_error("");
    const std::string who = "mha_fwd_splitkv";
    auto bad = [&](const std::string& why) { return fail(who + ": invalid argument: " + why); };
    if (int(mask_type) < 0 || int(mask_type) > 3)
        return bad("mask_type argument " + str(int(mask_type)) + " is not a mask_enum (0 to 3)");
    if (int(mask_type) != 0 && args.mask_type == 0)
        args.mask_type = 2; // as CK: the trait picks a masked kernel, which anchors top-left only for args.mask_type 1
    if (int(mask_type) == 0 && args.mask_type != 0)
        return bad("mask_type argument is no_mask but args.mask_type is " + str(args.mask_type));
    // group mode: seqlen_k (the longest cache) only sizes the split heuristic and the launch's read schedule (the
    // kernels take each batch's key count from the device arrays); CK never reads it there, so a value out of range
    // (a caller that left it unset) reads as 0, unknown: the heuristic then picks one split
    if (is_group_mode && (args.seqlen_k < 0 || args.seqlen_k > kMaxSeqlen))
        args.seqlen_k = 0;
    const bool paged = args.page_block_size > 0 || args.block_table_ptr != nullptr;
    // group mode over a block table with per-batch key counts (seqlen_k_ptr) reads no physical key rows: seqstart_k
    // may be null there (CK reads it but ignores it for pages)
    const bool no_key_rows = is_group_mode && paged && args.seqlen_k_ptr != nullptr && args.seqstart_k_ptr == nullptr;
    if (no_key_rows)
        args.seqstart_k_ptr = args.seqstart_q_ptr; // a stand-in for the checks; the kernels get null
    const aiter::mha_fwd_args f = fwd_args_of(args, q_dtype_str, is_group_mode, int(bias_type), has_lse, has_sink);
    if (std::string why = invalid_argument(f); !why.empty())
        return bad(why);
    if (args.is_gappy)
        return bad("is_gappy (local seqstart_k offsets) is not supported");
    if (args.num_splits < 0 || args.num_splits > kMaxSplits)
        return bad("num_splits must be in [0, " + str(kMaxSplits) + "] (0: heuristic), got " + str(args.num_splits));
    if (args.page_block_size < 0)
        return bad("page_block_size must be >= 0 (0: a dense cache), got " + str(args.page_block_size));
    if (paged)
    {
        if (std::string why = invalid_page_table(args.page_block_size, args.block_table_ptr, "block_table_ptr");
            !why.empty())
            return bad(why);
        if (args.batch_stride_block_table < 1)
            return bad("batch_stride_block_table must be >= 1, got " + str(args.batch_stride_block_table));
        if (args.cache_batch_idx != nullptr)
            return bad("cache_batch_idx cannot be combined with a paged KV cache");
    }
    if (args.cache_batch_idx != nullptr && (is_group_mode || !aligned(args.cache_batch_idx, 4)))
        return bad("cache_batch_idx needs batch mode and a 4-byte aligned int32 [batch] array");
    if (args.seqlen_k_ptr != nullptr && !aligned(args.seqlen_k_ptr, 4))
        return bad("seqlen_k_ptr must be 4-byte aligned (int32 [batch])");
    if (paged && !is_group_mode && int64_t(args.seqlen_k) > int64_t(args.batch_stride_block_table) * args.page_block_size)
        return bad("seqlen_k (" + str(args.seqlen_k) + ", the longest cache) exceeds batch_stride_block_table x "
                   "page_block_size (" + str(int64_t(args.batch_stride_block_table) * args.page_block_size) + ")");

    int splits = args.num_splits;
    const int max_q = is_group_mode ? args.max_seqlen_q : args.seqlen_q;
    const int pack = pack_ratio(args.nhead_q, args.nhead_k, int(bias_type), max_q); // query heads per tile
    const int64_t tile_rows = int64_t(max_q) * pack;
    int block_m = split_block_m(tile_rows);
    if (splits != 1 && spec_decode_rows(tile_rows, args.hdim_q, args.hdim_v))
    {
        // the tile by the shape, for a given count > 1 too (the heuristic's count passed back runs as it would)
        const SplitChoice c = resolve_splits(args.batch, args.nhead_q, args.nhead_k, max_q, args.seqlen_k,
                                             int(bias_type), args.hdim_q, args.hdim_v, paged);
        if (splits == 0)
            splits = args.lse_acc_ptr && args.o_acc_ptr ? c.splits : 1;
        if (splits > 1)
            block_m = c.block_m;
    }
    if (splits == 0)
        splits = (args.lse_acc_ptr && args.o_acc_ptr)
                     ? num_splits_for(args.batch, args.nhead_q, args.nhead_k, max_q, args.seqlen_k, int(bias_type),
                                      split_rules(args.hdim_q, args.hdim_v, paged))
                     : 1;
    if (splits > 1)
    {
        if (args.lse_acc_ptr == nullptr || args.o_acc_ptr == nullptr || !aligned(args.lse_acc_ptr, 4) ||
            !aligned(args.o_acc_ptr, 4))
            return bad("num_splits > 1 needs 4-byte aligned fp32 lse_acc_ptr and o_acc_ptr");
        if (args.stride_o_acc < args.hdim_v || args.nhead_stride_o_acc < 0 || args.nhead_stride_lse_acc < 0 ||
            args.split_stride_o_acc < 0 || args.split_stride_lse_acc < 0 || args.batch_stride_o_acc < 0 ||
            args.batch_stride_lse_acc < 0)
            return bad("o_acc / lse_acc strides must be >= 0 and stride_o_acc >= hdim_v");
        // o_acc [split, batch, head, row, hdim_v] and lse_acc [split, batch, head, row] (rows 1 apart): every
        // (split, batch, head, row) needs its own partial
        if (std::string why = overlapping_output("o_acc", args.batch, max_q, args.nhead_q, args.hdim_v,
                                                 args.stride_o_acc, args.nhead_stride_o_acc, args.batch_stride_o_acc,
                                                 is_group_mode, {splits, args.split_stride_o_acc});
            !why.empty())
            return bad(why);
        if (std::string why = overlapping_output("lse_acc", args.batch, max_q, args.nhead_q, 1, 1,
                                                 args.nhead_stride_lse_acc, args.batch_stride_lse_acc, is_group_mode,
                                                 {splits, args.split_stride_lse_acc});
            !why.empty())
            return bad(why);
    }

    FwdParams p = make_params(f);
    if (no_key_rows)
        p.seq.seqstart_k = nullptr;
    if (!is_group_mode)
        p.kv.seqlen_k = static_cast<const int32_t*>(args.seqlen_k_ptr);
    else
        p.seq.seqlen_k = static_cast<const int32_t*>(args.seqlen_k_ptr);
    p.kv.cache_batch_idx = static_cast<const int32_t*>(args.cache_batch_idx);
    if (paged)
    {
        p.kv.page_size = args.page_block_size;
        p.kv.block_table = static_cast<const int32_t*>(args.block_table_ptr);
        p.kv.block_table_batch_stride = args.batch_stride_block_table;
    }
    SplitParams& sp = p.split;
    sp.num_splits = splits;
    sp.pack_ratio = pack;
    const int64_t tiles = int64_t(args.batch) * (pack > 1 ? args.nhead_k : args.nhead_q); // tiles of the grid
    const int64_t row_blocks = (tile_rows + block_m - 1) / block_m; // CTAs per tile and split
    sp.ring_flags = ring_flags_for(tiles, splits, tile_rows, paged, args.hdim_q, args.hdim_v,
                                   args.stride_k == args.hdim_q && args.stride_v == args.hdim_v,
                                   args.nhead_stride_k == args.hdim_q && args.nhead_stride_v == args.hdim_v,
                                   args.seqlen_k);
    GridMerge grid_merge;
    if (splits > 1)
    {
        sp.lse_acc = static_cast<float*>(args.lse_acc_ptr);
        sp.o_acc = static_cast<float*>(args.o_acc_ptr);
        sp.lse_acc_split_stride = args.split_stride_lse_acc, sp.lse_acc_batch_stride = args.batch_stride_lse_acc;
        sp.lse_acc_head_stride = args.nhead_stride_lse_acc;
        sp.o_acc_split_stride = args.split_stride_o_acc, sp.o_acc_batch_stride = args.batch_stride_o_acc;
        sp.o_acc_head_stride = args.nhead_stride_o_acc, sp.o_acc_row_stride = args.stride_o_acc;
        // More splits than a cluster holds, on a decode tile whose CTAs all fit at once: they may merge inside the
        // split grid (fwd_launch.cuh), reading the partials 16 bytes at a time. MHA_SPLITKV_MERGE=combine keeps the
        // combine kernel; MHA_SPLITKV_MERGE=grid makes a call that cannot merge in the grid an error (for tests and
        // comparisons).
        const char* merge_env = std::getenv("MHA_SPLITKV_MERGE");
        const std::string merge = merge_env ? merge_env : "";
        grid_merge.required = merge == "grid";
        grid_merge.tiles    = tiles * row_blocks;
        grid_merge.ctas     = tiles * row_blocks * splits;
        grid_merge.no_merge =
            merge == "combine" ? "MHA_SPLITKV_MERGE=combine"
            : block_m != kDecodeBlockM ? "not a decode tile (more than 16 rows per KV head, unsplit or past 64)"
            : splits <= kClusterMergeMaxSplits  ? "8 splits or fewer merge in a thread-block cluster"
            : !aligned(args.o_acc_ptr, 16) || args.hdim_v % 4 || args.stride_o_acc % 4 ||
                    args.nhead_stride_o_acc % 4 || args.split_stride_o_acc % 4 ||
                    (!is_group_mode && args.batch_stride_o_acc % 4)
                ? "o_acc_ptr is not 16-byte aligned or an o_acc stride / hdim_v is not a multiple of 4"
                : "";
    }
    return run_split(who.c_str(), f, p, stream_config, block_m, splits > 1 ? &grid_merge : nullptr);
}

float mha_batch_prefill(mha_batch_prefill_args args, const ck_tile::stream_config& stream_config,
                        std::string q_dtype_str, bool is_group_mode, mask_enum mask_type, bias_enum bias_type,
                        bool has_lse, quant_scale_enum qscale_type, bool /*use_ext_asm*/)
{
    using namespace mha;
    mha_set_last_error("");
    const std::string who = "mha_batch_prefill";
    auto bad = [&](const std::string& why) { return fail(who + ": invalid argument: " + why); };
    if (int(qscale_type) != 0)
        return fail(who + ": qscale_type " + str(int(qscale_type)) + " (fp8 descales) is not supported yet");
    if (int(mask_type) < 0 || int(mask_type) > 3)
        return bad("mask_type argument " + str(int(mask_type)) + " is not a mask_enum (0 to 3)");
    // group mode: seqlen_k only sizes the launch (each batch's key count comes from the page table), as in
    // mha_fwd_splitkv: a value out of range reads as 0, unknown
    if (is_group_mode && (args.seqlen_k < 0 || args.seqlen_k > kMaxSeqlen))
        args.seqlen_k = 0;
    if (int(mask_type) != 0 && args.mask_type == 0)
        args.mask_type = 2; // as CK (and mha_fwd_splitkv): masked kernels anchor top-left only for args.mask_type 1
    if (int(mask_type) == 0 && args.mask_type != 0)
        return bad("mask_type argument is no_mask but args.mask_type is " + str(args.mask_type));
    const aiter::mha_fwd_args f = fwd_args_of(args, q_dtype_str, is_group_mode, int(bias_type), has_lse);
    if (std::string why = invalid_argument(f); !why.empty())
        return bad(why);
    if (std::string why = invalid_page_table(args.page_block_size, args.kv_page_indices, "kv_page_indices");
        !why.empty())
        return bad(why);
    if (args.kv_indptr == nullptr || !aligned(args.kv_indptr, 4))
        return bad("kv_indptr must be a 4-byte aligned int32 [batch + 1] array");
    // as AITER: kv_last_page_lens is required when page_block_size > 1 (pages of one key are always full)
    if ((args.kv_last_page_lens == nullptr && args.page_block_size > 1) || !aligned(args.kv_last_page_lens, 4))
        return bad("kv_last_page_lens must be a 4-byte aligned int32 [batch] array (it may be null only when "
                   "page_block_size is 1)");
    if (args.num_total_pages < 0)
        return bad("num_total_pages must be >= 0, got " + str(args.num_total_pages));

    FwdParams p = make_params(f);
    p.seq.seqstart_k = nullptr; // keys come from the page table
    p.kv.page_size = args.page_block_size;
    p.kv.page_indptr = static_cast<const int32_t*>(args.kv_indptr);
    p.kv.page_indices = static_cast<const int32_t*>(args.kv_page_indices);
    p.kv.last_page_lens = static_cast<const int32_t*>(args.kv_last_page_lens);
    p.split.num_splits = 1;
    const int max_q = is_group_mode ? args.max_seqlen_q : args.seqlen_q;
    p.split.pack_ratio = f.p_drop > 0.f ? 1 : pack_ratio(args.nhead_q, args.nhead_k, int(bias_type), max_q);
    return run_split(who.c_str(), f, p, stream_config, split_block_m(int64_t(max_q) * p.split.pack_ratio));
}

} // namespace aiter
