#pragma once
// Arrival counters of the split-KV merge inside the split grid (SplitParams::merge_counters, splitkv_combine.cuh).

#include <cstdint>

namespace mha {

// Counters for `tiles` tiles of a split-KV call on `stream` whose partials go to `o_acc` in the current context's module, with
// counts of zero between calls; nullptr when the pool has no room (the combine kernel merges then). Calls that share
// both run one after the other (same stream) or could not be correct anyway (two calls in flight on one o_acc overwrite
// each other's partials), so two calls in flight never count on the same counters.
unsigned* merge_counters_for(const void* o_acc, const void* stream, int64_t tiles);

} // namespace mha
