// The counters behind SplitParams::merge_counters. A split-KV call whose tiles merge inside the split grid counts its
// CTAs in on one counter per tile, and the last CTA in sets the count back to 0 and advances the counter's generation
// (splitkv_combine.cuh), so a counter's count is 0 whenever no call is using it. They are a __device__ array, zero from
// the module's load: no allocation and no memset, nothing that a CUDA graph capture forbids. Calls that may run at the
// same time must not share counters. Each (CUDA context, o_acc address, stream) gets a slot of its own for as long as
// the module stays loaded in that context, i.e. until a cudaDeviceReset (a captured graph keeps its slot's address).
// Contexts, not devices: every context on a device (a cuCtxCreate context, a green context) holds its own copy of the
// array at its own address, so calls alternating between two contexts of one device must neither share slots nor
// take each other's address change for a reload (which would hand out slots still counting). Calls on one stream
// run one after the other, and calls in flight on different streams share a slot only if they also share o_acc, which a
// caller cannot do anyway (the partials would collide); keying by the stream too keeps such a mistake from leaving a
// counter off for later calls. When the slots run out, calls on new (address, stream) pairs take the combine kernel,
// which needs no counters.

#include "merge_counters.h"

#include "../common/driver_api.h"

#include <cuda_runtime.h>

#include <iterator>
#include <map>
#include <mutex>
#include <tuple>

namespace mha {
namespace {

constexpr int kSlots = 128, kSlotTiles = 1024; // 512 KB per context

__device__ unsigned g_merge_counters[kSlots * kSlotTiles];

} // namespace

unsigned* merge_counters_for(const void* o_acc, const void* stream, int64_t tiles)
{
    if (o_acc == nullptr || tiles < 1 || tiles > kSlotTiles)
        return nullptr;
    // The array's address, looked up on every call: cudaDeviceReset unloads the module with the context, and the
    // next call's lookup loads it again, possibly elsewhere and always zero, so a changed address drops the device's
    // slots (a cached address would point into a released context). Inside a stream capture (global mode) the
    // lookup, which may load the module, is allowed as a relaxed call.
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
    // The context the lookup ran in (current now; a context id is never reused in a process). Unknown: no counters.
    const unsigned long long ctx = current_context_id();
    if (base == nullptr || ctx == 0)
        return nullptr;
    using Key = std::tuple<unsigned long long, const void*, const void*>; // (context, o_acc, stream)
    // Never destroyed: a decode call from a static destructor or an atexit handler still finds them.
    static std::mutex& mu                                  = *new std::mutex;
    static std::map<unsigned long long, unsigned*>& base_of = *new std::map<unsigned long long, unsigned*>;
    static std::map<Key, int>& slot_of                     = *new std::map<Key, int>;
    static std::map<unsigned long long, int>& slots_used    = *new std::map<unsigned long long, int>;
    std::lock_guard<std::mutex> lock(mu);
    if (unsigned*& known = base_of[ctx]; known != base)
    {
        known = base; // first call in this context, or the module was loaded again: every counter is 0
        slots_used[ctx] = 0;
        for (auto it = slot_of.begin(); it != slot_of.end();)
            it = std::get<0>(it->first) == ctx ? slot_of.erase(it) : std::next(it);
    }
    auto slot = slot_of.find({ctx, o_acc, stream});
    if (slot == slot_of.end())
    {
        int& used = slots_used[ctx];
        if (used == kSlots)
            return nullptr;
        slot = slot_of.emplace(Key{ctx, o_acc, stream}, used++).first;
    }
    return base + int64_t(slot->second) * kSlotTiles;
}

} // namespace mha
