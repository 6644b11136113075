// The counters behind SplitParams::merge_counters. A split-KV call whose tiles merge inside the split grid counts its
// CTAs in and out on one counter per tile, and the last CTA out sets it back to 0 (splitkv_combine.cuh), so a counter
// is 0 whenever no call is using it. They are a __device__ array, zero from the module's load: no allocation and no
// memset, nothing that a CUDA graph capture forbids. Calls that may run at the same time must not share counters;
// such calls have different o_acc buffers (two calls on one o_acc would overwrite each other's partials), so each
// o_acc address of a device gets a slot of its own, for the life of the process. When the slots run out, calls on
// new addresses take the combine kernel, which needs no counters.

#include "merge_counters.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

namespace mha {
namespace {

constexpr int kSlots = 128, kSlotTiles = 1024; // 512 KB per device

__device__ unsigned g_merge_counters[kSlots * kSlotTiles];

} // namespace

unsigned* merge_counters_for(const void* o_acc, int64_t tiles)
{
    if (o_acc == nullptr || tiles < 1 || tiles > kSlotTiles)
        return nullptr;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return nullptr;
    static std::mutex mu;
    static std::map<int, unsigned*> base_of;                    // device -> its array
    static std::map<std::pair<int, const void*>, int> slot_of; // (device, o_acc) -> slot
    static std::map<int, int> slots_used;
    std::lock_guard<std::mutex> lock(mu);
    auto base = base_of.find(dev);
    if (base == base_of.end())
    {
        // inside a stream capture (global mode) the lookup, which may load the module, is allowed as a relaxed call
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        void* ptr = nullptr;
        if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess)
        {
            if (cudaGetSymbolAddress(&ptr, g_merge_counters) != cudaSuccess)
                ptr = nullptr;
            cudaThreadExchangeStreamCaptureMode(&mode);
        }
        base = base_of.emplace(dev, static_cast<unsigned*>(ptr)).first;
    }
    if (base->second == nullptr)
        return nullptr;
    auto slot = slot_of.find({dev, o_acc});
    if (slot == slot_of.end())
    {
        int& used = slots_used[dev];
        if (used == kSlots)
            return nullptr;
        slot = slot_of.emplace(std::pair{dev, o_acc}, used++).first;
    }
    return base->second + int64_t(slot->second) * kSlotTiles;
}

} // namespace mha
