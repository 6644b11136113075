// Driver API functions reached through the runtime (cudaGetDriverEntryPoint*), so the library links no libcuda:
// the tensor-map encoder of the decode step (decode_ring.cuh) and the current context's id, which keys what the
// library keeps per CUDA context (kernel attributes, func_attr.h; the L2 sweep buffer, l2_flush.cu).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

namespace mha {

// The driver's `name` at ABI `version` (the `_v<version>` of its PFN type), or nullptr when the driver lacks it. A
// failed query leaves no error behind for the caller's launch checks.
template <typename Fn>
Fn driver_entry_point(const char* name, int version)
{
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050 // the versioned query; CUDA 13 deprecates the other
    const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
#else
    (void)version;
    const cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess)
    {
        (void)cudaGetLastError();
        return nullptr;
    }
    return reinterpret_cast<Fn>(fn);
}

// The calling thread's current CUDA context and its id (unique over the process's life: a context made after a
// cudaDeviceReset has another); false, with ctx null and id 0, when there is none or the driver cannot say.
inline bool current_context(CUcontext& ctx, unsigned long long& id)
{
    static const auto get_current = driver_entry_point<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
    static const auto get_id      = driver_entry_point<PFN_cuCtxGetId_v12000>("cuCtxGetId", 12000);
    ctx = nullptr, id = 0;
    if (get_current == nullptr || get_id == nullptr || get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr ||
        get_id(ctx, &id) != CUDA_SUCCESS)
    {
        ctx = nullptr, id = 0;
        return false;
    }
    return true;
}

// The id of the calling thread's current CUDA context, 0 when there is none (current_context).
inline unsigned long long current_context_id()
{
    CUcontext ctx         = nullptr;
    unsigned long long id = 0;
    current_context(ctx, id);
    return id;
}

// Whether the context a handle named when its id was `id` still exists: the driver reports a destroyed context as
// an error, and a handle reused by a later context (a primary context after cudaDeviceReset) has another id.
inline bool context_alive(CUcontext ctx, unsigned long long id)
{
    static const auto get_id = driver_entry_point<PFN_cuCtxGetId_v12000>("cuCtxGetId", 12000);
    unsigned long long now   = 0;
    return get_id != nullptr && get_id(ctx, &now) == CUDA_SUCCESS && now == id;
}

} // namespace mha
