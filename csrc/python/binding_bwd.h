#pragma once
// The backward half of the aiter_mha binding (included once, by binding.cpp): mha_bwd / mha_varlen_bwd with AITER's
// Python signatures, on aiter::mha_bwd (include/mha_bwd.h, libmha_bwd.so). Arguments are checked (binding_args.h)
// before any device work. GQA / MQA dK, dV come back from the library per query head and a broadcast bias's dBias per
// element; device_ops.h sums them into the caller's arrays and owns every temporary of the call.

#include <pybind11/pybind11.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "binding_args.h"
#include "device_ops.h"
#include "dlpack_io.h"
#include "mha_bwd.h"

namespace mha_py {

// ------------------------------------------------------------------------------------------------ arguments

// mha_bwd / mha_varlen_bwd arguments as the caller gave them (AITER's names).
struct BwdArgs
{
    py::object dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, window_size_left, window_size_right, dq, dk,
        dv, dbias, bias, alibi_slopes, rng_state, gen, sink_ptr, d_sink, mask, seed, offset, stream;
    bool is_causal, deterministic, zero_tensors, use_asm_v3;
};

// Group-mode (mha_varlen_bwd) arguments.
struct BwdVarlen
{
    py::object cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k;
};

// AITER's mapping (its mha_bwd / mha_fwd torch interfaces): is_causal is a bottom-right causal mask that keeps a left
// window, any other window is a bottom-right sliding window ("b:left,right"), (-1, -1) is no mask. The forward
// binding's mask=2 with the same windows is the same mask. AITER also turns windows >= seqlen_k into -1; that is
// not done here, because with seqlen_q > seqlen_k + 1 it changes which keys a row sees, and the forward binding (whose
// output this backward differentiates) does not do it either. `mask` (the forward's vocabulary) replaces is_causal.
inline MaskSpec bwd_mask(bool is_causal, const py::object& mask, int left, int right)
{
    if (!mask.is_none())
    {
        if (is_causal)
            invalid("pass either is_causal=True or mask=..., not both (mask takes the forward's vocabulary: 'none', "
                    "'causal', 'causal_top_left', 'causal_bottom_right', 'window_generic' or an int mask_type)");
        return parse_mask(mask, left, right);
    }
    if (is_causal)
        return {static_cast<int>(mask_enum::mask_bottom_right), left, 0};
    if (left == -1 && right == -1)
        return {static_cast<int>(mask_enum::no_mask), -1, -1};
    return {static_cast<int>(mask_enum::mask_bottom_right), left, right};
}

inline void require_none_arg(const py::object& x, const char* name, const char* why)
{
    if (!x.is_none())
        invalid(std::string(name) + " must be None: " + why);
}

// The sink logits: `sink` (AITER's name for mha_bwd / mha_varlen_bwd) or `sink_ptr` (this binding's earlier name).
inline py::object sink_arg(const py::object& sink, const py::object& sink_ptr)
{
    if (!sink.is_none() && !sink_ptr.is_none())
        invalid("pass the sink logits as sink (AITER's name) or sink_ptr, not both");
    return sink.is_none() ? sink_ptr : sink;
}

// An output the caller may pass: same shape as `like` (given as its shape) and q's dtype, unit-stride last dim, no
// self-overlap.
inline TensorPtr import_grad(const py::object& obj, const char* name, uintptr_t stream, const char* layout,
                             const std::vector<int64_t>& shape, const DLDataType& qt, const char* like)
{
    TensorPtr t = import_opt(obj, name, stream);
    if (t)
    {
        t->check_layout(static_cast<int>(shape.size()), layout, &qt, "q has", true);
        if (t->shape() != shape)
            invalid(std::string(name) + " has shape " + shape_str(t->shape()) + "; expected " + like + "'s shape " +
                    shape_str(shape));
    }
    return t;
}

// Elements spanned by a non-negative strided view (1 past its last element's offset; 1 when empty).
inline int64_t extent_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides)
{
    int64_t extent = 1;
    for (size_t i = 0; i < shape.size(); ++i)
        extent += (std::max<int64_t>(shape[i], 1) - 1) * strides[i];
    return extent;
}

// The fp32 D = rowsum(dO * O) buffer, returned as softmax_d. The library addresses it with softmax_lse's strides, so it
// gets the same strides (contiguous when softmax_lse is) over an allocation that spans them.
inline std::shared_ptr<DeviceStorage> allocate_like_lse(int device, const ImportedTensor& lse)
{
    std::vector<int64_t> strides(lse.ndim());
    for (int i = 0; i < lse.ndim(); ++i)
        strides[i] = lse.size(i) > 1 ? lse.stride(i) : 0;
    auto s     = DeviceStorage::allocate(device, kF32, {extent_of(lse.shape(), strides)});
    s->shape   = lse.shape();
    s->strides = strides;
    return s;
}

// A zero fill as one stream operation: cudaMemsetAsync when the view is dense, else the strided-sum kernel.
struct ZeroOp
{
    void* ptr    = nullptr;
    size_t bytes = 0;
    SumLaunch kernel;
};

inline ZeroOp make_zero(const View& v)
{
    ZeroOp z;
    bool dense = true;
    const std::vector<int64_t> want = contiguous_strides(v.shape);
    for (size_t i = 0; i < v.shape.size(); ++i)
        dense = dense && (v.shape[i] <= 1 || v.strides[i] == want[i]);
    if (dense)
        z.ptr = v.ptr, z.bytes = static_cast<size_t>(v.numel()) * (v.dtype.bits / 8);
    else
        z.kernel = make_zero_fill(v);
    return z;
}

inline cudaError_t enqueue(const ZeroOp& z, cudaStream_t stream)
{
    if (z.ptr != nullptr)
        return z.bytes > 0 ? cudaMemsetAsync(z.ptr, 0, z.bytes, stream) : cudaSuccess;
    return enqueue(z.kernel, stream);
}

inline void check_alloc_strides(const std::vector<int64_t>& shape, const std::string& what)
{
    for (int64_t st : contiguous_strides(shape))
        if (st > kIndexMax)
            invalid(what + ": a contiguous " + shape_str(shape) + " array has a stride that does not fit int32, which "
                           "the library takes for element strides");
}

inline size_t bytes_of(const std::vector<int64_t>& shape, int elem_bytes)
{
    size_t n = static_cast<size_t>(elem_bytes);
    for (int64_t d : shape)
        if (__builtin_mul_overflow(n, static_cast<size_t>(d), &n))
            raise(PyExc_MemoryError, "cannot allocate an array of shape " + shape_str(shape));
    return n;
}

// ------------------------------------------------------------------------------------------------ the call

inline py::object run_bwd(const BwdArgs& o, const BwdVarlen* vl)
{
    const bool group = vl != nullptr;

    // Scalar arguments first: they need no device and fail fast.
    const int wl          = window_arg(o.window_size_left, "window_size_left");
    const int wr          = window_arg(o.window_size_right, "window_size_right");
    const MaskSpec mask   = bwd_mask(o.is_causal, o.mask, wl, wr);
    const uintptr_t strm  = parse_stream(o.stream);
    const double p_drop   = real_arg(o.dropout_p, "dropout_p");
    const uint64_t seed   = u64_arg(o.seed, "seed");
    const uint64_t offset = u64_arg(o.offset, "offset");
    if (!(p_drop >= 0 && p_drop < 1))
        invalid("dropout_p must be in [0, 1), got " + std::to_string(p_drop));
    require_none_arg(o.gen, "gen", "this binding takes no torch.Generator; pass rng_state (the forward's seed_offset "
                                   "array) or seed= / offset= to reproduce the forward's dropout mask");
    if (!o.bias.is_none() && !o.alibi_slopes.is_none())
        invalid("bias and alibi_slopes are mutually exclusive (the library takes one bias_type)");
    if (!o.dbias.is_none() && o.bias.is_none())
        invalid("dbias needs bias: it receives the gradient of the elementwise bias");
    if (!o.d_sink.is_none() && o.sink_ptr.is_none())
        invalid("d_sink needs sink: it receives the gradient of the sink logits");
    if (!o.rng_state.is_none() && (seed != 0 || offset != 0))
        invalid("pass either seed/offset or rng_state (a device array), not both");
    int64_t max_q_arg = 0, max_k_arg = 0;
    if (group)
    {
        max_q_arg = int_arg(vl->max_seqlen_q, "max_seqlen_q", 0, kIndexMax);
        max_k_arg = int_arg(vl->max_seqlen_k, "max_seqlen_k", 0, kIndexMax);
    }

    // Layouts and cross-tensor checks, then devices (so host arrays get the same precise reasons).
    // Batch mode indexes q/k/v/out/dout as [b, s, h, d] (row dim 1, head dim 2); group mode as [total, h, d].
    const int R = group ? 0 : 1, H = R + 1, D = R + 2, nd = group ? 3 : 4;
    ImportedTensor q(o.q, "q", strm);
    q.check_layout(nd, group ? "[total_q, nhead_q, hdim_q]" : "[batch, seqlen_q, nhead_q, hdim_q]", nullptr, nullptr,
                   false);
    const DLDataType qt = q.dtype();
    ImportedTensor k(o.k, "k", strm);
    k.check_layout(nd, group ? "[total_k, nhead_k, hdim_q]" : "[batch, seqlen_k, nhead_k, hdim_q]", &qt, "q has",
                   false);
    ImportedTensor v(o.v, "v", strm);
    v.check_layout(nd, group ? "[total_k, nhead_k, hdim_v]" : "[batch, seqlen_k, nhead_k, hdim_v]", &qt, "q has",
                   false);
    const char* dtype = qt.code == kDLBfloat ? "bf16" : "fp16";

    int64_t b         = group ? 0 : q.size(0);
    const int64_t s_q = q.size(R), h_q = q.size(H), d = q.size(D);
    const int64_t s_k = k.size(R), h_k = k.size(H), d_v = v.size(D);
    if (!group)
    {
        expect_size(k, 0, b, "batch (dim 0)", "q's batch");
        expect_size(v, 0, b, "batch (dim 0)", "q's batch");
    }
    expect_size(k, D, d, group ? "head dim (dim 2)" : "head dim (dim 3)", "q's head dim");
    expect_size(v, R, s_k, group ? "total (dim 0)" : "seqlen (dim 1)", group ? "k's total" : "k's seqlen");
    expect_size(v, H, h_k, group ? "nhead (dim 1)" : "nhead (dim 2)", "k's nhead");
    if (h_k == 0)
        invalid("k has nhead_k = 0 (shape " + shape_str(k.shape()) + ")");
    if (h_q % h_k != 0)
        invalid("nhead_q = " + std::to_string(h_q) + " (q dim " + std::to_string(H) +
                ") is not a multiple of nhead_k = " + std::to_string(h_k) + " (k dim " + std::to_string(H) +
                "); MQA/GQA need nhead_q % nhead_k == 0");
    const int64_t groups = h_q / h_k; // query heads per KV head

    double scale = 1.0 / std::sqrt(static_cast<double>(d > 0 ? d : 1));
    if (!o.softmax_scale.is_none())
        scale = real_arg(o.softmax_scale, "softmax_scale");
    if (!(scale > 0) || !std::isfinite(scale)) // checked here too: an empty problem never reaches the library
        invalid("softmax_scale must be finite and > 0, got " + std::to_string(scale));

    const std::vector<int64_t> o_shape = group ? std::vector<int64_t>{s_q, h_q, d_v}
                                               : std::vector<int64_t>{b, s_q, h_q, d_v};
    const char* o_layout = group ? "[total_q, nhead_q, hdim_v]" : "[batch, seqlen_q, nhead_q, hdim_v]";
    ImportedTensor out(o.out, "out", strm);
    out.check_layout(nd, o_layout, &qt, "q has", false);
    if (out.shape() != o_shape)
        invalid("out has shape " + shape_str(out.shape()) + "; expected " + o_layout + " = " + shape_str(o_shape));
    ImportedTensor dout(o.dout, "dout", strm);
    dout.check_layout(nd, o_layout, &qt, "q has", false);
    if (dout.shape() != o_shape)
        invalid("dout has shape " + shape_str(dout.shape()) + "; expected out's shape " + shape_str(o_shape));

    const std::vector<int64_t> lse_shape = group ? std::vector<int64_t>{h_q, s_q} : std::vector<int64_t>{b, h_q, s_q};
    const char* lse_layout = group ? "[nhead_q, total_q] float32" : "[batch, nhead_q, seqlen_q] float32";
    ImportedTensor lse(o.softmax_lse, "softmax_lse", strm);
    lse.check_layout(nd - 1, lse_layout, &kF32, "expected", false);
    if (lse.shape() != lse_shape)
        invalid("softmax_lse has shape " + shape_str(lse.shape()) + "; expected " + lse_layout + " = " +
                shape_str(lse_shape));
    if (lse.overlaps())
    {
        std::vector<int64_t> st;
        for (int i = 0; i < lse.ndim(); ++i)
            st.push_back(lse.stride(i));
        invalid("softmax_lse: strides " + shape_str(st) + " make elements overlap; the library writes softmax_d "
                "with softmax_lse's strides, so they must not");
    }

    TensorPtr dq_in = import_grad(o.dq, "dq", strm, group ? "[total_q, nhead_q, hdim_q]"
                                                          : "[batch, seqlen_q, nhead_q, hdim_q]", q.shape(), qt, "q");
    TensorPtr dk_in = import_grad(o.dk, "dk", strm, group ? "[total_k, nhead_k, hdim_q]"
                                                          : "[batch, seqlen_k, nhead_k, hdim_q]", k.shape(), qt, "k");
    TensorPtr dv_in = import_grad(o.dv, "dv", strm, group ? "[total_k, nhead_k, hdim_v]"
                                                          : "[batch, seqlen_k, nhead_k, hdim_v]", v.shape(), qt, "v");

    // Sequence arrays (group mode): cu_seqlens_* [b+1] physical starts, seqused_* [b] logical lengths.
    SeqArrays seqs;
    if (group)
        seqs = import_seq_arrays(vl->cu_seqlens_q, vl->cu_seqlens_k, vl->seqused_q, vl->seqused_k, strm, b);
    TensorPtr &cu_q = seqs.cu_q, &cu_k = seqs.cu_k, &used_q = seqs.used_q, &used_k = seqs.used_k;

    TensorPtr bias = import_opt(o.bias, "bias", strm);
    BiasStrides bias_st;
    if (bias)
        bias_st = check_bias(*bias, group, qt, b, h_q, s_q, s_k);
    TensorPtr dbias = import_opt(o.dbias, "dbias", strm);
    if (dbias)
    {
        dbias->check_layout(nd, group ? "[nhead_q, total_q, max_seqlen_k]" : "[batch, nhead_q, seqlen_q, seqlen_k]",
                            &qt, "q has", true);
        if (dbias->shape() != bias->shape())
            invalid("dbias has shape " + shape_str(dbias->shape()) + "; expected bias's shape " +
                    shape_str(bias->shape()) + " (a broadcast bias gets its gradient summed over the broadcast dims)");
        if (dbias->numel() > 0 && dbias->data() == bias->data())
            invalid("dbias must not alias bias: the bias is read while dbias is written");
    }
    TensorPtr alibi = import_opt(o.alibi_slopes, "alibi_slopes", strm);
    const index_t alibi_batch = alibi ? check_alibi(*alibi, b, h_q) : 0;
    TensorPtr rng_state = import_opt(o.rng_state, "rng_state", strm);
    if (rng_state)
        check_seed_offset(*rng_state);
    TensorPtr sink = import_opt(o.sink_ptr, "sink", strm), d_sink = import_opt(o.d_sink, "d_sink", strm);
    for (ImportedTensor* x : {sink.get(), d_sink.get()})
        if (x)
        {
            x->check_layout(1, "[nhead_q] float32", &kF32, "expected", x == d_sink.get());
            expect_size(*x, 0, h_q, "length", "q's nhead");
        }

    q.check_device(nullptr);
    for (const ImportedTensor* x : {&k, &v, &out, &dout, &lse, dq_in.get(), dk_in.get(), dv_in.get(), cu_q.get(),
                                    cu_k.get(), used_q.get(), used_k.get(), bias.get(), dbias.get(), alibi.get(),
                                    rng_state.get(), sink.get(), d_sink.get()})
        if (x != nullptr)
            x->check_device(&q);
    const int device = q.device().device_id;

    // Group mode: the longest logical lengths, checked against max_seqlen_* and the bias width.
    Seqlens lens{s_q, s_k};
    if (group)
    {
        lens = b > 0 ? read_seqlens(*cu_q, *cu_k, used_q.get(), used_k.get(), b, s_q, s_k, strm, device) : Seqlens{};
        if (max_q_arg < lens.max_q)
            invalid("max_seqlen_q = " + std::to_string(max_q_arg) + " is less than the longest logical seqlen_q (" +
                    std::to_string(lens.max_q) + ") in cu_seqlens_q / seqused_q");
        if (max_k_arg < lens.max_k)
            invalid("max_seqlen_k = " + std::to_string(max_k_arg) + " is less than the longest logical seqlen_k (" +
                    std::to_string(lens.max_k) + ") in cu_seqlens_k / seqused_k");
        if (bias && bias->size(2) < lens.max_k)
            invalid("bias width (dim 2) is " + std::to_string(bias->size(2)) + " but the longest logical seqlen_k is " +
                    std::to_string(lens.max_k));
    }
    const int64_t width = bias ? bias->size(group ? 2 : 3) : 0; // bias / dbias row length

    // Outputs the caller did not pass are allocated contiguous; their strides must fit int32 as well.
    if (!dq_in)
        check_alloc_strides(q.shape(), "dq");
    if (!dk_in)
        check_alloc_strides(k.shape(), "dk");
    if (!dv_in)
        check_alloc_strides(v.shape(), "dv");
    // Expanded per-query-head dk / dv (GQA / MQA) and the full dbias of a broadcast bias.
    const std::vector<int64_t> dk_full_shape = group ? std::vector<int64_t>{s_k, h_q, d}
                                                     : std::vector<int64_t>{b, s_k, h_q, d};
    const std::vector<int64_t> dv_full_shape = group ? std::vector<int64_t>{s_k, h_q, d_v}
                                                     : std::vector<int64_t>{b, s_k, h_q, d_v};
    const std::vector<int64_t> dbias_full_shape = group ? std::vector<int64_t>{h_q, s_q, width}
                                                        : std::vector<int64_t>{b, h_q, s_q, s_k};
    const bool expand_kv = groups > 1;
    const bool expand_dbias = dbias && dbias->shape() != dbias_full_shape;
    if (expand_kv)
    {
        check_alloc_strides(dk_full_shape, "dk (per query head, before the GQA sum)");
        check_alloc_strides(dv_full_shape, "dv (per query head, before the GQA sum)");
    }
    if (expand_dbias)
        check_alloc_strides(dbias_full_shape, "dbias (per batch and head, before the broadcast sum)");

    std::shared_ptr<DeviceStorage> dq_buf, dk_buf, dv_buf;
    if (!dq_in)
        dq_buf = DeviceStorage::allocate(device, qt, q.shape());
    if (!dk_in)
        dk_buf = DeviceStorage::allocate(device, qt, k.shape());
    if (!dv_in)
        dv_buf = DeviceStorage::allocate(device, qt, v.shape());
    std::shared_ptr<DeviceStorage> d_buf = allocate_like_lse(device, lse);
    const View dq_view = dq_in ? view_of(*dq_in) : view_of(*dq_buf);
    const View dk_view = dk_in ? view_of(*dk_in) : view_of(*dk_buf);
    const View dv_view = dv_in ? view_of(*dv_in) : view_of(*dv_buf);

    const auto stream = reinterpret_cast<cudaStream_t>(strm);
    auto result = [&]() -> py::object {
        return py::make_tuple(dq_in ? o.dq : py::cast(DeviceBuffer{dq_buf}),
                              dk_in ? o.dk : py::cast(DeviceBuffer{dk_buf}),
                              dv_in ? o.dv : py::cast(DeviceBuffer{dv_buf}), py::cast(DeviceBuffer{d_buf}));
    };
    // Orders a DLPack consumer on another stream after the work enqueued for the allocated outputs.
    auto record_ready = [&]() -> cudaError_t {
        return mark_ready(device, strm, {&dq_buf, &dk_buf, &dv_buf, &d_buf});
    };

    // Stream work is planned with the GIL held (the kernel loader may raise) and enqueued without it.
    std::vector<ZeroOp> pre;   // zero fills before the library call
    std::vector<SumLaunch> post; // GQA and broadcast-bias sums after it
    // softmax_d is zeroed over its whole allocation: group mode leaves rows outside the sequences unwritten.
    ZeroOp zero_d;
    zero_d.ptr = d_buf->ptr, zero_d.bytes = static_cast<size_t>(extent_of(d_buf->shape, d_buf->strides)) * 4;
    pre.push_back(zero_d);

    // Nothing to compute (no query, key or head anywhere): every gradient and D are zero. The library is skipped, as
    // it treats zero sizes as invalid.
    const bool nothing = b == 0 || h_q == 0 || s_q == 0 || s_k == 0 || lens.max_q == 0 || lens.max_k == 0;
    if (nothing || o.zero_tensors)
    {
        for (const View* x : {&dq_view, &dk_view, &dv_view})
            pre.push_back(make_zero(*x));
        if (dbias && nothing)
            pre.push_back(make_zero(view_of(*dbias)));
        if (d_sink && nothing)
            pre.push_back(make_zero(view_of(*d_sink)));
    }
    if (nothing)
    {
        cudaError_t e = cudaSuccess;
        {
            DeviceGuard guard(device);
            py::gil_scoped_release no_gil;
            for (const ZeroOp& z : pre)
                if (e == cudaSuccess)
                    e = enqueue(z, stream);
            if (e == cudaSuccess)
                e = record_ready();
        }
        if (e != cudaSuccess)
            raise_cuda("zero-filling the gradients of an empty problem", e);
        return result();
    }
    // A dbias written in place is zeroed first: elements the kernels skip (fully masked tiles) must read 0.
    if (dbias && !expand_dbias)
        pre.push_back(make_zero(view_of(*dbias)));

    CallArena arena(device, stream);
    const int elem = qt.bits / 8;
    void* dk_full    = nullptr;
    void* dv_full    = nullptr;
    void* dbias_full = nullptr;
    {
        DeviceGuard guard(device);
        // Group mode leaves padding rows (past seqused_k) of the expanded dk / dv unwritten: zero them so that the
        // sums stay finite there. A broadcast dbias sums elements the kernels may skip: zero it too.
        if (expand_kv)
        {
            dk_full = arena.alloc(bytes_of(dk_full_shape, elem), group);
            dv_full = arena.alloc(bytes_of(dv_full_shape, elem), group);
        }
        if (expand_dbias)
            dbias_full = arena.alloc(bytes_of(dbias_full_shape, elem), true);
        if (arena.failed())
        {
            arena.release();
            raise(arena.error_code == cudaErrorMemoryAllocation ? PyExc_MemoryError : PyExc_RuntimeError,
                  arena.error);
        }
    }
    if (expand_kv)
    {
        // full [.., s_k, h_q, d] -> [.., s_k, h_k, d]: query head hk * groups + g belongs to KV head hk.
        const std::vector<int64_t> kst = contiguous_strides(dk_full_shape), vst = contiguous_strides(dv_full_shape);
        std::vector<int64_t> kin(kst), vin(vst);
        kin[H] = groups * d, vin[H] = groups * d_v;
        post.push_back(make_sum(dk_view, dk_full, kin, {{groups, d}}));
        post.push_back(make_sum(dv_view, dv_full, vin, {{groups, d_v}}));
    }
    if (expand_dbias)
    {
        const View dbv = view_of(*dbias);
        const std::vector<int64_t> full_st = contiguous_strides(dbias_full_shape);
        std::vector<int64_t> in_st(full_st.size());
        std::vector<std::pair<int64_t, int64_t>> reduced;
        for (size_t i = 0; i < full_st.size(); ++i)
        {
            const bool summed = dbv.shape[i] != dbias_full_shape[i];
            in_st[i]          = summed ? 0 : full_st[i];
            if (summed)
                reduced.push_back({dbias_full_shape[i], full_st[i]});
        }
        post.push_back(make_sum(dbv, dbias_full, in_st, reduced));
    }

    // Arrays with no elements are never read; the library still wants non-null pointers (q's serves).
    auto data_or_q = [&](const ImportedTensor& x) { return x.numel() > 0 ? x.data() : q.data(); };
    const auto i32 = [](int64_t x) { return static_cast<ck_tile::index_t>(x); };

    aiter::mha_bwd_args a{};
    a.use_asm_v3       = o.use_asm_v3;
    a.v3_atomic_fp32   = true; // AITER's default (is_v3_atomic_fp32=True)
    a.v3_bf16_cvt      = 1;    // AITER's default (how_v3_bf16_cvt=1)
    a.v3_api_check     = false;
    a.hdim_q           = i32(d);
    a.hdim_v           = i32(d_v);
    a.data_type        = dtype;
    a.is_group_mode    = group;
    a.mask_type        = mask.type;
    a.bias_type        = static_cast<int>(bias ? bias_enum::elementwise_bias : alibi ? bias_enum::alibi
                                                                                   : bias_enum::no_bias);
    a.has_dbias        = dbias != nullptr;
    a.has_dropout      = p_drop > 0;
    a.is_store_randval = false;
    a.is_deterministic = o.deterministic;

    a.q_ptr        = q.data();
    a.k_ptr        = data_or_q(k);
    a.v_ptr        = data_or_q(v);
    a.bias_ptr     = bias ? data_or_q(*bias) : alibi ? alibi->data() : nullptr;
    a.o_ptr        = data_or_q(out);
    a.lse_ptr      = data_or_q(lse);
    a.do_ptr       = data_or_q(dout);
    a.d_ptr        = d_buf->ptr;
    a.rand_val_ptr = nullptr;
    a.dq_ptr       = dq_view.ptr;
    a.dk_ptr       = expand_kv ? dk_full : dk_view.ptr;
    a.dv_ptr       = expand_kv ? dv_full : dv_view.ptr;
    a.dbias_ptr    = !dbias ? nullptr : expand_dbias ? dbias_full : dbias->data();
    a.sink_ptr     = sink ? sink->data() : nullptr;
    a.d_sink_ptr   = d_sink ? d_sink->data() : nullptr;

    a.seqstart_q_ptr  = group ? cu_q->data() : nullptr;
    a.seqstart_k_ptr  = group ? cu_k->data() : nullptr;
    a.seqlen_q_ptr    = used_q ? used_q->data() : nullptr;
    a.seqlen_k_ptr    = used_k ? used_k->data() : nullptr;
    a.cu_seqlen_q_ptr = nullptr;
    a.cu_seqlen_k_ptr = nullptr;

    // Every size was checked to fit int32 (check_layout, check_alloc_strides). Group mode: seqlen_q/k are the totals.
    a.seqlen_q     = i32(s_q);
    a.seqlen_k     = i32(s_k);
    a.batch        = i32(b);
    a.max_seqlen_q = i32(group ? max_q_arg : s_q);
    // group mode with a bias: at most its width, which holds every logical seqlen_k (checked above), so the library's
    // check of the dbias row stride against max_seqlen_k holds for a dbias of that width
    a.max_seqlen_k = i32(!group ? s_k : bias ? std::min<int64_t>(max_k_arg, width) : max_k_arg);
    a.nhead_q      = i32(h_q);
    a.nhead_k      = i32(h_k);
    a.scale        = static_cast<float>(scale);

    // Row / head / batch strides. Group mode has no batch strides: rows are addressed through seqstart_*.
    const auto dk_st = expand_kv ? contiguous_strides(dk_full_shape) : dk_view.strides;
    const auto dv_st = expand_kv ? contiguous_strides(dv_full_shape) : dv_view.strides;
    const auto db_st = !dbias ? std::vector<int64_t>(nd, 0)
                              : expand_dbias ? contiguous_strides(dbias_full_shape) : view_of(*dbias).strides;
    const int bR = group ? 1 : 2, bH = bR - 1; // dbias [b, h, s_q, s_k] / [h, total_q, width]: row and head dims
    a.stride_q       = q.stride(R);
    a.stride_k       = k.stride(R);
    a.stride_v       = v.stride(R);
    a.stride_bias    = bias ? bias_st.row : alibi_batch;
    a.stride_o       = out.stride(R);
    a.stride_randval = 0;
    a.stride_do      = dout.stride(R);
    a.stride_dq      = i32(dq_view.strides[R]);
    a.stride_dk      = i32(dk_st[R]);
    a.stride_dv      = i32(dv_st[R]);
    a.stride_dbias   = i32(db_st[bR]);

    a.nhead_stride_q       = q.stride(H);
    a.nhead_stride_k       = k.stride(H);
    a.nhead_stride_v       = v.stride(H);
    a.nhead_stride_bias    = bias_st.head;
    a.nhead_stride_o       = out.stride(H);
    a.nhead_stride_randval = 0;
    a.nhead_stride_do      = dout.stride(H);
    a.nhead_stride_lsed    = lse.stride(nd - 3);
    a.nhead_stride_dq      = i32(dq_view.strides[H]);
    a.nhead_stride_dk      = i32(dk_st[H]);
    a.nhead_stride_dv      = i32(dv_st[H]);
    a.nhead_stride_dbias   = i32(db_st[bH]);

    a.batch_stride_q       = group ? 0 : q.stride(0);
    a.batch_stride_k       = group ? 0 : k.stride(0);
    a.batch_stride_v       = group ? 0 : v.stride(0);
    a.batch_stride_bias    = bias_st.batch;
    a.batch_stride_o       = group ? 0 : out.stride(0);
    a.batch_stride_randval = 0;
    a.batch_stride_do      = group ? 0 : dout.stride(0);
    a.batch_stride_lsed    = group ? 0 : lse.stride(0);
    a.batch_stride_dq      = group ? 0 : i32(dq_view.strides[0]);
    a.batch_stride_dk      = group ? 0 : i32(dk_st[0]);
    a.batch_stride_dv      = group ? 0 : i32(dv_st[0]);
    a.batch_stride_dbias   = group ? 0 : i32(db_st[0]);

    a.window_size_left  = mask.left;
    a.window_size_right = mask.right;
    a.p_drop            = static_cast<float>(p_drop);
    a.p_undrop          = static_cast<float>(1.0 - p_drop);
    // The forward binding's rule: the same (seed, offset), by value or through a device array, gives the same mask.
    if (rng_state)
    {
        const char* so     = static_cast<const char*>(rng_state->data());
        a.drop_seed_offset = std::pair<const void*, const void*>{
            so, so + static_cast<int64_t>(rng_state->stride(0)) * sizeof(uint64_t)};
    }
    else
        a.drop_seed_offset = std::pair<uint64_t, uint64_t>{seed, offset};

    a.workspace_alloc   = [&arena](size_t bytes, bool zero_init) { return arena.alloc(bytes, zero_init); };
    a.pinned_host_alloc = [&arena](size_t bytes) { return arena.alloc_pinned(bytes); };
    // The library's refusals (its checks and the device's arch / shared memory) before the zero fills of the caller's
    // buffers: a call it refuses leaves them as given.
    int refused = 0;
    {
        DeviceGuard guard(device);
        refused = aiter::mha_bwd_check(a);
    }
    if (refused != 0) // ValueError, or RuntimeError for a CUDA failure (no usable device), as the forward's
    {
        const char* why = aiter::mha_get_last_error();
        raise_library(why != nullptr && why[0] != '\0' ? std::string(why)
                                                       : std::string(group ? "mha_varlen_bwd" : "mha_bwd") +
                                                             ": aiter::mha_bwd_check refused the call without a reason");
    }

    float ret             = 0.f;
    cudaError_t cuda_err  = cudaSuccess;
    const char* cuda_what = "";
    auto step = [&](cudaError_t e, const char* what) { // keeps the first failure
        if (cuda_err == cudaSuccess && e != cudaSuccess)
            cuda_err = e, cuda_what = what;
    };
    {
        DeviceGuard guard(device);
        py::gil_scoped_release no_gil;
        for (const ZeroOp& z : pre)
            if (cuda_err == cudaSuccess)
                step(enqueue(z, stream), "zero-filling the gradients");
        if (cuda_err == cudaSuccess)
        {
            ret = aiter::mha_bwd(std::move(a), ck_tile::stream_config{stream, false, 0, 0, 1, true});
            if (ret >= 0)
            {
                for (const SumLaunch& l : post)
                    if (cuda_err == cudaSuccess)
                        step(enqueue(l, stream), "summing dK / dV / dBias over the broadcast heads / dims");
                if (cuda_err == cudaSuccess)
                    step(record_ready(), "recording the completion event");
            }
        }
        step(arena.release(), "releasing the backward's temporaries");
    }
    if (arena.failed())
        raise(arena.error_code == cudaErrorMemoryAllocation ? PyExc_MemoryError : PyExc_RuntimeError, arena.error);
    if (cuda_err != cudaSuccess)
        raise_cuda(cuda_what, cuda_err);
    if (ret < 0)
    {
        // error.h: with both libraries loaded, setter and getter resolve to one copy of the per-thread reason
        const char* why = aiter::mha_get_last_error();
        raise(PyExc_RuntimeError, why != nullptr && why[0] != '\0'
                                      ? std::string(why)
                                      : std::string(group ? "mha_varlen_bwd" : "mha_bwd") +
                                            ": aiter::mha_bwd returned " + std::to_string(ret) +
                                            " without giving a reason");
    }
    return result();
}

// ------------------------------------------------------------------------------------------------ documentation

#define MHA_BWD_COMMON_DOC                                                                                            \
    "dropout_p: the forward's dropout probability in [0, 1). The mask is regenerated from rng_state, a 2-element\n"    \
    "         uint64 / int64 device array [seed, offset] (the forward's seed_offset), or from the keyword-only\n"      \
    "         seed= / offset= ints (the forward's seed / offset): the same values give the forward's mask bit for\n"  \
    "         bit. gen must be None (no torch.Generator here).\n"                                                      \
    "softmax_scale: the forward's scale (None: 1/sqrt(hdim_q)).\n"                                                    \
    "is_causal, window_size_left, window_size_right: AITER's mapping: is_causal is the bottom-right causal mask\n"    \
    "         (keeping window_size_left), other windows are bottom-right sliding windows (-1: unbounded), (-1, -1)\n" \
    "         is no mask: the forward's mask=2 (or 'none') with those windows. The keyword-only mask= takes the\n"    \
    "         forward's vocabulary instead ('causal_top_left', an int mask_type, ...; not with is_causal=True).\n"    \
    "deterministic: dQ accumulated in a fixed order (bit-identical across runs).\n"                                  \
    "dq, dk, dv: optional preallocated outputs (q / k / v shapes, q's dtype, unit-stride last dim), else allocated\n" \
    "         as contiguous DeviceBuffer objects. With nhead_q > nhead_k (MQA / GQA) dk / dv hold the sums over the\n" \
    "         query heads of each KV head (the library's per-query-head gradients, reduced on the device).\n"        \
    "alibi_slopes: float32 [h_q] or [b | 1, h_q], as in the forward.\n"                                              \
    "sink:    the forward's float32 [h_q] sink logits (sink_ptr=, keyword-only, is the same argument's earlier\n" \
    "         name); d_sink: optional float32 [h_q] output for their gradient.\n"                                    \
    "stream:  cudaStream_t as an int (0: default stream), or an object with .cuda_stream / .ptr. Not the\n"          \
    "         caller's current stream (AITER's torch ops use that): under torch.cuda.stream(s) pass stream=s.\n"     \
    "         Every kernel runs on it, preallocated outputs are written on it, and inputs must outlive its work\n"   \
    "         (a temporary such as x.contiguous() passed inline is released when the call returns).\n"               \
    "use_asm_v3: try the Hopper (sm90a) kernels first.\n\n"                                                           \
    "Returns (dq, dk, dv, softmax_d), as AITER's mha_bwd: softmax_d is the fp32 D = rowsum(dout * out) times\n"     \
    "(1 - dropout_p) (CK's p_undrop) with\n"                                                                          \
    "softmax_lse's shape and strides (the library shares them). dbias and d_sink, when given, are written in place\n" \
    "(AITER fills dbias the same way). Raises ValueError for invalid arguments, before any device work (group mode:\n" \
    "after reading the sequence arrays back; the library's refusals, aiter::mha_bwd_check, including the GPU's\n"  \
    "arch, also come before the zero fills), RuntimeError when the call fails past them (the launch, the device),\n" \
    "with aiter::mha_get_last_error()'s reason, and MemoryError when an allocation fails."

constexpr const char* kMhaBwdDoc =
    "Attention backward, batch mode, with AITER's signature (aiter/ops/mha.py; keyword-only extensions after *).\n"
    "q, dq: [b, s_q, h_q, d]; k, dk: [b, s_k, h_k, d]; v, dv: [b, s_k, h_k, d_v]; out, dout: [b, s_q, h_q, d_v]\n"
    "(float16 / bfloat16 on one CUDA device, strides multiples of 8 with a unit-stride last dim); softmax_lse: the\n"
    "forward's float32 [b, h_q, s_q] LSE.\n\n"
    "bias:    the forward's elementwise bias [b | 1, h_q | 1, s_q | 1, s_k]. dbias: optional output of bias's shape,\n"
    "         zero-filled first; over broadcast dims it receives the sum of the per-element gradients.\n"
    MHA_BWD_COMMON_DOC;

constexpr const char* kVarlenBwdDoc =
    "Attention backward, group (varlen) mode, with AITER's signature (aiter/ops/mha.py; cu_seqlens_q_padded /\n"
    "cu_seqlens_k_padded must be None: give the padded starts as cu_seqlens_* and the lengths as seqused_*); bias,\n"
    "dbias, sink_ptr, seqused_* and the rest after * are keyword-only extensions. q, dq: [total_q, h_q, d]; k, dk:\n"
    "[total_k, h_k, d]; v, dv: [total_k, h_k, d_v]; out, dout: [total_q, h_q, d_v]; softmax_lse: the forward's\n"
    "float32 [h_q, total_q]. cu_seqlens_q / cu_seqlens_k: int32 [b + 1] physical start rows; seqused_q / seqused_k:\n"
    "optional int32 [b] logical lengths, as in mha_varlen_fwd. max_seqlen_q / max_seqlen_k must be >= every logical\n"
    "length: the binding reads the sequence arrays back (synchronizing the stream) and checks them, and the bias\n"
    "width, before the call. zero_tensors: zero dq, dk, dv first. Rows past a sequence's logical length are not\n"
    "written (softmax_d reads 0 there), except that with MQA / GQA the dk / dv rows past seqused_k receive 0.\n\n"
    "bias:    the forward's bias [h_q | 1, total_q | 1, width >= every logical seqlen_k]; dbias: optional output of\n"
    "         bias's shape, zero-filled first, summed over broadcast dims.\n"
    MHA_BWD_COMMON_DOC;

} // namespace mha_py
