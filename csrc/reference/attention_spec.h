#pragma once
// The per-element rules of the forward contract (include/mha_fwd.h, "Semantics"), written once for both references:
// host_reference.h (double math) and naive_attention.cu (fp32 math). AttentionProblem describes one call as the
// references see it (logical lengths per batch, strides, optional features); below it, which keys a query row sees
// (MaskSpec, sink tokens included), the score modifiers (soft-cap, bias, ALiBi), dropout's keep test and where an
// element of each tensor lives in batch and group mode. Independent of csrc/common and csrc/ck on purpose.

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define REFERENCE_HOST_DEVICE __host__ __device__
#else
#define REFERENCE_HOST_DEVICE
#endif

namespace reference {

// Element strides of a [batch, head, row, dim] view whose dim is contiguous. Group mode ignores `batch`: batch b
// starts at its physical first row instead (see element_offset).
struct Strides
{
    int64_t batch;
    int64_t head;
    int64_t row;
};

// mask_type as in aiter::mha_fwd_args: 0 none, 1 top-left, 2 bottom-right, 3 window_generic (anchored bottom-right,
// as the library's device code does). (left, right) are FlashAttention window sizes, < 0 meaning unbounded, so
// causal is (-1, 0). sink_size > 0 keeps keys [0, sink_size) visible left of a finite window (mask types 1-3).
struct MaskSpec
{
    int type      = 0;
    int left      = -1;
    int right     = -1;
    int sink_size = 0;

    REFERENCE_HOST_DEVICE bool causal() const { return left < 0 && right == 0; }

    // Key j is visible to query row i of a (seqlen_q, seqlen_k) sequence.
    REFERENCE_HOST_DEVICE bool visible(int i, int j, int seqlen_q, int seqlen_k) const
    {
        if (j >= seqlen_k)
            return false;
        if (type == 0)
            return true;
        const int64_t diag = int64_t(i) + (type == 1 ? 0 : int64_t(seqlen_k) - seqlen_q);
        if (right >= 0 && j > diag + right)
            return false;
        if (left < 0 || j >= diag - left)
            return true;
        return j < sink_size && i < seqlen_k; // a sink token hidden by the left edge of the window
    }
};

enum BiasType : int
{
    kNoBias          = 0,
    kElementwiseBias = 1,
    kAlibi           = 2,
};

// Where ALiBi measures the distance from (CK's make_alibi_from_lr_mask): the bottom-right diagonal without a mask and
// with bottom-right windows, the top-left diagonal with top-left and window_generic (type 3) windows, and the column
// itself with causal masks. (CK casts the mask enum to its AlibiMode: 3 is neither VERTICAL nor FROM_BOTTOM_RIGHT, so
// its slope is negated without the bottom-right shifts, while the type-3 mask itself is anchored bottom-right.)
enum AlibiMode : int
{
    kAlibiBottomRight = 0, // -slope * |i + seqlen_k - seqlen_q - j|
    kAlibiTopLeft     = 1, // -slope * |i - j|
    kAlibiVertical    = 2, // +slope * j (a per-row constant away from the others under a causal mask)
};

REFERENCE_HOST_DEVICE inline int alibi_mode(const MaskSpec& m)
{
    if (m.type == 0)
        return kAlibiBottomRight;
    if (m.causal())
        return kAlibiVertical;
    return m.type == 2 ? kAlibiBottomRight : kAlibiTopLeft;
}

template <typename F>
REFERENCE_HOST_DEVICE F alibi_value(int mode, F slope, int i, int j, int seqlen_q, int seqlen_k)
{
    if (mode == kAlibiVertical)
        return slope * F(j);
    const int64_t anchor = int64_t(i) + (mode == kAlibiBottomRight ? int64_t(seqlen_k) - seqlen_q : 0);
    const int64_t dist   = anchor > j ? anchor - j : j - anchor;
    return -slope * F(dist);
}

REFERENCE_HOST_DEVICE inline double reference_tanh(double x) { return tanh(x); }
REFERENCE_HOST_DEVICE inline float reference_tanh(float x) { return tanhf(x); }

// One forward call. Arrays of metadata live where the reference runs (host memory for host_reference.h, device
// memory for naive_attention.cu); so do the tensors, which are fp32 for the host reference and the dtype of q
// (fp16 / bf16) for the naive GPU kernel.
struct AttentionProblem
{
    int batch, nhead_q, nhead_k, hdim_q, hdim_v;
    int max_seqlen_q; // >= every seqlen_q[b]

    const int32_t* seqlen_q;   // [batch] logical lengths
    const int32_t* seqlen_k;   // [batch]
    const int32_t* seqstart_q; // group mode: [batch + 1] physical first rows of Q, O, bias, randval; batch mode: nullptr
    const int32_t* seqstart_k; // group mode: [batch + 1] physical first rows of K, V; batch mode: nullptr
    const int32_t* out_start;  // [batch + 1] cumulative seqlen_q: where batch b starts in the packed outputs

    const void* q; // [batch, nhead_q, rows, hdim_q]
    const void* k; // [batch, nhead_k, rows, hdim_q]; query head h reads key head h / (nhead_q / nhead_k)
    const void* v; // [batch, nhead_k, rows, hdim_v]
    Strides q_strides, k_strides, v_strides;

    float scale;   // s = scale * q.k
    float softcap; // > 0: s = softcap * tanh(s / softcap), before bias / ALiBi
    MaskSpec mask;

    int bias_type;             // BiasType
    const void* bias;          // elementwise: [batch, nhead_q, rows, keys] (dtype of q) through bias_strides
    Strides bias_strides;
    const float* alibi_slopes; // ALiBi: slope of (b, h) at alibi_slopes[b * alibi_batch_stride + h]
    int64_t alibi_batch_stride;

    const float* sink; // [nhead_q] natural-log sink logits joining every row's softmax denominator, or nullptr

    const uint8_t* randval; // dropout when not null: uint8 [batch, nhead_q, rows, keys] through randval_strides
    Strides randval_strides;
    uint8_t keep_threshold; // keep iff randval <= keep_threshold (floor((1 - p_drop) * 255))
    float rp_keep;          // 1 / (1 - p_drop)

    // Outputs, fp32 and packed: row i of (b, h) is row nhead_q * out_start[b] + h * seqlen_q[b] + i of
    // o [rows, hdim_v] and lse [rows]. In batch mode that is [batch, nhead_q, seqlen_q, hdim_v].
    float* o;
    float* lse;
};

// Offset of row `row` of (batch b, head h) in a tensor with strides `s`: batch mode steps by s.batch, group mode
// starts batch b at physical row seqstart[b].
REFERENCE_HOST_DEVICE inline int64_t element_offset(const Strides& s, const int32_t* seqstart, int b, int h, int row)
{
    const int64_t batch_off = seqstart != nullptr ? int64_t(seqstart[b]) * s.row : int64_t(b) * s.batch;
    return batch_off + int64_t(h) * s.head + int64_t(row) * s.row;
}

REFERENCE_HOST_DEVICE inline int64_t packed_row(const AttentionProblem& p, int b, int h, int i)
{
    return int64_t(p.nhead_q) * p.out_start[b] + int64_t(h) * p.seqlen_q[b] + i;
}

// The logit of (i, j) from dot = q_i . k_j: scale, soft-cap, then the elementwise bias value `bias` (0 without one),
// then ALiBi with `slope`.
template <typename F>
REFERENCE_HOST_DEVICE F modified_score(const AttentionProblem& p, F dot, F bias, F slope, int i, int j, int seqlen_q,
                                       int seqlen_k)
{
    F s = F(p.scale) * dot;
    if (p.softcap > 0.f)
        s = F(p.softcap) * reference_tanh(s / F(p.softcap));
    if (p.bias_type == kElementwiseBias)
        s += bias;
    else if (p.bias_type == kAlibi)
        s += alibi_value(alibi_mode(p.mask), slope, i, j, seqlen_q, seqlen_k);
    return s;
}

// A normalised probability after dropout: kept ones scaled by 1 / (1 - p_drop), dropped ones 0.
template <typename F>
REFERENCE_HOST_DEVICE F apply_dropout(const AttentionProblem& p, F prob, uint8_t randval)
{
    return randval <= p.keep_threshold ? prob * F(p.rp_keep) : F(0);
}

} // namespace reference
