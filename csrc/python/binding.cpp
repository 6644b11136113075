// aiter_mha: the pybind11 + DLPack binding of aiter::mha_fwd (include/mha_fwd.h), torch-free. It takes any DLPack array
// (torch, CuPy, JAX; NumPy only reaches the error paths), checks it (dlpack_io.h) with a precise ValueError, fills every
// aiter::mha_fwd_args field for batch mode and launches on the caller's stream. Outputs it allocates itself come back
// as DeviceBuffer objects that export through __dlpack__. Python-facing documentation: kMhaFwdDoc at the bottom.

#include <pybind11/pybind11.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_io.h"
#include "mha_fwd.h"

namespace py = pybind11;

namespace {

using namespace mha_py;

static_assert(sizeof(ck_tile::index_t) == sizeof(mha_py::index_t), "dlpack_io.h checks strides against int32");

constexpr const char* kVersion = "0.1.0";

// ------------------------------------------------------------------------------------------------ mha_fwd

struct MaskSpec
{
    int type;
    int left;
    int right;
};

int window_arg(const py::object& w, const char* name)
{
    int64_t v = 0;
    if (!as_int64(w, v))
        invalid(std::string(name) + " must be an int (-1: unbounded)");
    if (v < -1 || v > kIndexMax)
        invalid(std::string(name) + " = " + std::to_string(v) + " is out of range; use -1 (unbounded) or 0.." +
                std::to_string(kIndexMax));
    return static_cast<int>(v);
}

// mask: "none" | "causal" (= bottom-right, FlashAttention's convention) | "causal_bottom_right" | "causal_top_left",
// or an int mask_type 0..3 that takes window_left/right as given (sliding window with 1/2, generic window with 3).
MaskSpec parse_mask(const py::object& mask, int left, int right)
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
            if (left != -1 || right != -1)
                invalid("mask='" + m + "' is (window_left=-1, window_right=0) (got " + std::to_string(left) + ", " +
                        std::to_string(right) + "); pass mask=1 (top-left) or 2 (bottom-right) for a sliding window");
            return {top_left ? 1 : 2, -1, 0};
        }
        invalid("mask='" + m + "' is not one of 'none', 'causal', 'causal_top_left', 'causal_bottom_right' "
                "(or an int mask_type 0..3)");
    }
    int64_t t = 0;
    if (as_int64(mask, t))
    {
        if (t < 0 || t > 3)
            invalid("mask_type " + std::to_string(t) +
                    " is not 0 (none), 1 (top-left), 2 (bottom-right) or 3 (generic window)");
        return {static_cast<int>(t), left, right};
    }
    invalid("mask must be a str or an int mask_type, got " +
            std::string(py::str(py::type::handle_of(mask).attr("__name__"))));
}

// An int handle, or a stream object carrying one (torch's .cuda_stream, CuPy's .ptr).
uintptr_t parse_stream(const py::object& stream)
{
    py::object h = stream;
    if (!PyLong_Check(h.ptr()))
    {
        if (py::hasattr(stream, "cuda_stream"))
            h = stream.attr("cuda_stream");
        else if (py::hasattr(stream, "ptr"))
            h = stream.attr("ptr");
        if (!PyLong_Check(h.ptr()))
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

void expect_size(const ImportedTensor& x, int dim, int64_t want, const char* what, const std::string& why)
{
    if (x.size(dim) != want)
        invalid(x.name() + " " + what + " is " + std::to_string(x.size(dim)) + " but " + why + " is " +
                std::to_string(want) + " (" + x.name() + " shape " + shape_str(x.shape()) + ")");
}

py::object mha_fwd_py(const py::object& q_obj, const py::object& k_obj, const py::object& v_obj,
                      const py::object& scale_obj, const py::object& mask_obj, const py::object& window_left_obj,
                      const py::object& window_right_obj, bool return_lse, const py::object& out_obj,
                      const py::object& lse_obj, const py::object& stream_obj, bool use_asm_v3)
{
    // Scalar arguments first: they need no device and fail fast.
    const int wl         = window_arg(window_left_obj, "window_left");
    const int wr         = window_arg(window_right_obj, "window_right");
    const MaskSpec mask  = parse_mask(mask_obj, wl, wr);
    const uintptr_t strm = parse_stream(stream_obj);
    const bool has_lse   = return_lse || !lse_obj.is_none();

    // Layout and cross-tensor checks come before the device checks so host arrays get the same precise reasons.
    ImportedTensor q(q_obj, "q", strm);
    q.check_layout(4, "[batch, seqlen_q, nhead_q, hdim_q]", nullptr, nullptr, false);
    const DLDataType qt = q.dtype();
    ImportedTensor k(k_obj, "k", strm);
    k.check_layout(4, "[batch, seqlen_k, nhead_k, hdim_q]", &qt, "q has", false);
    ImportedTensor v(v_obj, "v", strm);
    v.check_layout(4, "[batch, seqlen_k, nhead_k, hdim_v]", &qt, "q has", false);
    const char* dtype = qt.code == kDLBfloat ? "bf16" : "fp16";

    const int64_t b = q.size(0), s_q = q.size(1), h_q = q.size(2), d = q.size(3);
    const int64_t s_k = k.size(1), h_k = k.size(2), d_v = v.size(3);
    expect_size(k, 0, b, "batch (dim 0)", "q's batch");
    expect_size(v, 0, b, "batch (dim 0)", "q's batch");
    expect_size(k, 3, d, "head dim (dim 3)", "q's head dim");
    expect_size(v, 1, s_k, "seqlen (dim 1)", "k's seqlen");
    expect_size(v, 2, h_k, "nhead (dim 2)", "k's nhead");
    if (h_k == 0)
        invalid("k has nhead_k = 0 (shape " + shape_str(k.shape()) + ")");
    if (h_q % h_k != 0)
        invalid("nhead_q = " + std::to_string(h_q) + " (q dim 2) is not a multiple of nhead_k = " +
                std::to_string(h_k) + " (k dim 2); MQA/GQA need nhead_q % nhead_k == 0");

    double scale = 1.0 / std::sqrt(static_cast<double>(d > 0 ? d : 1));
    if (!scale_obj.is_none())
    {
        scale = PyFloat_AsDouble(scale_obj.ptr()); // any real number: float, int, numpy scalars
        if (scale == -1.0 && PyErr_Occurred())
        {
            PyErr_Clear();
            invalid("scale must be a real number or None (None: 1/sqrt(hdim_q))");
        }
        if (!std::isfinite(scale))
            invalid("scale must be finite, got " + std::to_string(scale));
    }

    const std::vector<int64_t> out_shape{b, s_q, h_q, d_v};
    const std::vector<int64_t> lse_shape{b, h_q, s_q};
    const DLDataType lse_dtype{kDLFloat, 32, 1};

    std::unique_ptr<ImportedTensor> out_in, lse_in;
    if (!out_obj.is_none())
    {
        out_in = std::make_unique<ImportedTensor>(out_obj, "out", strm);
        out_in->check_layout(4, "[batch, seqlen_q, nhead_q, hdim_v]", &qt, "q has", true);
        if (out_in->shape() != out_shape)
            invalid("out has shape " + shape_str(out_in->shape()) + "; expected [batch, seqlen_q, nhead_q, hdim_v] = " +
                    shape_str(out_shape));
    }
    if (!lse_obj.is_none())
    {
        lse_in = std::make_unique<ImportedTensor>(lse_obj, "lse", strm);
        lse_in->check_layout(3, "[batch, nhead_q, seqlen_q] float32", &lse_dtype, "expected", true);
        if (lse_in->shape() != lse_shape)
            invalid("lse has shape " + shape_str(lse_in->shape()) + "; expected [batch, nhead_q, seqlen_q] = " +
                    shape_str(lse_shape));
    }

    q.check_device(nullptr);
    for (const ImportedTensor* x : {&k, &v, out_in.get(), lse_in.get()})
        if (x != nullptr)
            x->check_device(&q);
    const int device = q.device().device_id;

    // An allocated out / lse is contiguous, so its batch stride must fit int32 too.
    const bool out_fits = out_in || static_cast<int64_t>(s_q) * h_q * d_v <= kIndexMax;
    const bool lse_fits = lse_in || !has_lse || static_cast<int64_t>(h_q) * s_q <= kIndexMax;
    if (!out_fits || !lse_fits)
        invalid(std::string(!out_fits ? "out" : "lse") + ": a contiguous [" + (!out_fits ? "s_q, h_q, d_v" : "h_q, s_q") +
                "] batch stride does not fit int32; pass a preallocated out/lse whose strides do");

    std::shared_ptr<DeviceStorage> out_buf, lse_buf;
    if (!out_in)
        out_buf = DeviceStorage::allocate(device, q.dtype(), out_shape);
    if (has_lse && !lse_in)
        lse_buf = DeviceStorage::allocate(device, lse_dtype, lse_shape);

    auto result = [&]() -> py::object {
        py::object o = out_in ? out_obj : py::cast(DeviceBuffer{out_buf});
        if (!has_lse)
            return o;
        py::object l = lse_in ? lse_obj : py::cast(DeviceBuffer{lse_buf});
        return py::make_tuple(o, l);
    };
    // Nothing to write: skip the library, which may treat zero sizes as invalid.
    if (b == 0 || s_q == 0 || h_q == 0)
        return result();

    aiter::mha_fwd_args a;
    a.use_asm_v3      = use_asm_v3;
    a.v3_api_check    = false;
    a.how_v3_bf16_cvt = 1;
    a.data_type       = dtype;
    a.is_group_mode   = false;
    a.bias_type       = static_cast<int>(bias_enum::no_bias);
    a.has_lse         = has_lse;
    a.qscale_type     = static_cast<int>(quant_scale_enum::no_scale);
    a.has_sink        = false;

    a.q_ptr         = q.data();
    a.k_ptr         = k.data();
    a.v_ptr         = v.data();
    a.bias_ptr      = nullptr;
    a.q_descale_ptr = nullptr;
    a.k_descale_ptr = nullptr;
    a.v_descale_ptr = nullptr;
    a.rand_val_ptr  = nullptr;
    a.lse_ptr       = !has_lse ? nullptr : lse_in ? lse_in->data() : lse_buf->ptr;
    a.o_ptr         = out_in ? out_in->data() : out_buf->ptr;

    a.seqstart_q_ptr             = nullptr;
    a.seqstart_k_ptr             = nullptr;
    a.seqlen_q_ptr               = nullptr;
    a.seqlen_k_ptr               = nullptr;
    a.cu_seqlen_q_ptr            = nullptr;
    a.cu_seqlen_k_ptr            = nullptr;
    a.block_scale_seqstart_q_ptr = nullptr;
    a.block_scale_seqstart_k_ptr = nullptr;
    a.sink_ptr                   = nullptr;

    // Every size was checked to fit int32 in ImportedTensor::check.
    a.seqlen_q     = static_cast<ck_tile::index_t>(s_q);
    a.seqlen_k     = static_cast<ck_tile::index_t>(s_k);
    a.batch        = static_cast<ck_tile::index_t>(b);
    a.max_seqlen_q = static_cast<ck_tile::index_t>(s_q);
    a.hdim_q       = static_cast<ck_tile::index_t>(d);
    a.hdim_v       = static_cast<ck_tile::index_t>(d_v);
    a.nhead_q      = static_cast<ck_tile::index_t>(h_q);
    a.nhead_k      = static_cast<ck_tile::index_t>(h_k);

    a.scale_s         = static_cast<float>(scale);
    a.logits_soft_cap = 0.f;

    // DLPack dims are (batch, seq, head, hdim): dim 1 is the row stride, dim 2 the head stride, dim 0 the batch stride.
    // An allocated out is contiguous bshd; an allocated lse contiguous [b, h, s_q] (nhead stride s_q, batch h*s_q).
    // A given lse has a unit stride along s_q (checked as its last dim): the library has no field for that stride.
    const ck_tile::index_t o_row   = out_in ? out_in->stride(1) : static_cast<ck_tile::index_t>(h_q * d_v);
    const ck_tile::index_t o_head  = out_in ? out_in->stride(2) : static_cast<ck_tile::index_t>(d_v);
    const ck_tile::index_t o_batch = out_in ? out_in->stride(0) : static_cast<ck_tile::index_t>(s_q * h_q * d_v);

    a.stride_q       = q.stride(1);
    a.stride_k       = k.stride(1);
    a.stride_v       = v.stride(1);
    a.stride_bias    = 0;
    a.stride_randval = 0;
    a.stride_o       = o_row;

    a.nhead_stride_q         = q.stride(2);
    a.nhead_stride_k         = k.stride(2);
    a.nhead_stride_v         = v.stride(2);
    a.nhead_stride_bias      = 0;
    a.nhead_stride_randval   = 0;
    a.nhead_stride_lse       = !has_lse ? 0 : lse_in ? lse_in->stride(1) : static_cast<ck_tile::index_t>(s_q);
    a.nhead_stride_o         = o_head;
    a.nhead_stride_q_descale = 0;
    a.nhead_stride_k_descale = 0;
    a.nhead_stride_v_descale = 0;

    a.batch_stride_q         = q.stride(0);
    a.batch_stride_k         = k.stride(0);
    a.batch_stride_v         = v.stride(0);
    a.batch_stride_bias      = 0;
    a.batch_stride_randval   = 0;
    a.batch_stride_lse       = !has_lse ? 0 : lse_in ? lse_in->stride(0) : static_cast<ck_tile::index_t>(h_q * s_q);
    a.batch_stride_o         = o_batch;
    a.batch_stride_q_descale = 0;
    a.batch_stride_k_descale = 0;
    a.batch_stride_v_descale = 0;

    a.window_size_left  = mask.left;
    a.window_size_right = mask.right;
    a.sink_size         = 0;
    a.mask_type         = mask.type;
    a.min_seqlen_q      = 0;

    a.p_drop           = 0.f;
    a.s_randval        = false;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};

    a.block_scale_size_q  = 0;
    a.block_scale_size_kv = 0;

    float ret = 0.f;
    {
        DeviceGuard guard(device);
        const auto stream = reinterpret_cast<cudaStream_t>(strm);
        py::gil_scoped_release no_gil;
        ret = aiter::mha_fwd(std::move(a), ck_tile::stream_config{stream, false, 0, 0, 1, true});
        if (ret >= 0 && (out_buf || lse_buf))
        {
            // Record completion so a DLPack consumer on another stream can wait for it.
            auto ev             = std::make_shared<ReadyEvent>();
            ev->device          = device;
            ev->producer_stream = normalize_stream(strm);
            cudaError_t e       = cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming);
            if (e == cudaSuccess)
                e = cudaEventRecord(ev->event, stream);
            if (e != cudaSuccess)
            {
                cudaGetLastError();
                py::gil_scoped_acquire gil;
                raise(PyExc_RuntimeError, cuda_error("recording the completion event of mha_fwd", e));
            }
            if (out_buf)
                out_buf->ready = ev;
            if (lse_buf)
                lse_buf->ready = ev;
        }
    }
    if (ret < 0)
    {
        const char* why = aiter::mha_get_last_error();
        invalid(why != nullptr && why[0] != '\0'
                    ? std::string(why)
                    : "aiter::mha_fwd returned " + std::to_string(ret) + " without giving a reason");
    }
    return result();
}

constexpr const char* kModuleDoc =
    "aiter_mha: AITER's MHA forward (aiter::mha_fwd) on NVIDIA GPUs, taking DLPack arrays (torch, CuPy, JAX).\n"
    "Does not import torch. See mha_fwd.__doc__.";

constexpr const char* kMhaFwdDoc = R"doc(Attention forward, batch mode. q: [b, s_q, h_q, d], k: [b, s_k, h_k, d], v: [b, s_k, h_k, d_v], float16 or
bfloat16 on one CUDA device, any element strides with a unit-stride last dim (a transposed bhsd view passes).
h_q % h_k == 0 (MQA/GQA). Arrays are taken through DLPack (__dlpack__ or a raw 'dltensor' capsule).

scale:   softmax scale, default 1/sqrt(d).
mask:    'none' | 'causal' (= 'causal_bottom_right') | 'causal_top_left', or an int mask_type
         (0 none, 1 top-left, 2 bottom-right, 3 generic) used with window_left / window_right (-1: unbounded).
return_lse: also return the fp32 natural-log LSE [b, h_q, s_q] (implied when lse is given).
out, lse: preallocated DLPack arrays to write into ([b, s_q, h_q, d_v] in q's dtype; [b, h_q, s_q] float32 with a
         unit-stride last dim); otherwise the function allocates contiguous DeviceBuffer objects.
stream:  cudaStream_t as an int (0: default stream), or an object with .cuda_stream / .ptr.
use_asm_v3: try the Hopper (sm90a) kernels first.

Returns out, or (out, lse). Raises ValueError on invalid input or when the library rejects the call.)doc";

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

    m.def("mha_fwd", &mha_fwd_py, kMhaFwdDoc, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
          py::arg("scale") = py::none(), py::arg("mask") = "none", py::arg("window_left") = -1,
          py::arg("window_right") = -1, py::arg("return_lse") = false, py::arg("out") = py::none(),
          py::arg("lse") = py::none(), py::arg("stream") = 0, py::arg("use_asm_v3") = false);

    m.def(
        "last_kernel_name",
        []() {
            const char* n = aiter::mha_get_last_kernel_name();
            return std::string(n != nullptr ? n : "");
        },
        "The kernel that the last successful mha_fwd call on this thread launched (aiter::mha_get_last_kernel_name).");
}
