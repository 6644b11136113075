#pragma once
// Argument parsing shared by the aiter_mha entry points (binding.cpp, binding_bwd.h): scalar arguments (ints, windows,
// reals, seeds, streams, the mask vocabulary) and the shape / broadcast checks on imported arrays. Every failure
// raises ValueError with the argument's name and what was expected.

#include <pybind11/pybind11.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dlpack_io.h"

namespace mha_py {

inline constexpr DLDataType kF32{kDLFloat, 32, 1};
inline constexpr DLDataType kI32{kDLInt, 32, 1};
inline constexpr DLDataType kI64{kDLInt, 64, 1};
inline constexpr DLDataType kU64{kDLUInt, 64, 1};
inline constexpr DLDataType kU8{kDLUInt, 8, 1};

using TensorPtr = std::unique_ptr<ImportedTensor>;

// ------------------------------------------------------------------------------------------------ scalar arguments

struct MaskSpec
{
    int type;
    int left;
    int right;
};

inline std::string type_name(const py::handle& x) { return py::str(py::type::handle_of(x).attr("__name__")); }

inline int64_t int_arg(const py::object& x, const std::string& name, int64_t lo, int64_t hi, const char* hint = "")
{
    int64_t v = 0;
    if (!as_int64(x, v))
        invalid(name + " must be an int" + hint + ", got " + type_name(x));
    if (v < lo || v > hi)
        invalid(name + " = " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]" + hint);
    return v;
}

inline int window_arg(const py::object& w, const char* name)
{
    int64_t v = 0;
    if (!as_int64(w, v))
        invalid(std::string(name) + " must be an int (-1: unbounded)");
    if (v < -1 || v > kIndexMax)
        invalid(std::string(name) + " = " + std::to_string(v) + " is out of range; use -1 (unbounded) or 0.." +
                std::to_string(kIndexMax));
    return static_cast<int>(v);
}

// Any real number (float, int, NumPy scalar), finite.
inline double real_arg(const py::object& x, const std::string& name)
{
    const double v = PyFloat_AsDouble(x.ptr());
    if (v == -1.0 && PyErr_Occurred())
    {
        PyErr_Clear();
        invalid(name + " must be a real number, got " + type_name(x));
    }
    if (!std::isfinite(v))
        invalid(name + " must be finite, got " + std::to_string(v));
    return v;
}

// An int in [0, 2**64): a Python int or anything with __index__ (NumPy integers), not a bool.
inline uint64_t u64_arg(const py::object& x, const std::string& name)
{
    PyObject* i = PyBool_Check(x.ptr()) ? nullptr : PyNumber_Index(x.ptr());
    if (i == nullptr)
    {
        PyErr_Clear();
        invalid(name + " must be an int in [0, 2**64), got " + type_name(x));
    }
    const py::object as_int = py::reinterpret_steal<py::object>(i);
    const unsigned long long v = PyLong_AsUnsignedLongLong(as_int.ptr());
    if (PyErr_Occurred())
    {
        PyErr_Clear();
        invalid(name + " must be an int in [0, 2**64), got " + std::string(py::str(as_int)));
    }
    return static_cast<uint64_t>(v);
}

// mask: "none" | "causal" (= bottom-right, FlashAttention's convention) | "causal_bottom_right" | "causal_top_left" |
// "window_generic", or an int mask_type 0..3 that takes window_left/right as given (sliding window with 1/2, generic
// window with 3).
inline MaskSpec parse_mask(const py::object& mask, int left, int right)
{
    if (py::isinstance<py::str>(mask))
    {
        const std::string m = py::cast<std::string>(mask);
        if (m == "none" || m == "no_mask")
        {
            if (left != -1 || right != -1)
                invalid("mask='" + m + "' takes no window (got window_left=" + std::to_string(left) +
                        ", window_right=" + std::to_string(right) + "); pass an int mask_type for windows");
            return {0, -1, -1};
        }
        const bool top_left = m == "causal_top_left";
        if (top_left || m == "causal" || m == "causal_bottom_right")
        {
            // the windows left at their defaults, or given as the causal (-1, 0) itself
            if (left != -1 || (right != -1 && right != 0))
                invalid("mask='" + m + "' is (window_left=-1, window_right=0) (got " + std::to_string(left) + ", " +
                        std::to_string(right) + "); pass mask=1 (top-left) or 2 (bottom-right) for a sliding window");
            return {top_left ? 1 : 2, -1, 0};
        }
        if (m == "window_generic")
            return {3, left, right};
        invalid("mask='" + m + "' is not one of 'none', 'causal', 'causal_top_left', 'causal_bottom_right', "
                "'window_generic' (or an int mask_type 0..3)");
    }
    int64_t t = 0;
    if (as_int64(mask, t))
    {
        if (t < 0 || t > 3)
            invalid("mask_type " + std::to_string(t) +
                    " is not 0 (none), 1 (top-left), 2 (bottom-right) or 3 (generic window)");
        if (t == 0 && (left != -1 || right != -1)) // the library ignores windows without a mask
            invalid("mask_type 0 (none) takes no window (got window_left=" + std::to_string(left) +
                    ", window_right=" + std::to_string(right) + "); pass mask_type 1, 2 or 3 for a windowed mask");
        return {static_cast<int>(t), left, right};
    }
    invalid("mask must be a str or an int mask_type, got " + type_name(mask));
}

// An int handle, or a stream object carrying one (torch's .cuda_stream, CuPy's .ptr).
inline uintptr_t parse_stream(const py::object& stream)
{
    // an int, or any integer type (NumPy's included) through __index__, as the other integer arguments
    auto as_index = [](const py::object& x) -> py::object {
        if (PyBool_Check(x.ptr()) || !PyIndex_Check(x.ptr()))
            return py::none();
        if (PyLong_Check(x.ptr()))
            return x;
        PyObject* i = PyNumber_Index(x.ptr());
        if (i == nullptr)
        {
            PyErr_Clear();
            return py::none();
        }
        return py::reinterpret_steal<py::object>(i);
    };
    py::object h = as_index(stream);
    if (h.is_none())
    {
        if (py::hasattr(stream, "cuda_stream"))
            h = as_index(stream.attr("cuda_stream"));
        else if (py::hasattr(stream, "ptr"))
            h = as_index(stream.attr("ptr"));
        if (h.is_none())
            invalid("stream must be an int cudaStream_t handle (0: default stream) or an object with .cuda_stream "
                    "or .ptr");
    }
    const unsigned long long v = PyLong_AsUnsignedLongLong(h.ptr());
    if (PyErr_Occurred())
    {
        PyErr_Clear();
        invalid("stream must be a non-negative int cudaStream_t handle");
    }
    return static_cast<uintptr_t>(v);
}

inline void expect_size(const ImportedTensor& x, int dim, int64_t want, const char* what, const std::string& why)
{
    if (x.size(dim) != want)
        invalid(x.name() + " " + what + " is " + std::to_string(x.size(dim)) + " but " + why + " is " +
                std::to_string(want) + " (" + x.name() + " shape " + shape_str(x.shape()) + ")");
}

// A dim that is either `want` long or broadcast (size 1); returns the element stride the library takes (0 when
// broadcast or never stepped along).
inline index_t broadcast_stride(const ImportedTensor& x, int dim, int64_t want, const std::string& what)
{
    if (x.size(dim) != want && x.size(dim) != 1)
        invalid(x.name() + " dim " + std::to_string(dim) + " (" + what + ") is " + std::to_string(x.size(dim)) +
                "; expected " + std::to_string(want) + " or 1 (broadcast) (" + x.name() + " shape " +
                shape_str(x.shape()) + ")");
    return x.size(dim) == 1 ? 0 : x.stride(dim);
}

inline TensorPtr import_opt(const py::object& obj, const char* name, uintptr_t stream)
{
    return obj.is_none() ? nullptr : std::make_unique<ImportedTensor>(obj, name, stream);
}

// ------------------------------------------------------------------------------------------------ feature arrays

// Element strides of an elementwise bias as the library takes them (0 along broadcast dims).
// Group-mode sequence arrays: cu_seqlens_q / cu_seqlens_k [b + 1] physical starts (their length sets b) and the
// optional seqused_q / seqused_k [b] logical lengths, checked for dtype and length.
struct SeqArrays
{
    TensorPtr cu_q, cu_k, used_q, used_k;
};

inline SeqArrays import_seq_arrays(const py::object& cu_seqlens_q, const py::object& cu_seqlens_k,
                                   const py::object& seqused_q, const py::object& seqused_k, uintptr_t strm,
                                   int64_t& b)
{
    SeqArrays a;
    a.cu_q = std::make_unique<ImportedTensor>(cu_seqlens_q, "cu_seqlens_q", strm);
    a.cu_q->check_layout(1, "[batch + 1] int32", &kI32, "expected", false);
    if (a.cu_q->size(0) < 1)
        invalid("cu_seqlens_q must hold batch + 1 >= 1 entries, got shape " + shape_str(a.cu_q->shape()));
    b      = a.cu_q->size(0) - 1;
    a.cu_k = std::make_unique<ImportedTensor>(cu_seqlens_k, "cu_seqlens_k", strm);
    a.cu_k->check_layout(1, "[batch + 1] int32", &kI32, "expected", false);
    expect_size(*a.cu_k, 0, b + 1, "length", "cu_seqlens_q's length");
    a.used_q = import_opt(seqused_q, "seqused_q", strm);
    a.used_k = import_opt(seqused_k, "seqused_k", strm);
    for (ImportedTensor* u : {a.used_q.get(), a.used_k.get()})
        if (u)
        {
            u->check_layout(1, "[batch] int32", &kI32, "expected", false);
            expect_size(*u, 0, b, "length", "the batch (len(cu_seqlens_q) - 1)");
        }
    return a;
}

// Group mode: the physical starts and logical lengths, read back to check them against the arrays' extents and the
// max_seqlen_* promises before the library indexes memory with them.
struct Seqlens
{
    int64_t max_q = 0, max_k = 0; // longest logical lengths
};

inline Seqlens read_seqlens(const ImportedTensor& cu_q, const ImportedTensor& cu_k, const ImportedTensor* used_q,
                            const ImportedTensor* used_k, int64_t b, int64_t total_q, int64_t total_k,
                            uintptr_t stream, int device)
{
    std::vector<int32_t> cq(b + 1), ck(b + 1), uq(used_q ? b : 0), uk(used_k ? b : 0);
    {
        DeviceGuard guard(device);
        const auto s = reinterpret_cast<cudaStream_t>(stream);
        py::gil_scoped_release no_gil;
        // all four are unit-stride int32 (check_layout: a 1-D array's only dim is its last)
        cudaError_t e = cudaMemcpyAsync(cq.data(), cu_q.data(), cq.size() * 4, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(ck.data(), cu_k.data(), ck.size() * 4, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess && used_q)
            e = cudaMemcpyAsync(uq.data(), used_q->data(), uq.size() * 4, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess && used_k)
            e = cudaMemcpyAsync(uk.data(), used_k->data(), uk.size() * 4, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s);
        if (e != cudaSuccess)
        {
            cudaGetLastError();
            py::gil_scoped_acquire gil;
            raise(PyExc_RuntimeError, cuda_error("reading cu_seqlens_* / seqused_* back to check them", e));
        }
    }
    Seqlens r;
    auto scan = [&](const std::vector<int32_t>& cu, const std::vector<int32_t>& used, const char* cu_name,
                    const char* used_name, int64_t total, const char* total_name, int64_t& longest) {
        if (cu[0] < 0)
            invalid(std::string(cu_name) + "[0] = " + std::to_string(cu[0]) + " is negative");
        for (int64_t i = 0; i < b; ++i)
        {
            const int64_t phys = int64_t(cu[i + 1]) - cu[i];
            if (phys < 0)
                invalid(std::string(cu_name) + " decreases at index " + std::to_string(i + 1) + " (" +
                        std::to_string(cu[i]) + " -> " + std::to_string(cu[i + 1]) + ")");
            int64_t len = phys;
            if (!used.empty())
            {
                len = used[i];
                if (len < 0 || len > phys)
                    invalid(std::string(used_name) + "[" + std::to_string(i) + "] = " + std::to_string(len) +
                            " is outside [0, " + std::to_string(phys) + "], sequence " + std::to_string(i) +
                            "'s rows in " + cu_name);
            }
            longest = std::max(longest, len);
        }
        if (cu[b] > total)
            invalid(std::string(cu_name) + "[-1] = " + std::to_string(cu[b]) + " is past " + total_name + " = " +
                    std::to_string(total));
    };
    scan(cq, uq, "cu_seqlens_q", "seqused_q", total_q, "total_q (q dim 0)", r.max_q);
    scan(ck, uk, "cu_seqlens_k", "seqused_k", total_k, "total_k (k dim 0)", r.max_k);
    return r;
}

struct BiasStrides
{
    index_t row = 0, head = 0, batch = 0;
};

// bias in q's dtype: batch mode [batch, nhead_q, seqlen_q, seqlen_k] with dims 0-2 of size b / h_q / s_q or 1; group
// mode [nhead_q, total_q, width] with dims 0-1 of size h_q / total_q (s_q) or 1 (the width is checked by the caller).
inline BiasStrides check_bias(const ImportedTensor& bias, bool group, const DLDataType& qt, int64_t b, int64_t h_q,
                              int64_t s_q, int64_t s_k)
{
    const char* layout = group ? "[nhead_q, total_q, max_seqlen_k]" : "[batch, nhead_q, seqlen_q, seqlen_k]";
    bias.check_layout(group ? 3 : 4, layout, &qt, "q has", false);
    if (!group)
        expect_size(bias, 3, s_k, "seqlen_k (dim 3)", "k's seqlen");
    BiasStrides st;
    const int o0 = group ? -1 : 0; // dim offset: group mode has no batch dim
    if (!group)
        st.batch = broadcast_stride(bias, 0, b, "batch");
    st.head = broadcast_stride(bias, o0 + 1, h_q, "nhead_q");
    st.row  = broadcast_stride(bias, o0 + 2, s_q, group ? "total_q" : "seqlen_q");
    return st;
}

// ALiBi slopes, float32 [nhead_q] or [batch | 1, nhead_q]; returns the batch stride (0: shared by every batch).
inline index_t check_alibi(const ImportedTensor& alibi, int64_t b, int64_t h_q)
{
    if (alibi.ndim() != 1 && alibi.ndim() != 2)
        invalid("alibi_slopes must be 1-D [nhead_q] or 2-D [batch, nhead_q] float32, got " +
                std::to_string(alibi.ndim()) + "-D shape " + shape_str(alibi.shape()));
    alibi.check_layout(alibi.ndim(), "[nhead_q] or [batch, nhead_q] float32", &kF32, "expected", false);
    expect_size(alibi, alibi.ndim() - 1, h_q, "nhead (last dim)", "q's nhead");
    return alibi.ndim() == 2 ? broadcast_stride(alibi, 0, b, "batch") : 0;
}

// A device [seed, offset] pair (the forward's seed_offset, the backward's rng_state): uint64 or int64, 2 elements.
inline void check_seed_offset(const ImportedTensor& so)
{
    const DLDataType t = so.dtype();
    if (!same_dtype(t, kU64) && !same_dtype(t, kI64))
        invalid(so.name() + " has dtype " + dtype_str(t) + "; expected uint64 (or int64) [seed, offset]");
    so.check_layout(1, "[2] uint64 (seed, offset)", &t, "its", false);
    expect_size(so, 0, 2, "length", "[seed, offset]");
}

} // namespace mha_py
