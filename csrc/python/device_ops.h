#pragma once
// Device-side helpers of the backward binding (binding_bwd.h), host code: a strided view type, launches of the
// strided-sum kernel (strided_sum.h / strided_sum.cu, compiled into the module), and CallArena, the owner of
// every temporary one mha_bwd call needs (workspace_alloc / pinned_host_alloc memory, expanded dK / dV / dBias), freed
// in stream order after the call's last use. Failures raise RuntimeError / MemoryError (never ValueError).

#include <pybind11/pybind11.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_io.h"
#include "strided_sum.h"

namespace mha_py {

// An array the device helpers read or write: element pointer, dtype, up to 4 dims with element strides.
struct View
{
    void* ptr = nullptr;
    DLDataType dtype{};
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;

    int64_t numel() const
    {
        int64_t n = 1;
        for (int64_t s : shape)
            n *= s;
        return n;
    }
};

inline View view_of(const ImportedTensor& t)
{
    View v{t.data(), t.dtype(), t.shape(), {}};
    for (int i = 0; i < t.ndim(); ++i)
        v.strides.push_back(t.stride(i));
    return v;
}

inline View view_of(const DeviceStorage& s) { return View{s.ptr, s.dtype, s.shape, s.strides}; }

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape)
{
    std::vector<int64_t> st(shape.size(), 1);
    for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
        st[i] = st[i + 1] * std::max<int64_t>(shape[i + 1], 1);
    return st;
}

[[noreturn]] inline void raise_cuda(const char* what, cudaError_t e)
{
    cudaGetLastError(); // keep a non-sticky error out of the next launch check
    raise(e == cudaErrorMemoryAllocation ? PyExc_MemoryError : PyExc_RuntimeError, cuda_error(what, e));
}

// ------------------------------------------------------------------------------------------------ strided sum

// Plain data for one launch, built with the GIL held and launched without it.
struct SumLaunch
{
    bool bf16 = false;
    StridedSumParams p{};
    unsigned blocks = 0;
};

constexpr unsigned kSumThreads   = 256;
constexpr unsigned kSumMaxBlocks = 4096; // grid-stride beyond 1M outputs; enough blocks to fill any current GPU

// out (up to 4 dims, any strides) = in summed over `reduced` = {(size, in stride)} (at most 3), where in_strides give
// in's step along each dim of out. Both arrays fp16 or both bf16.
inline SumLaunch make_sum(const View& out, const void* in, const std::vector<int64_t>& in_strides,
                          const std::vector<std::pair<int64_t, int64_t>>& reduced)
{
    SumLaunch l;
    l.p.numel = out.numel();
    if (l.p.numel == 0)
        return l; // nothing to launch (enqueue skips it)
    if (out.dtype.bits != 16 || (out.dtype.code != kDLFloat && out.dtype.code != kDLBfloat))
        raise(PyExc_RuntimeError, "internal: the strided-sum kernel takes float16 / bfloat16, got " +
                                      dtype_str(out.dtype));
    l.bf16 = out.dtype.code == kDLBfloat;
    const int pad = kSumDims - static_cast<int>(out.shape.size()); // leading dims of size 1
    for (int d = 0; d < kSumDims; ++d)
    {
        const bool real = d >= pad;
        l.p.shape[d]      = real ? out.shape[d - pad] : 1;
        l.p.out_stride[d] = real ? out.strides[d - pad] : 0;
        l.p.in_stride[d]  = real ? in_strides[d - pad] : 0;
    }
    for (int r = 0; r < kSumRedDims; ++r)
    {
        const bool real  = r < static_cast<int>(reduced.size());
        l.p.red_shape[r]  = real ? reduced[r].first : 1;
        l.p.red_stride[r] = real ? reduced[r].second : 0;
    }
    l.p.out = out.ptr;
    l.p.in  = in != nullptr ? in : out.ptr;
    constexpr int kLast = kSumDims - 1;
    bool vec8 = in != nullptr && l.p.shape[kLast] % 8 == 0 && l.p.out_stride[kLast] == 1 &&
                l.p.in_stride[kLast] == 1 && reinterpret_cast<uintptr_t>(l.p.out) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(l.p.in) % 16 == 0;
    for (int d = 0; d < kLast; ++d)
        vec8 = vec8 && l.p.out_stride[d] % 8 == 0 && l.p.in_stride[d] % 8 == 0;
    for (int r = 0; r < kSumRedDims; ++r)
        vec8 = vec8 && l.p.red_stride[r] % 8 == 0;
    l.p.vec8 = vec8;
    const int64_t items = vec8 ? l.p.numel / 8 : l.p.numel;
    l.blocks = static_cast<unsigned>(std::min<int64_t>((items + kSumThreads - 1) / kSumThreads, kSumMaxBlocks));
    return l;
}

// Writes 0 to every element of a fp16 / bf16 view (an empty reduction).
inline SumLaunch make_zero_fill(const View& out)
{
    return make_sum(out, nullptr, std::vector<int64_t>(out.shape.size(), 0), {{0, 0}});
}

// Enqueues the launch on `stream`; returns the launch error (cudaSuccess when there is nothing to do).
inline cudaError_t enqueue(const SumLaunch& l, cudaStream_t stream)
{
    if (l.p.numel == 0)
        return cudaSuccess;
    return launch_strided_sum(l.p, l.bf16, l.blocks, kSumThreads, stream);
}

// ------------------------------------------------------------------------------------------------ call arena

// Temporaries of one call. Device memory comes from the stream-ordered allocator (cudaMallocAsync) and goes back with
// cudaFreeAsync on the same stream once everything that uses it is enqueued, so nothing waits; where the device has
// no memory pools it falls back to cudaMalloc and a stream synchronization before cudaFree. Pinned host memory
// (group mode) is kept until the stream has drained, because the library's host-to-device copies out of it may still
// be in flight when the call returns. The library's callbacks run without the GIL and must not throw: alloc() records
// the first error and returns nullptr, and the binding raises `error` after the call.
class CallArena
{
  public:
    CallArena(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
    CallArena(const CallArena&)            = delete;
    CallArena& operator=(const CallArena&) = delete;
    ~CallArena() // normally already released by the binding; this path only runs when it raised before that
    {
        const SavedContext saved; // dlpack_io.h: puts back the caller's context, never creating one
        const bool switch_dev = saved.device() >= 0 && saved.device() != device_;
        if (switch_dev)
            cudaSetDevice(device_);
        release();
        if (switch_dev)
            saved.restore();
    }

    void* alloc(size_t bytes, bool zero_init)
    {
        void* p = nullptr;
        bytes   = std::max<size_t>(bytes, 1);
        cudaError_t e = cudaMallocAsync(&p, bytes, stream_);
        const bool pooled = e == cudaSuccess;
        if (e == cudaErrorNotSupported)
        {
            cudaGetLastError();
            e = cudaMalloc(&p, bytes);
        }
        if (e == cudaSuccess)
            blocks_.push_back({p, pooled});
        if (e == cudaSuccess && zero_init)
            e = cudaMemsetAsync(p, 0, bytes, stream_);
        if (e != cudaSuccess)
        {
            cudaGetLastError();
            note(cuda_error(("allocating " + std::to_string(bytes) + " bytes of device workspace").c_str(), e), e);
            return nullptr;
        }
        return p;
    }

    std::shared_ptr<void> alloc_pinned(size_t bytes)
    {
        void* p = nullptr;
        const cudaError_t e = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
        if (e != cudaSuccess)
        {
            cudaGetLastError();
            note(cuda_error(("allocating " + std::to_string(bytes) + " bytes of pinned host memory").c_str(), e), e);
            return nullptr;
        }
        std::shared_ptr<void> sp(p, [](void* q) {
            if (cudaFreeHost(q) != cudaSuccess)
                cudaGetLastError();
        });
        pinned_.push_back(sp);
        return sp;
    }

    // Frees everything in stream order (see above); call with the arena's device current. Idempotent; returns the
    // first CUDA error.
    cudaError_t release()
    {
        cudaError_t first = cudaSuccess;
        auto keep = [&](cudaError_t e) {
            if (e != cudaSuccess && first == cudaSuccess)
                first = e;
        };
        const bool must_sync = !pinned_.empty() ||
                               std::any_of(blocks_.begin(), blocks_.end(), [](const Block& b) { return !b.pooled; });
        if (must_sync)
            keep(cudaStreamSynchronize(stream_));
        for (const Block& b : blocks_)
            keep(b.pooled ? cudaFreeAsync(b.ptr, stream_) : cudaFree(b.ptr));
        blocks_.clear();
        pinned_.clear();
        if (first != cudaSuccess)
            cudaGetLastError();
        return first;
    }

    bool failed() const { return !error.empty(); }
    std::string error;                // the first allocation failure, for the binding to raise
    cudaError_t error_code = cudaSuccess;

  private:
    struct Block
    {
        void* ptr;
        bool pooled;
    };
    void note(std::string msg, cudaError_t e)
    {
        if (error.empty())
            error = std::move(msg), error_code = e;
    }

    std::vector<Block> blocks_;
    std::vector<std::shared_ptr<void>> pinned_;
    int device_;
    cudaStream_t stream_;
};

} // namespace mha_py
