#pragma once
// DLPack at the edge of the aiter_mha binding (binding.cpp): ImportedTensor consumes a producer's array (torch, CuPy,
// JAX, NumPy) and checks it; DeviceStorage / DeviceBuffer own the outputs the binding allocates and export them through
// __dlpack__ with shared ownership. Invalid input raises ValueError with a precise reason. Uses only dlpack_abi.h,
// pybind11 and the CUDA runtime; knows nothing about attention.

#include <pybind11/pybind11.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../common/driver_api.h"
#include "dlpack_abi.h"

namespace mha_py {

namespace py = pybind11;

using index_t = int32_t;                        // the library's ck_tile::index_t
inline constexpr int64_t kIndexMax = INT32_MAX; // every size and element stride the library takes must fit index_t

// DLPack's stream vocabulary for CUDA (the Python array API spec): -1 asks for no synchronization, 1 is the legacy
// default stream, 2 the per-thread default stream. They coincide with cudaStreamLegacy / cudaStreamPerThread.
inline constexpr int64_t kDLPackNoSync   = -1;
inline constexpr uintptr_t kStreamLegacy    = 1;
inline constexpr uintptr_t kStreamPerThread = 2;
inline constexpr size_t kMinAllocBytes   = 256; // keep buffers of empty outputs non-null (one cudaMalloc granule)

// ------------------------------------------------------------------------------------------------ small helpers

[[noreturn]] inline void raise(PyObject* type, const std::string& msg)
{
    PyErr_SetString(type, msg.c_str());
    throw py::error_already_set();
}

[[noreturn]] inline void invalid(const std::string& msg) { raise(PyExc_ValueError, msg); }

// A negative return of the forward / paged entry points: ValueError for a refused call, RuntimeError when the reason
// is a CUDA failure (a launch error, an unusable context: the library's reasons then name the cudaError)
[[noreturn]] inline void raise_library(const std::string& why)
{
    raise(why.find("cudaError") != std::string::npos ? PyExc_RuntimeError : PyExc_ValueError, why);
}

inline std::string shape_str(const std::vector<int64_t>& v)
{
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i)
        s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

inline std::string dtype_str(DLDataType t)
{
    if (t.lanes == 1 && t.code == kDLFloat && t.bits == 16)
        return "float16";
    if (t.lanes == 1 && t.code == kDLBfloat && t.bits == 16)
        return "bfloat16";
    if (t.lanes == 1 && t.code == kDLFloat && t.bits == 32)
        return "float32";
    if (t.lanes == 1 && t.code == kDLFloat && t.bits == 64)
        return "float64";
    std::string kind = t.code == kDLInt ? "int" : t.code == kDLUInt ? "uint" : t.code == kDLFloat ? "float"
                     : t.code == kDLBfloat ? "bfloat" : "code" + std::to_string(t.code) + "_";
    return kind + std::to_string(t.bits) + (t.lanes == 1 ? "" : "x" + std::to_string(t.lanes));
}

inline bool same_dtype(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

inline std::string device_str(DLDevice d)
{
    switch (d.device_type)
    {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "cuda_host (pinned cpu)";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "dlpack device type " + std::to_string(d.device_type);
    }
}

inline std::string cuda_error(const char* what, cudaError_t e)
{
    return std::string(what) + " failed: " + cudaGetErrorString(e);
}

// An int as int64: a Python int or anything with __index__ (NumPy integers), not a bool; false when obj is no int or
// does not fit.
inline bool as_int64(const py::handle& obj, int64_t& value)
{
    if (PyBool_Check(obj.ptr()) || !PyIndex_Check(obj.ptr()))
        return false;
    PyObject* i = PyNumber_Index(obj.ptr());
    if (i == nullptr)
    {
        PyErr_Clear();
        return false;
    }
    const py::object as_int = py::reinterpret_steal<py::object>(i);
    int overflow      = 0;
    const long long v = PyLong_AsLongLongAndOverflow(as_int.ptr(), &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred()))
    {
        PyErr_Clear();
        return false;
    }
    value = v;
    return true;
}

// A stream handle as the library sees it; 0 and cudaStreamLegacy name the same (legacy default) stream.
inline uintptr_t normalize_stream(uintptr_t s) { return s == 0 ? kStreamLegacy : s; }

// The calling thread's current CUDA context (none included), put back exactly by restore(). Restoring "the previous
// device" with cudaSetDevice instead would create that device's primary context (CUDA 12 and later) in a thread that
// never used it -- device 0 by default, a few hundred MB on it for each such process, the bug PyTorch's and
// TensorFlow's device guards once had -- and would replace a non-primary context the caller had current with the
// primary one. Without the driver's context calls it falls back to cudaSetDevice(previous device). A thread that had no
// context keeps the runtime's device selection at the one used here (as PyTorch's guard leaves it).
class SavedContext
{
  public:
    SavedContext()
    {
        static const auto get_current = mha::driver_entry_point<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
        exact_ = get_current != nullptr && get_current(&ctx_) == CUDA_SUCCESS;
        if (cudaGetDevice(&device_) != cudaSuccess)
        {
            cudaGetLastError();
            device_ = -1;
        }
    }
    int device() const { return device_; }
    void restore() const
    {
        static const auto set_current = mha::driver_entry_point<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent", 4000);
        if (exact_ && set_current != nullptr && set_current(ctx_) == CUDA_SUCCESS)
            return;
        if (device_ >= 0 && cudaSetDevice(device_) != cudaSuccess)
            cudaGetLastError();
    }

  private:
    CUcontext ctx_ = nullptr;
    int device_    = -1;
    bool exact_    = false;
};

// Makes `device` current for a scope and puts the previous context back afterwards (SavedContext).
class DeviceGuard
{
  public:
    explicit DeviceGuard(int device)
    {
        int prev      = 0;
        cudaError_t e = cudaGetDevice(&prev);
        if (e != cudaSuccess)
        {
            cudaGetLastError();
            raise(PyExc_RuntimeError, cuda_error("cudaGetDevice", e));
        }
        if (prev != device)
        {
            e = cudaSetDevice(device);
            if (e != cudaSuccess)
            {
                cudaGetLastError();
                raise(PyExc_RuntimeError, cuda_error(("cudaSetDevice(" + std::to_string(device) + ")").c_str(), e));
            }
            switched_ = true;
        }
    }
    ~DeviceGuard()
    {
        if (switched_)
            saved_.restore();
    }
    DeviceGuard(const DeviceGuard&)            = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    SavedContext saved_; // before the constructor's body switches
    bool switched_ = false;
};

// The device of a stream handle (not 0 / 1 / 2) from the driver: its context, whose device is asked once (made
// current for the query and then popped: no context is made or left behind) and kept per thread, so a call pays one
// driver call per array. Driver calls through the runtime's entry points, so any toolkit and driver the library
// supports answers; CUDA_ERROR_NOT_SUPPORTED when the driver lacks one of them.
inline CUresult stream_device(uintptr_t strm, int& device)
{
    struct Known
    {
        CUcontext ctx = nullptr;
        int device    = -1;
    };
    thread_local std::array<Known, 8> known{};
    thread_local size_t next = 0;
    static const auto get_ctx = mha::driver_entry_point<PFN_cuStreamGetCtx_v9020>("cuStreamGetCtx", 9020);
    static const auto push    = mha::driver_entry_point<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent", 4000);
    static const auto pop     = mha::driver_entry_point<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent", 4000);
    static const auto get_dev = mha::driver_entry_point<PFN_cuCtxGetDevice_v2000>("cuCtxGetDevice", 2000);
    if (get_ctx == nullptr || push == nullptr || pop == nullptr || get_dev == nullptr)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUcontext ctx = nullptr;
    CUresult r    = get_ctx(reinterpret_cast<CUstream>(strm), &ctx);
    if (r != CUDA_SUCCESS)
        return r;
    for (const Known& k : known)
        if (k.ctx == ctx && ctx != nullptr)
        {
            device = k.device;
            return CUDA_SUCCESS;
        }
    if ((r = push(ctx)) != CUDA_SUCCESS)
        return r;
    CUdevice_v1 dev = 0;
    r               = get_dev(&dev);
    CUcontext popped = nullptr;
    pop(&popped);
    if (r != CUDA_SUCCESS)
        return r;
    device            = static_cast<int>(dev);
    known[next++ % 8] = {ctx, device};
    return CUDA_SUCCESS;
}

// A stream handle of the call must queue on the device of array `whose` (checked as each array is imported, before
// its producer queues anything on the stream). The default streams (0 / 1 legacy, 2 per-thread) are the current
// device's, which is the arrays' during the call; any other handle is asked for its device: CUDA refuses a launch on
// another device's stream, but only after the call had allocated and (the backward) zero-filled outputs. A capsule
// passed as such names its device only once consumed: the launch answers for it. A handle that is no live stream
// cannot be told apart from one safely (as everywhere in CUDA): the driver's answer is raised; a driver that cannot
// answer leaves the check to the launch.
inline void check_stream_device(uintptr_t strm, int device, const std::string& whose)
{
    if (strm <= kStreamPerThread)
        return;
    int on           = -1;
    const CUresult r = stream_device(strm, on);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        return;
    if (r != CUDA_SUCCESS)
    {
        static const auto name = mha::driver_entry_point<PFN_cuGetErrorName_v6000>("cuGetErrorName", 6000);
        const char* text       = nullptr;
        if (name == nullptr || name(r, &text) != CUDA_SUCCESS || text == nullptr)
            text = "an unknown error";
        invalid("stream is not a usable CUDA stream (the driver says " + std::string(text) + ")");
    }
    if (on != device)
        invalid("stream is a stream of cuda:" + std::to_string(on) + " but " + whose + " is on cuda:" +
                std::to_string(device) + "; pass a stream of that device");
}

// The calling thread's context at construction, put back at destruction whatever happened in between.
class RestoredContext
{
  public:
    RestoredContext() = default;
    ~RestoredContext() { saved_.restore(); }
    RestoredContext(const RestoredContext&)            = delete;
    RestoredContext& operator=(const RestoredContext&) = delete;

  private:
    SavedContext saved_;
};

// PyTorch's current device made `device` for a scope when `obj` is a torch.Tensor (torch.cuda.device(device)), nothing
// otherwise. PyTorch is never imported here: a tensor exists only where the caller already imported it.
class TorchDeviceScope
{
  public:
    TorchDeviceScope(py::handle obj, int device)
    {
        const py::dict modules = py::module_::import("sys").attr("modules");
        if (!modules.contains("torch"))
            return;
        const py::object torch = modules["torch"];
        if (!py::hasattr(torch, "Tensor") || !py::isinstance(obj, torch.attr("Tensor")))
            return;
        scope_ = torch.attr("cuda").attr("device")(device);
        scope_.attr("__enter__")();
    }
    ~TorchDeviceScope()
    {
        if (!scope_)
            return;
        try
        {
            scope_.attr("__exit__")(py::none(), py::none(), py::none());
        }
        catch (const py::error_already_set&)
        {
            // the export's own outcome is what the caller sees; a failed exit leaves PyTorch's index at the device
        }
    }
    bool entered() const { return bool(scope_); }
    TorchDeviceScope(const TorchDeviceScope&)            = delete;
    TorchDeviceScope& operator=(const TorchDeviceScope&) = delete;

  private:
    py::object scope_;
};

// ------------------------------------------------------------------------------------------------ DLPack import

// One consumed DLPack tensor: owns the DLManagedTensor and calls its deleter on destruction (with the GIL held, which
// producers such as NumPy may expect). Strides are materialized even when the producer sent none.
class ImportedTensor
{
    // Calls the producer's deleter exactly once; a member, so it also runs when the constructor throws.
    struct Owner
    {
        DLManagedTensor* mt = nullptr;
        ~Owner()
        {
            if (mt != nullptr && mt->deleter != nullptr)
                mt->deleter(mt);
        }
    };

  public:
    ImportedTensor(py::handle obj, std::string name, uintptr_t stream) : name_(std::move(name))
    {
        py::object cap = get_capsule(obj, stream);
        PyObject* c    = cap.ptr();
        if (!PyCapsule_IsValid(c, kDLTensorCapsuleName))
        {
            const char* got = PyCapsule_GetName(c);
            PyErr_Clear();
            const std::string got_s = got ? got : "(null)";
            if (got_s == kUsedDLTensorCapsuleName)
                invalid(name_ + ": the DLPack capsule was already consumed (name 'used_dltensor'); a capsule can be "
                                "used once, pass the array itself or a fresh capsule");
            invalid(name_ + ": expected a DLPack capsule named 'dltensor', got one named '" + got_s + "'");
        }
        auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kDLTensorCapsuleName));
        if (mt == nullptr)
        {
            PyErr_Clear();
            invalid(name_ + ": the DLPack capsule holds a null DLManagedTensor");
        }
        // Taking ownership: from here on the producer's capsule destructor leaves the tensor alone and owner_ calls
        // the deleter exactly once, whatever happens next.
        if (PyCapsule_SetName(c, kUsedDLTensorCapsuleName) != 0)
        {
            PyErr_Clear();
            invalid(name_ + ": could not mark the DLPack capsule as consumed");
        }
        owner_.mt = mt;

        const DLTensor& t = mt->dl_tensor;
        if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr))
            invalid(name_ + ": malformed DLPack tensor (ndim " + std::to_string(t.ndim) + ", shape pointer " +
                    (t.shape ? "set" : "null") + ")");
        shape_.assign(t.shape, t.shape + t.ndim);
        for (int64_t s : shape_)
            if (s < 0)
                invalid(name_ + ": malformed DLPack tensor with a negative size, shape " + shape_str(shape_));
        if (t.strides != nullptr)
            strides_.assign(t.strides, t.strides + t.ndim);
        else
        { // the protocol's compact row-major layout
            strides_.assign(t.ndim, 1);
            for (int i = t.ndim - 2; i >= 0; --i)
                strides_[i] = strides_[i + 1] * (shape_[i + 1] > 0 ? shape_[i + 1] : 1);
        }
    }
    ImportedTensor(const ImportedTensor&)            = delete;
    ImportedTensor& operator=(const ImportedTensor&) = delete;

    const std::string& name() const { return name_; }
    int ndim() const { return owner_.mt->dl_tensor.ndim; }
    DLDataType dtype() const { return owner_.mt->dl_tensor.dtype; }
    DLDevice device() const { return owner_.mt->dl_tensor.device; }
    int64_t size(int i) const { return shape_[i]; }
    const std::vector<int64_t>& shape() const { return shape_; }
    int64_t numel() const
    {
        int64_t n = 1;
        for (int64_t s : shape_)
            n *= s;
        return n;
    }
    void* data() const { return static_cast<char*>(owner_.mt->dl_tensor.data) + owner_.mt->dl_tensor.byte_offset; }

    // Element stride of dim i as the library takes it. A size-1 dim is never stepped along, so its stride is
    // replaced by the row-major one the later dims give (0 where that does not fit int32): producers report any
    // stride there (PyTorch up to 2.9 exports 1 through DLPack, which the library's stride checks would refuse: a
    // batch of one, one query, one KV head).
    index_t stride(int i) const
    {
        if (shape_[i] > 1)
        {
            const int64_t s = strides_[i];
            return (s < 0 || s > kIndexMax) ? 0 : static_cast<index_t>(s);
        }
        int64_t packed = 1;
        for (int j = i + 1; j < ndim(); ++j)
            packed *= std::max<int64_t>(shape_[j], 1);
        return packed > kIndexMax ? 0 : static_cast<index_t>(packed);
    }

    // Row-major and dense (size-1 dims ignored): numel() elements from data(), nothing between them.
    bool contiguous() const
    {
        int64_t want = 1;
        for (int i = ndim() - 1; i >= 0; --i)
        {
            if (shape_[i] > 1 && strides_[i] != want)
                return false;
            want *= shape_[i];
        }
        return true;
    }

    // ndim, dtype, sizes, strides: the layout checks every q/k/v/out/lse goes through, in the order a user fixes them.
    // `want` is the required dtype (null: float16 or bfloat16) and `want_why` names where it comes from. The device is
    // checked separately (check_device), last, so that layout errors are reported for host arrays too.
    void check_layout(int want_ndim, const char* layout, const DLDataType* want, const char* want_why, bool is_output) const
    {
        if (ndim() != want_ndim)
            invalid(name_ + " must be " + std::to_string(want_ndim) + "-D " + layout + ", got " +
                    std::to_string(ndim()) + "-D shape " + shape_str(shape_));
        const DLDataType t = dtype();
        if (want == nullptr && !(t.lanes == 1 && t.bits == 16 && (t.code == kDLFloat || t.code == kDLBfloat)))
            invalid(name_ + " has dtype " + dtype_str(t) + "; expected float16 or bfloat16");
        if (want != nullptr && !same_dtype(t, *want))
            invalid(name_ + " has dtype " + dtype_str(t) + " but " + want_why + " " + dtype_str(*want));
        for (int i = 0; i < ndim(); ++i)
            if (shape_[i] > kIndexMax)
                invalid(name_ + ": size " + std::to_string(shape_[i]) + " of dim " + std::to_string(i) + " in shape " +
                        shape_str(shape_) + " does not fit int32");
        for (int i = 0; i < ndim(); ++i)
        {
            if (shape_[i] <= 1)
                continue;
            if (strides_[i] < 0)
                invalid(name_ + ": negative stride " + std::to_string(strides_[i]) + " in dim " + std::to_string(i) +
                        " (strides " + shape_str(strides_) + ") is not supported");
            if (strides_[i] > kIndexMax)
                invalid(name_ + ": stride " + std::to_string(strides_[i]) + " of dim " + std::to_string(i) +
                        " (strides " + shape_str(strides_) + ", in elements) does not fit int32, which the library "
                        "takes for element strides");
        }
        if (ndim() > 0 && shape_.back() > 1 && strides_.back() != 1)
            invalid(name_ + ": the last dimension must be contiguous (stride 1), got strides " + shape_str(strides_) +
                    " for shape " + shape_str(shape_));
        if (is_output && overlaps())
            invalid(name_ + ": strides " + shape_str(strides_) + " for shape " + shape_str(shape_) +
                    " make elements overlap; an output must not alias itself");
    }

    // A CUDA device array (on `ref`'s device when ref is given) with a non-null pointer when non-empty.
    void check_device(const ImportedTensor* ref) const
    {
        if (device().device_type != kDLCUDA)
            invalid(name_ + " is on " + device_str(device()) + "; expected a CUDA device array (DLPack kDLCUDA)");
        if (ref != nullptr && device().device_id != ref->device().device_id)
            invalid(name_ + " is on " + device_str(device()) + " but " + ref->name_ + " is on " +
                    device_str(ref->device()) + "; all arrays must be on one device");
        if (numel() > 0 && owner_.mt->dl_tensor.data == nullptr)
            invalid(name_ + ": null data pointer for a non-empty array");
    }

    // Sufficient non-overlap test: sorted by stride, each stepped dim must jump past the extent of all finer ones.
    bool overlaps() const
    {
        if (numel() == 0)
            return false;
        std::vector<int> dims;
        for (int i = 0; i < ndim(); ++i)
            if (shape_[i] > 1)
                dims.push_back(i);
        for (size_t a = 1; a < dims.size(); ++a) // insertion sort: at most 4 dims
            for (size_t b = a; b > 0 && strides_[dims[b]] < strides_[dims[b - 1]]; --b)
                std::swap(dims[b], dims[b - 1]);
        int64_t extent = 0; // max offset reachable with the finer dims
        for (int d : dims)
        {
            if (strides_[d] <= extent)
                return true;
            extent += strides_[d] * (shape_[d] - 1);
        }
        return false;
    }

  private:
    // obj.__dlpack__(stream=...), or obj itself when it already is a capsule. The stream argument tells the producer
    // which stream will read the data so it can order its pending writes before ours; it is only sent to CUDA arrays
    // (NumPy rejects any stream), and dropped for producers whose __dlpack__ predates the keyword.
    py::object get_capsule(py::handle obj, uintptr_t stream) const
    {
        if (PyCapsule_CheckExact(obj.ptr()))
            return py::reinterpret_borrow<py::object>(obj);
        if (obj.is_none())
            invalid(name_ + " is None; expected a DLPack array");
        if (!py::hasattr(obj, "__dlpack__"))
            invalid(name_ + ": " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                    " is not a DLPack array (no __dlpack__ method)");
        bool on_cuda = true;
        int device   = -1; // the producer's CUDA device, when it says
        if (py::hasattr(obj, "__dlpack_device__"))
        {
            try
            {
                py::tuple dev = obj.attr("__dlpack_device__")();
                on_cuda       = dev.size() >= 1 && py::cast<int>(dev[0]) == kDLCUDA;
                if (on_cuda && dev.size() >= 2)
                    device = py::cast<int>(dev[1]);
            }
            catch (const std::exception& e)
            {
                invalid(name_ + ": __dlpack_device__() failed: " + e.what());
            }
        }
        // The producer orders its pending writes before `ask`. The per-thread default stream (2) is asked as the
        // legacy one (1), which it waits for anyway: PyTorch refuses 2 ("per-thread default stream is not supported").
        const uintptr_t ours = normalize_stream(stream);
        const uintptr_t ask  = ours == kStreamPerThread ? kStreamLegacy : ours;
        auto export_capsule  = [&]() -> py::object {
            if (on_cuda)
            {
                try
                {
                    return obj.attr("__dlpack__")(py::arg("stream") = py::int_(ask));
                }
                catch (py::error_already_set& e)
                {
                    // only a __dlpack__ predating the keyword goes on without it (nothing to order then: Python's "got
                    // an unexpected keyword argument" / "takes no keyword arguments", pybind11's "incompatible
                    // function arguments"); any other TypeError is the producer's answer
                    if (!e.matches(PyExc_TypeError))
                        throw;
                    const std::string what = py::str(e.value()); // the message alone (what() adds the traceback)
                    if (what.find("unexpected keyword argument") == std::string::npos &&
                        what.find("takes no keyword arguments") == std::string::npos &&
                        what.find("incompatible function arguments") == std::string::npos)
                        throw;
                }
            }
            return obj.attr("__dlpack__")();
        };
        // A stream names a queue of the array's device: one of another device is refused before the producer
        // queues anything on it, and the array's device is current while it exports (outside the try below: a CUDA
        // failure switching to it stays a RuntimeError).
        std::optional<DeviceGuard> on_device;
        if (on_cuda && device >= 0)
        {
            check_stream_device(ours, device, name_);
            on_device.emplace(device);
        }
        try
        {
            try
            {
                return export_capsule();
            }
            catch (py::error_already_set& e)
            {
                // PyTorch exports a CUDA tensor only while its device is PyTorch's current one, an index it keeps
                // itself where selecting the device would make a context ("Can't export tensors on a different
                // CUDA device index": a tensor on cuda:1 from a thread at device 0). Retried in its device's scope
                // then; the common call pays nothing for it. Leaving that scope may select PyTorch's device in CUDA
                // too: the thread's context is put back exactly afterwards (RestoredContext outlives the scope).
                if (!on_cuda || device < 0 || !e.matches(PyExc_BufferError))
                    throw;
                const RestoredContext restore;
                TorchDeviceScope on_torch_device(obj, device);
                if (!on_torch_device.entered())
                    throw;
                return export_capsule();
            }
        }
        catch (py::error_already_set& e)
        {
            invalid(name_ + ": __dlpack__() failed: " + e.what());
        }
    }

    std::string name_;
    Owner owner_;
    std::vector<int64_t> shape_;
    std::vector<int64_t> strides_;
};

// ------------------------------------------------------------------------------------------------ DLPack export

// Marks when the kernel that filled a buffer is done, so a consumer on another stream can wait for it.
struct ReadyEvent
{
    cudaEvent_t event         = nullptr;
    uintptr_t producer_stream = 0; // normalize_stream()'d
    int device                = 0;
    ~ReadyEvent()
    {
        if (event != nullptr)
            cudaEventDestroy(event);
    }
};

// cudaMalloc'ed memory shared by the DeviceBuffer Python object and every DLManagedTensor exported from it: the
// last shared_ptr to go (the Python object dying or a consumer calling the deleter) frees it.
struct DeviceStorage
{
    void* ptr  = nullptr;
    int device = 0;
    DLDataType dtype{};
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
    std::shared_ptr<ReadyEvent> ready; // set once the producing kernel is enqueued

    ~DeviceStorage()
    {
        if (ptr == nullptr)
            return;
        const SavedContext saved;
        const bool switch_dev = saved.device() >= 0 && saved.device() != device;
        if (switch_dev)
            cudaSetDevice(device);
        ready.reset();
        if (cudaFree(ptr) != cudaSuccess) // e.g. at interpreter exit after the runtime unloaded: nothing to do
            cudaGetLastError();
        if (switch_dev)
            saved.restore();
    }

    static std::shared_ptr<DeviceStorage> allocate(int device, DLDataType dtype, std::vector<int64_t> shape)
    {
        auto s    = std::make_shared<DeviceStorage>();
        s->device = device;
        s->dtype  = dtype;
        s->shape  = std::move(shape);
        s->strides.assign(s->shape.size(), 1);
        for (int i = static_cast<int>(s->shape.size()) - 2; i >= 0; --i)
            s->strides[i] = s->strides[i + 1] * s->shape[i + 1];
        size_t bytes = dtype.bits / 8;
        for (int64_t d : s->shape)
            if (__builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes))
                raise(PyExc_MemoryError, "cannot allocate an array of shape " + shape_str(s->shape));
        DeviceGuard guard(device);
        const cudaError_t e = cudaMalloc(&s->ptr, bytes > kMinAllocBytes ? bytes : kMinAllocBytes);
        if (e != cudaSuccess)
        {
            s->ptr = nullptr;
            cudaGetLastError(); // allocation errors are not sticky; keep them out of the library's launch checks
            raise(e == cudaErrorMemoryAllocation ? PyExc_MemoryError : PyExc_RuntimeError,
                  cuda_error(("cudaMalloc of " + std::to_string(bytes) + " bytes for " + shape_str(s->shape)).c_str(),
                             e));
        }
        return s;
    }
};

// Records on `strm` (the current device's) the event a DLPack consumer on another stream waits for, after the work
// that fills the buffers was enqueued there, and hands it to each allocated (non-null) buffer.
inline cudaError_t mark_ready(int device, uintptr_t strm, std::initializer_list<std::shared_ptr<DeviceStorage>*> bufs)
{
    auto ev             = std::make_shared<ReadyEvent>();
    ev->device          = device;
    ev->producer_stream = normalize_stream(strm);
    cudaError_t e       = cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventRecord(ev->event, reinterpret_cast<cudaStream_t>(strm));
    if (e == cudaSuccess)
        for (auto* buf : bufs)
            if (*buf)
                (*buf)->ready = ev;
    return e;
}

// The Python-visible owner of a DeviceStorage.
struct DeviceBuffer
{
    std::shared_ptr<DeviceStorage> storage;
};

// manager_ctx of an exported DLManagedTensor: one shared_ptr reference, dropped by the deleter.
struct ExportContext
{
    std::shared_ptr<DeviceStorage> keep;
    DLManagedTensor managed{};
};

inline void export_deleter(DLManagedTensor* self)
{
    if (self != nullptr)
        delete static_cast<ExportContext*>(self->manager_ctx);
}

// Runs when the capsule dies; a consumer that took the tensor renamed the capsule and owns the deleter call instead.
inline void export_capsule_destructor(PyObject* capsule)
{
    if (!PyCapsule_IsValid(capsule, kDLTensorCapsuleName))
        return;
    auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kDLTensorCapsuleName));
    if (mt != nullptr && mt->deleter != nullptr)
        mt->deleter(mt);
}

// Orders the consumer's stream after the kernel that produced the buffer (DLPack's `stream` contract).
inline void sync_consumer(const DeviceStorage& s, const py::object& stream)
{
    uintptr_t consumer = kStreamLegacy; // None: the spec says assume the legacy default stream
    if (!stream.is_none())
    {
        int64_t v = 0;
        if (!as_int64(stream, v))
            raise(PyExc_TypeError, "__dlpack__: stream must be an int or None");
        if (v == kDLPackNoSync)
            return;
        if (v < 0)
            raise(PyExc_ValueError, "__dlpack__: invalid stream " + std::to_string(v));
        consumer = normalize_stream(static_cast<uintptr_t>(v));
    }
    // the same handle is the same stream, except 2: each thread's own per-thread default stream
    if (!s.ready || (s.ready->producer_stream == consumer && consumer != kStreamPerThread))
        return;
    DeviceGuard guard(s.device);
    const cudaError_t e = cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(consumer), s.ready->event, 0);
    if (e != cudaSuccess)
    {
        cudaGetLastError();
        raise(PyExc_RuntimeError, cuda_error("__dlpack__: cudaStreamWaitEvent on the consumer stream", e));
    }
}

inline py::object export_dlpack(const DeviceBuffer& buf, const py::object& stream, const py::object& max_version,
                                const py::object& dl_device, const py::object& copy)
{
    (void)max_version; // only the unversioned (v0.8) capsule is produced; consumers accept it for any max_version
    const DeviceStorage& s = *buf.storage;
    const int copy_true = copy.is_none() ? 0 : PyObject_IsTrue(copy.ptr());
    if (copy_true < 0) // copy's __bool__ raised: that exception, not a capsule with it still set
        throw py::error_already_set();
    if (copy_true == 1)
        raise(PyExc_BufferError, "DeviceBuffer.__dlpack__: copy=True is not supported (the buffer is exported in place)");
    if (!dl_device.is_none())
    {
        const py::tuple d(dl_device);
        int64_t type = 0, id = 0;
        if (d.size() != 2 || !as_int64(d[0], type) || !as_int64(d[1], id) || type != kDLCUDA || id != s.device)
            raise(PyExc_BufferError, "DeviceBuffer.__dlpack__: the buffer lives on cuda:" + std::to_string(s.device) +
                                         " and cannot be exported to another device");
    }
    sync_consumer(s, stream);

    auto* ctx     = new ExportContext{buf.storage, {}};
    DLTensor& t   = ctx->managed.dl_tensor;
    t.data        = s.ptr;
    t.device      = DLDevice{kDLCUDA, s.device};
    t.ndim        = static_cast<int32_t>(s.shape.size());
    t.dtype       = s.dtype;
    t.shape       = const_cast<int64_t*>(s.shape.data());
    t.strides     = const_cast<int64_t*>(s.strides.data());
    t.byte_offset = 0;
    ctx->managed.manager_ctx = ctx;
    ctx->managed.deleter     = export_deleter;
    PyObject* cap = PyCapsule_New(&ctx->managed, kDLTensorCapsuleName, export_capsule_destructor);
    if (cap == nullptr)
    {
        delete ctx;
        throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(cap);
}

inline py::tuple int_tuple(const std::vector<int64_t>& v)
{
    py::tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i)
        t[i] = py::int_(v[i]);
    return t;
}

} // namespace mha_py
