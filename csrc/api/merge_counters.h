#pragma once
// Arrival counters of the split-KV merge inside the split grid (SplitParams::merge_counters, splitkv_combine.cuh).

#include <cstdint>

namespace mha {

// Counters for `tiles` tiles of a split-KV call whose partials go to `o_acc` on the current device, zero between
// calls; nullptr when the pool has no room (the combine kernel merges then). Calls that share o_acc share them,
// which is safe because such calls cannot overlap anyway: they would overwrite each other's partials.
unsigned* merge_counters_for(const void* o_acc, int64_t tiles);

} // namespace mha
