#pragma once
// Argument checks and device queries shared by the forward (mha_fwd.cpp) and backward (mha_bwd.cpp) entry points.
// The sequence checks are templates: aiter::mha_fwd_args and aiter::mha_bwd_args name those fields alike.

#include "launch.h"
#include "registry.h"
#include "strides.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace mha {

constexpr int kMaxHdim   = 256;
constexpr int kMaxGridYZ = 65535; // grid.y = nhead_q, grid.z = batch
constexpr int kVecElems  = 8;     // 16-byte vector of fp16/bf16: cp.async rows and pointers keep this alignment
// Longest sequence: the kernels round lengths up to whole row / key blocks in 32-bit arithmetic
constexpr int kMaxSeqlen = 2147483647 - 4095;
// Group mode: the largest window on the side whose reach depends on the batches' key counts (mask_params)
constexpr int kMaxGroupWindow = 1 << 30;

// "; rebuild with `python3 compile.py --arch <target>`" for a GPU of compute capability cc, with compile.py's name of
// its target (sm_90a, sm_100a and sm_120a carry the "a"), or a note that compile.py has none.
inline std::string rebuild_hint(int cc)
{
    switch (cc)
    {
    case 80: case 86: case 89: return "; rebuild with `python3 compile.py --arch sm_" + str(cc) + "`";
    case 90: case 100: case 120: return "; rebuild with `python3 compile.py --arch sm_" + str(cc) + "a`";
    default: return "; compile.py has no target for it";
    }
}

// seqstart / seqlen / cu_seqlen pointers and lengths of batch or group mode: a reason string, or "" when valid.
template <typename Args>
std::string invalid_sequences(const Args& a)
{
    if (a.cu_seqlen_q_ptr && a.seqlen_q_ptr)
        return "seqlen_q_ptr and cu_seqlen_q_ptr are mutually exclusive";
    if (a.cu_seqlen_k_ptr && a.seqlen_k_ptr)
        return "seqlen_k_ptr and cu_seqlen_k_ptr are mutually exclusive";
    if (a.is_group_mode)
    {
        if (a.seqstart_q_ptr == nullptr || a.seqstart_k_ptr == nullptr)
            return "group mode needs seqstart_q_ptr and seqstart_k_ptr ([batch + 1] int32 physical starts)";
        if (a.max_seqlen_q < 0 || a.max_seqlen_q > kMaxSeqlen)
            return "max_seqlen_q must be in [0, " + str(kMaxSeqlen) + "], got " + str(a.max_seqlen_q);
        for (auto [n, p] : {std::pair{"seqstart_q_ptr", a.seqstart_q_ptr}, std::pair{"seqstart_k_ptr", a.seqstart_k_ptr},
                            std::pair{"seqlen_q_ptr", a.seqlen_q_ptr}, std::pair{"seqlen_k_ptr", a.seqlen_k_ptr},
                            std::pair{"cu_seqlen_q_ptr", a.cu_seqlen_q_ptr},
                            std::pair{"cu_seqlen_k_ptr", a.cu_seqlen_k_ptr}})
            if (!aligned(p, 4))
                return std::string(n) + " must be 4-byte aligned (int32)";
        return "";
    }
    if (a.seqstart_q_ptr || a.seqstart_k_ptr || a.seqlen_q_ptr || a.seqlen_k_ptr)
        return "seqstart_q/k_ptr and seqlen_q/k_ptr must be nullptr in batch mode (use cu_seqlen_q/k_ptr for padding)";
    for (auto [n, p] :
         {std::pair{"cu_seqlen_q_ptr", a.cu_seqlen_q_ptr}, std::pair{"cu_seqlen_k_ptr", a.cu_seqlen_k_ptr}})
        if (!aligned(p, 4))
            return std::string(n) + " must be 4-byte aligned (int32)";
    if (a.seqlen_q < 0 || a.seqlen_k < 0 || a.seqlen_q > kMaxSeqlen || a.seqlen_k > kMaxSeqlen)
        return "seqlen_q and seqlen_k must be in [0, " + str(kMaxSeqlen) + "], got " + str(a.seqlen_q) + " and " +
               str(a.seqlen_k);
    return "";
}

// Sequence layout pointers of batch / group mode, as the kernels read them (SeqParams).
template <typename Args>
void fill_sequences(SeqParams& q, const Args& a)
{
    q.is_group    = a.is_group_mode;
    q.seqstart_q  = static_cast<const int32_t*>(a.seqstart_q_ptr);
    q.seqstart_k  = static_cast<const int32_t*>(a.seqstart_k_ptr);
    q.seqlen_q    = static_cast<const int32_t*>(a.seqlen_q_ptr);
    q.seqlen_k    = static_cast<const int32_t*>(a.seqlen_k_ptr);
    q.cu_seqlen_q = static_cast<const int32_t*>(a.cu_seqlen_q_ptr);
    q.cu_seqlen_k = static_cast<const int32_t*>(a.cu_seqlen_k_ptr);
}

// Batch, heads, head dims, sequences and mask of a forward or backward call: "" when valid, else the reason.
template <typename Args>
std::string invalid_shape(const Args& a)
{
    if (a.batch < 1 || a.batch > kMaxGridYZ)
        return "batch must be in [1, " + str(kMaxGridYZ) + "] (a CUDA grid dimension; split larger batches into "
               "several calls), got " + str(a.batch);
    if (a.nhead_q < 1 || a.nhead_q > kMaxGridYZ)
        return "nhead_q must be in [1, " + str(kMaxGridYZ) + "] (a CUDA grid dimension), got " + str(a.nhead_q);
    if (a.nhead_k < 1 || a.nhead_q % a.nhead_k != 0)
        return "nhead_q (" + str(a.nhead_q) + ") must be a positive multiple of nhead_k (" + str(a.nhead_k) + ")";
    for (auto [name, d] : {std::pair{"hdim_q", a.hdim_q}, std::pair{"hdim_v", a.hdim_v}})
        if (d < kVecElems || d > kMaxHdim || d % kVecElems != 0)
            return std::string(name) + " must be a multiple of 8 in [8, 256], got " + str(d);
    if (std::string why = invalid_sequences(a); !why.empty())
        return why;
    if (a.mask_type < 0 || a.mask_type > 3)
        return "mask_type must be 0 (none), 1 (top-left causal), 2 (bottom-right causal) or 3 (window_generic), got " +
               str(a.mask_type);
    if (a.mask_type != 0 && (a.window_size_left < -1 || a.window_size_right < -1))
        return "window_size_left/right must be >= -1 (-1 = unbounded), got " + str(a.window_size_left) + ", " +
               str(a.window_size_right);
    if (a.mask_type != 0 && !a.is_group_mode && int64_t(a.seqlen_q) + a.seqlen_k > 2147483647)
        return "with a mask, seqlen_q + seqlen_k must be < 2^31 (the kernels' window bounds are 32-bit), got " +
               str(a.seqlen_q) + " + " + str(a.seqlen_k);
    if (a.mask_type != 0 && a.is_group_mode)
    {
        // the side mask_params cannot resolve without the batches' key counts (device data)
        const bool bottom_right = a.mask_type != 1;
        const int w = bottom_right ? a.window_size_left : a.window_size_right;
        if (w >= kMaxGroupWindow)
            return std::string("in group mode window_size_") + (bottom_right ? "left" : "right") +
                   " must be -1 (unbounded) or < 2^30 with this mask, got " + str(w);
        // a row's bound is its index (up to max_seqlen_q) plus that side: 32-bit in the kernels
        if (w > 0 && int64_t(a.max_seqlen_q) + w > 2147483647)
            return std::string("in group mode max_seqlen_q + window_size_") + (bottom_right ? "left" : "right") +
                   " must be < 2^31 with this mask (the kernels' window bounds are 32-bit), got " +
                   str(a.max_seqlen_q) + " + " + str(w);
    }
    return "";
}

// The mask the kernels get (MaskParams): a window side that reaches past every row's keys becomes unbounded (-1),
// the same mask, so the kernels' 32-bit bounds (diagonal -+ window) stay in range for any window a caller passes
// (INT_MAX included). Batch mode bounds every batch by seqlen_q / seqlen_k (per-batch lengths are at most those);
// group mode by max_seqlen_q, and a side that needs the key count is limited by invalid_shape instead.
template <typename Args>
MaskParams mask_params(const Args& a, int sink_size)
{
    const bool bottom_right = a.mask_type != 1;
    const int64_t sq = a.is_group_mode ? a.max_seqlen_q : a.seqlen_q;
    const int64_t sk = a.is_group_mode ? INT64_MAX : a.seqlen_k;
    // row i sees j in [i + off - left, i + off + right], off = 0 (top-left) or sk - sq (bottom-right)
    const int64_t right_all = bottom_right ? sq : sk;    // right >= this reaches past the last key for every row
    const int64_t left_all  = bottom_right ? sk - 1 : sq - 1; // left >= this reaches key 0 for every row
    const int right = a.window_size_right > 0 && a.window_size_right >= right_all ? -1 : a.window_size_right;
    const int left  = a.window_size_left > 0 && a.window_size_left >= left_all ? -1 : a.window_size_left;
    return MaskParams{left, right, bottom_right, sink_size};
}

// Strides of one [batch, seqlen, nhead, hdim]-style tensor t (elements): rows must not overlap, head / batch strides
// must be non-negative (the batch stride is unused in group mode), and, where the kernels load the tensor 16 bytes at
// a time (vec), every stride must keep rows 16-byte aligned. "" when valid, else the reason.
inline std::string invalid_strides(const char* t, int row, int head, int batch, int hdim, bool vec,
                                   bool group_mode)
{
    const std::string n = t;
    const int batch_stride = group_mode ? 0 : batch;
    if (row < hdim)
        return "stride_" + n + " (" + str(row) + ") must be >= the head dim (" + str(hdim) +
               "): rows are contiguous in the last dimension and must not overlap";
    if (head < 0 || batch_stride < 0)
        return "nhead_stride_" + n + " and batch_stride_" + n + " must be >= 0";
    if (vec && (row % kVecElems || head % kVecElems || batch_stride % kVecElems))
        return "stride_" + n + ", nhead_stride_" + n + " and batch_stride_" + n +
               " must be multiples of 8 elements (16-byte aligned rows), got " + str(row) + ", " + str(head) + ", " +
               str(batch);
    return "";
}

// Elementwise bias / ALiBi slopes and dropout (p_drop, device seed / offset): "" when valid, else the reason.
template <typename Args>
std::string invalid_bias_or_dropout(const Args& a)
{
    if (a.bias_type == 1)
    {
        if (a.bias_ptr == nullptr || !aligned(a.bias_ptr, 2))
            return "bias_type 1 (elementwise) needs a 2-byte aligned bias_ptr";
        if (a.stride_bias < 0 || a.nhead_stride_bias < 0 || a.batch_stride_bias < 0)
            return "stride_bias, nhead_stride_bias and batch_stride_bias must be >= 0";
    }
    if (a.bias_type == 2)
    {
        if (a.bias_ptr == nullptr || !aligned(a.bias_ptr, 4))
            return "bias_type 2 (alibi) needs a 4-byte aligned fp32 slope array in bias_ptr";
        if (a.stride_bias < 0)
            return "alibi stride_bias must be 0 ([h] slopes) or nhead_q ([b, h] slopes), got " + str(a.stride_bias);
    }
    if (!(a.p_drop >= 0.f && a.p_drop < 1.f))
        return "p_drop must be in [0, 1), got " + std::to_string(a.p_drop);
    if (a.p_drop > 0.f)
        if (auto* ptrs = std::get_if<std::pair<const void*, const void*>>(&a.drop_seed_offset))
            if (ptrs->first == nullptr || ptrs->second == nullptr || !aligned(ptrs->first, 8) ||
                !aligned(ptrs->second, 8))
                return "drop_seed_offset device pointers must be non-null, 8-byte aligned uint64 values";
    return "";
}

// The uint8 random values a call stores with dropout (mha_fwd's s_randval, mha_bwd's is_store_randval): "" when the
// buffer and its strides are usable, else the reason. `flag` names the caller's field.
template <typename Args>
std::string invalid_randval(const Args& a, const char* flag)
{
    if (a.rand_val_ptr == nullptr)
        return std::string(flag) + " is set but rand_val_ptr is null";
    if (a.stride_randval < 0 || a.nhead_stride_randval < 0 || a.batch_stride_randval < 0)
        return "randval strides must be >= 0";
    return "";
}

// The kernels' view of bias_type 1 / 2 and of dropout (the backward regenerates the forward's random values from
// the same fields). window_generic ALiBi and mask anchoring follow CK.
template <typename Args>
void fill_bias_and_dropout(ScoreModParams& m, DropoutParams& d, const Args& a)
{
    if (a.bias_type == 1)
    {
        m.bias = a.bias_ptr;
        m.bias_row_stride = a.stride_bias, m.bias_head_stride = a.nhead_stride_bias;
        m.bias_batch_stride = a.batch_stride_bias;
    }
    if (a.bias_type == 2)
    {
        m.alibi_slopes = static_cast<const float*>(a.bias_ptr);
        m.alibi_batch_stride = a.stride_bias;
        const bool causal = a.window_size_left < 0 && a.window_size_right == 0;
        // CK's make_alibi_from_lr_mask: causal -> vertical; else AlibiMode(mask_type), where window_generic (3)
        // is neither vertical nor bottom-right, so it measures from the top-left diagonal like mask_type 1
        m.alibi_mode = a.mask_type == 0 ? 0 : causal ? 2 : a.mask_type == 2 ? 0 : 1;
    }
    if (a.p_drop > 0.f)
    {
        const float keep = 1.f - a.p_drop;
        d.enabled = true;
        d.keep_threshold = static_cast<uint8_t>(std::floor(keep * 255.f));
        d.rp_keep = 1.f / keep, d.p_keep = keep;
        if (auto* v = std::get_if<std::pair<uint64_t, uint64_t>>(&a.drop_seed_offset))
            d.seed = v->first, d.offset = v->second;
        else if (auto* ptrs = std::get_if<std::pair<const void*, const void*>>(&a.drop_seed_offset))
            d.seed_ptr = static_cast<const uint64_t*>(ptrs->first),
            d.offset_ptr = static_cast<const uint64_t*>(ptrs->second);
    }
}

// The compute capability of the current device, or an error reason.
inline std::string current_cc(int& cc)
{
    int dev = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess)
    {
        (void)cudaGetLastError(); // ours: not to be reported again by the next call
        return cuda_error_reason("no usable CUDA device", err);
    }
    cc = major * 10 + minor;
    return "";
}

// "" when a kernel with `bytes` of dynamic shared memory per CTA fits the current device, else why not (sm_86 / sm_89
// allow 99 KiB, sm_80 163 KiB, sm_90 227 KiB; the larger tiles need Hopper or A100).
inline std::string smem_unfit(const char* name, const int* bytes)
{
    int dev = 0, optin = 0;
    if (bytes == nullptr)
        return "";
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    {
        (void)cudaGetLastError(); // unknown: the launch will tell; our failed query is not a pending error
        return "";
    }
    if (*bytes <= optin)
        return "";
    return std::string(name) + " needs " + str(*bytes) + " bytes of shared memory per block but this GPU allows " +
           str(optin);
}

inline bool arch_built(const BuildInfo& build, int cc)
{
    for (int i = 0; i < build.num_archs; ++i)
        if (build.arch_ccs[i] == cc)
            return true;
    return false;
}

// Whether the asm (sm_90a) family can run on the current device: "" when the GPU is sm_90 and `build` has sm_90a,
// else the reason.
inline std::string sm90a_unavailable(const BuildInfo& build)
{
    int cc = 0;
    if (std::string why = current_cc(cc); !why.empty())
        return why;
    if (cc != 90)
        return "the GPU is sm_" + str(cc) + ", not sm_90";
    if (!arch_built(build, 90))
        return "this library was built without sm_90a";
    return "";
}

// A stride the asm family's tensor copies / stores accept: positive and a multiple of `unit` elements, or any value
// for an extent-1 dimension (never stepped over; PyTorch exports 1 there).
inline bool asm_stride_ok(int64_t stride, int64_t extent, int unit)
{
    return extent == 1 || (stride > 0 && stride % unit == 0);
}

} // namespace mha
