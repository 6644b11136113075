#pragma once
// How many thread-block clusters of one-warp decode CTAs the current GPU holds at once (fwd_launch.cuh launches the
// decode step's 7 or 8 splits of a tile as such a cluster); the split heuristic (mha_fwd.cpp) keeps those within one
// wave.

namespace mha {

// Clusters of `cluster` one-warp CTAs of `smem_bytes` dynamic shared memory each, placed with the load-balancing
// policy as fwd_launch.cuh places them, that the current device runs at once (cudaOccupancyMaxActiveClusters; the
// GPCs' SM counts decide it, not the SM count alone: an H100 SXM holds 96 clusters of 8 at 37,888 bytes, not
// 132 x 6 / 8 = 99). Cached per (device, cluster, smem); 0 when it cannot be known (no GPU, a failed query).
int decode_clusters_per_wave(int cluster, int smem_bytes);

// One-warp decode CTAs of `smem_bytes` dynamic shared memory that one SM of the current device holds at once, by shared
// memory alone (the ring kernel's 255 registers allow 8); cached per (device, smem); 0 when it cannot be known.
int decode_ctas_per_sm(int smem_bytes);

} // namespace mha
