// aiter_mha: the pybind11 + DLPack binding of aiter::mha_fwd (include/mha_fwd.h), torch-free. It takes any DLPack array
// (torch, CuPy, JAX; NumPy only reaches the error paths), checks it (dlpack_io.h, binding_args.h) with a precise
// ValueError, fills every aiter::mha_fwd_args field for batch mode (mha_fwd) or group mode (mha_varlen_fwd) with each
// optional feature (bias, ALiBi, soft-cap, sinks, dropout) and launches on the caller's stream. Outputs it allocates
// itself come back as DeviceBuffer objects that export through __dlpack__. Python-facing documentation: kMhaFwdDoc /
// kVarlenDoc below. The backward (mha_bwd / mha_varlen_bwd on aiter::mha_bwd) lives in binding_bwd.h.

#include <pybind11/pybind11.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "binding_args.h"
#include "binding_bwd.h"
#include "dlpack_io.h"
#include "mha_fwd.h"
#include "mha_paged.h"

namespace py = pybind11;

namespace {

using namespace mha_py;

static_assert(sizeof(ck_tile::index_t) == sizeof(mha_py::index_t), "dlpack_io.h checks strides against int32");

constexpr const char* kVersion = "0.2.0";

// ------------------------------------------------------------------------------------------------ arguments

// Keyword arguments common to mha_fwd and mha_varlen_fwd, as the caller gave them.
struct Options
{
    py::object scale, mask, window_left, window_right, softcap, bias, alibi_slopes, dropout_p, seed, offset,
        seed_offset, sink, sink_size, out, lse, stream;
    bool return_randval, return_lse, use_asm_v3;
};

// Group-mode (mha_varlen_fwd) positional and keyword arguments.
struct Varlen
{
    py::object cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k, min_seqlen_q;
    bool check_seqlens;
};

py::object run_fwd(const py::object& q_obj, const py::object& k_obj, const py::object& v_obj, const Options& o,
                   const Varlen* vl)
{
    const bool group = vl != nullptr;
    const char* fn   = group ? "mha_varlen_fwd" : "mha_fwd";

    // Scalar arguments first: they need no device and fail fast.
    const int wl          = window_arg(o.window_left, "window_left");
    const int wr          = window_arg(o.window_right, "window_right");
    const MaskSpec mask   = parse_mask(o.mask, wl, wr);
    const uintptr_t strm  = parse_stream(o.stream);
    const double softcap  = real_arg(o.softcap, "softcap");
    const double p_drop   = real_arg(o.dropout_p, "dropout_p");
    const uint64_t seed   = u64_arg(o.seed, "seed");
    const uint64_t offset = u64_arg(o.offset, "offset");
    const int sink_size   = static_cast<int>(int_arg(o.sink_size, "sink_size", 0, kIndexMax));
    const bool has_lse    = o.return_lse || !o.lse.is_none();
    if (softcap < 0)
        invalid("softcap must be >= 0 (0: off), got " + std::to_string(softcap));
    if (!(p_drop >= 0 && p_drop < 1))
        invalid("dropout_p must be in [0, 1), got " + std::to_string(p_drop));
    if (!o.bias.is_none() && !o.alibi_slopes.is_none())
        invalid("bias and alibi_slopes are mutually exclusive (the library takes one bias_type)");
    if (!o.seed_offset.is_none() && (seed != 0 || offset != 0))
        invalid("pass either seed/offset or seed_offset (a device array), not both");
    int64_t max_q = 0, max_k = -1, min_q = 0;
    if (group)
    {
        max_q = int_arg(vl->max_seqlen_q, "max_seqlen_q", 0, kIndexMax);
        if (!vl->max_seqlen_k.is_none())
            max_k = int_arg(vl->max_seqlen_k, "max_seqlen_k", 0, kIndexMax);
        min_q = int_arg(vl->min_seqlen_q, "min_seqlen_q", 0, kIndexMax);
    }

    // Layout and cross-tensor checks come before the device checks so host arrays get the same precise reasons.
    // Batch mode indexes q/k/v as [b, s, h, d] (row dim 1, head dim 2); group mode as [total, h, d] (row dim 0).
    const int R = group ? 0 : 1, H = R + 1, D = R + 2, nd = group ? 3 : 4;
    ImportedTensor q(q_obj, "q", strm);
    q.check_layout(nd, group ? "[total_q, nhead_q, hdim_q]" : "[batch, seqlen_q, nhead_q, hdim_q]", nullptr, nullptr,
                   false);
    const DLDataType qt = q.dtype();
    ImportedTensor k(k_obj, "k", strm);
    k.check_layout(nd, group ? "[total_k, nhead_k, hdim_q]" : "[batch, seqlen_k, nhead_k, hdim_q]", &qt, "q has",
                   false);
    ImportedTensor v(v_obj, "v", strm);
    v.check_layout(nd, group ? "[total_k, nhead_k, hdim_v]" : "[batch, seqlen_k, nhead_k, hdim_v]", &qt, "q has",
                   false);
    const char* dtype = qt.code == kDLBfloat ? "bf16" : "fp16";

    // s_q / s_k: the per-batch lengths in batch mode, total_q / total_k in group mode.
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

    double scale = 1.0 / std::sqrt(static_cast<double>(d > 0 ? d : 1));
    if (!o.scale.is_none())
    {
        const double s = PyFloat_AsDouble(o.scale.ptr());
        if (s == -1.0 && PyErr_Occurred())
        {
            PyErr_Clear();
            invalid("scale must be a real number or None (None: 1/sqrt(hdim_q))");
        }
        if (!std::isfinite(s))
            invalid("scale must be finite, got " + std::to_string(s));
        scale = s;
    }

    // Sequence arrays (group mode): cu_seqlens_* [b+1] physical starts, seqused_* [b] logical lengths.
    SeqArrays seqs;
    if (group)
        seqs = import_seq_arrays(vl->cu_seqlens_q, vl->cu_seqlens_k, vl->seqused_q, vl->seqused_k, strm, b);
    TensorPtr &cu_q = seqs.cu_q, &cu_k = seqs.cu_k, &used_q = seqs.used_q, &used_k = seqs.used_k;

    // Optional features.
    TensorPtr bias = import_opt(o.bias, "bias", strm);
    BiasStrides bias_st;
    if (bias)
        bias_st = check_bias(*bias, group, qt, b, h_q, s_q, s_k);
    const index_t bias_row = bias_st.row, bias_head = bias_st.head, bias_batch = bias_st.batch;

    TensorPtr alibi = import_opt(o.alibi_slopes, "alibi_slopes", strm);
    const index_t alibi_batch = alibi ? check_alibi(*alibi, b, h_q) : 0;

    TensorPtr sink = import_opt(o.sink, "sink", strm);
    if (sink)
    {
        sink->check_layout(1, "[nhead_q] float32", &kF32, "expected", false);
        expect_size(*sink, 0, h_q, "length", "q's nhead");
    }

    TensorPtr seed_offset = import_opt(o.seed_offset, "seed_offset", strm);
    if (seed_offset)
        check_seed_offset(*seed_offset);

    // Outputs. Batch mode: out [b, s_q, h, d_v], lse [b, h, s_q]; group mode: out [total_q, h, d_v], lse [h, total_q].
    const std::vector<int64_t> out_shape = group ? std::vector<int64_t>{s_q, h_q, d_v}
                                                 : std::vector<int64_t>{b, s_q, h_q, d_v};
    const std::vector<int64_t> lse_shape = group ? std::vector<int64_t>{h_q, s_q} : std::vector<int64_t>{b, h_q, s_q};
    const char* out_layout = group ? "[total_q, nhead_q, hdim_v]" : "[batch, seqlen_q, nhead_q, hdim_v]";
    const char* lse_layout = group ? "[nhead_q, total_q] float32" : "[batch, nhead_q, seqlen_q] float32";

    TensorPtr out_in = import_opt(o.out, "out", strm), lse_in = import_opt(o.lse, "lse", strm);
    if (out_in)
    {
        out_in->check_layout(nd, out_layout, &qt, "q has", true);
        if (out_in->shape() != out_shape)
            invalid("out has shape " + shape_str(out_in->shape()) + "; expected " + out_layout + " = " +
                    shape_str(out_shape));
    }
    if (lse_in)
    {
        lse_in->check_layout(nd - 1, lse_layout, &kF32, "expected", true);
        if (lse_in->shape() != lse_shape)
            invalid("lse has shape " + shape_str(lse_in->shape()) + "; expected " + lse_layout + " = " +
                    shape_str(lse_shape));
    }

    q.check_device(nullptr);
    for (const ImportedTensor* x : {&k, &v, cu_q.get(), cu_k.get(), used_q.get(), used_k.get(), bias.get(),
                                    alibi.get(), sink.get(), seed_offset.get(), out_in.get(), lse_in.get()})
        if (x != nullptr)
            x->check_device(&q);
    const int device = q.device().device_id;

    // Group mode: the sequence arrays are read back (one small copy that synchronizes the stream) and checked as
    // mha_varlen_bwd checks them: starts inside q / k's rows, non-decreasing, seqused_* within each segment,
    // max_seqlen_q >= every logical seqlen_q (else rows past it are never written). check_seqlens=False trusts them
    // (no synchronization), except with bias / randval, whose rows, max_seqlen_k wide, must hold the longest logical
    // seqlen_k (a randval row narrower than that is written out of bounds): the arrays are read and checked then too.
    int64_t width = s_k;
    if (group && b > 0 && (vl->check_seqlens || bias || o.return_randval))
    {
        const Seqlens lens = read_seqlens(*cu_q, *cu_k, used_q.get(), used_k.get(), b, s_q, s_k, strm, device);
        if (max_q < lens.max_q)
            invalid("max_seqlen_q = " + std::to_string(max_q) + " is less than the longest logical seqlen_q (" +
                    std::to_string(lens.max_q) + ") in cu_seqlens_q / seqused_q");
        const int64_t need = lens.max_k;
        if (bias || o.return_randval)
        {
            width = max_k >= 0 ? max_k : bias ? bias->size(2) : need;
            if (width < need)
                invalid("max_seqlen_k = " + std::to_string(width) + (max_k >= 0 ? "" : " (bias dim 2)") +
                        " is less than the longest logical seqlen_k (" + std::to_string(need) +
                        ") in cu_seqlens_k / seqused_k");
            if (bias)
                expect_size(*bias, 2, width, "width (dim 2)", "max_seqlen_k");
        }
    }
    const std::vector<int64_t> rv_shape = group ? std::vector<int64_t>{h_q, s_q, width}
                                                : std::vector<int64_t>{b, h_q, s_q, s_k};

    // Allocated outputs are contiguous, so their largest strides must fit int32 too.
    const int64_t out_step = group ? h_q * d_v : s_q * h_q * d_v; // batch stride (group: row stride)
    const int64_t lse_step = group ? s_q : h_q * s_q;
    const int64_t rv_step  = group ? s_q * width : h_q * s_q * s_k;
    if (!out_in && out_step > kIndexMax)
        invalid("out: a contiguous " + std::string(out_layout) + " array has a stride that does not fit int32; pass "
                "a preallocated out whose strides do");
    if (has_lse && !lse_in && lse_step > kIndexMax)
        invalid("lse: a contiguous " + std::string(lse_layout) + " array has a stride that does not fit int32; pass "
                "a preallocated lse whose strides do");
    if (o.return_randval && rv_step > kIndexMax)
        invalid("return_randval: the uint8 randval array " + shape_str(rv_shape) + " has a stride that does not fit "
                "int32; use smaller problems to inspect the dropout mask");

    std::shared_ptr<DeviceStorage> out_buf, lse_buf, rv_buf;
    if (!out_in)
        out_buf = DeviceStorage::allocate(device, qt, out_shape);
    if (has_lse && !lse_in)
        lse_buf = DeviceStorage::allocate(device, kF32, lse_shape);
    if (o.return_randval)
        rv_buf = DeviceStorage::allocate(device, kU8, rv_shape);

    const auto stream = reinterpret_cast<cudaStream_t>(strm);
    // Orders a DLPack consumer on another stream after the work enqueued so far (randval fill and kernel).
    auto record_ready = [&] {
        if (!out_buf && !lse_buf && !rv_buf)
            return;
        if (const cudaError_t e = mark_ready(device, strm, {&out_buf, &lse_buf, &rv_buf}); e != cudaSuccess)
        {
            cudaGetLastError();
            py::gil_scoped_acquire gil;
            raise(PyExc_RuntimeError, cuda_error("recording the completion event", e));
        }
    };
    auto result = [&]() -> py::object {
        py::list r;
        r.append(out_in ? o.out : py::cast(DeviceBuffer{out_buf}));
        if (has_lse)
            r.append(lse_in ? o.lse : py::cast(DeviceBuffer{lse_buf}));
        if (rv_buf)
            r.append(py::cast(DeviceBuffer{rv_buf}));
        if (r.size() == 1)
        {
            py::object only = r[0];
            return only;
        }
        return py::tuple(r);
    };

    if (rv_buf)
    { // elements the kernel does not visit (masked tiles, padding) read as 0
        DeviceGuard guard(device);
        size_t bytes = 1;
        for (int64_t n : rv_shape)
            bytes *= static_cast<size_t>(n);
        const cudaError_t e = cudaMemsetAsync(rv_buf->ptr, 0, bytes, stream);
        if (e != cudaSuccess)
        {
            cudaGetLastError();
            raise(PyExc_RuntimeError, cuda_error("zero-filling randval", e));
        }
    }

    // Nothing to write: skip the library, which treats zero sizes as invalid.
    if (b == 0 || s_q == 0 || h_q == 0 || (group && max_q == 0))
    {
        DeviceGuard guard(device);
        record_ready();
        return result();
    }

    // Arrays with no elements are never read but the library wants non-null pointers: q's (non-empty here) serves.
    auto data_or_q = [&](const ImportedTensor& x) { return x.numel() > 0 ? x.data() : q.data(); };

    aiter::mha_fwd_args a;
    a.use_asm_v3      = o.use_asm_v3;
    a.v3_api_check    = false;
    a.how_v3_bf16_cvt = 1;
    a.data_type       = dtype;
    a.is_group_mode   = group;
    a.bias_type       = static_cast<int>(bias ? bias_enum::elementwise_bias : alibi ? bias_enum::alibi
                                                                                    : bias_enum::no_bias);
    a.has_lse         = has_lse;
    a.qscale_type     = static_cast<int>(quant_scale_enum::no_scale);
    a.has_sink        = sink != nullptr || sink_size > 0;

    a.q_ptr         = q.data();
    a.k_ptr         = data_or_q(k);
    a.v_ptr         = data_or_q(v);
    a.bias_ptr      = bias ? data_or_q(*bias) : alibi ? alibi->data() : nullptr;
    a.q_descale_ptr = nullptr;
    a.k_descale_ptr = nullptr;
    a.v_descale_ptr = nullptr;
    a.rand_val_ptr  = rv_buf && p_drop > 0 ? rv_buf->ptr : nullptr;
    a.lse_ptr       = !has_lse ? nullptr : lse_in ? lse_in->data() : lse_buf->ptr;
    a.o_ptr         = out_in ? out_in->data() : out_buf->ptr;

    a.seqstart_q_ptr             = group ? cu_q->data() : nullptr;
    a.seqstart_k_ptr             = group ? cu_k->data() : nullptr;
    a.seqlen_q_ptr               = used_q ? used_q->data() : nullptr;
    a.seqlen_k_ptr               = used_k ? used_k->data() : nullptr;
    a.cu_seqlen_q_ptr            = nullptr;
    a.cu_seqlen_k_ptr            = nullptr;
    a.block_scale_seqstart_q_ptr = nullptr;
    a.block_scale_seqstart_k_ptr = nullptr;
    a.sink_ptr                   = sink ? sink->data() : nullptr;

    // Every size was checked to fit int32 in ImportedTensor::check_layout. Group mode: seqlen_q/k are the totals.
    a.seqlen_q     = static_cast<ck_tile::index_t>(s_q);
    a.seqlen_k     = static_cast<ck_tile::index_t>(s_k);
    a.batch        = static_cast<ck_tile::index_t>(b);
    a.max_seqlen_q = static_cast<ck_tile::index_t>(group ? max_q : s_q);
    a.hdim_q       = static_cast<ck_tile::index_t>(d);
    a.hdim_v       = static_cast<ck_tile::index_t>(d_v);
    a.nhead_q      = static_cast<ck_tile::index_t>(h_q);
    a.nhead_k      = static_cast<ck_tile::index_t>(h_k);

    a.scale_s         = static_cast<float>(scale);
    a.logits_soft_cap = static_cast<float>(softcap);

    // An allocated out is contiguous; an allocated lse contiguous [b, h, s_q] / [h, total_q]. A given lse has a unit
    // stride along s_q (checked as its last dim): the library has no field for that stride. Group mode has no batch
    // strides (rows are addressed through seqstart_*).
    const auto i32 = [](int64_t x) { return static_cast<ck_tile::index_t>(x); };
    a.stride_q       = q.stride(R);
    a.stride_k       = k.stride(R);
    a.stride_v       = v.stride(R);
    a.stride_bias    = bias ? bias_row : alibi_batch;
    a.stride_randval = i32(group ? width : s_k);
    a.stride_o       = out_in ? out_in->stride(R) : i32(h_q * d_v);

    a.nhead_stride_q         = q.stride(H);
    a.nhead_stride_k         = k.stride(H);
    a.nhead_stride_v         = v.stride(H);
    a.nhead_stride_bias      = bias_head;
    a.nhead_stride_randval   = i32(s_q * (group ? width : s_k));
    a.nhead_stride_lse       = !has_lse ? 0 : lse_in ? lse_in->stride(nd - 3) : i32(s_q);
    a.nhead_stride_o         = out_in ? out_in->stride(H) : i32(d_v);
    a.nhead_stride_q_descale = 0;
    a.nhead_stride_k_descale = 0;
    a.nhead_stride_v_descale = 0;

    a.batch_stride_q         = group ? 0 : q.stride(0);
    a.batch_stride_k         = group ? 0 : k.stride(0);
    a.batch_stride_v         = group ? 0 : v.stride(0);
    a.batch_stride_bias      = bias_batch;
    a.batch_stride_randval   = group ? 0 : i32(h_q * s_q * s_k);
    a.batch_stride_lse       = group || !has_lse ? 0 : lse_in ? lse_in->stride(0) : i32(h_q * s_q);
    a.batch_stride_o         = group ? 0 : out_in ? out_in->stride(0) : i32(s_q * h_q * d_v);
    a.batch_stride_q_descale = 0;
    a.batch_stride_k_descale = 0;
    a.batch_stride_v_descale = 0;

    a.window_size_left  = mask.left;
    a.window_size_right = mask.right;
    a.sink_size         = sink_size;
    a.mask_type         = mask.type;
    a.min_seqlen_q      = static_cast<ck_tile::index_t>(min_q);

    a.p_drop    = static_cast<float>(p_drop);
    a.s_randval = a.rand_val_ptr != nullptr;
    if (seed_offset)
    {
        const char* so     = static_cast<const char*>(seed_offset->data());
        a.drop_seed_offset = std::pair<const void*, const void*>{
            so, so + static_cast<int64_t>(seed_offset->stride(0)) * sizeof(uint64_t)};
    }
    else
        a.drop_seed_offset = std::pair<uint64_t, uint64_t>{seed, offset};

    a.block_scale_size_q  = 0;
    a.block_scale_size_kv = 0;

    float ret = 0.f;
    {
        DeviceGuard guard(device);
        py::gil_scoped_release no_gil;
        ret = aiter::mha_fwd(std::move(a), ck_tile::stream_config{stream, false, 0, 0, 1, true});
        if (ret >= 0)
            record_ready();
    }
    if (ret < 0)
    {
        const char* why = aiter::mha_get_last_error();
        raise_library(why != nullptr && why[0] != '\0' ? std::string(why)
                                                       : std::string(fn) + ": aiter::mha_fwd returned " +
                                                             std::to_string(ret) + " without giving a reason");
    }
    return result();
}

// ------------------------------------------------------------------------------------------------ paged attention

// Checks shared by both paged-attention entry points; fills the query / output / table fields of `a`.
struct PagedInputs
{
    ImportedTensor q, k, v, tables, lens;
};

void require_none(const py::object& x, const char* name, const char* why)
{
    if (!x.is_none())
        invalid(std::string(name) + " must be None: " + why);
}

void require_unit_scale(const py::object& x, const char* name)
{
    if (x.is_none())
        return;
    const double s = PyFloat_AsDouble(x.ptr());
    if (PyErr_Occurred())
    {
        PyErr_Clear();
        invalid(std::string(name) + " must be None or 1.0 (fp8 KV caches are not supported yet)");
    }
    if (s != 1.0)
        invalid(std::string(name) + " must be None or 1.0 (fp8 KV caches are not supported yet), got " +
                std::to_string(s));
}

// The inner (fixed) strides of a cache view, e.g. {bs * 8, 8, 1} for the last three dims of a 5D HND key cache.
void expect_inner_strides(const ImportedTensor& t, std::vector<int64_t> want, const char* layout)
{
    const int n = t.ndim(), first = n - int(want.size());
    for (int i = first; i < n; ++i)
        if (t.size(i) > 1 && t.stride(i) != want[i - first])
            invalid(t.name() + " must be " + layout + " with its last " + std::to_string(want.size()) +
                    " dims contiguous; got shape " + shape_str(t.shape()));
}

void fill_common(aiter::paged_attention_args& a, const ImportedTensor& q, const ImportedTensor& tables,
                 const ImportedTensor& lens, const ImportedTensor& out)
{
    const DLDataType qt = q.dtype();
    a.data_type = qt.code == kDLBfloat ? "bf16" : "fp16";
    a.query = q.data(), a.out = out.data();
    a.block_tables = static_cast<const int32_t*>(tables.data());
    a.context_lens = static_cast<const int32_t*>(lens.data());
    a.num_seqs = static_cast<int>(q.size(0)), a.num_heads = static_cast<int>(q.size(1));
    a.head_size = static_cast<int>(q.size(2));
    a.q_stride_seq = q.stride(0), a.q_stride_head = q.stride(1);
    a.o_stride_seq = out.stride(0), a.o_stride_head = out.stride(1);
}

void check_tables(const ImportedTensor& q, const ImportedTensor& tables, const ImportedTensor& lens)
{
    tables.check_layout(2, "[num_seqs, max_blocks_per_seq] int32", &kI32, "expected", false);
    lens.check_layout(1, "[num_seqs] int32", &kI32, "expected", false);
    expect_size(tables, 0, q.size(0), "num_seqs (dim 0)", "query's num_seqs");
    expect_size(lens, 0, q.size(0), "num_seqs (dim 0)", "query's num_seqs");
    // The library takes one row stride, which also bounds what a row addresses (context_lens are clamped to
    // block_size x that stride): rows padded past the view's width would let a long context read entries outside it.
    if (!tables.contiguous())
        invalid("block_tables must be a contiguous [num_seqs, max_blocks_per_seq] int32 array (stride(0) == size(1)), "
                "got shape " + shape_str(tables.shape()) + " with row stride " + std::to_string(tables.stride(0)));
}

void call_paged(float (*fn)(const aiter::paged_attention_args&, const ck_tile::stream_config&),
                aiter::paged_attention_args& a, int device, uintptr_t strm, const char* name)
{
    float ret = 0.f;
    {
        DeviceGuard guard(device);
        py::gil_scoped_release no_gil;
        ret = fn(a, ck_tile::stream_config{reinterpret_cast<cudaStream_t>(strm), false, 0, 0, 1, true});
    }
    if (ret < 0)
    {
        const char* why = aiter::mha_get_last_error();
        raise_library(why != nullptr && why[0] != '\0' ? std::string(why)
                                                       : std::string(name) + " failed without a reason");
    }
}

py::object paged_attention_v1_core(const py::object& out_o, const py::object& ws_o, const py::object& q_o,
                                   const py::object& k_o, const py::object& v_o, const py::object& scale,
                                   const py::object& tables_o, const py::object& cu_query_lens,
                                   const py::object& lens_o, const py::object& max_context_len,
                                   const py::object& alibi_o, const std::string& kv_cache_dtype,
                                   const std::string& layout, const py::object& softcap, const py::object& k_scale,
                                   const py::object& v_scale, const py::object& fp8_out_scale,
                                   const py::object& partition_size, const py::object& mtp,
                                   const py::object& q_scale, const py::object& sliding_window,
                                   const py::object& stream)
{
    if (kv_cache_dtype != "auto")
        invalid("kv_cache_dtype must be 'auto' (fp8 KV caches are not supported yet), got '" + kv_cache_dtype + "'");
    if (layout != "HND" && layout != "NHD")
        invalid("kv_cache_layout must be 'HND' or 'NHD', got '" + layout + "'");
    require_unit_scale(k_scale, "k_scale");
    require_unit_scale(v_scale, "v_scale");
    require_none(fp8_out_scale, "fp8_out_scale", "fp8 output is not supported yet");
    require_none(q_scale, "q_scale", "fp8 queries are not supported yet");
    require_none(cu_query_lens, "cu_query_lens", "only mtp=1 (one query token per sequence) is supported yet");
    int_arg(mtp, "mtp", 1, 1); // multi-token decode: not yet
    const uintptr_t strm = parse_stream(stream);
    const bool nhd = layout == "NHD";

    ImportedTensor q(q_o, "query", strm);
    q.check_layout(3, "[num_seqs, num_heads, head_size]", nullptr, nullptr, false);
    const DLDataType qt = q.dtype();
    ImportedTensor k(k_o, "key_cache", strm), v(v_o, "value_cache", strm);
    ImportedTensor out(out_o, "out", strm), tables(tables_o, "block_tables", strm), lens(lens_o, "context_lens", strm);
    out.check_layout(3, "[num_seqs, num_heads, head_size]", &qt, "query has", true);
    expect_size(out, 0, q.size(0), "num_seqs (dim 0)", "query's");
    expect_size(out, 1, q.size(1), "num_heads (dim 1)", "query's");
    expect_size(out, 2, q.size(2), "head_size (dim 2)", "query's");
    const int64_t d = q.size(2);
    int64_t hk = 0, bs = 0;
    // "HND" with 4-D caches is AITER's pa_v1 reading: K and V [num_blocks, num_kv_heads, block_size, head_size], each
    // token's head_size elements contiguous; the library takes it as a token-major cache with its own token stride
    const bool hnd4 = !nhd && k.ndim() == 4;
    const bool token_major = nhd || hnd4; // each token's head_size elements contiguous, token stride the caller's
    const int token_dim    = nhd ? 1 : 2;
    if (hnd4)
    {
        const char* shape = "[num_blocks, num_kv_heads, block_size, head_size]";
        k.check_layout(4, shape, &qt, "query has", false);
        hk = k.size(1), bs = k.size(2);
        expect_size(k, 3, d, "head_size (dim 3)", "query's head_size");
        v.check_layout(4, shape, &qt, "query has", false);
        expect_size(v, 1, hk, "num_kv_heads (dim 1)", "key_cache's num_kv_heads");
        expect_size(v, 2, bs, "block_size (dim 2)", "key_cache's block_size");
        expect_size(v, 3, d, "head_size (dim 3)", "query's head_size");
    }
    else if (!nhd)
    {
        k.check_layout(5, "[num_blocks, num_kv_heads, head_size / 8, block_size, 8]", &qt, "query has", false);
        hk = k.size(1), bs = k.size(3);
        expect_size(k, 2, d / 8, "head_size / 8 (dim 2)", "query's head_size / 8");
        expect_size(k, 4, 8, "x (dim 4)", "16 bytes of 2-byte elements");
        expect_inner_strides(k, {bs * 8, 8, 1}, "[num_blocks, num_kv_heads, head_size / 8, block_size, 8]");
        v.check_layout(4, "[num_blocks, num_kv_heads, head_size, block_size]", &qt, "query has", false);
        expect_size(v, 2, d, "head_size (dim 2)", "query's head_size");
        expect_size(v, 3, bs, "block_size (dim 3)", "key_cache's block_size");
        expect_inner_strides(v, {bs, 1}, "[num_blocks, num_kv_heads, head_size, block_size]");
    }
    else
    {
        // any strides with the head dim contiguous (padded heads, a slice of a fused cache's heads): the token
        // strides travel with the call
        k.check_layout(4, "[num_blocks, block_size, num_kv_heads, head_size]", &qt, "query has", false);
        hk = k.size(2), bs = k.size(1);
        expect_size(k, 3, d, "head_size (dim 3)", "query's head_size");
        v.check_layout(4, "[num_blocks, block_size, num_kv_heads, head_size]", &qt, "query has", false);
        expect_size(v, 1, bs, "block_size (dim 1)", "key_cache's block_size");
        expect_size(v, 2, hk, "num_kv_heads (dim 2)", "key_cache's num_kv_heads");
        expect_size(v, 3, d, "head_size (dim 3)", "query's head_size");
    }
    expect_size(v, 0, k.size(0), "num_blocks (dim 0)", "key_cache's num_blocks");
    if (!token_major)
        expect_size(v, 1, hk, "num_kv_heads (dim 1)", "key_cache's num_kv_heads");
    // a token-major cache's token stride travels with the call, where 0 would mean "packed NHD rows"
    if (token_major && (k.stride(token_dim) == 0 || v.stride(token_dim) == 0))
        invalid("key_cache / value_cache: a token stride of 0 (every token of a block aliased) is not supported");
    check_tables(q, tables, lens);
    TensorPtr alibi = import_opt(alibi_o, "alibi_slopes", strm);
    if (alibi)
    {
        alibi->check_layout(1, "[num_heads] float32", &kF32, "expected", false);
        expect_size(*alibi, 0, q.size(1), "length", "query's num_heads");
    }
    ImportedTensor ws(ws_o, "workspace_buffer", strm);
    if (!ws.contiguous()) // its size is taken as numel x element size
        invalid("workspace_buffer must be contiguous, got shape " + shape_str(ws.shape()));
    for (const ImportedTensor* t : {&q, &k, &v, &out, &tables, &lens, &ws})
        t->check_device(&q);
    if (alibi)
        alibi->check_device(&q);

    aiter::paged_attention_args a{};
    fill_common(a, q, tables, lens, out);
    a.key_cache = k.data(), a.value_cache = v.data();
    a.alibi_slopes = alibi ? static_cast<const float*>(alibi->data()) : nullptr;
    a.workspace = ws.data(), a.workspace_bytes = ws.numel() * ((ws.dtype().bits + 7) / 8);
    a.num_kv_heads = static_cast<int>(hk), a.block_size = static_cast<int>(bs);
    a.block_tables_stride = static_cast<int>(tables.size(1)); // contiguous rows (check_tables)
    a.max_context_len = static_cast<int>(int_arg(max_context_len, "max_context_len", 0,
                                                 std::min<int64_t>(bs * tables.size(1), kIndexMax),
                                                 " (block_size x the block_tables width)"));
    a.partition_size = static_cast<int>(int_arg(partition_size, "partition_size", 1, 1 << 20));
    a.k_stride_block = k.stride(0), a.v_stride_block = v.stride(0);
    a.k_stride_head = nhd ? k.stride(2) : k.stride(1);
    a.v_stride_head = nhd ? v.stride(2) : v.stride(1);
    if (token_major) // checked non-zero above
        a.k_stride_token = k.stride(token_dim), a.v_stride_token = v.stride(token_dim);
    a.scale = static_cast<float>(real_arg(scale, "scale"));
    // as AITER's pa_v1: a soft-cap or sliding window <= 0 is off
    a.logits_soft_cap = static_cast<float>(std::max(0.0, real_arg(softcap, "logits_soft_cap")));
    a.sliding_window  = static_cast<int>(
        std::max<int64_t>(0, int_arg(sliding_window, "sliding_window", std::numeric_limits<int32_t>::min(), kIndexMax)));
    a.nhd = token_major;
    call_paged(&aiter::paged_attention_v1, a, q.device().device_id, strm, "paged_attention_v1_core");
    return out_o;
}

py::object pa_fwd_asm(const py::object& q_o, const py::object& k_o, const py::object& v_o, const py::object& tables_o,
                      const py::object& lens_o, const py::object& tables_stride0, const py::object& max_qlen,
                      const py::object& k_qscale, const py::object& v_qscale, const py::object& out_o,
                      const py::object& qo_indptr, const py::object& /*high_precision*/,
                      const py::object& /*kernel_name*/, const py::object& stream)
{
    int_arg(max_qlen, "max_qlen", 1, 1); // one query token per sequence
    require_none(k_qscale, "K_QScale", "fp8 / int8 KV caches are not supported yet");
    require_none(v_qscale, "V_QScale", "fp8 / int8 KV caches are not supported yet");
    require_none(qo_indptr, "qo_indptr", "only one query token per sequence is supported yet");
    const uintptr_t strm = parse_stream(stream);
    ImportedTensor q(q_o, "Q", strm);
    q.check_layout(3, "[num_seqs, num_heads, head_size]", nullptr, nullptr, false);
    const DLDataType qt = q.dtype();
    if (q.size(2) != 128)
        invalid("ASM PA only supports head_size=128, got " + std::to_string(q.size(2)));
    ImportedTensor k(k_o, "K", strm), v(v_o, "V", strm), tables(tables_o, "block_tables", strm),
        lens(lens_o, "context_lens", strm);
    k.check_layout(5, "[num_blocks, num_kv_heads, 16, 16, 8]", &qt, "Q has", false);
    v.check_layout(5, "[num_blocks, num_kv_heads, 2, 128, 8]", &qt, "Q has", false);
    expect_size(k, 2, 16, "head_size / 8 (dim 2)", "16 for head_size 128");
    expect_size(k, 3, 16, "block_size (dim 3)", "16 (the asm kernel's block size)");
    expect_size(k, 4, 8, "x (dim 4)", "16 bytes of 2-byte elements");
    expect_inner_strides(k, {128, 8, 1}, "[num_blocks, num_kv_heads, 16, 16, 8]");
    expect_size(v, 0, k.size(0), "num_blocks (dim 0)", "K's num_blocks");
    expect_size(v, 1, k.size(1), "num_kv_heads (dim 1)", "K's num_kv_heads");
    expect_size(v, 2, 2, "block_size / 8 (dim 2)", "2 for block_size 16");
    expect_size(v, 3, 128, "head_size (dim 3)", "128");
    expect_size(v, 4, 8, "x (dim 4)", "16 bytes of 2-byte elements");
    expect_inner_strides(v, {1024, 8, 1}, "[num_blocks, num_kv_heads, 2, 128, 8]");
    check_tables(q, tables, lens);
    TensorPtr out_in = import_opt(out_o, "out_", strm);
    if (out_in)
    {
        out_in->check_layout(3, "[num_seqs, num_heads, 128]", &qt, "Q has", true);
        for (int i = 0; i < 3; ++i)
            expect_size(*out_in, i, q.size(i), "size", "Q's");
    }
    for (const ImportedTensor* t : {&q, &k, &v, &tables, &lens})
        t->check_device(&q);
    if (out_in)
        out_in->check_device(&q);
    const int device = q.device().device_id;
    std::shared_ptr<DeviceStorage> out_buf;
    if (!out_in)
        out_buf = DeviceStorage::allocate(device, qt, {q.size(0), q.size(1), q.size(2)});

    aiter::paged_attention_args a{};
    a.data_type = qt.code == kDLBfloat ? "bf16" : "fp16";
    a.query = q.data(), a.out = out_in ? out_in->data() : out_buf->ptr;
    a.block_tables = static_cast<const int32_t*>(tables.data());
    a.context_lens = static_cast<const int32_t*>(lens.data());
    a.num_seqs = static_cast<int>(q.size(0)), a.num_heads = static_cast<int>(q.size(1)), a.head_size = 128;
    a.q_stride_seq = q.stride(0), a.q_stride_head = q.stride(1);
    a.o_stride_seq = out_in ? out_in->stride(0) : q.size(1) * 128;
    a.o_stride_head = out_in ? out_in->stride(1) : 128;
    a.key_cache = k.data(), a.value_cache = v.data();
    a.num_kv_heads = static_cast<int>(k.size(1)), a.block_size = 16;
    // AITER passes the row stride separately; it must be the table's own, its row width (contiguous rows:
    // check_tables), so that no row reads past its entries
    const int64_t stride0 = int_arg(tables_stride0, "block_tables_stride0", 1, kIndexMax);
    if (stride0 != tables.size(1))
        invalid("block_tables_stride0 (" + std::to_string(stride0) + ") must equal block_tables.stride(0) (" +
                std::to_string(tables.size(1)) + " for its contiguous rows)");
    a.block_tables_stride = static_cast<int>(stride0);
    // each context must fit the table width: context_lens are device data, so this bounds what the kernel may read
    a.max_context_len = static_cast<int>(std::min<int64_t>(int64_t(a.block_size) * tables.size(1), kIndexMax));
    a.partition_size = 16;
    a.k_stride_block = k.stride(0), a.k_stride_head = k.stride(1);
    a.v_stride_block = v.stride(0), a.v_stride_head = v.stride(1);
    a.scale = 1.f / std::sqrt(128.f); // the asm kernel has no scale argument
    call_paged(&aiter::pa_fwd_asm, a, device, strm, "pa_fwd_asm");
    if (out_in)
        return out_o;
    {
        DeviceGuard guard(device); // a consumer on another stream waits for the kernel (sync_consumer)
        if (const cudaError_t e = mark_ready(device, strm, {&out_buf}); e != cudaSuccess)
        {
            cudaGetLastError();
            raise(PyExc_RuntimeError, cuda_error("recording the completion event", e));
        }
    }
    return py::cast(DeviceBuffer{out_buf});
}

// ------------------------------------------------------------------------------------------------ documentation

constexpr const char* kModuleDoc =
    "aiter_mha: AITER's MHA forward and backward (aiter::mha_fwd, aiter::mha_bwd) on NVIDIA GPUs, taking DLPack\n"
    "arrays (torch, CuPy, JAX). Does not import torch. See mha_fwd.__doc__, mha_varlen_fwd.__doc__,\n"
    "mha_bwd.__doc__ and mha_varlen_bwd.__doc__.";

#define MHA_FEATURE_DOC                                                                                               \
    "scale:   softmax scale, default 1/sqrt(d).\n"                                                                     \
    "mask:    'none' | 'causal' (= 'causal_bottom_right') | 'causal_top_left' | 'window_generic', or an int\n"        \
    "         mask_type (0 none, 1 top-left, 2 bottom-right, 3 generic) used with window_left / window_right\n"       \
    "         (-1: unbounded; window_generic passes them as given and anchors bottom-right).\n"                       \
    "softcap: > 0 applies cap * tanh(s / cap) to the scaled scores (0: off).\n"                                         \
    "alibi_slopes: float32 [h_q] or [b, h_q] (size-1 b broadcasts) ALiBi slopes; excludes bias.\n"                    \
    "dropout_p: dropout probability in [0, 1). Random numbers come from (seed, offset) (ints < 2**64), or from\n"     \
    "         seed_offset, a 2-element uint64 (or int64) device array [seed, offset] read by the kernel (the same\n"  \
    "         values give the same mask bit for bit). return_randval=True also returns the uint8 random values\n"     \
    "         (keep iff randval <= floor((1 - p) * 255)); elements the kernel never visits stay 0.\n"                  \
    "sink:    float32 [h_q] device array of per-head sink logits (natural log, unscaled) joining every row's\n"        \
    "         softmax denominator. sink_size: keys j < sink_size stay visible left of a finite window.\n"            \
    "return_lse: also return the fp32 natural-log LSE (implied when lse is given); -inf for rows that see no key.\n" \
    "out, lse: preallocated DLPack arrays to write into (q's dtype; float32 with a unit-stride last dim); otherwise\n" \
    "         the function allocates contiguous DeviceBuffer objects.\n"                                               \
    "stream:  cudaStream_t as an int (0: default stream), or an object with .cuda_stream / .ptr. Not the\n"           \
    "         caller's current stream (AITER's torch ops use that): under torch.cuda.stream(s) pass stream=s.\n"      \
    "         Every kernel runs on it, preallocated outputs are written on it, and inputs must outlive its work\n"    \
    "         (a temporary such as x.contiguous() passed inline is released when the call returns). It must be a\n"    \
    "         stream of the arrays' device (ValueError otherwise); 2 is the per-thread default stream.\n"              \
    "use_asm_v3: try the Hopper (sm90a) kernels first.\n\n"                                                            \
    "Returns out, then lse if return_lse (or lse given), then randval if return_randval: a single array when only\n"  \
    "out is returned, else a tuple in that order. Raises ValueError on invalid input or when the library rejects\n"    \
    "the call (with its reason), RuntimeError for a CUDA failure, MemoryError when an output cannot be allocated.\n"  \
    "Full semantics: the comment above aiter::mha_fwd_args in include/mha_fwd.h."

constexpr const char* kMhaFwdDoc =
    "Attention forward, batch mode. q: [b, s_q, h_q, d], k: [b, s_k, h_k, d], v: [b, s_k, h_k, d_v], float16 or\n"
    "bfloat16 on one CUDA device, element strides that are multiples of 8 with a unit-stride last dim and 16-byte\n"
    "aligned rows (a transposed bhsd view passes).\n"
    "h_q % h_k == 0 (MQA/GQA); d and d_v: multiples of 8 up to 256. Arrays are taken through DLPack (__dlpack__ or a\n"
    "raw 'dltensor' capsule).\n\n"
    "bias:    elementwise bias in q's dtype indexed [b, h_q, s_q, s_k]; dims 0-2 broadcast when of size 1 (or\n"
    "         stride 0); the last dim must be s_k long with stride 1.\n"
    "Outputs: out [b, s_q, h_q, d_v]; lse [b, h_q, s_q]; randval uint8 [b, h_q, s_q, s_k].\n" MHA_FEATURE_DOC;

constexpr const char* kVarlenDoc =
    "Attention forward, group (varlen) mode. q: [total_q, h_q, d], k: [total_k, h_k, d], v: [total_k, h_k, d_v]\n"
    "(strides multiples of 8, unit-stride last dim). cu_seqlens_q / cu_seqlens_k: int32 device arrays [b + 1] of physical\n"
    "start rows (AITER's seqstart_*); sequence i occupies rows cu[i] .. cu[i+1]-1. seqused_q / seqused_k: optional\n"
    "int32 [b] logical lengths (AITER's seqlen_*_ptr; padding rows past them are neither read nor written).\n"
    "max_seqlen_q: >= every logical seqlen_q. min_seqlen_q > 0 skips sequences with seqlen_q <= min_seqlen_q\n"
    "(nothing is written for them). Rows outside every sequence (and past seqused_q) are not written either.\n"
    "check_seqlens (default True): read the sequence arrays back (synchronizing the stream) and raise ValueError\n"
    "when a start lies outside q / k's rows, they decrease, a seqused_* exceeds its segment or max_seqlen_q is\n"
    "short; False trusts them as AITER does (no synchronization): wrong arrays then read and write out of bounds.\n\n"
    "bias:    elementwise bias in q's dtype indexed [h_q, total_q, max_seqlen_k]: sequence i's rows start at row\n"
    "         cu_seqlens_q[i]; dims 0-1 broadcast when of size 1. max_seqlen_k: the width of bias / randval rows;\n"
    "         default the bias width, else the longest logical seqlen_k, checked against it (with bias or\n"
    "         return_randval the arrays are read back and checked even when check_seqlens is False).\n"
    "Outputs: out [total_q, h_q, d_v]; lse [h_q, total_q]; randval uint8 [h_q, total_q, max_seqlen_k].\n"
    MHA_FEATURE_DOC;

constexpr const char* kPagedV1Doc =
    "Paged-attention decode, the generic implementation (AITER's paged_attention_v1_core signature), into out.\n"
    "query: [num_seqs, num_heads, head_size] float16/bfloat16 (head_size a multiple of 8 up to 256);\n"
    "kv_cache_layout 'HND' (vLLM): key_cache [num_blocks, num_kv_heads, head_size/8, block_size, 8], value_cache\n"
    "[num_blocks, num_kv_heads, head_size, block_size] (block_size a multiple of 8), or, as AITER's pa_v1 reads\n"
    "'HND', both 4-D [num_blocks, num_kv_heads, block_size, head_size]; 'NHD': both [num_blocks, block_size,\n"
    "num_kv_heads, head_size]. Block and head strides are free (0 aliases every block to one); 4-D caches also take\n"
    "any token stride (a multiple of 8), with the head dim contiguous.\n"
    "block_tables int32 [num_seqs, max_blocks] (contiguous); context_lens int32 [num_seqs]; max_context_len >=\n"
    "every context.\n"
    "The context is processed in partitions of partition_size tokens (a multiple of block_size, <= 1024); with\n"
    "more than one, workspace_buffer (any dtype, contiguous) must hold paged_attention_workspace_bytes(...)\n"
    "bytes, else ValueError. alibi_slopes fp32 [num_heads] or None, added to the scaled scores as\n"
    "slope * (token - context_len + 1); logits_soft_cap > 0 then caps them, cap * tanh(s / cap), as AITER\n"
    "(<= 0: off); sliding_window > 0 keeps the last sliding_window tokens (<= 0: off). kv_cache_dtype 'auto' with k_scale / v_scale None\n"
    "or 1.0, cu_query_lens / fp8_out_scale / q_scale None and mtp 1 (fp8 and multi-token decode: not yet).";

constexpr const char* kPaAsmDoc =
    "Paged-attention decode, the tuned implementation (AITER's pa_fwd_asm signature): head_size 128, block 16,\n"
    "scale 1/sqrt(128). Q [num_seqs, num_heads, 128]; K [num_blocks, num_kv_heads, 16, 16, 8] (vLLM 5D); V in the\n"
    "asm layout [num_blocks, num_kv_heads, 2, 128, 8] (V.view(B, H, 128, 2, 8).permute(0, 1, 3, 2, 4)).\n"
    "block_tables int32 [num_seqs, block_tables_stride0] (contiguous), context_lens int32 [num_seqs]. Writes out_ or\n"
    "returns a new [num_seqs, num_heads, 128] array. No workspace: a CTA per 16 query heads of a KV head; on sm_90 a\n"
    "short batch's contexts are split over a thread-block cluster merged in distributed shared memory. max_qlen 1\n"
    "and no quantization scales (not yet).";

} // namespace

PYBIND11_MODULE(aiter_mha, m)
{
    m.doc()               = kModuleDoc;
    m.attr("__version__") = kVersion;

    py::class_<DeviceBuffer>(m, "DeviceBuffer",
                             "A cudaMalloc'ed array returned by mha_fwd; consume it with torch.from_dlpack / "
                             "cupy.from_dlpack. The memory lives until this object and every consumer are gone.")
        .def("__dlpack__", &export_dlpack, py::arg("stream") = py::none(), py::kw_only(),
             py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
        .def("__dlpack_device__",
             [](const DeviceBuffer& b) { return py::make_tuple(static_cast<int>(kDLCUDA), b.storage->device); })
        .def_property_readonly("shape", [](const DeviceBuffer& b) { return int_tuple(b.storage->shape); })
        .def_property_readonly("strides", [](const DeviceBuffer& b) { return int_tuple(b.storage->strides); })
        .def_property_readonly("dtype", [](const DeviceBuffer& b) { return dtype_str(b.storage->dtype); })
        .def_property_readonly("device", [](const DeviceBuffer& b) { return b.storage->device; })
        .def_property_readonly("data_ptr",
                               [](const DeviceBuffer& b) { return reinterpret_cast<uintptr_t>(b.storage->ptr); })
        .def("__repr__", [](const DeviceBuffer& b) {
            return "DeviceBuffer(shape=" + shape_str(b.storage->shape) + ", dtype=" + dtype_str(b.storage->dtype) +
                   ", device=cuda:" + std::to_string(b.storage->device) + ")";
        });

    using O = py::object;
    m.def(
        "mha_fwd",
        [](O q, O k, O v, O scale, O mask, O window_left, O window_right, O softcap, O bias, O alibi_slopes,
           O dropout_p, O seed, O offset, O seed_offset, bool return_randval, O sink, O sink_size, bool return_lse,
           O out, O lse, O stream, bool use_asm_v3) {
            const Options o{scale, mask,      window_left, window_right, softcap,    bias,
                            alibi_slopes, dropout_p, seed,  offset, seed_offset, sink,
                            sink_size,    out,       lse,   stream, return_randval, return_lse, use_asm_v3};
            return run_fwd(q, k, v, o, nullptr);
        },
        kMhaFwdDoc, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("scale") = py::none(),
        py::arg("mask") = "none", py::arg("window_left") = -1, py::arg("window_right") = -1,
        py::arg("softcap") = 0.0, py::arg("bias") = py::none(), py::arg("alibi_slopes") = py::none(),
        py::arg("dropout_p") = 0.0, py::arg("seed") = 0, py::arg("offset") = 0, py::arg("seed_offset") = py::none(),
        py::arg("return_randval") = false, py::arg("sink") = py::none(), py::arg("sink_size") = 0,
        py::arg("return_lse") = false, py::arg("out") = py::none(), py::arg("lse") = py::none(),
        py::arg("stream") = 0, py::arg("use_asm_v3") = false);

    m.def(
        "mha_varlen_fwd",
        [](O q, O k, O v, O cu_seqlens_q, O cu_seqlens_k, O max_seqlen_q, O max_seqlen_k, O seqused_q, O seqused_k,
           O min_seqlen_q, O scale, O mask, O window_left, O window_right, O softcap, O bias, O alibi_slopes,
           O dropout_p, O seed, O offset, O seed_offset, bool return_randval, O sink, O sink_size, bool return_lse,
           O out, O lse, O stream, bool use_asm_v3, bool check_seqlens) {
            const Options o{scale, mask,      window_left, window_right, softcap,    bias,
                            alibi_slopes, dropout_p, seed,  offset, seed_offset, sink,
                            sink_size,    out,       lse,   stream, return_randval, return_lse, use_asm_v3};
            const Varlen vl{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q,
                            seqused_k,    min_seqlen_q, check_seqlens};
            return run_fwd(q, k, v, o, &vl);
        },
        kVarlenDoc, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"),
        py::arg("max_seqlen_q"), py::kw_only(), py::arg("max_seqlen_k") = py::none(),
        py::arg("seqused_q") = py::none(), py::arg("seqused_k") = py::none(), py::arg("min_seqlen_q") = 0,
        py::arg("scale") = py::none(), py::arg("mask") = "none", py::arg("window_left") = -1,
        py::arg("window_right") = -1, py::arg("softcap") = 0.0, py::arg("bias") = py::none(),
        py::arg("alibi_slopes") = py::none(), py::arg("dropout_p") = 0.0, py::arg("seed") = 0, py::arg("offset") = 0,
        py::arg("seed_offset") = py::none(), py::arg("return_randval") = false, py::arg("sink") = py::none(),
        py::arg("sink_size") = 0, py::arg("return_lse") = false, py::arg("out") = py::none(),
        py::arg("lse") = py::none(), py::arg("stream") = 0, py::arg("use_asm_v3") = false,
        py::arg("check_seqlens") = true);

    m.def(
        "mha_bwd",
        [](O dout, O q, O k, O v, O out, O softmax_lse, O dropout_p, O softmax_scale, bool is_causal,
           O window_size_left, O window_size_right, bool deterministic, O dq, O dk, O dv, O dbias, O bias,
           O alibi_slopes, O rng_state, O gen, O sink, O d_sink, O sink_ptr, O mask, O seed, O offset, O stream,
           bool use_asm_v3) {
            const BwdArgs a{dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, window_size_left,
                            window_size_right, dq, dk, dv, dbias, bias, alibi_slopes, rng_state, gen,
                            sink_arg(sink, sink_ptr), d_sink, mask, seed, offset, stream, is_causal, deterministic,
                            false, use_asm_v3};
            return run_bwd(a, nullptr);
        },
        kMhaBwdDoc, py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
        py::arg("softmax_lse"), py::arg("dropout_p"), py::arg("softmax_scale"), py::arg("is_causal"),
        py::arg("window_size_left"), py::arg("window_size_right"), py::arg("deterministic"),
        py::arg("dq") = py::none(), py::arg("dk") = py::none(), py::arg("dv") = py::none(),
        py::arg("dbias") = py::none(), py::arg("bias") = py::none(), py::arg("alibi_slopes") = py::none(),
        py::arg("rng_state") = py::none(), py::arg("gen") = py::none(), py::arg("sink") = py::none(),
        py::arg("d_sink") = py::none(), py::kw_only(), py::arg("sink_ptr") = py::none(), py::arg("mask") = py::none(),
        py::arg("seed") = 0, py::arg("offset") = 0, py::arg("stream") = 0, py::arg("use_asm_v3") = false);

    m.def(
        "mha_varlen_bwd",
        [](O dout, O q, O k, O v, O out, O softmax_lse, O cu_seqlens_q, O cu_seqlens_k, O max_seqlen_q,
           O max_seqlen_k, O dropout_p, O softmax_scale, bool zero_tensors, bool is_causal, O window_size_left,
           O window_size_right, bool deterministic, O dq, O dk, O dv, O alibi_slopes, O rng_state, O gen,
           O cu_seqlens_q_padded, O cu_seqlens_k_padded, O sink, O d_sink, O bias, O dbias, O sink_ptr, O seqused_q,
           O seqused_k, O mask, O seed, O offset, O stream, bool use_asm_v3) {
            for (const auto& [x, name] : {std::pair{&cu_seqlens_q_padded, "cu_seqlens_q_padded"},
                                          std::pair{&cu_seqlens_k_padded, "cu_seqlens_k_padded"}})
                require_none_arg(*x, name,
                                 "padded starts are given here as cu_seqlens_q / cu_seqlens_k themselves, with the "
                                 "sequences' lengths as seqused_q= / seqused_k=");
            const BwdArgs a{dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, window_size_left,
                            window_size_right, dq, dk, dv, dbias, bias, alibi_slopes, rng_state, gen,
                            sink_arg(sink, sink_ptr), d_sink, mask, seed, offset, stream, is_causal, deterministic,
                            zero_tensors, use_asm_v3};
            const BwdVarlen vl{cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q, seqused_k};
            return run_bwd(a, &vl);
        },
        kVarlenBwdDoc, py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"),
        py::arg("softmax_lse"), py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"), py::arg("max_seqlen_q"),
        py::arg("max_seqlen_k"), py::arg("dropout_p"), py::arg("softmax_scale"), py::arg("zero_tensors"),
        py::arg("is_causal"), py::arg("window_size_left"), py::arg("window_size_right"), py::arg("deterministic"),
        py::arg("dq") = py::none(), py::arg("dk") = py::none(), py::arg("dv") = py::none(),
        py::arg("alibi_slopes") = py::none(), py::arg("rng_state") = py::none(), py::arg("gen") = py::none(),
        py::arg("cu_seqlens_q_padded") = py::none(), py::arg("cu_seqlens_k_padded") = py::none(),
        py::arg("sink") = py::none(), py::arg("d_sink") = py::none(), py::kw_only(), py::arg("bias") = py::none(),
        py::arg("dbias") = py::none(), py::arg("sink_ptr") = py::none(), py::arg("seqused_q") = py::none(),
        py::arg("seqused_k") = py::none(), py::arg("mask") = py::none(), py::arg("seed") = 0, py::arg("offset") = 0,
        py::arg("stream") = 0, py::arg("use_asm_v3") = false);

    m.def("paged_attention_v1_core", &paged_attention_v1_core, kPagedV1Doc, py::arg("out"),
          py::arg("workspace_buffer"), py::arg("query"), py::arg("key_cache"), py::arg("value_cache"),
          py::arg("scale"), py::arg("block_tables"), py::arg("cu_query_lens"), py::arg("context_lens"),
          py::arg("max_context_len"), py::arg("alibi_slopes"), py::arg("kv_cache_dtype"), py::arg("kv_cache_layout"),
          py::arg("logits_soft_cap"), py::arg("k_scale"), py::arg("v_scale"), py::arg("fp8_out_scale") = py::none(),
          py::arg("partition_size") = 256, py::arg("mtp") = 1, py::arg("q_scale") = py::none(),
          py::arg("sliding_window") = 0, py::kw_only(), py::arg("stream") = 0);
    m.def("pa_fwd_asm", &pa_fwd_asm, kPaAsmDoc, py::arg("Q"), py::arg("K"), py::arg("V"), py::arg("block_tables"),
          py::arg("context_lens"), py::arg("block_tables_stride0"), py::arg("max_qlen") = 1,
          py::arg("K_QScale") = py::none(), py::arg("V_QScale") = py::none(), py::arg("out_") = py::none(),
          py::arg("qo_indptr") = py::none(), py::arg("high_precision") = 1, py::arg("kernelName") = py::none(),
          py::kw_only(), py::arg("stream") = 0);
    m.def("paged_attention_workspace_bytes", &aiter::paged_attention_workspace_bytes, py::arg("num_seqs"),
          py::arg("num_heads"), py::arg("head_size"), py::arg("max_context_len"), py::arg("partition_size") = 256,
          py::arg("elem_bytes") = 2,
          "Bytes paged_attention_v1_core needs in workspace_buffer (0 when the context fits one partition).");

    m.def(
        "last_kernel_name",
        []() {
            const char* n = aiter::mha_get_last_kernel_name();
            return std::string(n != nullptr ? n : "");
        },
        "The kernel that the last successful mha_fwd / mha_varlen_fwd call on this thread launched "
        "(aiter::mha_get_last_kernel_name).");
}
