#pragma once
// The ck forward kernel: FlashAttention-2-style tiling with CuTe's SM80 mma.sync atoms (runs on sm_80 and newer).
// One CTA computes a kBlockM x hdim_v tile of O for one (batch, head): Q stays in shared memory, K and V tiles stream
// through with cp.async (V[n] loads while S = Q K[n]^T computes, K[next] loads while softmax and O += P V[n] run),
// and the online softmax keeps O in fp32 registers. Key blocks are visited last-to-first so the partial / masked
// blocks come first and the rest run without elementwise masking; sink-token blocks left of a sliding window last.

#include "../common/fwd_params.h"
#include "../common/mask.h"
#include "decode_ring.cuh"
#include "decode_t.cuh"
#include "fwd_features.cuh"
#include "fwd_traits.cuh"
#include "fwd_utils.cuh"
#include "seq_info.cuh"
#include "splitkv_combine.cuh"
#include "stamps.cuh"

#include <climits>

namespace mha::ck {

// kDecodeT: the ring instance (sm_90 split-KV decode) compiled for the transposed step of tiles of at most 8 rows
// alone; fwd_launch.cuh launches it only for such calls, and the other instance of the same traits has every other
// path. With all paths in one kernel (bf16 d128: ~270 KB of SASS) the transposed step's first wait sat ~210 KB past
// the set-up that issues the first copies. When another kernel's code had displaced ours from the instruction caches
// (a torch or CuPy reduction, cuDNN's attention kernel; not a GEMM, an elementwise kernel or the L2 sweep), the warp
// fetched that code behind the grid's first 16 MB of K / V at the DRAM, and the first block landed ~4.5 us late
// (H100, per-CTA stamps: 8.4-10.5 us after the first CTA start instead of 3.4-4.5). The kDecodeT instance is ~106
// KB with its first wait 32 KB past the first copies (first block at 3.8 us either way). docs/decode_log.md.
// With p.split.warp_splits > 1 a kDecodeT CTA has that many warps, each one split of the tile (a one-warp CTA's
// shared memory each, kWarpSmemBytes apart), and they merge in shared memory (cluster_merge, in_cta).
// kDecodeT is the step's count of 8-row N tiles: 1 for tiles of at most 8 rows (a decode step of up to 8 query heads
// per KV head), 2 for at most 16 (a speculative-decode step: 3 or 4 queries of 4 packed heads), a separate instance
// so the 8-row step's code and registers stay as they are; 0 is the instance with every other path.
template <typename Kt, int kDecodeT = 0>
__global__ void __launch_bounds__(kDecodeT ? 32 * kWarpMergeMaxSplits : Kt::kNThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p)
{
    static_assert(!kDecodeT || Kt::kRing, "the transposed-step instance is a ring instance");
    using Element = typename Kt::Element;
    constexpr int kBlockM   = Kt::kBlockM;
    constexpr int kBlockN   = Kt::kBlockN;
    constexpr int kHeadDim  = Kt::kHeadDim;
    constexpr int kHeadDimV = Kt::kHeadDimV;

    extern __shared__ __align__(1024) char smem_cta[];
    // kDecodeT: this warp's split of the tile when the splits are warps (warp_splits), else warp 0 of one
    const int warp = kDecodeT ? int(threadIdx.x / 32) : 0;
    char* const smem_raw = smem_cta + warp * Kt::kWarpSmemBytes;
    MHA_STAMP(kStampStart);
    MHA_STAMP(kStampParam, p.seqlen_k);
#if MHA_DECODE_TMA
    // kRingEarly (kDecodeT; the launcher keeps it only for calls whose first blocks follow from the kernel
    // parameters and at most two dependent loads: fwd_launch.cuh): each warp's first key block leaves now, before
    // the setup below (which takes ~1.4 us of dependent parameter and instruction fetches on an H100), into ring
    // stage 0. The setup then computes the same block as its first (n_first) and skips that copy. The split is this
    // warp (warp splits) or this CTA's (grid splits: z = batch * num_splits + split), its range the setup's: per =
    // ceil(blocks / splits) blocks each. A batch's key count comes from the cache's per-batch counts when the call
    // has them, and a paged cache's pages from its block table (one load per box, as the setup's fetch_page).
    DecodeRing<Kt::kKvStages> ring;
    bool early = false;
    if constexpr (kDecodeT && !MHA_DECODE_CLAIM)
        if (p.split.ring_flags & kRingEarly)
        {
            const bool warp_split = p.split.warp_splits > 1;
            const int batch = warp_split ? int(blockIdx.z) : p.split.splits_div.div(int(blockIdx.z));
            const int split = warp_split ? warp : int(blockIdx.z) - batch * p.split.num_splits;
            // its first block n0 (at least lo) when the batch holds `keys` keys; a partial block (rows past the key
            // count) takes the setup's row-by-row copy
            auto first_block = [&](int keys, int& n0) {
                const int nblocks = (keys + kBlockN - 1) / kBlockN;
                int lo = 0;
                n0 = nblocks - 1 - split; // interleaved splits: split s's first block
                const int32_t il = p.split.ring_flags & (kRingInterleave | kRingInterleaveGrid);
                if (!(il & kRingInterleave) || (!warp_split && !(il & kRingInterleaveGrid)))
                {
                    const int per = p.split.splits_div.div(nblocks + p.split.num_splits - 1);
                    lo = split * per, n0 = min(lo + per, nblocks) - 1;
                }
                return n0 >= lo && (n0 + 1) * kBlockN <= keys && smem_addr(smem_raw) % 1024 == 0;
            };
            // stage 0's barrier armed for the whole block, then this lane's box (if it has one) into block row
            // `first`, from key row `row` of `outer` (the batch, or a page)
            auto first_copies = [&](int row, int outer, int first, bool has_box) {
                const int lane = int(threadIdx.x % 32);
                ring.init(smem_raw + Kt::kSmemBarOffset, lane);
                constexpr int kStageBytes = kBlockN * (kHeadDim + kHeadDimV) * int(sizeof(Element));
                ring.arm(0, uint32_t(kStageBytes), lane);
                if (has_box)
                {
                    Element* const k_dst = reinterpret_cast<Element*>(smem_raw) + Kt::kSmemQOElems + first * Kt::kAtomQ;
                    Element* const v_dst = reinterpret_cast<Element*>(smem_raw) + Kt::kSmemQOElems +
                                           Kt::kSmemKElems + first * Kt::kAtomV;
                    const int head = int(blockIdx.y);
                    CUTE_UNROLL
                    for (int c = 0; c < kHeadDim / Kt::kAtomQ; ++c)
                        ring.load(k_dst + c * kBlockN * Kt::kAtomQ, p.kv.tma_k, c * Kt::kAtomQ, row, head, outer, 0);
                    CUTE_UNROLL
                    for (int c = 0; c < kHeadDimV / Kt::kAtomV; ++c)
                        ring.load(v_dst + c * kBlockN * Kt::kAtomV, p.kv.tma_v, c * Kt::kAtomV, row, head, outer, 0);
                }
                MHA_STAMP(kStampEarly);
            };
            int n0 = 0;
            if (__builtin_expect(!(p.split.ring_flags & kRingEarlyTables), 1))
            {
                // dense, seqlen_k keys in every batch: one box of kBlockN rows per atom column, from lane 0
                early = first_block(p.seqlen_k, n0);
                if (early)
                    first_copies(n0 * kBlockN, batch, 0, threadIdx.x % 32 == 0);
            }
            else
            {
                // the batch's own key count, and a paged cache's pages of 2^k keys from its block table: boxes of
                // tma_box_rows rows (all of a block, or as much as stays inside one page), one per lane
                // (the batch's key count clamped to the cache's, as SeqInfo::apply_kv_cache clamps it)
                const int keys = p.kv.seqlen_k ? max(0, min(p.kv.seqlen_k[batch], p.seqlen_k)) : p.seqlen_k;
                early = first_block(keys, n0);
                if (early)
                {
                    const int first = int(threadIdx.x % 32) * p.kv.tma_box_rows, ps = p.kv.page_size;
                    int row = n0 * kBlockN + first, outer = batch;
                    if (ps > 0 && first < kBlockN)
                    {
                        const int32_t* pages = p.kv.block_table + int64_t(batch) * p.kv.block_table_batch_stride;
                        outer = pages[row >> (__ffs(ps) - 1)];
                        row &= ps - 1;
                    }
                    first_copies(row, outer, first, first < kBlockN);
                }
            }
        }
#endif
    if constexpr (Kt::kSplit)
        grid_launch_dependents(); // the combine kernel may launch now; it waits for this grid to finish
#if MHA_DECODE_TMA
    // The ring's tensor maps live in the kernel parameters: their first fetch by the copy engine overlaps the
    // setup below instead of delaying the first key block. One lane issues all four from uniform addresses (a
    // per-lane select of the map compiled to a jump table and a loop over the lanes).
    if constexpr (Kt::kRing)
        if (p.kv.tma_box_rows > 0 && threadIdx.x == 0)
        {
            prefetch_tensormap(p.kv.tma_k);
            prefetch_tensormap(p.kv.tma_v);
            prefetch_tensormap(p.kv.tma_k1);
            prefetch_tensormap(p.kv.tma_v1);
        }
#endif

    const int tidx   = kDecodeT ? int(threadIdx.x % 32) : int(threadIdx.x);
    // Heavier row blocks first when masked (a causal mask makes later row blocks longer): shortens the tail.
    const int m_block = p.mask.is_none() ? blockIdx.x : gridDim.x - 1 - blockIdx.x;
    const int bidh    = blockIdx.y; // query head; with packing (kSplit, pack_ratio > 1) the KV head
    int bidb = blockIdx.z, split = 0;
    if constexpr (Kt::kSplit)
    {
        // (batch, split) from z = batch * num_splits + split; warp splits: z = blockIdx.z * num_splits + warp
        const int z = kDecodeT && p.split.warp_splits > 1 ? int(blockIdx.z) * p.split.warp_splits + warp
                                                          : int(blockIdx.z);
        bidb  = p.split.splits_div.div(z);
        split = z - bidb * p.split.num_splits;
    }
    const int pack   = Kt::kSplit ? p.split.pack_ratio : 1; // query heads per tile row group
    const int bidh_k = pack > 1 ? bidh : bidh / p.head_ratio;

    SeqInfo seq(p, bidb);
    if constexpr (Kt::kSplit)
        seq.apply_kv_cache(p, bidb);
    const int seqlen_q = seq.seqlen_q;
    const int seqlen_k = seq.seqlen_k;
    MHA_STAMP(kStampKeyCount, seqlen_k);
    const int rows_q   = seqlen_q * pack; // tile rows: (query, packed head) pairs
    const int m_begin  = m_block * kBlockM;
    if (m_begin >= rows_q || (p.seq.is_group && p.seq.min_seqlen_q > 0 && seqlen_q <= p.seq.min_seqlen_q))
        return;
    // kDecodeT: at most 8 x kDecodeT rows (the launcher checked max_seqlen_q x pack against that; a group-mode batch
    // longer than the max_seqlen_q it was given gets its first rows, as the grid gives it its first kBlockM otherwise)
    const int m_end = min(m_begin + (kDecodeT ? 8 * kDecodeT : kBlockM), rows_q);
    // query position of tile row r (rows m_begin + r); identity unless heads are packed
    auto q_pos = [&](int r) { return Kt::kSplit ? (m_begin + r) / pack : m_begin + r; };
    const int q_begin = q_pos(0), q_end = q_pos(m_end - m_begin - 1) + 1, q_tile_end = q_pos(kBlockM - 1) + 1;

    // Visited key blocks, last to first: the window [n_block_min, n_block_max), then sink blocks [0, n_sink_end)
    // that lie left of it. A split keeps the part inside its own block range [n_lo, n_hi).
    const WindowMask mask = WindowMask::make(p.mask, seqlen_q, seqlen_k);
    const MaskRange nr    = mask.range(q_begin, q_end);
    int n_lo = 0, n_hi = INT_MAX;
    // kDecodeT with warp splits and MHA_DECODE_CLAIM (off by default: not deterministic, decode_t.cuh): the warps of
    // the CTA claim the tile's key blocks at run time instead of each taking a fixed range (decode ring below)
    const bool claim = MHA_DECODE_CLAIM && kDecodeT && p.split.warp_splits > 1;
    // kDecodeT with warp splits and kRingInterleave (the host's choice, fwd_params.h): split s (warp s) takes blocks
    // s, s + S, s + 2 S, ... of the tile's order (S = num_splits) instead of a contiguous range, a fixed partition
    // still; with kRingInterleaveGrid too the splits that are CTAs do the same
    const int stride = kDecodeT && !claim && p.split.num_splits > 1 && (p.split.ring_flags & kRingInterleave) &&
                               (p.split.warp_splits > 1 || (p.split.ring_flags & kRingInterleaveGrid))
                           ? p.split.num_splits
                           : 1;
    if constexpr (Kt::kSplit)
    {
        const int per = p.split.splits_div.div((seqlen_k + kBlockN - 1) / kBlockN + p.split.num_splits - 1);
        n_lo = claim || stride > 1 ? 0 : split * per;
        n_hi = claim || stride > 1 ? INT_MAX : n_lo + per;
    }
    const int n_block_min = max(nr.n_begin / kBlockN, n_lo);
    const int n_block_max = min(nr.n_end > nr.n_begin ? (nr.n_end + kBlockN - 1) / kBlockN : 0, n_hi);
    const int n_sink_end  = min(min((mask.sink_end(q_end) + kBlockN - 1) / kBlockN, nr.n_begin / kBlockN), n_hi);
    // claim: the i-th block of that order (-1 past the last)
    const int n_window = max(n_block_max - n_block_min, 0), n_claims = n_window + max(n_sink_end, 0);
    auto claimed_block = [&](int i) {
        return i >= n_claims ? -1 : i < n_window ? n_block_max - 1 - i : n_sink_end - 1 - (i - n_window);
    };
    auto next_block = [&](int n) {
        if (stride > 1) // n's place in the order, then stride places on
            return claimed_block((n >= n_block_min ? n_block_max - 1 - n : n_window + n_sink_end - 1 - n) + stride);
        return n == n_block_min ? n_sink_end - 1 : n - 1;
    };
    const int n_first = stride > 1                   ? claimed_block(split)
                        : n_block_max > n_block_min ? n_block_max - 1
                                                    : n_sink_end - 1;

    MHA_STAMP(kStampRange, n_first);
    // ---- global tensors of this (batch, head), offsets in 64 bits ----
    int64_t kv_batch = bidb; // dense K/V cache row (cache_batch_idx remaps it)
    const int32_t* pages = nullptr; // paged K/V: this batch's page ids
    int page_size = 0;
    if constexpr (Kt::kSplit)
    {
        if (p.kv.cache_batch_idx != nullptr)
            kv_batch = p.kv.cache_batch_idx[bidb];
        page_size = p.kv.page_size;
        if (page_size > 0)
            pages = p.kv.page_indptr ? p.kv.page_indices + p.kv.page_indptr[bidb]
                                     : p.kv.block_table + bidb * p.kv.block_table_batch_stride;
    }
    // Decode tile on sm_90 with tensor maps (decode_ring.cuh): its first blocks are issued here, ahead of the Q copy
    // and the rest of the setup (H200, %globaltimer stamps: the first copy leaves 1.6 us after the CTA starts instead
    // of 2.5; b=1 8k +9-12%, b=16 1k +4%).
    // Its boxes land in 1024-byte swizzle periods, so the stages must start on 1024-byte boundaries.
    constexpr int kStageElems = Kt::kSmemKElems + Kt::kSmemVElems;
    const bool use_ring = Kt::kRing && MHA_DECODE_TMA && p.kv.tma_box_rows > 0 && smem_addr(smem_raw) % 1024 == 0;
#if MHA_DECODE_TMA
    if constexpr (Kt::kRing)
        if (use_ring && !early)
            ring.init(smem_raw + Kt::kSmemBarOffset, tidx);
    static_assert(!Kt::kRing || kBlockN <= 32, "one box (or one row) per lane");
    // stage st: K, then V, at st * kStageElems
    Element* const s_kv = reinterpret_cast<Element*>(smem_raw) + Kt::kSmemQOElems;
    const int box_r     = p.kv.tma_box_rows;
    const int row_base  = p.seq.is_group ? int(seq.k_row0) : 0;
    const int outer     = p.seq.is_group ? 0 : int(kv_batch);
    auto rows_of = [&](int n_block) { return min(kBlockN, seqlen_k - n_block * kBlockN); };
    // key j's page and row in it: shifts for the usual power-of-two page sizes (a division is ~20 dependent
    // instructions, and this warp issues one every ~5 cycles)
    const int page_shift = page_size > 0 && (page_size & (page_size - 1)) == 0 ? __ffs(page_size) - 1 : -1;
    auto page_index = [&](int j) { return page_shift >= 0 ? j >> page_shift : j / page_size; };
    auto page_row   = [&](int j) { return page_shift >= 0 ? j & (page_size - 1) : j % page_size; };
    int page_of = 0; // paged: the page of this lane's box in block n_issue
    auto fetch_page = [&](int n_block) {
        if (n_block < n_lo)
            return;
        const int rows = rows_of(n_block), r = rows == kBlockN ? box_r : 1;
        const int first = tidx * r, j = n_block * kBlockN + first;
        page_of = first < rows ? pages[page_index(j)] : 0;
    };
    // Copies block n_block into stage st; rows past seqlen_k are zeroed instead (P is 0 there, and 0 times
    // stale bits must not make a NaN).
    auto issue = [&](int n_block, int st) {
        const int rows = rows_of(n_block);
        const bool full = rows == kBlockN;
        const int r = full ? box_r : 1, boxes = full ? kBlockN >> (__ffs(box_r) - 1) : rows; // box_r: 2^k
        ring.arm(st, uint32_t(boxes * r * (kHeadDim + kHeadDimV) * int(sizeof(Element))), tidx);
        Element* const k_dst = s_kv + st * kStageElems;
        Element* const v_dst = k_dst + Kt::kSmemKElems;
        if (tidx < boxes)
        {
            const int first = tidx * r, j = n_block * kBlockN + first;
            const int c1 = row_base + (page_size > 0 ? page_row(j) : j);
            const int c3 = page_size > 0 ? page_of : outer;
            const TmaDesc& mk = full ? p.kv.tma_k : p.kv.tma_k1;
            const TmaDesc& mv = full ? p.kv.tma_v : p.kv.tma_v1;
            CUTE_UNROLL
            for (int c = 0; c < kHeadDim / Kt::kAtomQ; ++c)
                ring.load(k_dst + (c * kBlockN + first) * Kt::kAtomQ, mk, c * Kt::kAtomQ, c1, bidh_k, c3, st);
            CUTE_UNROLL
            for (int c = 0; c < kHeadDimV / Kt::kAtomV; ++c)
                ring.load(v_dst + (c * kBlockN + first) * Kt::kAtomV, mv, c * Kt::kAtomV, c1, bidh_k, c3, st);
        }
        if (!full) // a row of one atom column is kAtom contiguous elements (the swizzle stays inside it)
            for (int i = rows + tidx; i < kBlockN; i += 32)
            {
                CUTE_UNROLL
                for (int c = 0; c < kHeadDim / Kt::kAtomQ; ++c)
                    zero_row(k_dst + (c * kBlockN + i) * Kt::kAtomQ, Kt::kAtomQ);
                CUTE_UNROLL
                for (int c = 0; c < kHeadDimV / Kt::kAtomV; ++c)
                    zero_row(v_dst + (c * kBlockN + i) * Kt::kAtomV, Kt::kAtomV);
            }
    };
    int n_issue = n_first >= n_lo ? n_first : n_lo - 1; // next block to copy (< n_lo: none left)
    // claim: the block each stage holds (-1: none, the warp's last), as the consumer cannot recompute the order; a
    // counter in warp 0's spare shared memory hands out claims after each warp's first kKvStages - 1 fixed ones
    int stage_block[Kt::kKvStages] = {};
    auto block_in = [&](int st) {
        int b = stage_block[0];
        CUTE_UNROLL
        for (int i = 1; i < Kt::kKvStages; ++i)
            b = st == i ? stage_block[i] : b;
        return b;
    };
    auto set_block = [&](int st, int b) {
        CUTE_UNROLL
        for (int i = 0; i < Kt::kKvStages; ++i)
            stage_block[i] = st == i ? b : stage_block[i];
    };
    int* const claim_counter = reinterpret_cast<int*>(smem_cta + Kt::kSmemBytes);
    auto next_claim = [&] { // lane 0 claims for the warp
        int c = 0;
        if (tidx == 0)
            c = atomicAdd(claim_counter, 1);
        return claimed_block((Kt::kKvStages - 1) * p.split.warp_splits + __shfl_sync(0xffffffff, c, 0));
    };
    auto issue_next = [&](int st) {
        if (n_issue < n_lo)
        {
            if (claim)
                set_block(st, -1);
            return;
        }
        issue(n_issue, st);
        if (claim)
            set_block(st, n_issue), n_issue = next_claim();
        else
            n_issue = next_block(n_issue);
        if (page_size > 0)
            fetch_page(n_issue);
    };
    int n_start = n_first; // the first block this warp computes
    // The ring's consumer side, shared by both decode steps: before block n, the stage the previous block freed goes
    // back to the copy engine and n's stage (returned) is waited for; ring_advance() after the block. With
    // kRingLateRefill (the host's choice, fwd_params.h) the freed stage goes back only once n's has landed, so a
    // waiting warp has kKvStages - 1 blocks in flight instead of kKvStages.
    int ring_st = 0, ring_phase = 0, ring_st_issue = Kt::kKvStages - 1;
    const bool late_refill = p.split.ring_flags & kRingLateRefill;
#ifdef MHA_STAMPS
    int land_i = 0; // this warp's key blocks waited for so far (stamps.cuh, land)
#endif
    // waits for the current stage (with MHA_STAMPS, logs when the wait began and ended)
    auto ring_wait_current = [&] {
#ifdef MHA_STAMPS
        const unsigned long long from = globaltimer();
        ring.wait(ring_st, ring_phase);
        land(land_i++, from, globaltimer());
#else
        ring.wait(ring_st, ring_phase);
#endif
    };
    auto ring_acquire = [&](int n) {
        ring.fence_async(); // every lane is done reading (and zeroing) the stage the copy engine refills next
        __syncwarp();
        if (late_refill)
            ring_wait_current();
        issue_next(ring_st_issue);
        if (!late_refill)
            ring_wait_current();
        if (n == n_start)
            MHA_STAMP(kStampFirstBlock);
        MHA_STAMP(kStampLast); // every block's; the last one stays
        return ring_st;
    };
    auto ring_advance = [&] {
        ring_st_issue = ring_st;
        if (++ring_st == Kt::kKvStages)
            ring_st = 0, ring_phase ^= 1;
    };
    if constexpr (Kt::kRing)
        if (use_ring)
        {
            if (claim)
            {
                // fixed first claims: warp w's stage st holds claim w + st * warps; then one barrier, after which
                // the counter (zeroed by thread 0) hands out the rest
                if (threadIdx.x == 0)
                    *claim_counter = 0;
                CUTE_UNROLL
                for (int st = 0; st < Kt::kKvStages; ++st)
                {
                    const int b = st < Kt::kKvStages - 1 ? claimed_block(warp + st * p.split.warp_splits) : -1;
                    stage_block[st] = b;
                    if (b >= 0)
                    {
                        if (page_size > 0)
                            fetch_page(b);
                        issue(b, st);
                    }
                }
                n_start = stage_block[0];
                __syncthreads();
                n_issue = next_claim();
                if (page_size > 0)
                    fetch_page(n_issue);
            }
            else
            {
                int st = 0;
                if (early) // stage 0 holds n_first already
                    n_issue = next_block(n_issue), st = 1;
                if (page_size > 0)
                    fetch_page(n_issue);
                for (; st < Kt::kKvStages - 1; ++st)
                    issue_next(st);
            }
            MHA_STAMP(kStampIssued);
        }
#endif
    const int64_t q_off = p.seq.is_group ? seq.q_row0 * p.q_row_stride : bidb * p.q_batch_stride;
    const int64_t k_off = page_size > 0 ? 0 : p.seq.is_group ? seq.k_row0 * p.k_row_stride : kv_batch * p.k_batch_stride;
    const int64_t v_off = page_size > 0 ? 0 : p.seq.is_group ? seq.k_row0 * p.v_row_stride : kv_batch * p.v_batch_stride;
    const int64_t o_off = p.seq.is_group ? seq.q_row0 * p.o_row_stride : bidb * p.o_batch_stride;
    const Element* q_base = static_cast<const Element*>(p.q) + q_off;
    Element* o_base       = static_cast<Element*>(p.o) + o_off;
    const Element* q_ptr  = q_base + bidh * p.q_head_stride;
    const Element* k_ptr  = static_cast<const Element*>(p.k) + k_off + bidh_k * p.k_head_stride;
    const Element* v_ptr  = static_cast<const Element*>(p.v) + v_off + bidh_k * p.v_head_stride;
    Element* o_ptr        = o_base + bidh * p.o_head_stride;
    // kSplit: the query head of tile row r, and the offset of key row j inside the paged cache
    auto q_head = [&](int r) { return pack > 1 ? bidh * pack + (m_begin + r) % pack : bidh; };
    // Paged key row n_block * kBlockN + r: its page id and row inside the page come from ids[r] / ids[kBlockN + r]
    // (shared memory, prepared a block ahead, so no division here) or, for the first block, from the page table.
    auto page_off = [&](int n_block, int r, const int* ids, int64_t row_stride, int64_t page_stride) {
        if (ids != nullptr)
            return int64_t(ids[r]) * page_stride + int64_t(ids[kBlockN + r]) * row_stride;
        const int j = n_block * kBlockN + r;
        return int64_t(pages[j / page_size]) * page_stride + int64_t(j % page_size) * row_stride;
    };

    Tensor mQ = make_tensor(make_gmem_ptr(q_ptr), make_shape(seqlen_q, Int<kHeadDim>{}),
                            make_stride(p.q_row_stride, _1{}));
    Tensor mO = make_tensor(make_gmem_ptr(o_ptr), make_shape(seqlen_q, Int<kHeadDimV>{}),
                            make_stride(p.o_row_stride, _1{}));
    // local_tile on a shape that is not a tile multiple is fine: out-of-range rows are never dereferenced.
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));   // (M, K)
    Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDimV>>{}, make_coord(m_block, 0));  // (M, Kv)

    // ---- shared memory: Q (later O) | K | V ----
    Element* smem = reinterpret_cast<Element*>(smem_raw);
    Tensor sQ  = make_tensor(make_smem_ptr(smem), typename Kt::SmemLayoutQ{});
    Tensor sK  = make_tensor(sQ.data() + int(Kt::kSmemQOElems), typename Kt::SmemLayoutK{});
    Tensor sV  = make_tensor(sK.data() + int(Kt::kSmemKElems), typename Kt::SmemLayoutV{});
    Tensor sVt = make_tensor(sV.data(), typename Kt::SmemLayoutVt{});
    Tensor sO  = make_tensor(sQ.data(), typename Kt::SmemLayoutO{});

    typename Kt::GmemCopyQK gmem_copy_qk;
    typename Kt::GmemCopyV gmem_copy_v;
    auto gmem_thr_qk = gmem_copy_qk.get_thread_slice(tidx);
    auto gmem_thr_v  = gmem_copy_v.get_thread_slice(tidx);
    Tensor tQgQ = gmem_thr_qk.partition_S(gQ);
    Tensor tQsQ = gmem_thr_qk.partition_D(sQ);
    Tensor tKsK = gmem_thr_qk.partition_D(sK);
    Tensor tVsV = gmem_thr_v.partition_D(sV);
    // K / V key block n as a tile, rebuilt per block: a 64-bit base and (see kKvOffsets32) 32-bit offsets inside it,
    // which the host allows by keeping row strides below 2^24. Fewer live 64-bit addresses than a (N, K, n) view.
    using KvStride = std::conditional_t<Kt::kKvOffsets32, int, int64_t>;
    const KvStride k_row_stride = KvStride(p.k_row_stride);
    const KvStride v_row_stride = KvStride(p.v_row_stride);
    auto tile_k = [&](int n) {
        return make_tensor(make_gmem_ptr(k_ptr + int64_t(n) * kBlockN * p.k_row_stride),
                           Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_stride(k_row_stride, _1{}));
    };
    auto tile_v = [&](int n) {
        return make_tensor(make_gmem_ptr(v_ptr + int64_t(n) * kBlockN * p.v_row_stride),
                           Shape<Int<kBlockN>, Int<kHeadDimV>>{}, make_stride(v_row_stride, _1{}));
    };
    // identity coordinates for bounds checks
    Tensor tQcQ = gmem_thr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tKcK = gmem_thr_qk.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    Tensor tVcV = gmem_thr_v.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimV>>{}));

    typename Kt::TiledMma tiled_mma;
    auto thr_mma = tiled_mma.get_thread_slice(tidx);
    Tensor tSrQ  = thr_mma.partition_fragment_A(sQ);                                     // (MMA, MMA_M, MMA_K)
    Tensor tSrK  = thr_mma.partition_fragment_B(sK);                                     // (MMA, MMA_N, MMA_K)
    Tensor tOrVt = thr_mma.partition_fragment_B(
        make_tensor(sV.data(), Layout<Shape<Int<kHeadDimV>, Int<kBlockN>>>{}));          // (MMA, MMA_Kv, MMA_N)
    Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDimV>>{}); // (MMA, MMA_M, MMA_Kv)

    auto smem_copy_q = make_tiled_copy_A(typename Kt::SmemCopyAtom{}, tiled_mma);
    auto smem_thr_q  = smem_copy_q.get_thread_slice(tidx);
    Tensor tSsQ      = smem_thr_q.partition_S(sQ);
    auto smem_copy_k = make_tiled_copy_B(typename Kt::SmemCopyAtom{}, tiled_mma);
    auto smem_thr_k  = smem_copy_k.get_thread_slice(tidx);
    Tensor tSsK      = smem_thr_k.partition_S(sK);
    auto smem_copy_v = make_tiled_copy_B(typename Kt::SmemCopyAtomTransposed{}, tiled_mma);
    auto smem_thr_v  = smem_copy_v.get_thread_slice(tidx);
    Tensor tOsVt     = smem_thr_v.partition_S(sVt);

    // (row, col) of every score element this thread holds, for masking and the optional features
    Tensor tScS = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));

    const bool even_q = p.hdim_q == kHeadDim;
    const bool even_v = p.hdim_v == kHeadDimV;

    // ---- optional features (full instances only) ----
    ScoreMods<Element> mods{};
    TileDropout dropout{};
    bool has_dropout = false;
    if constexpr (Kt::kFull)
    {
        const ScoreModParams& m = p.mod;
        mods.scale    = p.scale;
        mods.softcap  = Kt::kOther ? m.softcap : 0.f;
        mods.alibi_offset   = m.alibi_mode == 0 ? seqlen_k - seqlen_q : 0;
        mods.alibi_vertical = m.alibi_mode == 2;
        mods.seqlen_q = seqlen_q;
        mods.seqlen_k = seqlen_k;
        if (Kt::kOther && m.bias != nullptr)
        {
            const int64_t off = (p.seq.is_group ? seq.q_row0 * m.bias_row_stride : bidb * m.bias_batch_stride) +
                                bidh * m.bias_head_stride;
            mods.bias = static_cast<const Element*>(m.bias) + off;
            mods.bias_row_stride = m.bias_row_stride;
        }
        mods.alibi_slope = Kt::kAlibi && m.alibi_slopes ? m.alibi_slopes[bidb * m.alibi_batch_stride + bidh] : 0.f;
        const DropoutParams& d = p.drop;
        has_dropout = Kt::kDropout && d.enabled;
        if (has_dropout)
        {
            dropout.seed   = d.seed_ptr ? *d.seed_ptr : d.seed;
            dropout.offset = d.offset_ptr ? *d.offset_ptr : d.offset;
            dropout.bh     = uint32_t(bidb) * uint32_t(p.nhead_q) + uint32_t(bidh);
            dropout.keep_threshold = d.keep_threshold;
            dropout.seqlen_q = seqlen_q;
            dropout.seqlen_k = seqlen_k;
            if (d.randval != nullptr)
            {
                const int64_t off = (p.seq.is_group ? seq.q_row0 * d.randval_row_stride
                                                    : bidb * d.randval_batch_stride) + bidh * d.randval_head_stride;
                dropout.randval = d.randval + off;
                dropout.randval_row_stride = d.randval_row_stride;
            }
        }
    }
    // Full instances with a score modifier turn scores into natural-log logits first; otherwise the scale folds into
    // exp2. A plain decode step on a full split-KV instance skips the modifiers' per-element (predicated) code this
    // way: 1,400 of its 1,600 instructions per key block at d128 (where a plain instance is built, generate.py
    // SPLIT_PLAIN_DIMS, it has none of that code).
    const bool mod_scores = Kt::kFull && mods.active();
    const float softmax_scale_log2 = mod_scores ? kLog2e : p.scale_log2;
    const float softmax_scale      = mod_scores ? 1.f : p.scale;

    // ---- prologue: Q and the first K block in flight ----
    if constexpr (Kt::kSplit)
        copy_rows_gather(gmem_copy_qk, tQsQ, tQcQ, [&](int r) {
            return q_base + q_head(r) * p.q_head_stride + int64_t(q_pos(r)) * p.q_row_stride;
        }, m_end - m_begin, p.hdim_q);
    else
        copy_tile_pred(gmem_copy_qk, tQgQ, tQsQ, tQcQ, seqlen_q - m_begin, p.hdim_q);
    // K / V block n into stage `st` (kSplit double-buffers; offsets are whole swizzle periods)
    auto stage_view = [&](auto& t, int st) {
        if constexpr (Kt::kSplit)
            return make_tensor(t.data() + st * kStageElems, t.layout());
        else
            return t;
    };
    auto load_k = [&](int n_block, int st, const int* ids = nullptr) {
        const int rows_left = seqlen_k - n_block * kBlockN;
        auto dst = stage_view(tKsK, st);
        if (Kt::kSplit && page_size > 0 && page_size % kBlockN == 0 && even_q && rows_left >= kBlockN)
            cute::copy(gmem_copy_qk, gmem_thr_qk.partition_S(make_tensor(   // the block lies inside one page
                make_gmem_ptr(k_ptr + page_off(n_block, 0, ids, p.k_row_stride, p.k_batch_stride)),
                Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_stride(k_row_stride, _1{}))), dst);
        else if (Kt::kSplit && page_size > 0)
            copy_rows_gather(gmem_copy_qk, dst, tKcK, [&](int r) {
                return k_ptr + page_off(n_block, r, ids, p.k_row_stride, p.k_batch_stride);
            }, rows_left, p.hdim_q);
        else if (even_q && rows_left >= kBlockN)
            cute::copy(gmem_copy_qk, gmem_thr_qk.partition_S(tile_k(n_block)), dst);
        else
            copy_tile_pred(gmem_copy_qk, gmem_thr_qk.partition_S(tile_k(n_block)), dst, tKcK, rows_left, p.hdim_q);
    };
    auto load_v = [&](int n_block, int st, const int* ids = nullptr) {
        const int rows_left = seqlen_k - n_block * kBlockN;
        auto dst = stage_view(tVsV, st);
        if (Kt::kSplit && page_size > 0 && page_size % kBlockN == 0 && even_v && rows_left >= kBlockN)
            cute::copy(gmem_copy_v, gmem_thr_v.partition_S(make_tensor(
                make_gmem_ptr(v_ptr + page_off(n_block, 0, ids, p.v_row_stride, p.v_batch_stride)),
                Shape<Int<kBlockN>, Int<kHeadDimV>>{}, make_stride(v_row_stride, _1{}))), dst);
        else if (Kt::kSplit && page_size > 0)
            copy_rows_gather(gmem_copy_v, dst, tVcV, [&](int r) {
                return v_ptr + page_off(n_block, r, ids, p.v_row_stride, p.v_batch_stride);
            }, rows_left, p.hdim_v);
        else if (even_v && rows_left >= kBlockN)
            cute::copy(gmem_copy_v, gmem_thr_v.partition_S(tile_v(n_block)), dst);
        else
            copy_tile_pred(gmem_copy_v, gmem_thr_v.partition_S(tile_v(n_block)), dst, tVcV, rows_left, p.hdim_v);
    };
    if (!use_ring && n_first >= n_lo)
        load_k(n_first, 0);
    cute::cp_async_fence();

    clear(acc_o);
    constexpr int kRows = decltype(size<0>(acc_rowcol_layout(acc_o.layout())))::value;
    OnlineSoftmax<kRows> softmax;
    Tensor o_rc = make_tensor(acc_o.data(), acc_rowcol_layout(acc_o.layout()));

    // S += Q K[n]^T into a cleared acc_s from the K tile in `tSsK_n`, score modifiers, then the mask.
    auto score = [&](auto& acc_s, int n_block, auto const& tSsK_n) {
        const int n_begin = n_block * kBlockN;
        // kSkipPadKeys: the MMAs past seqlen_k of a partial last key block are skipped (those columns are masked
        // below: the tile is not fully visible).
        if constexpr (Kt::kSkipPadKeys)
            gemm_smem_smem_cols(acc_s, tSrQ, tSrK, tSsQ, tSsK_n, tiled_mma, smem_copy_q, smem_copy_k, smem_thr_q,
                                smem_thr_k, seqlen_k - n_begin);
        else
            gemm_smem_smem(acc_s, tSrQ, tSrK, tSsQ, tSsK_n, tiled_mma, smem_copy_q, smem_copy_k, smem_thr_q,
                           smem_thr_k);
        if constexpr (Kt::kFull)
            if (mod_scores)
                mods.apply(acc_s, tScS, m_begin, n_begin);
        if (!mask.tile_fully_visible(q_begin, q_tile_end, n_begin, n_begin + kBlockN))
        {
            if (mask.sink_size > 0)
            {
                CUTE_UNROLL
                for (int i = 0; i < size(acc_s); ++i)
                    if (!mask.visible(q_pos(get<0>(tScS(i))), n_begin + get<1>(tScS(i))))
                        acc_s(i) = -INFINITY;
            }
            else
            {
                // per-row [lo, hi), then one bound test per element (column offsets are compile-time constants)
                Tensor s_rc = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
                Tensor c_rc = make_tensor(tScS.data(), acc_rowcol_layout(tScS.layout()));
                CUTE_UNROLL
                for (int r = 0; r < size<0>(s_rc); ++r)
                {
                    int lo, hi, sink_hi;
                    mask.row_bounds(q_pos(get<0>(c_rc(r, 0))), lo, hi, sink_hi);
                    lo -= n_begin, hi -= n_begin;
                    CUTE_UNROLL
                    for (int c = 0; c < size<1>(s_rc); ++c)
                    {
                        const int col = get<1>(c_rc(r, c));
                        if (col < lo || col >= hi)
                            s_rc(r, c) = -INFINITY;
                    }
                }
            }
        }
    };

    // Online softmax on S, dropout, then O += P V[n] with V from `tOsVt_n`. The prefill loop below spells the same
    // steps out inline: through this lambda ptxas spills twice as much there (d128 128x48: 80 vs 40 B).
    auto update = [&](auto& acc_s, int n_block, auto const& tOsVt_n) {
        Tensor s_rc = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
        softmax.update(s_rc, o_rc, softmax_scale_log2);
        if constexpr (Kt::kFull)
        {
            // TileDropout walks a key block's n8 tiles in one thread (one warp along N)
            static_assert(decltype(size<1>(s_rc))::value * 4 == kBlockN, "a thread holds its block's keys");
            if (has_dropout && (dropout.randval != nullptr || !Kt::kDropoutPairs))
            {
                Tensor c_rc = make_tensor(tScS.data(), acc_rowcol_layout(tScS.layout()));
                dropout.apply(s_rc, c_rc, m_begin, n_block * kBlockN);
            }
        }
        // P in the A-operand layout, converted to the input type without leaving registers
        Tensor tOrP = make_tensor_like<Element>(acc_s);
        CUTE_UNROLL
        for (int i = 0; i < size(acc_s); ++i)
            tOrP(i) = static_cast<Element>(acc_s(i));
        if constexpr (Kt::kDropoutPairs)
        {
            if (has_dropout && dropout.randval == nullptr)
            {
                Tensor c_rc = make_tensor(tScS.data(), acc_rowcol_layout(tScS.layout()));
                dropout.apply_pairs(tOrP, acc_rowcol_layout(tOrP.layout()), c_rc, m_begin, n_block * kBlockN);
            }
        }
        Tensor tOrP_a = make_tensor(tOrP.data(), acc_to_a_operand_layout(tOrP.layout()));
        gemm_reg_smem(acc_o, tOrP_a, tOrVt, tOsVt_n, tiled_mma, smem_copy_v, smem_thr_v);
    };

#if MHA_DECODE_TMA
    // Up to 8 splits of a decode tile on sm_90 (p.split.cluster_merge): the num_splits CTAs of the tile form one
    // cluster (fwd_launch.cuh). Each leaves its fp32 partial O (normalised by its own sum) in s_part and its LSE in
    // s_lse, in its own shared memory (the drained ring: every issued stage was waited for), then every CTA merges
    // its share of the tile's (row, 4-column) chunks from all of them through distributed shared memory, with the
    // combine kernel's weights and merge_lse (each weight taken as exp(lse_s - max) / sum instead of merge_weight's
    // exp(lse_s - lse_keys): one exp per split). No partials in global memory, no second kernel. The second barrier
    // keeps each CTA's shared memory alive until the others have read it. in_cta (kDecodeT, warp_splits): the splits
    // are the warps of this CTA, each with its own share of the shared memory; one CTA barrier, plain shared loads.
    constexpr int kLd = kHeadDimV + 8; // fp32 row stride: the 8 rows of a fragment fall in different banks
    float* const s_part = reinterpret_cast<float*>(smem_raw + Kt::kSmemQBytes);
    float* const s_lse  = s_part + kBlockM * kLd;
    static_assert(!Kt::kRing || kBlockM * (kLd + 1) * 4 <= Kt::kKvStages * Kt::kStageBytes, "partial fits the ring");
    // row_of(tr): tile row tr's (query head, position), called by every lane (it may shuffle).
    auto cluster_merge = [&](auto const& row_of) {
        const bool in_cta = kDecodeT && p.split.warp_splits > 1;
        // split s's copy of `x` (an address in this CTA's or this warp's share of the shared memory)
        auto sibling = [&](const float* x, int s) {
            return reinterpret_cast<const float*>(reinterpret_cast<const char*>(x) + (s - warp) * Kt::kWarpSmemBytes);
        };
        if (in_cta)
            __syncthreads();
        else
            cluster_sync();
        MHA_STAMP(kStampMerge);
        constexpr int kChunks = kHeadDimV / 4; // per row, a shift apart; chunks past hdim_v are skipped
        const int n_splits = p.split.num_splits, total = (m_end - m_begin) * kChunks;
        // The chunk loop, once per kind of sibling load (two copies, neither choosing per split): from the
        // barrier to O stored each warp runs alone on its SM quarter, so every instruction is latency.
        // kS (a compile-time bound on the splits, 4 or 8): the loads, exps and sums below are unrolled over kS
        // slots, the ones past n_splits predicated off; the common decode call has 4 splits, and each slot's
        // instructions are fetched cold in this one-off tail whether or not its predicate is on.
        auto merge_chunks = [&](int first, auto const& load_lse, auto const& load_part, auto slots) {
            constexpr int kS = decltype(slots)::value;
            for (int i0 = first * 32; i0 < total; i0 += n_splits * 32) // warp-uniform
            {
                const int i = i0 + tidx, tr = i / kChunks, col = (i % kChunks) * 4;
                const int2 hq = row_of(tr);
                const int h = hq.x, q = hq.y;
                if (i >= total || col >= p.hdim_v)
                    continue;
                // Latency, not throughput (one chunk per lane): every split's LSE and partial chunk is loaded up
                // front, and each split's exp(lse_s - max) serves both the sum and the weight (exp(lse_s - lse_keys)
                // = that / sum, lse_keys being max + log(sum)). With the weights computed first, two exps per
                // split, the loads behind them and one copy of the code choosing per split between shared and
                // distributed loads, barrier to O stored took 0.93 us (H100 stamps, b=16 1k, p50); now 0.45.
                float l[kS];
                float4 x[kS];
                float m = -INFINITY;
                CUTE_UNROLL
                for (int s = 0; s < kS; ++s)
                {
                    if (s < n_splits)
                    {
                        l[s] = load_lse(tr, s);
                        x[s] = load_part(tr * kLd + col, s);
                    }
                    else
                        l[s] = -INFINITY, x[s] = make_float4(0.f, 0.f, 0.f, 0.f);
                    m = fmaxf(m, l[s]);
                }
                MHA_STAMP(kStampMergeLse, __float_as_int(m));
                float e[kS], sum = 0.f;
                CUTE_UNROLL
                for (int s = 0; s < kS; ++s)
                    sum += e[s] = l[s] == -INFINITY ? 0.f : expf(l[s] - m);
                const MergedLse mg = merge_lse(m, sum, Kt::kOther && p.mod.sink != nullptr ? p.mod.sink[h] : -INFINITY);
                const float inv_sum = sum > 0.f ? 1.f / sum : 0.f;
                float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
                // every loaded chunk is consumed, an empty split's (its O is 0) with weight 0: the O stores below
                // wait for every sibling load, so no load is still in flight when this CTA arrives at the relaxed
                // cluster barrier after which its siblings may exit
                CUTE_UNROLL
                for (int s = 0; s < kS; ++s)
                {
                    const float w = e[s] * inv_sum;
                    acc.x += w * x[s].x, acc.y += w * x[s].y, acc.z += w * x[s].z, acc.w += w * x[s].w;
                }
                alignas(8) Element out[4] = {static_cast<Element>(acc.x * mg.out_scale),
                                             static_cast<Element>(acc.y * mg.out_scale),
                                             static_cast<Element>(acc.z * mg.out_scale),
                                             static_cast<Element>(acc.w * mg.out_scale)};
                *reinterpret_cast<uint2*>(o_base + h * p.o_head_stride + int64_t(q) * p.o_row_stride + col) =
                    *reinterpret_cast<const uint2*>(out);
                if (p.lse != nullptr && col == 0)
                    p.lse[h * p.lse_head_stride + (p.seq.is_group ? seq.q_row0 : bidb * p.lse_batch_stride) + q] =
                        mg.lse;
            }
        };
        auto merge = [&](auto slots) {
            if (in_cta)
                merge_chunks(
                    warp, [&](int tr, int s) { return *sibling(s_lse + tr, s); },
                    [&](int off, int s) { return *reinterpret_cast<const float4*>(sibling(s_part + off, s)); }, slots);
            else
                merge_chunks(
                    cluster_cta_rank(), [&](int tr, int s) { return cluster_load(cluster_smem_addr(s_lse + tr, s)); },
                    [&](int off, int s) { return cluster_load4(cluster_smem_addr(s_part + off, s)); }, slots);
        };
        static_assert(kWarpMergeMaxSplits <= kClusterMergeMaxSplits, "one bound for both kinds of sibling");
        if (n_splits <= 4)
            merge(cute::Int<4>{});
        else
            merge(cute::Int<kClusterMergeMaxSplits>{});
        MHA_STAMP(kStampStored);
        // relaxed: the O / LSE stores above need no ordering, and a release would hold every CTA until they
        // reach the L2 (H200, cold same-call A/B, three passes, KV GB/s: b=16 1k 2686-2714 -> 2733-2744, 2k
        // 3241-3277 -> 3292-3326, b=8 1k 1901-1938 -> 1946-1961, 8k-length points +0.2-0.5%). In one CTA the
        // shared memory lives until its last warp exits.
        if (!in_cta)
            cluster_sync_relaxed();
        MHA_STAMP(kStampEnd);
    };
#endif

    // More than 8 splits of a decode tile, with arrival counters from the host: the split grid was launched
    // cooperatively (fwd_launch.cuh) and the tile's splits merge here, without the combine kernel
    // (splitkv_combine.cuh). Every lane calls it after this split's partial stores. Generic, so only the split-KV
    // instances compile it.
    auto merge_in_grid = [&](auto rows) {
        const SplitParams& sp = p.split;
        const int64_t row0 = p.seq.is_group ? seq.q_row0 : 0;
        unsigned* const counter = sp.merge_counters + (int64_t(bidb) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        const int64_t lse_row0 = p.seq.is_group ? seq.q_row0 : bidb * p.lse_batch_stride;
        merge_splits_in_grid<Element>(
            sp, counter, sp.o_acc + (p.seq.is_group ? 0 : bidb * sp.o_acc_batch_stride),
            sp.lse_acc + (p.seq.is_group ? 0 : bidb * sp.lse_acc_batch_stride), Kt::kOther ? p.mod.sink : nullptr,
            p.hdim_v, split, int(rows), [&](int tr) {
                const int h = q_head(tr), q = q_pos(tr);
                return MergeRow{h, row0 + q, o_base + h * p.o_head_stride + int64_t(q) * p.o_row_stride,
                                p.lse != nullptr ? p.lse + h * p.lse_head_stride + lse_row0 + q : nullptr};
            });
    };

#if MHA_DECODE_TMA
    // Decode tiles of at most 8 x kDecodeT rows (a decode step: up to 8 query heads per KV head, or up to 16 rows of
    // a few queries) on the ring: the transposed step of decode_t.cuh, keys and head dimensions on the MMA's M side
    // and the rows on its N side, kNT tiles of 8 (each K / V fragment loaded once for all of them). Only the kDecodeT
    // instances have it.
    if constexpr (kDecodeT)
    {
        if (use_ring && m_end - m_begin <= 8 * kDecodeT && !has_dropout)
        {
            constexpr int kMT = kBlockN / 16, kQK = kHeadDim / 16, kDT = kHeadDimV / 16, kNT = kDecodeT;
            static_assert(kNT * 8 <= kBlockM, "the Q tile and s_part hold kBlockM rows");
            constexpr int kRowBytes = 128; // a swizzled atom row: 64 elements
            static_assert(Kt::kAtomQ == 64 && Kt::kAtomV == 64 && sizeof(Element) == 2, "dt::swz128_offset's tiles");
            const int g = tidx / 4, t = tidx % 4;
            cute::cp_async_wait<0>(); // Q
            __syncwarp();
            MHA_STAMP(kStampQ);
            // Q^T as B fragments, kept in registers: N tile nt, step k holds (d 16 k + 2 t.., row 8 nt + g) and
            // (d 16 k + 8 + 2 t.., row 8 nt + g)
            uint32_t qf[kNT][kQK][2];
            CUTE_UNROLL
            for (int nt = 0; nt < kNT; ++nt)
                CUTE_UNROLL
                for (int k = 0; k < kQK; k += 2)
                {
                    uint32_t r[4];
                    dt::ldsm_x4(r, smem_addr(smem_raw) +
                                       dt::swz128_offset<kBlockM>(8 * nt + tidx % 8, 16 * k + 8 * (tidx / 8)));
                    qf[nt][k][0] = r[0], qf[nt][k][1] = r[1], qf[nt][k + 1][0] = r[2], qf[nt][k + 1][1] = r[3];
                }
            // This lane's ldmatrix row inside a stage, by the 16-column step mod 4 (the swizzle's chunk XOR):
            // K (A of S^T): key 16 mt + rk, columns 16 k + 8 (lane / 16); V^T (A of O^T, transposed): key 16 kk + rv,
            // columns 16 mt + 8 ((lane / 8) % 2).
            const int rk = tidx % 8 + 8 * ((tidx / 8) % 2), rv = tidx % 8 + 8 * (tidx / 16);
            uint32_t k_off[4], v_off[4];
            CUTE_UNROLL
            for (int c = 0; c < 4; ++c)
            {
                k_off[c] = dt::swz128_offset<kBlockN>(rk, 16 * c + 8 * (tidx / 16));
                v_off[c] = dt::swz128_offset<kBlockN>(rv, 16 * c + 8 * ((tidx / 8) % 2));
            }
            // O^T: o[nt][mt] = (d 16 mt + g [+8], rows 8 nt + 2 t, 8 nt + 2 t + 1); this lane's softmax rows are
            // 8 nt + 2 t and 8 nt + 2 t + 1 (row_max / row_sum [nt][0 / 1])
            float o[kNT][kDT][4];
            float row_max[kNT][2], row_sum[kNT][2];
            CUTE_UNROLL
            for (int nt = 0; nt < kNT; ++nt)
            {
                CUTE_UNROLL
                for (int mt = 0; mt < kDT; ++mt)
                    o[nt][mt][0] = o[nt][mt][1] = o[nt][mt][2] = o[nt][mt][3] = 0.f;
                row_max[nt][0] = row_max[nt][1] = -INFINITY, row_sum[nt][0] = row_sum[nt][1] = 0.f;
            }
            // tile row tidx % kBlockM's query head and position, for the epilogue's row addresses (the divisions by
            // the pack ratio run while the first block is in flight)
            const int row_h = q_head(tidx % kBlockM), row_q = q_pos(tidx % kBlockM);
            // A split that neither a cluster nor its CTA's other warps merge (the merge in the grid or the combine
            // kernel reads its partial from o_acc / lse_acc) stores its fp32 partial O straight from the O^T
            // fragments, to row addresses worked out here, before the key loop: this lane's softmax rows 2 t and
            // 2 t + 1 of each N tile (nullptr past the tile's rows). The epilogue is then the stores alone; through
            // s_part (row by row, each row's address after its shuffles) it took ~1.1 us after the loop instead of
            // ~0.3 (H100, %globaltimer stamps, b=1 2k / 8k): the tail code runs once per warp, each instruction
            // fetched cold.
            const bool direct = p.split.num_splits > 1 && !p.split.cluster_merge && p.split.warp_splits <= 1;
            float* part_o[kNT][2] = {};
            float* part_l[kNT][2] = {};
            if (direct) // warp-uniform
            {
                const SplitParams& sp = p.split;
                const int64_t row0 = p.seq.is_group ? seq.q_row0 : 0;
                float* const o_acc = sp.o_acc + split * sp.o_acc_split_stride +
                                     (p.seq.is_group ? 0 : bidb * sp.o_acc_batch_stride);
                float* const lse_acc = sp.lse_acc + split * sp.lse_acc_split_stride +
                                       (p.seq.is_group ? 0 : bidb * sp.lse_acc_batch_stride);
                CUTE_UNROLL
                for (int nt = 0; nt < kNT; ++nt)
                    CUTE_UNROLL
                    for (int j = 0; j < 2; ++j)
                    {
                        const int r = 8 * nt + 2 * t + j;
                        const int h = __shfl_sync(0xffffffff, row_h, r), q = __shfl_sync(0xffffffff, row_q, r);
                        if (r < m_end - m_begin)
                        {
                            part_o[nt][j] = o_acc + h * sp.o_acc_head_stride + (row0 + q) * sp.o_acc_row_stride;
                            part_l[nt][j] = lse_acc + h * sp.lse_acc_head_stride + row0 + q;
                        }
                    }
            }
            const uint32_t ring_s = smem_addr(s_kv);
            for (int n = n_start; n >= n_lo; n = claim ? block_in(ring_st) : next_block(n))
            {
                const int st = ring_acquire(n);
                const uint32_t sk = ring_s + st * (kStageElems * int(sizeof(Element)));
                const uint32_t sv = sk + Kt::kSmemKElems * int(sizeof(Element));
                // S^T = K Q^T: s[nt][mt] = (key 16 mt + g [+8], rows 8 nt + 2 t, 8 nt + 2 t + 1)
                float s[kNT][kMT][4];
                CUTE_UNROLL
                for (int nt = 0; nt < kNT; ++nt)
                    CUTE_UNROLL
                    for (int mt = 0; mt < kMT; ++mt)
                        s[nt][mt][0] = s[nt][mt][1] = s[nt][mt][2] = s[nt][mt][3] = 0.f;
                CUTE_UNROLL
                for (int k = 0; k < kQK; ++k)
                    CUTE_UNROLL
                    for (int mt = 0; mt < kMT; ++mt)
                    {
                        uint32_t a[4];
                        dt::ldsm_x4(a, sk + k_off[k % 4] + ((k / 4) * kBlockN + 16 * mt) * kRowBytes);
                        CUTE_UNROLL
                        for (int nt = 0; nt < kNT; ++nt)
                            dt::mma<Element>(s[nt][mt], a, qf[nt][k][0], qf[nt][k][1]);
                    }
                const int n_begin = n * kBlockN;
                if (mod_scores)
                {
                    CUTE_UNROLL
                    for (int nt = 0; nt < kNT; ++nt)
                        CUTE_UNROLL
                        for (int mt = 0; mt < kMT; ++mt)
                            CUTE_UNROLL
                            for (int i = 0; i < 4; ++i)
                                s[nt][mt][i] = mods.modify(s[nt][mt][i], m_begin + 8 * nt + 2 * t + i % 2,
                                                           n_begin + 16 * mt + g + 8 * (i / 2));
                }
                if (!mask.tile_fully_visible(q_begin, q_tile_end, n_begin, n_begin + kBlockN))
                {
                    CUTE_UNROLL
                    for (int nt = 0; nt < kNT; ++nt)
                        CUTE_UNROLL
                        for (int mt = 0; mt < kMT; ++mt)
                            CUTE_UNROLL
                            for (int i = 0; i < 4; ++i)
                                if (!mask.visible(q_pos(8 * nt + 2 * t + i % 2), n_begin + 16 * mt + g + 8 * (i / 2)))
                                    s[nt][mt][i] = -INFINITY;
                }
                // online softmax of rows 8 nt + 2 t + r (OnlineSoftmax's arithmetic over the 8 lanes of a row)
                CUTE_UNROLL
                for (int nt = 0; nt < kNT; ++nt)
                    CUTE_UNROLL
                    for (int r = 0; r < 2; ++r)
                    {
                        float m = row_max[nt][r];
                        CUTE_UNROLL
                        for (int mt = 0; mt < kMT; ++mt)
                            m = fmaxf(m, fmaxf(s[nt][mt][r], s[nt][mt][r + 2]));
                        m = dt::group_max(m);
                        // a row with nothing visible yet keeps max = -inf; shift by 0 so exp2(-inf) = 0, not NaN
                        const float shift = m == -INFINITY ? 0.f : m * softmax_scale_log2;
                        const float corr  = exp2f(row_max[nt][r] * softmax_scale_log2 - shift);
                        row_sum[nt][r] *= corr;
                        CUTE_UNROLL
                        for (int mt = 0; mt < kDT; ++mt)
                            o[nt][mt][r] *= corr, o[nt][mt][r + 2] *= corr;
                        row_max[nt][r] = m;
                        CUTE_UNROLL
                        for (int mt = 0; mt < kMT; ++mt)
                        {
                            s[nt][mt][r]     = exp2f(s[nt][mt][r] * softmax_scale_log2 - shift);
                            s[nt][mt][r + 2] = exp2f(s[nt][mt][r + 2] * softmax_scale_log2 - shift);
                            row_sum[nt][r] += s[nt][mt][r] + s[nt][mt][r + 2];
                        }
                    }
                // O^T += V^T P^T, P^T's B fragments by transposing S^T's 8 x 8 quarters in registers
                CUTE_UNROLL
                for (int kk = 0; kk < kMT; ++kk)
                {
                    uint32_t b0[kNT], b1[kNT];
                    CUTE_UNROLL
                    for (int nt = 0; nt < kNT; ++nt)
                    {
                        b0[nt] = dt::movm_t(dt::pack2<Element>(s[nt][kk][0], s[nt][kk][1]));
                        b1[nt] = dt::movm_t(dt::pack2<Element>(s[nt][kk][2], s[nt][kk][3]));
                    }
                    CUTE_UNROLL
                    for (int mt = 0; mt < kDT; ++mt)
                    {
                        uint32_t a[4];
                        dt::ldsm_x4_t(a, sv + v_off[mt % 4] + ((mt / 4) * kBlockN + 16 * kk) * kRowBytes);
                        CUTE_UNROLL
                        for (int nt = 0; nt < kNT; ++nt)
                            dt::mma<Element>(o[nt][mt], a, b0[nt], b1[nt]);
                    }
                }
                ring_advance();
            }
            MHA_STAMP(kStampLoopEnd);

            // normalise (as OnlineSoftmax::finalize); then a split partial straight out (direct), else O and the LSE
            // through s_part / s_lse
            const bool partial = p.split.num_splits > 1;
            const float sink = Kt::kOther && p.mod.sink != nullptr && !partial ? p.mod.sink[bidh] : -INFINITY;
            // Every row's sum over its 8 lanes, interleaved (3 dependent shuffle steps, not 6 or 12); without a sink
            // logit (every split, and every call without one) finalize_row reduces to the lines below, with no
            // branches for the compiler to keep the rows apart with.
            float sum[kNT][2], lse[kNT][2], inv[kNT][2];
            CUTE_UNROLL
            for (int nt = 0; nt < kNT; ++nt)
                sum[nt][0] = row_sum[nt][0], sum[nt][1] = row_sum[nt][1];
            CUTE_UNROLL
            for (int x = 4; x <= 16; x *= 2)
            {
                float other[kNT][2];
                CUTE_UNROLL
                for (int nt = 0; nt < kNT; ++nt)
                    other[nt][0] = __shfl_xor_sync(0xffffffff, sum[nt][0], x),
                    other[nt][1] = __shfl_xor_sync(0xffffffff, sum[nt][1], x);
                CUTE_UNROLL
                for (int nt = 0; nt < kNT; ++nt)
                    sum[nt][0] += other[nt][0], sum[nt][1] += other[nt][1];
            }
            CUTE_UNROLL
            for (int nt = 0; nt < kNT; ++nt)
            {
                if (sink == -INFINITY) // warp-uniform
                    CUTE_UNROLL
                    for (int r = 0; r < 2; ++r)
                    {
                        const bool seen = sum[nt][r] > 0.f;
                        lse[nt][r] = seen ? row_max[nt][r] * softmax_scale + logf(sum[nt][r]) : -INFINITY;
                        inv[nt][r] = seen ? 1.f / sum[nt][r] : 0.f;
                    }
                else
                    CUTE_UNROLL
                    for (int r = 0; r < 2; ++r)
                        inv[nt][r] = finalize_row(sum[nt][r], row_max[nt][r], softmax_scale, sink, lse[nt][r]);
                CUTE_UNROLL
                for (int mt = 0; mt < kDT; ++mt)
                    o[nt][mt][0] *= inv[nt][0], o[nt][mt][2] *= inv[nt][0], o[nt][mt][1] *= inv[nt][1],
                        o[nt][mt][3] *= inv[nt][1];
            }
            if (direct)
            {
                CUTE_UNROLL
                for (int nt = 0; nt < kNT; ++nt)
                    CUTE_UNROLL
                    for (int mt = 0; mt < kDT; ++mt)
                        CUTE_UNROLL
                        for (int i = 0; i < 4; ++i)
                        {
                            float* const pr = part_o[nt][i % 2];
                            const int col   = 16 * mt + g + 8 * (i / 2);
                            if (pr != nullptr && col < p.hdim_v)
                                pr[col] = o[nt][mt][i];
                        }
                if (g == 0)
                    CUTE_UNROLL
                    for (int nt = 0; nt < kNT; ++nt)
                        CUTE_UNROLL
                        for (int j = 0; j < 2; ++j)
                            if (part_l[nt][j] != nullptr)
                                *part_l[nt][j] = lse[nt][j];
                if (p.split.merge_counters != nullptr)
                    merge_in_grid(m_end - m_begin);
                MHA_STAMP(kStampEnd);
                return;
            }
            __syncwarp(); // every lane is past its last read of the ring
            CUTE_UNROLL
            for (int nt = 0; nt < kNT; ++nt)
            {
                CUTE_UNROLL
                for (int mt = 0; mt < kDT; ++mt)
                    CUTE_UNROLL
                    for (int i = 0; i < 4; ++i)
                        s_part[(8 * nt + 2 * t + i % 2) * kLd + 16 * mt + g + 8 * (i / 2)] = o[nt][mt][i];
                if (g == 0)
                    s_lse[8 * nt + 2 * t] = lse[nt][0], s_lse[8 * nt + 2 * t + 1] = lse[nt][1];
            }
            if (partial && (p.split.cluster_merge || p.split.warp_splits > 1))
            {
                cluster_merge([&](int tr) {
                    return make_int2(__shfl_sync(0xffffffff, row_h, tr), __shfl_sync(0xffffffff, row_q, tr));
                });
                return;
            }
            __syncwarp();
            // one split: O and the LSE straight out, rows one by one (warp-uniform), a 4-column chunk per lane; a
            // row's head and position from its lane (split partials took the direct stores above)
            const int rows = m_end - m_begin;
            for (int tr = 0; tr < rows; ++tr)
            {
                const int h = __shfl_sync(0xffffffff, row_h, tr), q = __shfl_sync(0xffffffff, row_q, tr);
                Element* orow = o_base + h * p.o_head_stride + int64_t(q) * p.o_row_stride;
                for (int col = 4 * tidx; col < p.hdim_v; col += 128)
                {
                    const float4 x = *reinterpret_cast<const float4*>(s_part + tr * kLd + col);
                    alignas(8) Element out[4] = {static_cast<Element>(x.x), static_cast<Element>(x.y),
                                                 static_cast<Element>(x.z), static_cast<Element>(x.w)};
                    *reinterpret_cast<uint2*>(orow + col) = *reinterpret_cast<const uint2*>(out);
                }
            }
            if (p.lse != nullptr && tidx < rows)
            {
                const int64_t row0 = p.seq.is_group ? seq.q_row0 : bidb * p.lse_batch_stride;
                p.lse[row_h * p.lse_head_stride + row0 + row_q] = s_lse[tidx];
            }
            MHA_STAMP(kStampEnd);
            return;
        }
    }
#endif
    // The launcher picks the kDecodeT instance only where every tile takes the transposed step (sm_90, the ring's
    // tensor maps built, no dropout; dynamic shared memory starts 1024-byte aligned there; tiles are cut to 8 rows
    // above). Reaching this line is a launcher bug, not a bad input; stopping beats a silently wrong O.
    if constexpr (kDecodeT)
    {
        __trap();
        return;
    }

    if constexpr (!Kt::kSplit)
    {
        // Compute-bound prefill: one K and one V buffer. V[n] loads during S = Q K[n]^T, K[next] during the
        // softmax and O += P V[n]. One call site each, so the bodies are always inlined (a non-inlined body would
        // put acc_o in local memory).
        for (int n = n_first; n >= n_lo; n = next_block(n))
        {
            Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{}); // (MMA, M, N)
            clear(acc_s);
            cute::cp_async_wait<0>();
            __syncthreads(); // K[n] landed; every warp finished reading V of the previous block
            load_v(n, 0);
            cute::cp_async_fence();
            score(acc_s, n, tSsK);
            cute::cp_async_wait<0>();
            __syncthreads(); // V[n] landed; every warp finished reading K[n]
            const int n_next = next_block(n);
            if (n_next >= n_lo)
            {
                load_k(n_next, 0);
                cute::cp_async_fence();
            }
            Tensor s_rc = make_tensor(acc_s.data(), acc_rowcol_layout(acc_s.layout()));
            softmax.update(s_rc, o_rc, softmax_scale_log2);
            if constexpr (Kt::kFull)
            {
                // TileDropout walks a key block's n8 tiles in one thread (one warp along N)
                static_assert(decltype(size<1>(s_rc))::value * 4 == kBlockN, "a thread holds its block's keys");
                if (has_dropout && (dropout.randval != nullptr || !Kt::kDropoutPairs))
                {
                    Tensor c_rc = make_tensor(tScS.data(), acc_rowcol_layout(tScS.layout()));
                    dropout.apply(s_rc, c_rc, m_begin, n * kBlockN);
                }
            }
            Tensor tOrP = make_tensor_like<Element>(acc_s);
            CUTE_UNROLL
            for (int i = 0; i < size(acc_s); ++i)
                tOrP(i) = static_cast<Element>(acc_s(i));
            if constexpr (Kt::kDropoutPairs)
            {
                if (has_dropout && dropout.randval == nullptr)
                {
                    Tensor c_rc = make_tensor(tScS.data(), acc_rowcol_layout(tScS.layout()));
                    dropout.apply_pairs(tOrP, acc_rowcol_layout(tOrP.layout()), c_rc, m_begin, n * kBlockN);
                }
            }
            Tensor tOrP_a = make_tensor(tOrP.data(), acc_to_a_operand_layout(tOrP.layout()));
            // the partial last block skips the MMAs of P columns past seqlen_k (zeros). One code path for every
            // block: a separate call for the partial block doubles the spill (d128: 40 -> 440 B).
            if constexpr (Kt::kSkipPadKeys)
                gemm_reg_smem_keys(acc_o, tOrP_a, tOrVt, tOsVt, tiled_mma, smem_copy_v, smem_thr_v,
                                   seqlen_k - n * kBlockN);
            else
                gemm_reg_smem(acc_o, tOrP_a, tOrVt, tOsVt, tiled_mma, smem_copy_v, smem_thr_v);
        }
    }
    else if (use_ring)
    {
#if MHA_DECODE_TMA
        // Decode tile on sm_90: a ring of kKvStages stages filled by the tensor copy engine (decode_ring.cuh),
        // kKvStages - 1 blocks in flight while one computes. Lane t issues the boxes of rows [t * R, (t + 1) * R)
        // of a block (R = tma_box_rows; a partial last block: row t alone, from the one-row maps); its page id
        // is read one block ahead, so issuing never waits on the page table. The ring and its first blocks were
        // set up in the prologue (issue_next above).
        if constexpr (Kt::kRing)
        {
            cute::cp_async_wait<0>(); // Q
            for (int n = n_first; n >= n_lo; n = next_block(n))
            {
                const int st = ring_acquire(n);
                Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{}); // (MMA, M, N)
                clear(acc_s);
                score(acc_s, n, stage_view(tSsK, st));
                update(acc_s, n, stage_view(tOsVt, st));
                ring_advance();
            }
        }
#endif
    }
    else
    {
        // Split-KV prefill tile, and the decode tile without the ring: two K/V stages. Block `next` (K and V) streams in
        // while block n computes, so a whole block pair is always in flight. Paged: the page ids of the block after
        // that are fetched into shared memory during the compute, so issuing a block's loads never waits on the page
        // table.
        // [2 slots][page ids | rows inside the page][kBlockN]
        int* s_ids = reinterpret_cast<int*>(smem_raw + Kt::kSmemIdsOffset);
        constexpr int kIdsPerThread = (kBlockN + Kt::kNThreads - 1) / Kt::kNThreads;
        int ids_next[kIdsPerThread], rows_next[kIdsPerThread]; // rows tidx + i * kNThreads of a block
        auto fetch_ids = [&](int n_block) {
            CUTE_UNROLL
            for (int i = 0; i < kIdsPerThread; ++i)
            {
                const int r = tidx + i * Kt::kNThreads, j = n_block * kBlockN + r;
                const bool ok = n_block >= n_lo && r < kBlockN && j < seqlen_k;
                ids_next[i]  = ok ? pages[j / page_size] : 0;
                rows_next[i] = ok ? j % page_size : 0;
            }
        };
        auto store_ids = [&](int slot) {
            CUTE_UNROLL
            for (int i = 0; i < kIdsPerThread; ++i)
            {
                const int r = tidx + i * Kt::kNThreads;
                if (r < kBlockN)
                {
                    s_ids[slot * 2 * kBlockN + r]           = ids_next[i];
                    s_ids[slot * 2 * kBlockN + kBlockN + r] = rows_next[i];
                }
            }
        };
        int slot = 0; // s_ids[slot] holds the ids of the next block to load
        if (n_first >= n_lo)
        {
            load_v(n_first, 0);
            cute::cp_async_fence();
            if (page_size > 0)
            {
                fetch_ids(next_block(n_first));
                store_ids(0);
            }
        }
        int stage = 0;
        for (int n = n_first; n >= n_lo; n = next_block(n))
        {
            Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{}); // (MMA, M, N)
            clear(acc_s);
            cute::cp_async_wait<0>();
            __syncthreads(); // block n landed in `stage`; every warp finished reading the other stage and ids
            const int n_next = next_block(n);
            if (n_next >= n_lo)
            {
                const int* ids = page_size > 0 ? s_ids + slot * 2 * kBlockN : nullptr;
                load_k(n_next, stage ^ 1, ids);
                load_v(n_next, stage ^ 1, ids);
                cute::cp_async_fence();
                if (page_size > 0)
                    fetch_ids(next_block(n_next)); // in flight during the compute below
            }
            score(acc_s, n, stage_view(tSsK, stage));
            update(acc_s, n, stage_view(tOsVt, stage));
            if (page_size > 0 && n_next >= n_lo)
                store_ids(slot ^ 1);
            slot ^= 1;
            stage ^= 1;
        }
    }

    // ---- epilogue: normalise, LSE, O through shared memory with 16 B stores ----
    MHA_STAMP(kStampLoopEnd);
    float lse[kRows];
    // Split partials leave the sink to the combine kernel, which adds it once.
    const bool partial = Kt::kSplit && p.split.num_splits > 1;
    const float sink = Kt::kOther && p.mod.sink != nullptr && !partial ? p.mod.sink[bidh] : -INFINITY;
    softmax.finalize(o_rc, softmax_scale, sink, lse);
    if constexpr (Kt::kFull)
    {
        if (has_dropout)
        {
            CUTE_UNROLL
            for (int i = 0; i < size(acc_o); ++i)
                acc_o(i) *= p.drop.rp_keep;
        }
    }

#if MHA_DECODE_TMA
    if constexpr (Kt::kRing)
    {
        if (partial && p.split.cluster_merge)
        {
            Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
            Tensor c_rc = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r)
            {
                const int tr = get<0>(c_rc(r, 0));
                CUTE_UNROLL
                for (int c = 0; c < size<1>(o_rc); ++c)
                    s_part[tr * kLd + get<1>(c_rc(r, c))] = o_rc(r, c);
                if (get<1>(c_rc(0, 0)) == 0)
                    s_lse[tr] = lse[r];
            }
            cluster_merge([&](int tr) { return make_int2(q_head(tr), q_pos(tr)); });
            return;
        }
    }
#endif
    if constexpr (Kt::kSplit)
    {
        if (partial)
        {
            // fp32 partial O straight from the accumulators, and this split's LSE (-inf where it saw no key)
            const SplitParams& sp = p.split;
            Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
            Tensor c_rc = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
            const int64_t row0 = p.seq.is_group ? seq.q_row0 : 0;
            float* o_acc = sp.o_acc + split * sp.o_acc_split_stride + (p.seq.is_group ? 0 : bidb * sp.o_acc_batch_stride);
            float* lse_acc = sp.lse_acc + split * sp.lse_acc_split_stride +
                             (p.seq.is_group ? 0 : bidb * sp.lse_acc_batch_stride);
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r)
            {
                const int tr = get<0>(c_rc(r, 0));
                if (m_begin + tr >= m_end)
                    continue;
                const int64_t q = row0 + q_pos(tr);
                const int h     = q_head(tr);
                float* orow     = o_acc + h * sp.o_acc_head_stride + q * sp.o_acc_row_stride;
                CUTE_UNROLL
                for (int c = 0; c < size<1>(o_rc); ++c)
                    if (get<1>(c_rc(r, c)) < p.hdim_v)
                        orow[get<1>(c_rc(r, c))] = o_rc(r, c);
                if (get<1>(c_rc(0, 0)) == 0)
                    lse_acc[h * sp.lse_acc_head_stride + q] = lse[r];
            }
            cute::cp_async_wait<0>(); // with no visible key block the Q copy was never waited on
            if constexpr (Kt::kDecode)
            {
                if (sp.merge_counters != nullptr)
                    merge_in_grid(m_end - m_begin);
            }
            MHA_STAMP(kStampEnd);
            return;
        }
    }

    if (p.lse != nullptr)
    {
        Tensor tOcO = thr_mma.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
        Tensor c_rc = make_tensor(tOcO.data(), acc_rowcol_layout(tOcO.layout()));
        float* lse_ptr = p.lse + bidh * p.lse_head_stride +
                         (p.seq.is_group ? seq.q_row0 : bidb * p.lse_batch_stride);
        if (get<1>(c_rc(0, 0)) == 0) // one lane of each quad owns the row's LSE
        {
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r)
            {
                const int tr = get<0>(c_rc(r, 0));
                if (m_begin + tr < m_end)
                {
                    if constexpr (Kt::kSplit)
                        lse_ptr[(q_head(tr) - bidh) * p.lse_head_stride + q_pos(tr)] = lse[r];
                    else
                        lse_ptr[m_begin + tr] = lse[r];
                }
            }
        }
    }

    Tensor tOrO = make_tensor_like<Element>(acc_o);
    CUTE_UNROLL
    for (int i = 0; i < size(acc_o); ++i)
        tOrO(i) = static_cast<Element>(acc_o(i));
    cute::cp_async_wait<0>(); // with no visible key block the Q copy was never waited on
    __syncthreads();          // every warp is past its last read of sQ (sO aliases it)
    Tensor tOsO_mma = thr_mma.partition_C(sO);
    cute::copy(tOrO, tOsO_mma);
    __syncthreads();

    typename Kt::GmemCopyO gmem_copy_o;
    auto gmem_thr_o = gmem_copy_o.get_thread_slice(tidx);
    Tensor tOsO = gmem_thr_o.partition_S(sO);
    Tensor tOgO = gmem_thr_o.partition_D(gO);
    Tensor tOcO = gmem_thr_o.partition_D(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
    Tensor tOrOut = make_tensor<Element>(shape(tOgO));
    cute::copy(gmem_copy_o, tOsO, tOrOut);
    if constexpr (Kt::kSplit)
        store_rows_scatter(gmem_copy_o, tOrOut, tOcO, [&](int r) {
            return o_base + q_head(r) * p.o_head_stride + int64_t(q_pos(r)) * p.o_row_stride;
        }, m_end - m_begin, p.hdim_v);
    else
        store_tile_pred(gmem_copy_o, tOrOut, tOgO, tOcO, seqlen_q - m_begin, p.hdim_v);
}

} // namespace mha::ck
