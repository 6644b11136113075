// Kernel attributes (cudaFuncSetAttribute) set once per kernel, attribute, value and CUDA context instead of at
// every call. A launch needs its kernel's dynamic shared-memory limit in the current context; setting it costs about
// half a microsecond of host time (H100, session 33), twice per decode call (the split kernel and its transposed
// step), against 7-10 us for the whole enqueue. The attribute belongs to the context: a cudaDeviceReset, another
// device or a context of the caller's own starts without it, so the cache is keyed by the context's id
// (cuCtxGetId: unique over the process's life, never reused by a later context) and sets again where the id is new.
// Without the driver's context queries (or without a current context) every call sets, as before. Every setting of
// a library kernel's attribute goes through here, so a cached value is the value in force.
#pragma once

#include "driver_api.h"

#include <map>
#include <mutex>
#include <tuple>

namespace mha {

// cudaFuncSetAttribute(fn, attr, value), skipped when this process already set that value in the current context.
// raise_only (a limit): the value in force is never lowered, so one host thread cannot shrink the limit between
// another's setting and its launch; the check and the set then happen under the lock.
inline cudaError_t set_func_attribute(const void* fn, cudaFuncAttribute attr, int value, bool raise_only = false)
{
    using Key = std::tuple<const void*, int, unsigned long long>;
    // never destroyed: a call from another static's destructor at exit still finds them
    static std::mutex& mu          = *new std::mutex;
    static std::map<Key, int>& set = *new std::map<Key, int>; // (kernel, attribute, context id) -> the value in force
    unsigned long long ctx         = current_context_id();
    if (ctx == 0 && raise_only)
    {
        // no current context yet (a thread's first call): a query binds the device's, so that the set takes the locked
        // raise-only path below; setting first could lower a limit another thread raised for its launch
        cudaFuncAttributes fa{};
        if (cudaFuncGetAttributes(&fa, fn) != cudaSuccess)
            (void)cudaGetLastError();
        ctx = current_context_id();
    }
    if (ctx != 0 && raise_only)
    {
        std::lock_guard<std::mutex> lock(mu);
        int& in_force = set[Key(fn, int(attr), ctx)]; // 0 when not yet set here
        if (in_force >= value)
            return cudaSuccess;
        const cudaError_t err = cudaFuncSetAttribute(fn, attr, value);
        if (err == cudaSuccess)
            in_force = value;
        return err;
    }
    if (ctx != 0)
    {
        std::lock_guard<std::mutex> lock(mu);
        const auto it = set.find(Key(fn, int(attr), ctx));
        if (it != set.end() && it->second == value)
            return cudaSuccess;
    }
    const cudaError_t err = cudaFuncSetAttribute(fn, attr, value);
    // the first call of a thread may have made the context just now: ask again before remembering
    const unsigned long long now = ctx != 0 ? ctx : current_context_id();
    if (now != 0)
    {
        std::lock_guard<std::mutex> lock(mu);
        if (err == cudaSuccess)
            set[Key(fn, int(attr), now)] = value;
        else
            set.erase(Key(fn, int(attr), now)); // a failed set may have left any value: set again next time
    }
    return err;
}

template <typename Kernel>
cudaError_t set_func_attribute(Kernel* kernel, cudaFuncAttribute attr, int value)
{
    return set_func_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// The dynamic shared-memory limit a launch of `bytes` needs, raised only: launches of one kernel with different
// sizes from several host threads (a decode step's warp splits and its clusters) never see it shrink.
template <typename Kernel>
cudaError_t set_max_dynamic_smem(Kernel* kernel, int bytes)
{
    return set_func_attribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                              bytes, true);
}

} // namespace mha
