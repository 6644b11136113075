// How fast can each load method stream a decode-sized K / V cache on this GPU? A pure-read probe (no attention math)
// for telling an access-method ceiling from the decode kernel's own costs: decode-shaped streams (each warp reads its
// own K and V regions of `keys` rows of 256 bytes, 32 rows at a time through a two-stage shared-memory ring of its
// own, as csrc/ck/fwd_kernel.cuh's decode step does), one warp per CTA (a one-split call's grid: b=64, 8 KV heads =
// 512 regions) or several (a warp-split call's: b=16, 4 splits = 128 CTAs of 4 warps), the blocks brought in by
//   tma_ef        the tensor copy engine, two 128-byte-wide boxes per block, L2 evict-first (the decode kernel's),
//   tma           the same without the cache hint,
//   tma_row       one 3-d box per block and tensor (64 columns x 2 halves x 32 rows): the block's 8 KB in address
//                 order, evict-first,
//   cpasync       cp.async.cg 16 bytes per lane, each warp instruction 512 consecutive bytes,
//   cpasync_half  the same copies in the order of tma_ef's two boxes (bytes 0-127 of every row, then 128-255),
//   ldg           plain 16-byte streaming loads into registers (32 per lane per block; ptxas keeps 64 registers, so
//                 not all in flight at once), no shared memory,
// then the order the blocks are read in, with bulk copies (bulk_read below):
//   bulk          one 8 KB bulk copy (no tensor map) per block and tensor, each warp its own region (as above),
//   bulk_dyn      blocks claimed at run time from one global counter, region after region: the grid's requests walk
//                 the cache front to back,
//   bulk_dyn_nmaj the same claims, the n-th block of every region first,
//   gG_COPY       static groups of G warps sweeping one region at a time, blocks interleaved (g4 with 4 warps per
//                 CTA: the decode kernel's b=16 warp splits), COPY: bulk, row256 (one 256-byte copy per row into a
//                 padded layout), tmaef, tmarow,
//   dynG          groups of G warps, each group claiming its regions' blocks from its own counter,
//   chunkC[_tmaef] one global counter as bulk_dyn, C consecutive blocks per claim,
//   pacedKW       static: warp w takes blocks w, w + W, ... of the whole cache (region after region) and issues
//                 block g once the grid has consumed g - K W blocks (one global count per consumed block; tma_ef's
//                 copies).
// Every method reads every byte once; the warp folds one word per lane of each landed block (ldg: all it loaded) into
// a printed XOR (so nothing is elided; the ring methods fold the same words). Prints GB/s (K + V bytes / kernel time
// between events, median of 9 after a warm-up, the L2 swept before each run), after a line naming the GPU, its
// driver and how many clusters of 4 such CTAs fit at once.
// Twenty-fourth session, 512 regions of 256 keys (b=16 1k's 67 MB), 128 CTAs of 4 warps: H100 tma_ef 2500-2524,
// tma_row 2530-2554, cpasync 2618-2658, cpasync_half 2554-2557 GB/s; H200 3438 / 3455 / 3610 / 3543. At 16k keys
// the methods are within 1-2% (H200: all 4577-4583). The decode kernel with cp.async fills (branch cpasync-wip) read
// no faster than with tensor copies (H100 b=16 1k-8k, H200 b=16 1k-32k, both layouts): the kernel's b=16 1k time
// is not set by how its loads are issued.
// Twenty-ninth session (five H100s; 512 regions, 128 CTAs of 4 warps unless named): every static order reads the same
// (at 32768 keys, b=16 128k's 8.6 GB: 3034-3129 GB/s over tma_ef, tma_row, cpasync, bulk and gG_*; 132 CTAs or 512
// one-warp CTAs the same), while claims from one global counter read 3161-3184 (bulk_dyn, chunk1, chunk2; +2-3%) at
// 8192 and 32768 keys, in one-warp CTAs too; 2048 keys +1.5-3.5% (3113-3120 vs 2997-3069), 1024 keys +1.5-3%
// (3017-3041 vs 2907-3001); 256 keys (b=16 1k) even. The gain needs few regions in flight and fine claims: dyn128
// (4 regions at once) 3126-3165, dyn32 3046-3140, dyn4 (a counter per CTA) 3009-3050; chunk4 3126-3148, chunk8
// 3117-3127, chunk16 3109-3118. So it is the requests' order at the DRAM (a compact window walked front to back), not
// the balance between SMs (bulk_dyn_nmaj, balanced too: 3106-3112). A static order kept compact by pacing reads as
// much (paced2W 3193-3194 at 32768 keys, 3176 at 8192, 3085 at 2048; paced8W 3122-3136), so the order can be fixed
// (deterministic). The decode kernel (b=16 / b=64 128k: 3100-3139 GB/s) sits between the two; a decode prototype in
// the paced order (branch sweep-wip) did not gain on it. docs/decode_log.md.
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -cudart static -o read_probe scripts/read_probe.cu
//   ./read_probe [keys per region, a multiple of 32; default 16384] [regions; default 512] [warps per CTA; default 1]
#include <cuda.h>
#include "../csrc/common/mbarrier.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                                        \
    do                                                                                                               \
    {                                                                                                                \
        cudaError_t e_ = (x);                                                                                        \
        if (e_ != cudaSuccess)                                                                                       \
        {                                                                                                            \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                        \
            std::exit(1);                                                                                            \
        }                                                                                                            \
    } while (0)

constexpr int kRows = 32, kRowBytes = 256, kBlockBytes = kRows * kRowBytes; // one 32-key block of K or of V
constexpr int kStages = 2;

struct Maps
{
    CUtensorMap k, v;
};

__device__ __forceinline__ uint32_t saddr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void bar_wait(uint32_t bar, int phase) { mha::mbar_wait(bar, uint32_t(phase)); }

// one lane's word of each landed K / V stage, folded into acc
__device__ __forceinline__ uint32_t touch(const char* stage, int lane)
{
    return *reinterpret_cast<const uint32_t*>(stage + lane * 4) ^
           *reinterpret_cast<const uint32_t*>(stage + kBlockBytes + lane * 4);
}

// Each warp of a CTA streams its own region (region = CTA * warps per CTA + warp) through its own two-stage ring in
// the CTA's shared memory (kWarpSmem bytes per warp: the stages, then its barriers).
constexpr int kWarpSmem = kStages * 2 * kBlockBytes + 1024; // 1024-byte aligned stages (128-byte swizzle)

// Tensor copies, issued by the warp's lane 0. kRowBox false: a block of K (or V) is two boxes of 64 columns (128
// bytes) x 32 rows, as the decode kernel's maps have them (each box reads every other 128 bytes of the block); true:
// one 3-d box {64 columns, 2 halves, 32 rows} per tensor, which reads the block's 8 KB in address order.
template <bool kHint, bool kRowBox>
__global__ void tma_read(const __grid_constant__ Maps m, int blocks, uint32_t* out)
{
    extern __shared__ __align__(1024) char smem_all[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, region = blockIdx.x * (blockDim.x / 32) + warp;
    char* smem = smem_all + warp * kWarpSmem;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kStages * 2 * kBlockBytes);
    if (lane == 0)
    {
        for (int s = 0; s < kStages; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(bars + s)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    uint64_t policy = 0;
    if (kHint)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    auto issue = [&](int n, int st) {
        if (lane != 0 || n >= blocks)
            return;
        const uint32_t bar = saddr(bars + st);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(2 * kBlockBytes)
                     : "memory");
        char* dst = smem + st * 2 * kBlockBytes;
        const int row = region * blocks * kRows + n * kRows;
        for (int t = 0; t < 2; ++t) // K, then V
        {
            const uint64_t map = reinterpret_cast<uint64_t>(t == 0 ? &m.k : &m.v);
            if constexpr (kRowBox)
            {
                const uint32_t d = saddr(dst + t * kBlockBytes);
                if (kHint)
                    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                 ".L2::cache_hint [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(d),
                                 "l"(map), "r"(0), "r"(0), "r"(row), "r"(bar), "l"(policy)
                                 : "memory");
                else
                    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(d), "l"(map), "r"(0), "r"(0), "r"(row),
                                 "r"(bar)
                                 : "memory");
            }
            else
            {
                for (int c = 0; c < 2; ++c) // the two 64-column (128-byte) halves
                {
                    const uint32_t d = saddr(dst + t * kBlockBytes + c * (kBlockBytes / 2));
                    if (kHint)
                        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                     ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(d),
                                     "l"(map), "r"(c * 64), "r"(row), "r"(bar), "l"(policy)
                                     : "memory");
                    else
                        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                     " [%0], [%1, {%2, %3}], [%4];" ::"r"(d), "l"(map), "r"(c * 64), "r"(row), "r"(bar)
                                     : "memory");
                }
            }
        }
    };
    for (int s = 0; s < kStages; ++s)
        issue(s, s);
    uint32_t acc = 0;
    for (int n = 0; n < blocks; ++n)
    {
        const int st = n % kStages;
        bar_wait(saddr(bars + st), (n / kStages) & 1);
        acc ^= touch(smem + st * 2 * kBlockBytes, lane);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        issue(n + kStages, st);
    }
    atomicXor(out, acc);
}

// Bulk copies in a chosen order: which blocks each warp reads, and when, separated from how they are copied.
// kOrder (which block a warp's i-th stage holds):
//   0  its own region, front to back (the static partition of the methods above);
//   1  the next block of one counter for the grid, regions one after another: the grid's requests walk the cache
//      front to back in issue order (claimed a block ahead, one global atomic per 16 KB);
//   2  the same counter, the n-th block of every region before any region's (n+1)-th;
//   3  static groups: `group` consecutive warps sweep regions q, q + W / group, ... together, member m taking blocks
//      m, m + group, ... of each (group 4 with 4 warps per CTA is the decode kernel's b=16 interleave);
//   4  the same groups, each claiming its regions' blocks from a counter of its own;
//   5  as 1, in chunks of `group` consecutive blocks per claim;
//   6  static, warp w taking blocks w, w + W, w + 2 W, ... of the whole cache (region after region), paced: a warp
//      issues block g only once the grid has consumed g - `group` blocks (one global count per consumed block), so
//      the warps cannot drift apart (group >= 2 W: a warp's first two blocks go at once, and the lowest pending
//      block can always go; every warp must be resident).
// kCopy (how a block lands): 0 one 8 KB bulk copy per tensor (lane 0); 1 one 256-byte bulk copy per key row and
// tensor, one row per lane, into rows 272 bytes apart (a padded layout ldmatrix reads without bank conflicts, where
// the decode kernel's tensor copies use the 128-byte swizzle); 2 the decode kernel's tensor copies (two 128-byte-wide
// boxes per tensor, L2 evict-first, lane 0); 3 one 3-d box per tensor in address order (tma_row).
constexpr int kPadRow = kRowBytes + 16, kPadBlock = kRows * kPadRow;
constexpr int kWarpSmemPad = (kStages * 2 * kPadBlock + 1023) / 1024 * 1024 + 1024;
template <int kOrder, int kCopy = 0>
__global__ void bulk_read(const char* k, const char* v, int blocks, int regions, unsigned* counter, uint32_t* out,
                          int group, const __grid_constant__ Maps m, const __grid_constant__ Maps m3)
{
    constexpr int kTensorBytes = kCopy == 1 ? kPadBlock : kBlockBytes; // a stage's K, then V
    extern __shared__ __align__(1024) char smem_all[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, region = blockIdx.x * (blockDim.x / 32) + warp;
    char* smem = smem_all + warp * (kCopy == 1 ? kWarpSmemPad : kWarpSmem);
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + (kCopy == 1 ? kWarpSmemPad - 1024 : kStages * 2 * kBlockBytes));
    uint64_t policy = 0;
    if (kCopy == 2)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    if (lane == 0)
    {
        for (int s = 0; s < kStages; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(bars + s)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    const long total = long(blocks) * regions;
    // kOrder 5: the next chunk is claimed when a chunk's first block is taken (lane 0's state)
    long chunk_next = 0, chunk_g = 0;
    int chunk_left = 0;
    if (kOrder == 5 && lane == 0)
        chunk_next = long(atomicAdd(counter, 1u)) * group;
    // the block stage i holds: its index in [0, total) in kOrder's numbering (>= total: none), known to every lane
    auto claim = [&](int i) -> long {
        long g = 0;
        if constexpr (kOrder == 0)
            g = i < blocks ? long(region) * blocks + i : total;
        else if constexpr (kOrder == 3)
        {
            // groups of `group` consecutive warps sweep regions q, q + W / group, ...; member m of a group takes
            // blocks m, m + group, ... of each (blocks and W divisible by group)
            const int per = blocks / group, q = region / group, m = region % group;
            const long r = q + long(regions / group) * (i / per);
            g = r < regions ? r * blocks + m + long(group) * (i % per) : total;
        }
        else if constexpr (kOrder == 4)
        {
            // claims from the group's own counter: its regions q, q + W / group, ... front to back
            const int q = region / group;
            if (lane == 0)
            {
                const long c = atomicAdd(counter + q, 1u), r = q + long(regions / group) * (c / blocks);
                g = r < regions ? r * blocks + c % blocks : total;
            }
        }
        else if constexpr (kOrder == 5)
        {
            if (lane == 0)
            {
                if (chunk_left == 0)
                {
                    chunk_g = chunk_next, chunk_left = group;
                    chunk_next = long(atomicAdd(counter, 1u)) * group;
                }
                g = min(chunk_g++, total);
                --chunk_left;
            }
        }
        else if constexpr (kOrder == 6)
        {
            g = region + long(regions) * i;
            if (g < total && lane == 0)
                while (true)
                {
                    unsigned done;
                    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(done) : "l"(counter) : "memory");
                    if (long(done) + group >= g)
                        break;
                    __nanosleep(32);
                }
            __syncwarp();
        }
        else if (lane == 0)
            g = atomicAdd(counter, 1u);
        return kOrder == 0 || kOrder == 3 || kOrder == 6 ? g : __shfl_sync(0xffffffffu, g, 0);
    };
    auto issue = [&](long g, int st) {
        if (g >= total || (kCopy != 1 && lane != 0))
            return;
        // kOrder 2 numbers blocks n-major: g = n * regions + r
        const long blk = kOrder == 2 ? g % regions * long(blocks) + g / regions : g;
        const long off = blk * kBlockBytes;
        const uint32_t bar = saddr(bars + st);
        if (lane == 0)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(2 * kBlockBytes)
                         : "memory");
        char* dst = smem + st * 2 * kTensorBytes;
        if constexpr (kCopy == 0)
        {
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(saddr(dst)), "l"(k + off), "r"(kBlockBytes), "r"(bar) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(saddr(dst + kBlockBytes)), "l"(v + off), "r"(kBlockBytes), "r"(bar) : "memory");
        }
        else if constexpr (kCopy == 1)
        {
            // the expect_tx above comes first in lane 0's program order; other lanes' copies may complete before
            // it: the barrier's tx count goes negative and the phase still waits for the arrival
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(saddr(dst + lane * kPadRow)), "l"(k + off + lane * kRowBytes), "r"(kRowBytes),
                         "r"(bar) : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(saddr(dst + kPadBlock + lane * kPadRow)), "l"(v + off + lane * kRowBytes),
                         "r"(kRowBytes), "r"(bar) : "memory");
        }
        else
        {
            const int row = int(blk * kRows);
            for (int t = 0; t < 2; ++t)
            {
                if constexpr (kCopy == 3)
                    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                 " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(saddr(dst + t * kBlockBytes)),
                                 "l"(reinterpret_cast<uint64_t>(t == 0 ? &m3.k : &m3.v)), "r"(0), "r"(0), "r"(row),
                                 "r"(bar)
                                 : "memory");
                else
                    for (int c = 0; c < 2; ++c)
                        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                     ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;"
                                     ::"r"(saddr(dst + t * kBlockBytes + c * (kBlockBytes / 2))),
                                     "l"(reinterpret_cast<uint64_t>(t == 0 ? &m.k : &m.v)), "r"(c * 64), "r"(row),
                                     "r"(bar), "l"(policy)
                                     : "memory");
            }
        }
    };
    long held[kStages];
    for (int s = 0; s < kStages; ++s)
        issue(held[s] = claim(s), s);
    uint32_t acc = 0;
    for (int n = 0;; ++n)
    {
        const int st = n % kStages;
        if (held[st] >= total) // claims grow along a warp's sequence: nothing later either
            break;
        bar_wait(saddr(bars + st), (n / kStages) & 1);
        const char* stage = smem + st * 2 * kTensorBytes;
        acc ^= *reinterpret_cast<const uint32_t*>(stage + lane * 4) ^
               *reinterpret_cast<const uint32_t*>(stage + kTensorBytes + lane * 4);
        if (kOrder == 6 && lane == 0)
            asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        issue(held[st] = claim(n + kStages), st);
    }
    atomicXor(out, acc);
}

// cp.async.cg of 16 bytes per lane: a block of K and V is 2 x 8 KB = 32 copies per lane. kHalves false: each warp
// instruction copies 512 consecutive bytes (two rows); true: the order of the tensor copies' two boxes (bytes 0-127
// of every row, then 128-255), each half stored as its box would be.
template <bool kHalves>
__global__ void cpasync_read(const char* k, const char* v, int blocks, uint32_t* out)
{
    extern __shared__ __align__(1024) char smem_all[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, region = blockIdx.x * (blockDim.x / 32) + warp;
    char* smem = smem_all + warp * kWarpSmem;
    const size_t base = size_t(region) * blocks * kBlockBytes;
    auto issue = [&](int n, int st) {
        if (n < blocks)
        {
            char* dst = smem + st * 2 * kBlockBytes;
            const size_t off = base + size_t(n) * kBlockBytes;
            for (int i = lane * 16; i < kBlockBytes; i += 32 * 16)
            {
                // i: offset in the stage; g: the byte it copies, relative to the block
                const int g = kHalves ? (i / (kBlockBytes / 2)) * 128 + (i % (kBlockBytes / 2)) / 128 * kRowBytes +
                                            i % 128
                                      : i;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(dst + i)), "l"(k + off + g)
                             : "memory");
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(dst + kBlockBytes + i)),
                             "l"(v + off + g)
                             : "memory");
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    for (int s = 0; s < kStages; ++s)
        issue(s, s);
    uint32_t acc = 0;
    for (int n = 0; n < blocks; ++n)
    {
        const int st = n % kStages;
        asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 1) : "memory");
        __syncwarp();
        // each lane reads words other lanes copied (as the MMA's ldmatrix would)
        acc ^= touch(smem + st * 2 * kBlockBytes, (lane + 1) % 32);
        __syncwarp();
        issue(n + kStages, st);
    }
    atomicXor(out, acc);
}

// plain 16-byte loads, a block's K and V (32 per lane) in flight at once
__global__ void ldg_read(const uint4* k, const uint4* v, int blocks, uint32_t* out)
{
    const int lane = threadIdx.x % 32, region = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const size_t base = size_t(region) * blocks * (kBlockBytes / 16);
    uint32_t acc = 0;
    for (int n = 0; n < blocks; ++n)
    {
        uint4 r[2 * kBlockBytes / 16 / 32];
        const size_t off = base + size_t(n) * (kBlockBytes / 16);
#pragma unroll
        for (int i = 0; i < kBlockBytes / 16 / 32; ++i)
        {
            r[2 * i]     = __ldcs(k + off + i * 32 + lane);
            r[2 * i + 1] = __ldcs(v + off + i * 32 + lane);
        }
#pragma unroll
        for (int i = 0; i < 2 * kBlockBytes / 16 / 32; ++i)
            acc ^= r[i].x ^ r[i].y ^ r[i].z ^ r[i].w;
    }
    atomicXor(out, acc);
}

__global__ void sweep(const uint4* buf, size_t n, uint32_t* sink)
{
    uint32_t a = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    {
        const uint4 x = __ldcg(buf + i);
        a ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    if (a == 0x9e3779b9u)
        *sink = a;
}

int main(int argc, char** argv)
{
    const int keys  = argc > 1 ? std::atoi(argv[1]) : 16384;
    const int warps = argc > 2 ? std::atoi(argv[2]) : 512;
    const int per   = argc > 3 ? std::atoi(argv[3]) : 1;
    if (argc > 4 || keys < kRows || keys % kRows != 0 || warps < 1 || per < 1 || per > 6 || warps % per != 0 ||
        int64_t(keys) * warps > (int64_t(1) << 31))
    {
        std::fprintf(stderr,
                     "usage: read_probe [keys per region: a multiple of %d] [regions (streaming warps) >= 1] [warps per "
                     "CTA: 1 to 6, dividing the regions] (keys x regions < 2^31)\n",
                     kRows);
        return 2;
    }
    const int blocks = keys / kRows, ctas = warps / per;
    const size_t bytes = size_t(warps) * blocks * kBlockBytes; // of K, and of V
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    char *k, *v;
    uint32_t* out;
    CK(cudaMalloc(&k, bytes));
    CK(cudaMalloc(&v, bytes));
    CK(cudaMalloc(&out, 4));
    // distinct patterns in K and V (their words do not cancel in the printed XOR)
    std::vector<uint32_t> h(bytes / 4);
    for (size_t i = 0; i < h.size(); ++i)
        h[i] = uint32_t(i * 2654435761u);
    CK(cudaMemcpy(k, h.data(), bytes, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < h.size(); ++i)
        h[i] = uint32_t(i * 2246822519u + 7u);
    CK(cudaMemcpy(v, h.data(), bytes, cudaMemcpyHostToDevice));
    const size_t sweep_n = size_t(prop.l2CacheSize) * 4 / 16;
    uint4* sw;
    CK(cudaMalloc(&sw, sweep_n * 16));
    CK(cudaMemset(sw, 0, sweep_n * 16));

    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    // maps[0]: 2-d, boxes of 64 columns x 32 rows; maps[1]: 3-d (64 columns, 2 halves, rows), boxes of the whole block
    Maps maps[2];
    for (int t = 0; t < 4; ++t)
    {
        void* base = t % 2 == 0 ? k : v;
        CUtensorMap* map = t % 2 == 0 ? &maps[t / 2].k : &maps[t / 2].v;
        const cuuint64_t rows = bytes / kRowBytes;
        cuuint64_t dims2[2] = {128, rows}, strides2[1] = {kRowBytes}, dims3[3] = {64, 2, rows},
                   strides3[2] = {128, kRowBytes};
        cuuint32_t box2[2] = {64, kRows}, box3[3] = {64, 2, kRows}, unit[3] = {1, 1, 1};
        const bool row_box = t >= 2;
        if (encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, row_box ? 3 : 2, base, row_box ? dims3 : dims2,
                   row_box ? strides3 : strides2, row_box ? box3 : box2, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        {
            std::fprintf(stderr, "tensor map encode failed\n");
            return 1;
        }
    }
    const int smem = per * kWarpSmem;
    CK(cudaFuncSetAttribute(tma_read<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(tma_read<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(tma_read<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(cpasync_read<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(cpasync_read<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<5>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<5, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<6, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const int smem_pad = per * kWarpSmemPad;
    CK(cudaFuncSetAttribute(bulk_read<3, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_pad));
    CK(cudaFuncSetAttribute(bulk_read<3, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(bulk_read<3, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    unsigned* counter;
    CK(cudaMalloc(&counter, 4 * warps));

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    // what tells one machine of a kind from another: the driver, and how many 4-CTA clusters of these CTAs fit at
    // once (the decode kernel's one-split calls launch placement clusters of 4)
    int driver = 0, clusters = 0;
    CK(cudaDriverGetVersion(&driver));
    {
        cudaLaunchConfig_t cfg{};
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = 4, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
        cfg.gridDim = dim3(ctas), cfg.blockDim = dim3(32 * per), cfg.dynamicSmemBytes = smem;
        cfg.attrs = &attr, cfg.numAttrs = 1;
        if (ctas % 4 != 0 || cudaOccupancyMaxActiveClusters(&clusters, tma_read<true, false>, &cfg) != cudaSuccess)
            clusters = -1, (void)cudaGetLastError();
    }
    std::printf("# %s, %d SMs, L2 %d MB, driver %d, %d clusters of 4 at once: %d regions x %d keys x 256 B (K and V, "
                "%.2f GB), %d CTAs of %d warps\n",
                prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, driver, clusters, warps, keys,
                2.0 * bytes / 1e9, ctas, per);
    const char* names[] = {"tma_ef", "tma", "tma_row", "cpasync", "cpasync_half", "ldg", "bulk", "bulk_dyn",
                           "bulk_dyn_nmaj"};
    // the paced order needs every CTA resident at once
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bulk_read<6, 2>, 32 * per, smem));
    const bool all_resident = int64_t(per_sm) * prop.multiProcessorCount >= ctas;
    // then groups of warps sweeping regions together (bulk_read kOrder 3, static; 4, claimed at run time)
    const int sgroups[] = {1, 4, 8}, dgroups[] = {4, 32, 128, 512}, chunks[] = {1, 2, 4, 8, 16, 32},
              slacks[] = {2, 3, 4, 8}; // paced: slack in multiples of W
    const char* copies[] = {"bulk", "row256", "tmaef", "tmarow"};
    for (int meth = 0; meth < 9 + 12 + 4 + 12 + 4; ++meth)
    {
        const int group = meth < 9    ? 0
                          : meth < 21 ? sgroups[(meth - 9) % 3]
                          : meth < 25 ? dgroups[meth - 21]
                          : meth < 37 ? chunks[(meth - 25) % 6]
                                      : slacks[meth - 37] * warps;
        const int copy  = meth < 9 || meth >= 21 ? 0 : (meth - 9) / 3;
        if (meth >= 9 && meth < 25 && (blocks % group != 0 || warps % group != 0))
            continue;
        if (meth >= 37 && !all_resident) // the paced order waits on every warp: it would hang
        {
            if (meth == 37)
                std::printf("# paced orders skipped: the %d CTAs do not all fit at once\n", ctas);
            continue;
        }
        char name[32];
        std::snprintf(name, sizeof name, "%s", meth < 9 ? names[meth] : "");
        if (meth >= 9 && meth < 37)
            std::snprintf(name, sizeof name, meth < 21 ? "g%d_%s" : meth < 25 ? "dyn%d" : "chunk%d%s", group,
                          meth < 21 ? copies[copy] : meth < 31 ? "" : "_tmaef");
        if (meth >= 37)
            std::snprintf(name, sizeof name, "paced%dW", slacks[meth - 37]);
        std::vector<float> ms;
        for (int it = 0; it < 10; ++it)
        {
            sweep<<<prop.multiProcessorCount * 4, 512>>>(sw, sweep_n, out);
            CK(cudaMemset(out, 0, 4));
            CK(cudaMemset(counter, 0, 4 * warps));
            CK(cudaEventRecord(e0));
            const dim3 grid(ctas), block(32 * per);
            if (meth == 0)
                tma_read<true, false><<<grid, block, smem>>>(maps[0], blocks, out);
            else if (meth == 1)
                tma_read<false, false><<<grid, block, smem>>>(maps[0], blocks, out);
            else if (meth == 2)
                tma_read<true, true><<<grid, block, smem>>>(maps[1], blocks, out);
            else if (meth == 3)
                cpasync_read<false><<<grid, block, smem>>>(k, v, blocks, out);
            else if (meth == 4)
                cpasync_read<true><<<grid, block, smem>>>(k, v, blocks, out);
            else if (meth == 6)
                bulk_read<0><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, 1, maps[0], maps[1]);
            else if (meth == 7)
                bulk_read<1><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, 1, maps[0], maps[1]);
            else if (meth == 8)
                bulk_read<2><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, 1, maps[0], maps[1]);
            else if (meth >= 37)
                bulk_read<6, 2><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 31)
                bulk_read<5, 2><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 25)
                bulk_read<5><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 21)
                bulk_read<4><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 9 && copy == 0)
                bulk_read<3><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 9 && copy == 1)
                bulk_read<3, 1><<<grid, block, smem_pad>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 9 && copy == 2)
                bulk_read<3, 2><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else if (meth >= 9 && copy == 3)
                bulk_read<3, 3><<<grid, block, smem>>>(k, v, blocks, warps, counter, out, group, maps[0], maps[1]);
            else
                ldg_read<<<grid, block>>>(reinterpret_cast<const uint4*>(k), reinterpret_cast<const uint4*>(v),
                                          blocks, out);
            CK(cudaGetLastError());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            if (it > 0)
                ms.push_back(t);
        }
        uint32_t got;
        CK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
        std::sort(ms.begin(), ms.end());
        std::printf("%-12s %8.1f GB/s  (median %.4f ms, min %.4f)  xor %08x\n", name,
                    2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9, ms[ms.size() / 2], ms[0], got);
    }
    return 0;
}
