// decode_occupancy.h: the occupancy query behind the split heuristic's cluster bound.

#include "decode_occupancy.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

namespace mha {
namespace {

// Stands in for the decode kernel in the query: one warp and the shared memory it is given. The decode CTA's other
// limit, 255 registers per thread, allows 8 CTAs per SM, more than its shared memory (6 at 37,888 bytes), so the
// shared memory decides the occupancy of both.
__global__ void __launch_bounds__(32) decode_footprint_kernel() {}

// One lock for every query on decode_footprint_kernel: each sets its shared-memory limit before asking.
std::mutex& footprint_mutex()
{
    static std::mutex& mu = *new std::mutex; // never destroyed (calls from static destructors)
    return mu;
}

} // namespace

int decode_clusters_per_wave(int cluster, int smem_bytes)
{
    if (cluster < 1 || smem_bytes < 0)
        return 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
    {
        (void)cudaGetLastError();
        return 0;
    }
    static std::map<std::tuple<int, int, int>, int>& cache = *new std::map<std::tuple<int, int, int>, int>;
    const auto key = std::make_tuple(dev, cluster, smem_bytes);
    std::lock_guard<std::mutex> lock(footprint_mutex());
    if (auto it = cache.find(key); it != cache.end())
        return it->second;
    int n = 0;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim          = dim3(1, 1, unsigned(cluster));
    cfg.blockDim         = dim3(32);
    cfg.dynamicSmemBytes = size_t(smem_bytes);
    cudaLaunchAttribute attrs[2]{};
    attrs[0].id                = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x  = 1;
    attrs[0].val.clusterDim.y  = 1;
    attrs[0].val.clusterDim.z  = unsigned(cluster);
    attrs[1].id                = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    attrs[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicyLoadBalancing;
    cfg.attrs    = attrs;
    cfg.numAttrs = 2;
    cudaError_t err = cudaFuncSetAttribute(decode_footprint_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           smem_bytes);
    if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveClusters(&n, decode_footprint_kernel, &cfg);
    if (err != cudaSuccess)
    {
        (void)cudaGetLastError(); // no clusters on this GPU (before sm_90) or no room: unknown
        n = 0;
        // a transient failure (the lazy module load out of memory) is asked again next time, not remembered
        if (err == cudaErrorMemoryAllocation || err == cudaErrorLaunchOutOfResources)
            return n;
    }
    cache[key] = n;
    return n;
}

int decode_ctas_per_sm(int smem_bytes)
{
    if (smem_bytes < 0)
        return 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
    {
        (void)cudaGetLastError();
        return 0;
    }
    static std::map<std::pair<int, int>, int>& cache = *new std::map<std::pair<int, int>, int>;
    const auto key = std::make_pair(dev, smem_bytes);
    std::lock_guard<std::mutex> lock(footprint_mutex());
    if (auto it = cache.find(key); it != cache.end())
        return it->second;
    int n = 0;
    if (cudaFuncSetAttribute(decode_footprint_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_footprint_kernel, 32, size_t(smem_bytes)) !=
            cudaSuccess)
    {
        (void)cudaGetLastError();
        return 0; // not cached: a later call may know
    }
    return cache[key] = n;
}

} // namespace mha

