// The counters behind SplitParams::merge_counters. A split-KV call whose tiles merge inside the split grid counts its
// CTAs in on one counter per tile, and the last CTA in sets the count back to 0 and advances the counter's generation
// (splitkv_combine.cuh), so a counter's count is 0 whenever no call is using it. They are a __device__ array, zero from
// the module's load: no allocation and no memset, nothing that a CUDA graph capture forbids. Calls that may run at the
// same time must not share counters. Each (array, o_acc address, stream) gets a slot of its own, the array known by its
// address: contexts that share one loaded module (a green context and its primary context: the driver treats a green
// context as the primary one for everything but its resources) share its slots, as they must, while a separate load
// has its own array at its own address (unified addressing keeps addresses unique in the process). A cudaDeviceReset
// unloads the module and the next call's lookup loads it again, always zero, possibly at the same address: when no
// context that used an array is alive any more, its slots are handed out again. Calls on one stream run one after the
// other, and calls in flight on different streams share a slot only if they also share o_acc, which a caller cannot
// do anyway (the partials would collide); keying by the stream too keeps such a mistake from leaving a counter off for
// later calls. When an array's slots run out, calls on new (o_acc, stream) pairs take the combine kernel, which needs
// no counters.

#include "merge_counters.h"

#include "../common/driver_api.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace mha {
namespace {

constexpr int kSlots = 128, kSlotTiles = 1024; // 512 KB per loaded module

__device__ unsigned g_merge_counters[kSlots * kSlotTiles];

} // namespace

unsigned* merge_counters_for(const void* o_acc, const void* stream, int64_t tiles)
{
    if (o_acc == nullptr || tiles < 1 || tiles > kSlotTiles)
        return nullptr;
    // The array's address, looked up on every call (it changes when the module is loaded again after a
    // cudaDeviceReset, or in another context that loads it separately; a cached address could point into a released
    // context). Inside a stream capture (global mode) the lookup, which may load the module, is allowed as a relaxed
    // call.
    unsigned* base = nullptr;
    {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
        {
            (void)cudaGetLastError();
            return nullptr;
        }
        void* ptr = nullptr;
        if (cudaGetSymbolAddress(&ptr, g_merge_counters) != cudaSuccess)
        {
            (void)cudaGetLastError();
            ptr = nullptr;
        }
        cudaThreadExchangeStreamCaptureMode(&mode);
        base = static_cast<unsigned*>(ptr);
    }
    CUcontext ctx         = nullptr;
    unsigned long long id = 0;
    if (base == nullptr || !current_context(ctx, id))
        return nullptr;
    struct Array
    {
        std::vector<std::pair<CUcontext, unsigned long long>> users; // contexts that took slots here
        std::map<std::pair<const void*, const void*>, int> slot_of;  // (o_acc, stream) -> slot
    };
    // Never destroyed: a decode call from a static destructor or an atexit handler still finds them.
    static std::mutex& mu                              = *new std::mutex;
    static std::map<const unsigned*, Array>& arrays    = *new std::map<const unsigned*, Array>;
    std::lock_guard<std::mutex> lock(mu);
    Array& a = arrays[base];
    if (std::find(a.users.begin(), a.users.end(), std::make_pair(ctx, id)) == a.users.end())
    {
        // A context new to this array: a sharing one (its users stay alive), or the module was loaded again at the
        // same address after a reset (none is: every counter is 0 and no call of theirs can be in flight).
        a.users.erase(std::remove_if(a.users.begin(), a.users.end(),
                                     [](const auto& u) { return !context_alive(u.first, u.second); }),
                      a.users.end());
        if (a.users.empty())
            a.slot_of.clear();
        a.users.emplace_back(ctx, id);
    }
    auto slot = a.slot_of.find({o_acc, stream});
    if (slot == a.slot_of.end())
    {
        if (a.slot_of.size() == size_t(kSlots))
            return nullptr;
        const int next = int(a.slot_of.size());
        slot           = a.slot_of.emplace(std::make_pair(o_acc, stream), next).first;
    }
    return base + int64_t(slot->second) * kSlotTiles;
}

} // namespace mha
