#pragma once
// Per-CTA %globaltimer stamps of the decode tile, for finding where a short call's time goes. Compiled out unless the
// library is built with -DMHA_STAMPS (scripts/decode_stamps.sh does that, into a scratch directory). With it, lane 0
// of every CTA records the time at the points of fwd_kernel (MHA_STAMP below), and the launcher prints, for the
// split-KV decode launches from the MHA_STAMPS-th call on (environment variable, e.g. MHA_STAMPS=25 for the last
// call of -warmup=5 -repeat=20), the grid's spread at each point (us after the first CTA started: min, p10, p50,
// p90, max), three per-CTA durations and how many CTAs each SM held. The host synchronises after the launch, so the
// timed results of such a build mean nothing; the stamps do.

#include <cuda_runtime.h>

#ifdef MHA_STAMPS
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

#ifdef MHA_STAMPS
namespace mha {
unsigned long long stamps_spin_end(); // csrc/api/l2_flush.cu: when the spin before the timed pass ended
}
#endif

namespace mha::ck {

// The points: CTA start, key count known, first copies issued, first block landed, key loop ended, merge started
// (after the cluster barrier), CTA end, in the cluster merge the splits' LSEs loaded and O stored, (transposed
// decode step) the Q tile landed, the first kernel parameter loaded, the split's block range known, the first
// block issued at entry (kRingEarly), the last block landed, and in the merge inside the grid (splitkv_combine.cuh)
// the partial stored, then "merge" = counted in, "m:lse" = every split in, "m:stored" = its chunks stored. The slot
// after the points holds the SM id.
enum StampPoint
{
    kStampStart,
    kStampKeyCount,
    kStampIssued,
    kStampFirstBlock,
    kStampLoopEnd,
    kStampMerge,
    kStampEnd,
    kStampMergeLse, // cluster merge: the splits' LSEs loaded (merge in the grid: every split counted in)
    kStampStored,   // cluster merge / merge in the grid: O stored
    kStampQ,        // transposed decode step: the Q tile has landed (before the first block's wait)
    kStampParam,    // the first kernel parameter loaded
    kStampRange,    // the split's key block range known
    kStampEarly,    // kRingEarly: this warp's first block issued at kernel entry
    kStampLast,     // the last key block waited for had landed (stamped at every block; the last one stays)
    kStampPartial,  // merge in the grid: this split's partial stored (before it counts itself in)
    kStampPoints
};

#ifdef MHA_STAMPS
constexpr int kStampSlots   = kStampPoints + 1; // the points, then the SM id
constexpr int kStampMaxCtas = 16384;
static __device__ unsigned long long g_mha_stamps[kStampMaxCtas * kStampSlots]; // one per instance file

// This warp's slot: one per warp, so a CTA whose warps are the splits of a tile (SplitParams::warp_splits) records
// each split.
__device__ __forceinline__ unsigned long long stamp_warp()
{
    return (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * (unsigned long long)blockIdx.z)) * (blockDim.x / 32) +
           threadIdx.x / 32;
}

// Per key block of each warp (its first kLandMax blocks, the first kLandWarps warps): when its wait began and when it
// ended (the block had landed), lane 0 only; 4 MB per instance file. Written as MHA_STAMPS_LAND=FILE rows by
// print_stamps.
constexpr int kLandMax = 64, kLandWarps = 4096;
static __device__ unsigned long long g_mha_land[kLandWarps * kLandMax * 2];

__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

__device__ __forceinline__ void land(int i, unsigned long long waited_from, unsigned long long ready)
{
    const unsigned long long cta = stamp_warp();
    if (threadIdx.x % 32 != 0 || cta >= kLandWarps || i >= kLandMax)
        return;
    g_mha_land[(cta * kLandMax + i) * 2]     = waited_from;
    g_mha_land[(cta * kLandMax + i) * 2 + 1] = ready;
}

// `after`: a value the stamp waits for (a load's result), so the stamp is not taken before it has arrived.
__device__ __forceinline__ void stamp(int point, int after = 0)
{
    // The start is read before anything else: the slot's address needs the grid's dimensions and the stamp array's
    // address (constant banks 0 and 4), whose first loads miss (the bank-4 line in DRAM after an L2 sweep); a start
    // taken after them read 0.6-0.9 us late (H100: 4.2-4.5 us after the spin's end against 3.6-3.7 for a probe
    // kernel that reads the timer first).
    unsigned long long t0 = 0;
    if (point == kStampStart)
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0)::"memory");
    const unsigned long long cta = stamp_warp();
    if (threadIdx.x % 32 != 0 || cta >= kStampMaxCtas)
        return;
    // The timer read takes no operands, so an input of its asm would not make it wait for `after`: a volatile
    // store of `after` to the slot does (in-order issue), and the time overwrites it.
    unsigned long long* const slot = &g_mha_stamps[cta * kStampSlots + point];
    unsigned long long t;
    asm volatile("st.volatile.global.u32 [%1], %2;\n\tmov.u64 %0, %%globaltimer;"
                 : "=l"(t)
                 : "l"(slot), "r"(after)
                 : "memory");
    *slot = point == kStampStart ? t0 : t;
    if (point == kStampStart)
    {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        g_mha_stamps[cta * kStampSlots + kStampPoints] = sm;
    }
}
#define MHA_STAMP(...) ::mha::ck::stamp(__VA_ARGS__)

static inline void print_stamps(dim3 grid, int splits)
{
    static int calls = 0;
    const char* from = std::getenv("MHA_STAMPS");
    if (from == nullptr || ++calls < std::atoi(from))
        return;
    const size_t n = std::min<size_t>(size_t(grid.x) * grid.y * grid.z, kStampMaxCtas);
    std::vector<unsigned long long> v(n * kStampSlots);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpyFromSymbol(v.data(), g_mha_stamps, v.size() * sizeof(v[0])) != cudaSuccess)
        return;
    unsigned long long t0 = ~0ull;
    for (size_t i = 0; i < n; ++i)
        t0 = std::min(t0, v[i * kStampSlots]);
    // a point a CTA did not reach keeps an older launch's value: outside [t0, t0 + 10 ms), left out
    auto at = [&](size_t i, int k, double& us) {
        const unsigned long long t = v[i * kStampSlots + k];
        us = (t - t0) * 1e-3;
        return t >= t0 && t - t0 < 10000000ull;
    };
    auto row = [](const char* name, std::vector<double> c) {
        if (c.empty())
            return;
        std::sort(c.begin(), c.end());
        auto q = [&](double f) { return c[std::min(c.size() - 1, size_t(f * c.size()))]; };
        std::printf("[stamps] %-10s n=%5zu %8.2f %8.2f %8.2f %8.2f %8.2f\n", name, c.size(), c[0], q(0.1), q(0.5),
                    q(0.9), c.back());
    };
    std::printf("[stamps] call %d, grid %ux%ux%u, %d splits; us after the first CTA start: min p10 p50 p90 max\n",
                calls, grid.x, grid.y, grid.z, splits);
    // with -flush_cache=1: how long after the spin before this pass the first CTA started (the launch's latency)
    if (const unsigned long long spin = stamps_spin_end(); spin != 0 && spin < t0 && t0 - spin < 1000000ull)
        std::printf("[stamps] first CTA start %.2f us after the spin kernel's end\n", (t0 - spin) * 1e-3);
    const char* names[kStampPoints] = {"start",    "key count", "issued", "first",   "loop end",
                                       "merge",    "end",       "m:lse",  "m:stored", "q landed",
                                       "param",    "range",     "early",   "last",     "partial"};
    for (int k = 0; k < kStampPoints; ++k)
    {
        std::vector<double> c;
        double us;
        for (size_t i = 0; i < n; ++i)
            if (at(i, k, us))
                c.push_back(us);
        row(names[k], c);
    }
    std::vector<double> first_wait, loop, merge_wait, last_math, merge_run, part_store, arrive;
    std::vector<int> per_sm(1024, 0);
    for (size_t i = 0; i < n; ++i)
    {
        double a, b, c, d;
        if (at(i, kStampIssued, a) && at(i, kStampFirstBlock, b))
            first_wait.push_back(b - a);
        if (at(i, kStampFirstBlock, b) && at(i, kStampLoopEnd, c))
            loop.push_back(c - b);
        if (at(i, kStampLoopEnd, c) && at(i, kStampMerge, d))
            merge_wait.push_back(d - c);
        if (at(i, kStampLast, a) && at(i, kStampLoopEnd, c))
            last_math.push_back(c - a);
        if (at(i, kStampMerge, d) && at(i, kStampEnd, c))
            merge_run.push_back(c - d);
        if (at(i, kStampLoopEnd, c) && at(i, kStampPartial, a))
            part_store.push_back(a - c);
        if (at(i, kStampPartial, a) && at(i, kStampMerge, d))
            arrive.push_back(d - a);
        per_sm[v[i * kStampSlots + kStampPoints] % 1024]++;
    }
    row("d:first", first_wait);
    row("d:loop", loop);
    row("d:mwait", merge_wait);
    row("d:lastblk", last_math); // last block landed -> loop end (its math)
    row("d:merge", merge_run);   // merge start -> end
    row("d:partial", part_store); // merge in the grid: loop end -> partial stored
    row("d:arrive", arrive);      // merge in the grid: partial stored -> counted in
    // MHA_STAMPS_RAW=FILE: every CTA's row (CTA index, SM id, the points in ns after t0 or -1) for offline analysis
    if (const char* raw = std::getenv("MHA_STAMPS_RAW"))
        if (FILE* f = std::fopen(raw, "w"))
        {
            for (size_t i = 0; i < n; ++i)
            {
                std::fprintf(f, "%zu %llu", i, v[i * kStampSlots + kStampPoints]);
                for (int k = 0; k < kStampPoints; ++k)
                {
                    double us;
                    std::fprintf(f, " %lld", at(i, k, us) ? (long long)(v[i * kStampSlots + k] - t0) : -1ll);
                }
                std::fprintf(f, "\n");
            }
            std::fclose(f);
        }
    // MHA_STAMPS_LAND=FILE: per warp and key block, ns after t0 of the wait's start and end (-1: no such block)
    if (const char* raw = std::getenv("MHA_STAMPS_LAND"))
        if (FILE* f = std::fopen(raw, "w"))
        {
            const size_t warps = std::min<size_t>(n, kLandWarps);
            std::vector<unsigned long long> l(warps * kLandMax * 2);
            if (cudaMemcpyFromSymbol(l.data(), g_mha_land, l.size() * sizeof(l[0])) == cudaSuccess)
                for (size_t i = 0; i < warps; ++i)
                {
                    std::fprintf(f, "%zu %llu", i, v[i * kStampSlots + kStampPoints]);
                    for (int k = 0; k < 2 * kLandMax; ++k)
                    {
                        const unsigned long long t = l[i * kLandMax * 2 + k];
                        std::fprintf(f, " %lld", t >= t0 && t - t0 < 10000000ull ? (long long)(t - t0) : -1ll);
                    }
                    std::fprintf(f, "\n");
                }
            std::fclose(f);
        }
    std::printf("[stamps] SMs holding k CTAs:");
    for (int k = 1; k <= 64; ++k)
    {
        const int sms = int(std::count(per_sm.begin(), per_sm.end(), k));
        if (sms > 0)
            std::printf(" %d:%d", k, sms);
    }
    std::printf("\n");
}
#define MHA_PRINT_STAMPS(grid, splits) ::mha::ck::print_stamps(grid, splits)
#else
#define MHA_STAMP(...) ((void)0)
#define MHA_PRINT_STAMPS(grid, splits) ((void)0)
#endif

} // namespace mha::ck
