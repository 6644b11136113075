#pragma once
// The asm ("v3") family's forward on sm_90a: tiles of 128 query rows of one head, three warpgroups per CTA, one
// persistent CTA per SM (TileSchedule).
//   warpgroup 0        producer: one thread issues the tensor copies of Q and of each K / V block (TMA,
//                      128-byte swizzle) into a ring of kStages stages, each completing on an mbarrier
//   warpgroups 1 and 2 consumers: 64 query rows each; S = Q K^T by wgmma from shared memory, the online softmax
//                      in registers, O += P V by wgmma with P from registers
// A consumer issues block i's S GEMM and block i-1's PV GEMM back to back and runs block i's softmax while the PV
// GEMM is in flight (FlashAttention-3's intra-warpgroup overlap); the two consumers take turns issuing (ping-pong).
// A two-stage ring frees a stage's K when its S GEMM is done and its V when its PV GEMM is (kSplitKv); O leaves in
// 16-byte stores after a transpose inside each quad.
// Covers no mask, causal masks and sliding windows (left / right bounds, top-left or bottom-right; no sink tokens),
// batch and group (varlen) mode, MQA / GQA, LSE;
// csrc/api/mha_fwd.cpp (asm_instance) decides which calls come here.
// Group mode and batch-mode logical lengths (kVarlen kernels; the plain batch-mode kernel is kVarlen = false): the
// tensor maps span the whole tensors, so no box may reach past a sequence (into the next one's rows, padding that
// may hold NaN, or past the tensor's end, whose size the host does not know in group mode). A block that would is
// copied from further back instead, its box ending at the sequence's last row: the last query block of a sequence
// of at least 128 rows (rows already computed by the previous block are not stored again) and the last key block of
// one of at least kBlockN keys (keys the previous block had are masked). A sequence shorter than one block is
// copied with cp.async by a second producer warp, the rows past it zero-filled. The consumers read no sequence array:
// the producer hands them each tile's record through the Q barrier (`rec`).

#include "../common/driver_api.h"
#include "../common/func_attr.h"
#include "../common/fwd_params.h"
#include "../common/mbarrier.h"
#include "../common/row_store.h"
#include "../ck/seq_info.cuh"

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>
#include <cutlass/numeric_types.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <utility>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MHA_SM90A 1
#else
#define MHA_SM90A 0
#endif

namespace mha::asm90 {

// Tile shape and roles. Shared memory at 176-key blocks: d128 Q 32 KB + 2 stages x (K 44 KB + V 44 KB) = 208 KB,
// d64 Q 16 KB + 3 stages x (K 22 KB + V 22 KB) = 148 KB (128-key blocks: 160 / 112 KB); d256 at 80-key blocks: Q 64
// KB + 2 x (40 + 40) KB = 224 KB, 225 KB with the alignment slack (88 keys would not fit); d192 / d_v 128 at 128-key
// blocks: Q 48 KB + 2 x (48 + 32) KB = 208 KB (176 keys would not fit). Registers: the producer warpgroup gives its
// registers to the consumers (setmaxnreg 24 / 240: 128 x 24 + 256 x 240 = 64,512 of 65,536).
template <typename Element_, int kHeadDim_, int kBlockN_ = 128, int kHeadDimV_ = kHeadDim_>
struct Sm90FwdTraits
{
    using Element = Element_;
    static constexpr int kHeadDim     = kHeadDim_;  // Q / K: 64, 128, 192 or 256, whole 128-byte swizzle atoms
    static constexpr int kHeadDimV    = kHeadDimV_; // V / O: 64, 128 or 256
    static constexpr int kBlockM      = 128;       // two consumer warpgroups of 64 rows
    static constexpr int kBlockN      = kBlockN_;  // keys per block: 128 or 176 (d256: 80 or 64)
    // ring stages: d64 three (two lost 1-6%, H100), d128 two (the shared memory's limit at 176-key blocks)
    static constexpr int kStages      = kHeadDim <= 64 ? 3 : 2;
    // A two-stage ring frees a stage's K when its S GEMM is done and its V when its PV GEMM is (kSplitKv), so the
    // block after next's K loads while the current block's softmax runs. Freed together after the PV GEMM, a block's
    // K / V could only load during the block before it (the S and PV GEMMs in flight hold both stages), and at
    // short or memory-bound sequences the S GEMM waited for its K. H200, bf16, 16k tokens, TFLOP/s, together ->
    // split, s = 512 / 2k / 16k non-causal: d128 426 / 547 / 635 -> 476 / 649 / 718, d192 / d_v 128 (1k / 2k / 16k)
    // 506 / 555 / 624 -> 638 / 717 / 746, d256 381 / 520 / 562 -> 454 / 705 / 808; causal +7-37%. (d128's 128-key
    // blocks in three stages, freed together, gained about half as much.) d64's three stages keep one release: split
    // there, the extra wait and arrival per block lost 1-4%.
    static constexpr bool kSplitKv    = kStages == 2;
    static constexpr int kConsumers   = 2;         // consumer warpgroups
    static constexpr int kThreads     = 128 * (kConsumers + 1);
    static constexpr int kAtoms       = kHeadDim / 64;  // 64-column (128-byte) swizzle atoms per Q / K row
    static constexpr int kAtomsV      = kHeadDimV / 64; // per V row
    static constexpr int kAtomRows    = 128;            // bytes per atom row
    static constexpr int kQBytes      = kBlockM * kHeadDim * 2;
    static constexpr int kKBytes      = kBlockN * kHeadDim * 2;
    static constexpr int kVBytes      = kBlockN * kHeadDimV * 2;
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * 168, "setmaxnreg would wait forever");
    static constexpr int kRecInts      = 16; // a kVarlen tile record (9 used)
    // 1 KB of slack to align the tiles to the 1024-byte swizzle period, then the mbarriers (kVarlen: two more, a
    // 16-byte request of the cp.async warp and two tile records)
    static constexpr int kSmemBytes =
        1024 + kQBytes + kStages * (kKBytes + kVBytes) + 8 * (4 + (kSplitKv ? 4 : 3) * kStages) + 16 + 8 * kRecInts;
    static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "Q / K rows of whole swizzle atoms");
    static_assert(kHeadDimV == 64 || kHeadDimV == 128 || kHeadDimV == 256, "the PV GEMM atoms instantiated below");
    static_assert(kBlockN == 64 || kBlockN == 80 || kBlockN == 128 || kBlockN == 176,
                  "the S GEMM atoms instantiated below");
    static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory");
};

// Tiles: (128-row block m, head h, batch b). A CTA takes work items blockIdx.x, + gridDim.x, ... of a list in which
// the row blocks of one head are neighbours, so that the tiles in flight read the same K / V at about the same time,
// from the L2. When the grid covers every tile (one tile per CTA, handed out by the hardware as SMs free up), an
// item is one tile, heaviest row block first. Otherwise the grid is persistent (one CTA per SM: the producer loads
// the next tile's Q and K / V while the consumers finish the current one), and under a causal mask an item is a
// pair of row blocks m and num_m - 1 - m, whose key blocks add up to about the same count for every pair, so that
// the static round robin stays balanced. (A window with a left bound sees about as many keys from every row block:
// single items.) The host builds the schedule (the grid's size decides the pairing). Its divisions by per_head and
// nhead are multiplies (FastDiv): a run-time division (I2F, MUFU.RCP, F2I and a fix-up through the uniform datapath)
// sat twice at every tile's start in the consumers' path, as did a 64-bit division in tile_blocks (per-tile clock64
// stamps, d64 s = 512: ~960 cycles from one tile's epilogue to the next tile's start, of a ~12,000-cycle tile). With
// both gone, H100, bf16, 16k tokens, TFLOP/s, same calls in ABBA order (.carry/s52/c5.sh, c9.sh): s = 512 / 1k d64
// +4-5% / +2-3% (causal +5-7%), d128 +3-3.5% / +2%; 2k and longer even, but d64 at 16k -1.3 to -1.6% (no other
// instruction in its key loop changed; their order did).
struct TileCoord
{
    int m_block, h, b;
};

struct TileSchedule
{
    int32_t num_m, nhead, per_head; // per_head: items per (batch, head)
    uint32_t num_items;             // below 2^31: the host keeps the tile count there
    int32_t paired;
    FastDiv by_per_head, by_nhead;

    static TileSchedule make(int seqlen_q, int block_m, int nhead, int batch, bool causal, int64_t grid) // host
    {
        TileSchedule t{};
        t.num_m             = (seqlen_q + block_m - 1) / block_m;
        t.nhead             = nhead;
        const int64_t heads = int64_t(nhead) * batch;
        t.paired            = causal && grid < t.num_m * heads ? 1 : 0;
        t.per_head          = t.paired ? (t.num_m + 1) / 2 : t.num_m;
        t.num_items         = uint32_t(t.per_head * heads);
        t.by_per_head       = FastDiv::make(std::max(t.per_head, 1));
        t.by_nhead          = FastDiv::make(std::max(nhead, 1));
        return t;
    }

#if MHA_SM90A
    // The CTA's k-th tile: false past its last; `skip` for the empty second half of an odd count's middle pair.
    // item < num_items + gridDim.x < 2^32; divided only below num_items.
    __device__ __forceinline__ bool get(int64_t k, TileCoord& tc, bool& skip) const
    {
        const uint32_t kk   = uint32_t(k);
        const uint32_t item = blockIdx.x + (paired ? kk / 2 : kk) * gridDim.x;
        if (item >= num_items)
            return false;
        const int hb     = by_per_head.div(int(item));
        const int i      = int(item) - hb * per_head;
        const bool upper = paired && (kk & 1);
        tc.m_block       = upper ? i : num_m - 1 - i;
        skip             = upper && i == num_m - 1 - i;
        const int b      = by_nhead.div(hb);
        tc.h             = hb - b * nhead;
        tc.b             = b;
        return true;
    }
#endif
};

// Device arguments: FwdParams' fields this kernel reads, plus the three tensor maps (4-d: column, row, head, batch;
// group mode: the whole packed tensor as batch 0).
struct Sm90FwdParams
{
    TmaDesc tma_q, tma_k, tma_v;
    // the cp.async copies of sequences shorter than a block (kVarlen)
    const void* q;
    const void* k;
    const void* v;
    int64_t q_row_stride, q_head_stride, q_batch_stride;
    int64_t k_row_stride, k_head_stride, k_batch_stride;
    int64_t v_row_stride, v_head_stride, v_batch_stride;
    void* o;
    float* lse;
    int64_t o_row_stride, o_head_stride, o_batch_stride;
    int64_t lse_head_stride, lse_batch_stride;
    int32_t seqlen_q, seqlen_k; // batch mode (padded) lengths
    int32_t max_seqlen_q;       // the grid's rows per (batch, head): seqlen_q in batch mode
    int32_t hdim_q, hdim_v, head_ratio, nhead, batch;
    float scale, scale_log2;
    int32_t o_vec16;      // 16-byte aligned O rows: the epilogue's 16-byte stores (else 4-byte)
    // key j visible to row i iff -win_left <= j - (i + diag) <= win_right, diag = 0 top-left, seqlen_k - seqlen_q
    // bottom-right (per sequence); INT_MAX: no bound on that side (window_bound); causal: INT_MAX, 0. The kernels
    // compare offsets from the diagonal with the bounds (no bound is added to a row or key index: no overflow).
    int32_t win_left, win_right;
    int32_t bottom_right;
    SeqParams seq; // group mode and logical lengths (ck::SeqInfo; the kVarlen kernel)
    TileSchedule sched;
};

constexpr int32_t kNoBound = 0x7fffffff; // a window side without a bound

// MaskParams' side (< 0: none) as the kernels' bound
inline int32_t window_bound(int32_t side) { return side < 0 ? kNoBound : side; }

// One sequence's rows (batch b): lengths, physical first rows, the mask's diagonal. A group-mode sequence longer than
// max_seqlen_q gets its first max_seqlen_q rows (the grid's); min_seqlen_q skips a sequence (no row written).
struct TileSeq
{
    int sq, sk, diag;
    int64_t q_row0, k_row0;
};

template <bool kVarlen>
__device__ __forceinline__ TileSeq tile_seq(const Sm90FwdParams& p, int b)
{
    TileSeq r;
    if constexpr (!kVarlen)
    {
        r.sq = p.seqlen_q, r.sk = p.seqlen_k, r.q_row0 = r.k_row0 = 0;
        r.diag = p.bottom_right ? r.sk - r.sq : 0;
    }
    else
    {
        const ck::SeqInfo s(p, b);
        r.sk = s.seqlen_k, r.q_row0 = s.q_row0, r.k_row0 = s.k_row0;
        r.diag = p.bottom_right ? r.sk - s.seqlen_q : 0; // the sequence's own diagonal, as ck's
        r.sq   = s.seqlen_q;
        if (p.seq.is_group)
            r.sq = p.seq.min_seqlen_q > 0 && s.seqlen_q <= p.seq.min_seqlen_q ? 0 : min(s.seqlen_q, p.max_seqlen_q);
    }
    return r;
}

#if MHA_SM90A
namespace dev {

// One box of a 4-d tensor map into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const TmaDesc& map, int c0, int c1, int c2, int c3, uint64_t* bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(smem_u32(dst)),
                 "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
                 : "memory");
}

// The dynamic shared memory's first 1024-byte boundary (the 128-byte swizzle's period; the kernels ask for 1 KB of
// slack).
__device__ __forceinline__ unsigned char* smem_align1024(unsigned char* raw)
{
    return reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
}

// Warp specialization's register split (setmaxnreg): the producer warpgroup gives registers back, the consumers take
// them. Every warp of the warpgroup executes it.
template <int kRegs>
__device__ __forceinline__ void regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// wgmma shared-memory descriptor of a 128-byte-swizzled tile (PTX ISA "matrix descriptor"): start address, leading
// and stride byte offsets (16-byte units), layout type 1 = 128-byte swizzle. K-major operands (Q, K): rows of 128
// bytes, 8-row groups 1024 bytes apart (SBO), LBO unused (1). MN-major (V: keys are K, head columns are N): 64
// columns per 128-byte row, 8-key groups 1024 bytes apart (SBO), the next 64 columns `lbo` bytes on (LBO).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes)
{
    return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16 |
           uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32 | uint64_t(1) << 62;
}

template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
        cute::warpgroup_fence_operand(r[i]);
}

namespace gm = cute::SM90::GMMA;

template <typename Element, int N>
struct SsAtom;
template <>
struct SsAtom<cutlass::bfloat16_t, 64> { using type = gm::MMA_64x64x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::half_t, 64> { using type = gm::MMA_64x64x16_F32F16F16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::bfloat16_t, 80> { using type = gm::MMA_64x80x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::half_t, 80> { using type = gm::MMA_64x80x16_F32F16F16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::bfloat16_t, 128> { using type = gm::MMA_64x128x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::bfloat16_t, 176> { using type = gm::MMA_64x176x16_F32BF16BF16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::half_t, 128> { using type = gm::MMA_64x128x16_F32F16F16_SS<gm::Major::K, gm::Major::K>; };
template <>
struct SsAtom<cutlass::half_t, 176> { using type = gm::MMA_64x176x16_F32F16F16_SS<gm::Major::K, gm::Major::K>; };

template <typename Element>
struct Gmma;

template <>
struct Gmma<cutlass::bfloat16_t>
{
    using RS128 = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
    using RS64  = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
    using RS256 = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
    __device__ __forceinline__ static uint32_t pack(float lo, float hi)
    {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
};

template <>
struct Gmma<cutlass::half_t>
{
    using RS128 = cute::SM90::GMMA::MMA_64x128x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
    using RS64  = cute::SM90::GMMA::MMA_64x64x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
    using RS256 = cute::SM90::GMMA::MMA_64x256x16_F32F16F16_RS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
    __device__ __forceinline__ static uint32_t pack(float lo, float hi)
    {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
};

// acc (64 x 128, fp32) {+}= A (shared) * B (shared)
template <typename Atom, size_t... I>
__device__ __forceinline__ void gmma_ss(uint64_t da, uint64_t db, float (&d)[sizeof...(I)], bool accumulate,
                                        std::index_sequence<I...>)
{
    Atom::fma(da, db, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// acc (64 x N, fp32) += A (registers) * B (shared)
template <typename Atom, size_t... I>
__device__ __forceinline__ void gmma_rs(const uint32_t (&a)[4], uint64_t db, float (&d)[sizeof...(I)],
                                        std::index_sequence<I...>)
{
    Atom::fma(a[0], a[1], a[2], a[3], db, d[I]..., cute::SM90::GMMA::ScaleOut::One);
}

// Rows [0, rows) and columns [0, cols) of a kRows-row block from global memory (row 0 at `src`, `row_stride`
// elements apart) into the image a tensor copy of the block's kAtoms 64-column boxes makes: box a at a * kRows * 128
// bytes, row r's 16-byte chunk c at r * 128 + ((c ^ r % 8) << 4) (the 128-byte swizzle: `dst` is 1024-byte aligned
// and so is every box, kRows being a multiple of 8). Other rows and columns are zero-filled (source size 0; the
// source address stays in row 0). One warp, each lane a 16-byte cp.async per step, neighbouring lanes along a row.
template <int kRows, int kAtoms>
__device__ __forceinline__ void copy_block_async(unsigned char* dst, const uint16_t* src, int64_t row_stride, int rows,
                                                 int cols, int lane)
{
    constexpr int kChunks = 8 * kAtoms; // 16-byte chunks per row
    const uint32_t base   = smem_u32(dst);
#pragma unroll 1
    for (int i = lane; i < kRows * kChunks; i += 32)
    {
        const int r = i / kChunks, c = i % kChunks;
        const bool ok        = r < rows && 8 * c < cols;
        const uint16_t* from = ok ? src + r * row_stride + 8 * c : src;
        const uint32_t to    = base + (c / 8) * (kRows * 128) + r * 128 + (((c % 8) ^ (r % 8)) << 4);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from), "r"(ok ? 16 : 0)
                     : "memory");
    }
}

// The warp's cp.async copies have landed and are visible to the wgmma reads (async proxy); then lane 0 may arrive
// on the barriers that wait for them (expecting no transaction bytes).
__device__ __forceinline__ void copies_landed()
{
    asm volatile("cp.async.wait_all;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
}

// For 16-byte stores of an accumulator row: the quad (the four threads t = lane % 4 of a row) transposes a 4 x 4
// block of 32-bit words (bf16 / fp16 pairs) in two xor exchanges: thread t's w[e] is pair t of 8-column chunk e, and
// after the call its w[0..3] are the four pairs of chunk t. Every lane of the warp must call it.
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int t)
{
    const bool b0 = t & 1, b1 = t & 2;
    uint32_t ra = __shfl_xor_sync(0xffffffffu, b0 ? w[0] : w[1], 1);
    uint32_t rb = __shfl_xor_sync(0xffffffffu, b0 ? w[2] : w[3], 1);
    w[0] = b0 ? ra : w[0], w[2] = b0 ? rb : w[2], w[1] = b0 ? w[1] : ra, w[3] = b0 ? w[3] : rb;
    ra = __shfl_xor_sync(0xffffffffu, b1 ? w[0] : w[2], 2);
    rb = __shfl_xor_sync(0xffffffffu, b1 ? w[1] : w[3], 2);
    w[0] = b1 ? ra : w[0], w[1] = b1 ? rb : w[1], w[2] = b1 ? w[2] : ra, w[3] = b1 ? w[3] : rb;
}

} // namespace dev
#endif // MHA_SM90A

// Key blocks [first, first + count) the tile's rows [m0, min(m0 + kBlockM, sq)) see: from the first row's left
// bound to the last row's right bound, within [0, sk). count 0: no row of the tile sees a key.
struct KeyBlocks
{
    int first, count;
};

// The bounds in 64-bit (a row's diagonal minus an unbounded side, INT_MAX, must not wrap: written in 32-bit as
// `x > left ? x - left : 0`, ptxas folded it into a max of the wrapped difference and bottom-right tiles with sk < sq
// lost their keys), the divisions in 32-bit: 0 <= lo < hi <= sk < 2^31 - 4096. A 64-bit division by kBlockN was
// about 20 dependent uniform-datapath instructions at every tile's start.
template <typename Kt>
__device__ __forceinline__ KeyBlocks tile_blocks(const Sm90FwdParams& p, const TileSeq& ts, int m0)
{
    const int64_t lo = max(int64_t(0), int64_t(m0) + ts.diag - p.win_left);
    const int64_t hi = min(int64_t(ts.sk), int64_t(min(m0 + Kt::kBlockM, ts.sq)) + ts.diag + p.win_right);
    if (hi <= lo)
        return KeyBlocks{0, 0};
    const int first = int(uint32_t(lo) / Kt::kBlockN);
    return KeyBlocks{first, int((uint32_t(hi) + Kt::kBlockN - 1) / Kt::kBlockN) - first};
}

// The consumers' per-thread share of a 64-row warpgroup tile (wgmma's accumulator layout): warp w of the warpgroup
// holds rows 16w .. 16w + 15; lane l holds rows 16w + l / 4 and 16w + l / 4 + 8, and in each 8-column chunk j the
// columns 8j + 2 (l % 4) and + 1, as acc[4j + {0, 1}] (first row) and acc[4j + {2, 3}] (second row).
template <typename Kt, bool kVarlen>
__global__ void __launch_bounds__(Kt::kThreads, 1) sm90_fwd_kernel(const __grid_constant__ Sm90FwdParams p)
{
#if MHA_SM90A
    using Element = typename Kt::Element;
    using G       = dev::Gmma<Element>;
    constexpr int kBlockM = Kt::kBlockM, kBlockN = Kt::kBlockN, kStages = Kt::kStages, D = Kt::kHeadDim;
    constexpr int DV = Kt::kHeadDimV, kAtoms = Kt::kAtoms, kAtomsV = Kt::kAtomsV;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* smem = dev::smem_align1024(smem_raw);
    unsigned char* sQ  = smem;                              // kAtoms x [128 rows][128 B]
    unsigned char* sK  = sQ + Kt::kQBytes;                  // kStages x kAtoms x [kBlockN rows][128 B]
    unsigned char* sV  = sK + kStages * Kt::kKBytes;        // kStages x kAtomsV x [kBlockN rows][128 B]
    uint64_t* full_q   = reinterpret_cast<uint64_t*>(sV + kStages * Kt::kVBytes);
    uint64_t* empty_q  = full_q + 1;
    uint64_t* full_k   = empty_q + 1;
    uint64_t* full_v   = full_k + kStages;
    uint64_t* empty_k  = full_v + kStages;  // the stage's K is read (kSplitKv: its S GEMM is done), else K and V
    uint64_t* empty_v  = empty_k + kStages; // kSplitKv: the stage's V is read (its PV GEMM is done)
    // kVarlen: warp 0 -> warp 1 copy requests, one at a time
    uint64_t* req_full  = empty_v + (Kt::kSplitKv ? kStages : 0);
    uint64_t* req_empty = req_full + 1;
    int* req            = reinterpret_cast<int*>(req_empty + 1); // kind, stage, head, batch
    // kVarlen: the tile records, one per Q load (slot q_loads % 2, kRecInts each): m0 (-1: no more tiles), head,
    // batch, n_blocks, sq, sk, diag, q_row0, the first key block. Written by the producer before the load's full_q
    // arrival, read by the consumers after it: they never read the sequence arrays, and tiles past a sequence's rows
    // never reach them.
    int* rec            = req + 4;

    constexpr int kRecInts = Kt::kRecInts;
    // the consumers skip key blocks their warpgroup's rows do not see (blocks narrower than a tile: d256's 80 / 64
    // keys; batch mode, a split K / V ring). H100, bf16, 16k tokens, TFLOP/s, same call in ABBA order (.carry/s52/c15.sh):
    // causal s = 512 / 1k / 2k / 4k / 16k 269 / 478 / 636 / 728 / 789 -> 281 / 489 / 643 / 725 / 792 (+4.5 / +2.2 /
    // +1.1 / -0.4 / +0.4%); without a mask, where nothing is skipped, 512 rows 510 -> 502 (-1.6%: the code around the
    // key loop moved)
    constexpr bool kSkipTail = !kVarlen && kBlockN < kBlockM && Kt::kSplitKv;
    // causal-like masks (a right bound, no left one): row blocks in pairs of equal total work
    const TileSchedule& sched = p.sched;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
    if (tid == 0)
    {
        mbar_init(smem_u32(full_q), 1);
        mbar_init(smem_u32(empty_q), Kt::kConsumers * 4); // one arrival per consumer warp
        for (int s = 0; s < kStages; ++s)
        {
            mbar_init(smem_u32(full_k + s), 1);
            mbar_init(smem_u32(full_v + s), 1);
            mbar_init(smem_u32(empty_k + s), Kt::kConsumers * 4);
            if (Kt::kSplitKv)
                mbar_init(smem_u32(empty_v + s), Kt::kConsumers * 4);
        }
        mbar_init(smem_u32(req_full), 1);
        mbar_init(smem_u32(req_empty), 1);
        mbar_init_fence();
    }
    __syncthreads();

    // Both roles count the same Q loads and K / V blocks (`fill`, over all of the CTA's tiles: ring stage
    // fill % kStages, its use number fill / kStages). Batch mode: both walk the same tiles, and tiles with no visible
    // key load no Q. kVarlen: every full_q phase is a tile record (a tile with rows, with or without a Q load, or the
    // last record); the consumers walk the records.
    if (wg == 0)
    {
        // producers. Warp 0's lane 0 waits for free buffers in order and issues the tensor copies. kVarlen: a
        // sequence shorter than one block is copied by warp 1 (cp.async, zero fill) on warp 0's request, posted
        // once the buffer is free; a request holds (kind, ring stage, head, batch), one is pending at a time.
        dev::regs_dec<Kt::kProducerRegs>();
        enum : int { kReqQ = 0, kReqKv = 1, kReqEnd = 2 };
        if (warp == 0)
        {
            if (lane != 0)
                return;
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&p.tma_q)) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&p.tma_k)) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&p.tma_v)) : "memory");
            int q_loads = 0, fill = 0, reqs = 0;
            auto post = [&](int kind, int stage, int h, int b) {
                if (reqs > 0) // warp 1 has taken the previous request
                    mbar_wait(smem_u32(req_empty), uint32_t((reqs - 1) & 1));
                req[0] = kind, req[1] = stage, req[2] = h, req[3] = b;
                mbar_arrive(smem_u32(req_full));
                ++reqs;
            };
            TileCoord tc;
            bool skip;
            for (int64_t k = 0; sched.get(k, tc, skip); ++k)
            {
                const int hk = tc.h / p.head_ratio, m0 = tc.m_block * kBlockM;
                const TileSeq ts   = tile_seq<kVarlen>(p, tc.b);
                if (kVarlen && (skip || m0 >= ts.sq)) // no rows: no record
                    continue;
                const KeyBlocks kb = skip || m0 >= ts.sq ? KeyBlocks{0, 0} : tile_blocks<Kt>(p, ts, m0);
                const int n_blocks = kb.count;
                if (!kVarlen && n_blocks == 0)
                    continue;
                const int bc = kVarlen && p.seq.is_group ? 0 : tc.b; // the maps' batch coordinate
                if (q_loads > 0) // the consumers' last S GEMM of the previous tile has read Q
                    mbar_wait(smem_u32(empty_q), uint32_t((q_loads - 1) & 1));
                if constexpr (kVarlen)
                {
                    int* r = rec + kRecInts * (q_loads & 1);
                    r[0] = m0, r[1] = tc.h, r[2] = tc.b, r[3] = n_blocks;
                    r[4] = ts.sq, r[5] = ts.sk, r[6] = ts.diag, r[7] = int(ts.q_row0), r[8] = kb.first;
                }
                ++q_loads;
                if (kVarlen && n_blocks == 0) // rows without keys: the record alone (the consumers write zeros)
                {
                    mbar_arrive(smem_u32(full_q));
                    continue;
                }
                if (kVarlen && ts.sq < kBlockM)
                    post(kReqQ, 0, tc.h, tc.b);
                else
                {
                    // kVarlen: the last block of the sequence ends at its last row
                    const int q0 = kVarlen ? int(ts.q_row0) + min(m0, ts.sq - kBlockM) : m0;
                    mbar_expect_tx(smem_u32(full_q), Kt::kQBytes);
                    for (int a = 0; a < kAtoms; ++a)
                        dev::tma_load(sQ + a * kBlockM * Kt::kAtomRows, p.tma_q, 64 * a, q0, tc.h, bc, full_q);
                }
                for (int it = 0; it < n_blocks; ++it, ++fill)
                {
                    const int s = fill % kStages;
                    const uint32_t ph = uint32_t(((fill / kStages) & 1) ^ 1); // the stage's previous use, read
                    if (fill >= kStages)
                        mbar_wait(smem_u32(empty_k + s), ph);
                    if (kVarlen && ts.sk < kBlockN)
                    {
                        if (Kt::kSplitKv && fill >= kStages)
                            mbar_wait(smem_u32(empty_v + s), ph);
                        post(kReqKv, s, hk, tc.b);
                        continue;
                    }
                    // kVarlen: the last block of the sequence ends at its last key
                    const int n0  = (kb.first + it) * kBlockN;
                    const int row = kVarlen ? int(ts.k_row0) + min(n0, ts.sk - kBlockN) : n0;
                    unsigned char* k_dst = sK + s * Kt::kKBytes;
                    unsigned char* v_dst = sV + s * Kt::kVBytes;
                    mbar_expect_tx(smem_u32(full_k + s), Kt::kKBytes);
                    for (int a = 0; a < kAtoms; ++a)
                        dev::tma_load(k_dst + a * kBlockN * Kt::kAtomRows, p.tma_k, 64 * a, row, hk, bc, full_k + s);
                    if (Kt::kSplitKv && fill >= kStages)
                        mbar_wait(smem_u32(empty_v + s), ph);
                    mbar_expect_tx(smem_u32(full_v + s), Kt::kVBytes);
                    for (int a = 0; a < kAtomsV; ++a)
                        dev::tma_load(v_dst + a * kBlockN * Kt::kAtomRows, p.tma_v, 64 * a, row, hk, bc, full_v + s);
                }
            }
            if constexpr (kVarlen)
            {
                if (q_loads > 0)
                    mbar_wait(smem_u32(empty_q), uint32_t((q_loads - 1) & 1));
                rec[kRecInts * (q_loads & 1)] = -1; // no more tiles
                mbar_arrive(smem_u32(full_q));
                post(kReqEnd, 0, 0, 0);
            }
        }
        else if (kVarlen && warp == 1)
        {
            for (int r = 0;; ++r)
            {
                if (lane == 0)
                    mbar_wait(smem_u32(req_full), uint32_t(r & 1));
                __syncwarp();
                const int kind = req[0], s = req[1], h = req[2], b = req[3];
                __syncwarp();
                if (lane == 0)
                    mbar_arrive(smem_u32(req_empty));
                if (kind == kReqEnd)
                    break;
                const TileSeq ts = tile_seq<kVarlen>(p, b);
                const int64_t boff = p.seq.is_group ? 0 : b;
                if (kind == kReqQ) // rows [0, sq) of a sequence shorter than one query block
                {
                    const uint16_t* src = static_cast<const uint16_t*>(p.q) + boff * p.q_batch_stride +
                                          h * p.q_head_stride + ts.q_row0 * p.q_row_stride;
                    dev::copy_block_async<kBlockM, kAtoms>(sQ, src, p.q_row_stride, ts.sq, p.hdim_q, lane);
                    dev::copies_landed();
                    if (lane == 0)
                        mbar_arrive(smem_u32(full_q));
                }
                else // keys [0, sk) of a sequence shorter than one key block
                {
                    const uint16_t* k_src = static_cast<const uint16_t*>(p.k) + boff * p.k_batch_stride +
                                            h * p.k_head_stride + ts.k_row0 * p.k_row_stride;
                    const uint16_t* v_src = static_cast<const uint16_t*>(p.v) + boff * p.v_batch_stride +
                                            h * p.v_head_stride + ts.k_row0 * p.v_row_stride;
                    dev::copy_block_async<kBlockN, kAtoms>(sK + s * Kt::kKBytes, k_src, p.k_row_stride, ts.sk,
                                                           p.hdim_q, lane);
                    dev::copy_block_async<kBlockN, kAtomsV>(sV + s * Kt::kVBytes, v_src, p.v_row_stride, ts.sk,
                                                           p.hdim_v, lane);
                    dev::copies_landed();
                    if (lane == 0)
                    {
                        mbar_arrive(smem_u32(full_k + s));
                        mbar_arrive(smem_u32(full_v + s));
                    }
                }
            }
        }
        return;
    }

    // consumers
    dev::regs_inc<Kt::kConsumerRegs>();
    const int cw   = wg - 1;          // consumer warpgroup: rows 64 cw .. 64 cw + 63 of a tile
    const int wrow = 16 * (warp % 4); // the warp's first row in the warpgroup
    const int g = lane / 4, t = lane % 4;
    constexpr int kSRegs = kBlockN / 2; // 64 x kBlockN accumulator: kBlockN / 2 floats per thread
    constexpr int kORegs = DV / 2;

    // Ping-pong: the two consumer warpgroups take turns issuing their GEMMs (named barriers 1 and 2, 256 threads:
    // the waiting warpgroup's 128 plus the other's 128 arrivals), so that one's softmax runs while the tensor cores
    // work on the other's GEMMs. Warpgroup 0 goes first; each takes n_blocks + 1 turns per tile. H100, bf16,
    // TFLOP/s, 16k tokens, non-causal s = 1k / 4k / 16k, without -> with: d64 329 / 404 / 446 -> 361 / 450 / 476,
    // d128 399 / 494 / 528 -> 416 / 517 / 555 (causal alike: +3-13%).
    auto turn_wait = [&]() { asm volatile("bar.sync %0, 256;" ::"r"(1 + cw) : "memory"); };
    auto turn_pass = [&]() { asm volatile("bar.arrive %0, 256;" ::"r"(2 - cw) : "memory"); };
    if (cw == 1)
        asm volatile("bar.arrive 1, 256;" ::: "memory");

    float o[kORegs], row_max[2], row_sum[2], alpha[2];
    float s[kSRegs];
    uint32_t pa[kBlockN / 16][4];
    int q_loads = 0, fill = 0;
    for (int64_t k = 0;; ++k)
    {
        TileCoord tc;
        TileSeq ts;
        int m0, n_blocks, kb_first;
        if constexpr (kVarlen)
        {
            // the producer's record of the next tile with rows. m0 and n_blocks broadcast from lane 0 so that the
            // compiler knows them warp-uniform: `fill` (the ring's stage and phase) follows n_blocks, and the GEMM
            // descriptors derived from the stage stay in uniform registers (loaded per thread, they moved to
            // per-thread ones plus R2UR conversions: -4 to -10%, H200)
            mbar_wait(smem_u32(full_q), uint32_t(q_loads & 1));
            const int* r = rec + kRecInts * (q_loads & 1);
            ++q_loads;
            m0 = __shfl_sync(0xffffffffu, r[0], 0);
            if (m0 < 0)
                break;
            n_blocks = __shfl_sync(0xffffffffu, r[3], 0);
            kb_first = __shfl_sync(0xffffffffu, r[8], 0);
            ts.sq = r[4], ts.sk = r[5], ts.diag = r[6]; // head, batch and rows: read again at the epilogue
            if (n_blocks == 0) // no key to see: Q was not loaded (one arrival per consumer warp)
            {
                __syncwarp(); // every lane is past its reads of the slot this arrival lets the producer overwrite
                if (lane == 0)
                    mbar_arrive(smem_u32(empty_q));
            }
        }
        else
        {
            bool skip;
            if (!sched.get(k, tc, skip))
                break;
            if (skip)
                continue;
            m0 = tc.m_block * kBlockM;
            ts = tile_seq<kVarlen>(p, tc.b);
            if (m0 >= ts.sq) // nothing loaded, nothing written
                continue;
            const KeyBlocks kb = tile_blocks<Kt>(p, ts, m0);
            n_blocks = kb.count, kb_first = kb.first;
        }
        // the tile's first row: kVarlen, the last query block of a sequence of 128 rows or more was copied from row
        // sq - 128 on (rows below m0 are computed again, not stored)
        const int r0   = kVarlen && ts.sq >= kBlockM ? min(m0, ts.sq - kBlockM) : m0;
        const int row0 = r0 + 64 * cw + wrow + g; // this thread's rows: row0, row0 + 8
#pragma unroll
        for (int i = 0; i < kORegs; ++i)
            o[i] = 0.f;
        row_max[0] = row_max[1] = -INFINITY, row_sum[0] = row_sum[1] = 0.f;

        if (n_blocks > 0)
        {
            if constexpr (!kVarlen)
            {
                mbar_wait(smem_u32(full_q), uint32_t(q_loads & 1));
                ++q_loads;
            }
            const uint32_t q_base = smem_u32(sQ) + 64 * cw * Kt::kAtomRows;

            // S = Q K_blk^T for the stage's K (issued, not waited for)
            auto issue_s = [&](int st) {
                const uint32_t k_base = smem_u32(sK + st * Kt::kKBytes);
                dev::fence_regs(s);
                cute::warpgroup_arrive();
#pragma unroll
                for (int kk = 0; kk < D / 16; ++kk)
                {
                    const uint32_t off_q = (kk / 4) * kBlockM * Kt::kAtomRows + (kk % 4) * 32;
                    const uint32_t off_k = (kk / 4) * kBlockN * Kt::kAtomRows + (kk % 4) * 32;
                    dev::gmma_ss<typename dev::SsAtom<Element, kBlockN>::type>(
                        dev::desc_sw128(q_base + off_q, 16, 1024), dev::desc_sw128(k_base + off_k, 16, 1024), s,
                        kk > 0, std::make_index_sequence<kSRegs>{});
                }
                cute::warpgroup_commit_batch();
            };
            // O += P V_blk for the stage's V (issued, not waited for)
            auto issue_pv = [&](int st) {
                const uint32_t v_base = smem_u32(sV + st * Kt::kVBytes);
                dev::fence_regs(o);
                cute::warpgroup_arrive();
#pragma unroll
                for (int kk = 0; kk < kBlockN / 16; ++kk)
                {
                    const uint64_t dv =
                        dev::desc_sw128(v_base + kk * 16 * Kt::kAtomRows, kBlockN * Kt::kAtomRows, 1024);
                    if constexpr (DV == 256)
                        dev::gmma_rs<typename G::RS256>(pa[kk], dv, o, std::make_index_sequence<kORegs>{});
                    else if constexpr (DV == 128)
                        dev::gmma_rs<typename G::RS128>(pa[kk], dv, o, std::make_index_sequence<kORegs>{});
                    else
                        dev::gmma_rs<typename G::RS64>(pa[kk], dv, o, std::make_index_sequence<kORegs>{});
                }
                cute::warpgroup_commit_batch();
            };
            // Masks key columns past seqlen_k and outside the window (-inf), in blocks that need it: right of the
            // warpgroup's first row's right bound, or left of its last row's left bound. kVarlen: the last key block
            // of a sequence of kBlockN keys or more was copied from key sk - kBlockN on; its keys below n0 (the
            // previous block's) are masked too.
            auto mask = [&](int it) {
                const int n0 = (kb_first + it) * kBlockN;
                const int x  = r0 + 64 * cw + ts.diag - n0; // the warpgroup's first row's diagonal from n0
                const bool tail  = n0 + kBlockN > ts.sk;
                const bool right = kBlockN - 1 - x > p.win_right;
                const bool left  = x + 63 > p.win_left;
                if (!tail && !right && !left)
                    return;
                const int c0 = kVarlen && tail && ts.sk >= kBlockN ? ts.sk - kBlockN : n0; // the block's first key
#pragma unroll
                for (int r = 0; r < 2; ++r)
                {
                    // the row's visible keys [lo, hi) (kVarlen: none below n0), saturated at 0 and sk; column c is
                    // visible iff c - lo < width, unsigned. No operation can wrap: the diagonal dg may be negative
                    // (bottom-right, sk < sq) and an unbounded side is INT_MAX. Written as selects (`left >= dg ? 0 :
                    // dg - left`, `right > sk - 1 - dg ? sk : dg + right + 1`), the compiler folded them into a max /
                    // min of the wrapped differences, and rows with dg <= -2 under a window with one side unbounded
                    // lost every key (test_asm_windows' bottom-right cases with sk < sq).
                    const int dg  = row0 + 8 * r + ts.diag; // the row's diagonal
                    const int dg0 = max(dg, 0);
                    int lo        = dg0 - min(p.win_left, dg0); // max(dg - win_left, 0)
                    if (kVarlen)
                        lo = max(lo, n0);
                    const int hi = dg + 1 + min(p.win_right, ts.sk - 1 - dg); // min(dg + win_right + 1, sk)
                    const uint32_t width = hi > lo ? uint32_t(hi - lo) : 0u;
                    const int base       = c0 + 2 * t - lo;
#pragma unroll
                    for (int j = 0; j < kBlockN / 8; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e)
                            if (uint32_t(base + 8 * j + e) >= width)
                                s[4 * j + 2 * r + e] = -INFINITY;
                }
            };
            // Online softmax of the block's scores, in place: the new row maxima, s = exp2((s - max) * scale_log2),
            // the row sums, and in `alpha` the factor for the O accumulated so far. Runs while the previous block's
            // PV GEMM is in flight; pack() and rescale_o() wait for it.
            auto softmax = [&]() {
#pragma unroll
                for (int r = 0; r < 2; ++r)
                {
                    float m = row_max[r];
#pragma unroll
                    for (int j = 0; j < kBlockN / 8; ++j)
                        m = fmaxf(m, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
                    // a row with nothing visible yet keeps max = -inf: shift by 0 so exp2(-inf) = 0, not NaN
                    const float shift = m == -INFINITY ? 0.f : m * p.scale_log2;
                    alpha[r]   = exp2f(row_max[r] * p.scale_log2 - shift);
                    row_max[r] = m;
                    float sum  = 0.f;
#pragma unroll
                    for (int j = 0; j < kBlockN / 8; ++j)
                    {
                        const float x0 = exp2f(fmaf(s[4 * j + 2 * r], p.scale_log2, -shift));
                        const float x1 = exp2f(fmaf(s[4 * j + 2 * r + 1], p.scale_log2, -shift));
                        s[4 * j + 2 * r] = x0, s[4 * j + 2 * r + 1] = x1;
                        sum += x0 + x1;
                    }
                    row_sum[r] = row_sum[r] * alpha[r] + sum;
                }
            };
            // P as the PV GEMM's A fragments: k-step kk covers the chunks 2 kk and 2 kk + 1 (m16n8k16's A layout)
            auto pack = [&]() {
#pragma unroll
                for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        pa[kk][i] = G::pack(s[8 * kk + 2 * i], s[8 * kk + 2 * i + 1]);
            };
            auto rescale_o = [&]() {
#pragma unroll
                for (int j = 0; j < DV / 8; ++j)
                {
                    o[4 * j + 0] *= alpha[0], o[4 * j + 1] *= alpha[0];
                    o[4 * j + 2] *= alpha[1], o[4 * j + 3] *= alpha[1];
                }
            };
            auto release = [&](uint64_t* bar) {
                if (lane == 0)
                    mbar_arrive(smem_u32(bar));
            };
            auto stage = [](int f) { return f % kStages; };
            auto phase = [](int f) { return uint32_t((f / kStages) & 1); };

            // kSkipTail: the key blocks this warpgroup's rows see, n_mine <= n_blocks. Under a right bound (causal, windows)
            // the first warpgroup's 64 rows stop seeing keys up to 64 keys before the second's, and with 80-key blocks
            // (d256) that is a whole block in about half the tiles (64-key blocks: in most): its S and PV GEMMs are
            // skipped, the warpgroup only taking its turns and freeing the stages. Broadcast from lane 0: the ring's
            // stage arithmetic stays in the uniform datapath.
            int n_mine = n_blocks;
            if constexpr (kSkipTail)
            {
                const int64_t hi = min(int64_t(ts.sk), int64_t(min(r0 + 64 * cw + 64, ts.sq)) + ts.diag + p.win_right);
                const int n = int((max(hi, int64_t(0)) + kBlockN - 1) / kBlockN) - kb_first;
                n_mine      = __shfl_sync(0xffffffffu, max(1, min(n_blocks, n)), 0);
            }

            // block 0
            mbar_wait(smem_u32(full_k + stage(fill)), phase(fill));
            turn_wait();
            issue_s(stage(fill));
            turn_pass();
            cute::warpgroup_wait<0>();
            dev::fence_regs(s);
            if (Kt::kSplitKv)
                release(empty_k + stage(fill));
            if (n_mine == 1) // the tile's last S GEMM has read Q
                release(empty_q);
            mask(0);
            softmax(); // O is still 0: no rescale
            pack();
            for (int it = 1; it < n_mine; ++it)
            {
                const int cur = fill + it, prev = cur - 1;
                mbar_wait(smem_u32(full_k + stage(cur)), phase(cur));
                mbar_wait(smem_u32(full_v + stage(prev)), phase(prev));
                turn_wait();
                issue_s(stage(cur));
                issue_pv(stage(prev));
                turn_pass();
                cute::warpgroup_wait<1>(); // this block's S is in; the previous block's PV GEMM may still run
                dev::fence_regs(s);
                if (Kt::kSplitKv)
                    release(empty_k + stage(cur));
                if (it == n_mine - 1)
                    release(empty_q);
                mask(it);
                softmax();
                cute::warpgroup_wait<0>(); // the PV GEMM has read pa and written o
                dev::fence_regs(o);
                release((Kt::kSplitKv ? empty_v : empty_k) + stage(prev));
                rescale_o();
                pack();
            }
            if (kSkipTail && n_mine < n_blocks)
            {
                // block n_mine, not seen: the PV GEMM of block n_mine - 1 in its turn; then a turn for each block
                // after it and one for the last PV GEMM (the other warpgroup's count); every stage freed once
                const int cur = fill + n_mine, prev = cur - 1;
                mbar_wait(smem_u32(full_v + stage(prev)), phase(prev));
                turn_wait();
                issue_pv(stage(prev));
                turn_pass();
                release(empty_k + stage(cur));
                release(empty_v + stage(cur));
                cute::warpgroup_wait<0>();
                dev::fence_regs(o);
                release(empty_v + stage(prev));
                for (int it = n_mine + 1; it < n_blocks; ++it)
                {
                    turn_wait();
                    turn_pass();
                    release(empty_k + stage(fill + it));
                    release(empty_v + stage(fill + it));
                }
                turn_wait();
                turn_pass();
            }
            else
            {
                const int last = fill + n_blocks - 1;
                mbar_wait(smem_u32(full_v + stage(last)), phase(last));
                turn_wait();
                issue_pv(stage(last));
                turn_pass();
                cute::warpgroup_wait<0>();
                dev::fence_regs(o);
                release((Kt::kSplitKv ? empty_v : empty_k) + stage(last));
            }
            fill += n_blocks;
        }

        // epilogue: O / row sum (bf16 / fp16 pairs), LSE. The sequence's rows are read again (the tile record, or
        // the kernel parameters): kept from the tile's start, they would hold registers through the key loop.
        TileSeq te;
        if constexpr (kVarlen)
        {
            const int* r = rec + kRecInts * ((q_loads - 1) & 1);
            tc.m_block = r[0] / kBlockM, tc.h = r[1], tc.b = r[2], te.sq = r[4], te.q_row0 = r[7];
        }
        else
            te = tile_seq<kVarlen>(p, tc.b);
        const bool group = kVarlen && p.seq.is_group;
        Element* out = static_cast<Element*>(p.o) + int64_t(tc.h) * p.o_head_stride +
                       (group ? te.q_row0 * p.o_row_stride : int64_t(tc.b) * p.o_batch_stride);
        float* lse = p.lse == nullptr ? nullptr
                                      : p.lse + int64_t(tc.h) * p.lse_head_stride +
                                            (group ? te.q_row0 : int64_t(tc.b) * p.lse_batch_stride);
#pragma unroll
        for (int r = 0; r < 2; ++r)
        {
            float sum = row_sum[r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
            const int row   = row0 + 8 * r;
            const bool row_ok = row < te.sq && (!kVarlen || row >= tc.m_block * kBlockM);
            // d256's kVarlen kernel keeps the 4-byte stores: with the 16-byte ones ptxas spilled 32 registers around
            // each tile's last PV GEMM there. H100, group mode (16 random lengths averaging s), TFLOP/s, s = 512 / 1k
            // / 2k / 4k non-causal, 16-byte -> 4-byte: 251 / 421 / 598 / 680 -> 373 / 555 / 681 / 703 (ba2480f 330 /
            // 441 / 512 / 548; .carry/s48/c14.sh).
            constexpr bool kVec16 = !(kVarlen && DV == 256);
            // 16-byte stores: the quad (the row's four threads) transposes each 4 x 4 block of bf16 / fp16 pairs
            // (thread t: pair t of chunks 4c .. 4c + 3 -> all four pairs of chunk 4c + t; dev::quad_transpose). A
            // warp's store then covers 64 contiguous bytes of each of its 8 rows; the pairs' 4-byte stores touched 8
            // rows x 16 bytes per instruction with 4x the instructions, and the epilogue took ~1.1-1.3 us per tile
            // and warpgroup (clock64 stamps, d128 s = 512, H200). H100, bf16, 16k tokens, TFLOP/s, s = 512 / 2k / 16k
            // non-causal, 4-byte -> 16-byte (both with the split K / V release; .carry/s48/c5.sh, then c11.sh on
            // another H100): d128 458 / 652 / 705 -> 523 / 678 / 732, d256 416 / 691 / 802 -> 535 / 773 / 802, d64
            // 346 / 430 / 471 -> 353 / 447 / 493; H200, same call (c9.sh): d128 +1-12%, d256 +1-26%. mha_fwd
            // asks every call for O strides of multiples of 8 elements and a 16-byte aligned o_ptr, so the 4-byte
            // branch only guards this kernel's own contract; written without the branch, the 16-byte stores
            // measured 6-30% slower (ptxas spilled across the tile loop and lengthened the key loop; H100, same call).
            if (kVec16 && p.o_vec16)
            {
                Element* orow = out + int64_t(row) * p.o_row_stride;
#pragma unroll
                for (int c = 0; c < DV / 32; ++c)
                {
                    uint32_t w[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        w[e] = G::pack(o[4 * (4 * c + e) + 2 * r] * inv, o[4 * (4 * c + e) + 2 * r + 1] * inv);
                    dev::quad_transpose(w, t);
                    const int col = 8 * (4 * c + t);
                    if (row_ok && col < p.hdim_v)
                        *reinterpret_cast<uint4*>(orow + col) = make_uint4(w[0], w[1], w[2], w[3]);
                }
                if (row_ok && lse != nullptr && t == 0)
                    lse[row] = sum > 0.f ? row_max[r] * p.scale + logf(sum) : -INFINITY;
            }
            else if (row_ok)
            {
                Element* orow = out + int64_t(row) * p.o_row_stride;
#pragma unroll
                for (int j = 0; j < DV / 8; ++j)
                {
                    const int col = 8 * j + 2 * t;
                    if (col < p.hdim_v)
                        *reinterpret_cast<uint32_t*>(orow + col) =
                            G::pack(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
                }
                if (lse != nullptr && t == 0)
                    lse[row] = sum > 0.f ? row_max[r] * p.scale + logf(sum) : -INFINITY;
            }
        }
    }
    if (cw == 0) // warpgroup 1's last pass
        turn_wait();
#endif // MHA_SM90A
}

// Host: one 4-d tensor map (column, row, head, batch) of a 16-bit [batch][head][row][column] tensor given by element
// strides, boxes of 64 columns x box_rows rows (one 128-byte swizzle atom wide). False when the driver has no encoder
// or rejects the map (csrc/api checked the alignment rules before, so that is not expected).
inline bool encode_map_4d(TmaDesc& out, const void* base, int cols, int rows, int heads, int batch, int box_rows,
                          int64_t row_stride, int64_t head_stride, int64_t batch_stride)
{
    static const auto encode = driver_entry_point<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
    if (encode == nullptr)
        return false;
    const int64_t eb = 2;
    cuuint64_t dims[4]    = {cuuint64_t(cols), cuuint64_t(rows > 0 ? rows : 1), cuuint64_t(heads), cuuint64_t(batch)};
    cuuint64_t strides[3] = {cuuint64_t(row_stride * eb), cuuint64_t(head_stride * eb), cuuint64_t(batch_stride * eb)};
    // a dimension of extent 1 is never stepped over: give it the stride of a packed layout, which the encoder accepts
    // whatever the caller's was (PyTorch exports 1 for size-1 dimensions)
    for (int d = 1; d < 4; ++d)
        if (dims[d] == 1)
        {
            const cuuint64_t below = d == 1 ? dims[0] * eb : strides[d - 2] * dims[d - 1];
            strides[d - 1]         = (below + 15) / 16 * 16;
        }
    const cuuint32_t box[4]  = {64, cuuint32_t(box_rows), 1, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    return encode(reinterpret_cast<CUtensorMap*>(&out), CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(base), dims,
                  strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Host: the three tensor maps of a forward call. Group mode: one batch of as many rows as a map may span (the
// packed tensors' row counts are on the device only; the kVarlen kernel's tensor copies stay inside the sequences'
// rows): 2^31 - 1, or fewer where rows x row stride would reach 2^40 bytes, the encoder's limit on a stride, which the
// stride made up for a single head (rows x row stride) must respect too. No tensor a GPU holds has more rows.
inline int group_map_rows(int64_t row_stride_elems)
{
    const int64_t bytes = std::max<int64_t>(row_stride_elems, 1) * 2;
    return int(std::min<int64_t>(2147483647, ((int64_t(1) << 40) - 1024) / bytes));
}

inline bool encode_sm90_maps(Sm90FwdParams& a, const FwdParams& p, int block_m, int block_n)
{
    const bool g = p.seq.is_group;
    const int rq = g ? group_map_rows(p.q_row_stride) : p.seqlen_q, nb = g ? 1 : p.batch;
    const int rk = g ? group_map_rows(std::max(p.k_row_stride, p.v_row_stride)) : p.seqlen_k;
    return encode_map_4d(a.tma_q, p.q, p.hdim_q, rq, p.nhead_q, nb, block_m, p.q_row_stride, p.q_head_stride,
                         p.q_batch_stride) &&
           encode_map_4d(a.tma_k, p.k, p.hdim_q, rk, p.nhead_k, nb, block_n, p.k_row_stride, p.k_head_stride,
                         p.k_batch_stride) &&
           encode_map_4d(a.tma_v, p.v, p.hdim_v, rk, p.nhead_k, nb, block_n, p.v_row_stride, p.v_head_stride,
                         p.v_batch_stride);
}

// The SMs of the current device (the persistent grid's size), cached per device.
inline int sm_count()
{
    static int counts[64] = {};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
    {
        (void)cudaGetLastError();
        return 132;
    }
    if (counts[dev] == 0)
    {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
        {
            (void)cudaGetLastError();
            return 132;
        }
        counts[dev] = n;
    }
    return counts[dev];
}

template <typename Kt>
cudaError_t launch_sm90(const FwdParams& p, cudaStream_t stream)
{
    Sm90FwdParams a{};
    if (!encode_sm90_maps(a, p, Kt::kBlockM, Kt::kBlockN))
        return cudaErrorInvalidValue;
    a.q = p.q, a.k = p.k, a.v = p.v;
    a.q_row_stride = p.q_row_stride, a.q_head_stride = p.q_head_stride, a.q_batch_stride = p.q_batch_stride;
    a.k_row_stride = p.k_row_stride, a.k_head_stride = p.k_head_stride, a.k_batch_stride = p.k_batch_stride;
    a.v_row_stride = p.v_row_stride, a.v_head_stride = p.v_head_stride, a.v_batch_stride = p.v_batch_stride;
    a.o = p.o, a.lse = p.lse;
    a.o_row_stride = p.o_row_stride, a.o_head_stride = p.o_head_stride, a.o_batch_stride = p.o_batch_stride;
    a.lse_head_stride = p.lse_head_stride, a.lse_batch_stride = p.lse_batch_stride;
    a.seqlen_q = p.seqlen_q, a.seqlen_k = p.seqlen_k, a.max_seqlen_q = p.max_seqlen_q;
    a.hdim_q = p.hdim_q, a.hdim_v = p.hdim_v, a.head_ratio = p.head_ratio;
    a.nhead = p.nhead_q, a.batch = p.batch;
    a.scale = p.scale, a.scale_log2 = p.scale_log2;
    // 16-byte O stores where every row starts 16-byte aligned (a stride of an extent-1 dimension is never applied)
    a.o_vec16 = rows_16b_aligned(p.o, p.o_row_stride, p.o_head_stride, p.nhead_q, p.o_batch_stride, p.batch,
                                 p.seq.is_group);
    if (p.mask.sink_size != 0) // csrc/api sends calls with sink tokens to ck
        return cudaErrorInvalidValue;
    a.win_left     = window_bound(p.mask.left), a.win_right = window_bound(p.mask.right);
    a.bottom_right = p.mask.bottom_right ? 1 : 0;
    a.seq          = p.seq;

    // group mode and batch-mode logical lengths take the kVarlen kernel; plain batch mode keeps the kernel without
    // the per-sequence reads (they cost it 2-8% at 1k rows when it had them, H200)
    const bool varlen = p.seq.is_group || p.seq.cu_seqlen_q != nullptr || p.seq.cu_seqlen_k != nullptr;
    auto kernel = varlen ? &sm90_fwd_kernel<Kt, true> : &sm90_fwd_kernel<Kt, false>;
    cudaError_t err = set_max_dynamic_smem(kernel, Kt::kSmemBytes);
    if (err != cudaSuccess)
        return err;
    // csrc/api keeps the tile count below 2^31 (TileSchedule's 32-bit work list; asm_instance in mha_fwd.cpp). One
    // persistent CTA per SM, or one per tile where there are fewer (TileSchedule). H100, bf16, 16k tokens, non-causal,
    // TFLOP/s, one CTA per tile -> persistent: d64 s = 512 / 2k / 16k 277 / 394 / 444 -> 342 / 419 / 447; d128 2k /
    // 16k 527 / 635 -> 555 / 641.
    const int64_t tiles = int64_t((p.max_seqlen_q + Kt::kBlockM - 1) / Kt::kBlockM) * p.nhead_q * p.batch;
    // Group mode too: one CTA per tile lost 0-15% to the persistent grid (H200, bf16, 16 sequences of random
    // lengths averaging s, d64 / d128, s = 512..4096, no mask and causal; an earlier build of the kVarlen kernel),
    // d128 s = 1k causal excepted (+6%).
    const int64_t grid  = std::min<int64_t>(tiles, sm_count());
    if (grid == 0)
        return cudaSuccess;
    if (tiles >= (int64_t(1) << 31))
        return cudaErrorInvalidValue;
    // causal-like masks (a right bound, no left one): row blocks in pairs of equal total work
    a.sched = TileSchedule::make(p.max_seqlen_q, Kt::kBlockM, p.nhead_q, p.batch,
                                 a.win_left == kNoBound && a.win_right != kNoBound, grid);
    kernel<<<dim3(unsigned(grid)), Kt::kThreads, Kt::kSmemBytes, stream>>>(a);
    return cudaGetLastError();
}

// One asm instance: two key-block widths of one (dtype, head dim) (d256: 80 and 64 keys). The wide block serves calls
// without a mask and causal calls of at least kWideMinRowsCausal rows; 128 keys (d256: 64) serve shorter causal
// calls, whose diagonal blocks are mostly masked. H100, bf16, 16k tokens, TFLOP/s, 128 -> 176 keys: d128 (one CTA per tile) non-causal
// s = 512 / 2k / 16k 349 / 475 / 555 -> 358 / 493 / 578, causal 512 / 1k / 2k / 16k 235 / 318 / 387 / 513 -> 217 /
// 307 / 392 / 544; d64 (persistent) non-causal 512 / 2k / 8k / 16k 342 / 419 / 442 / 447 -> 358 / 444 / 479 / 486,
// causal 8k / 16k 411 / 441 -> 440 / 488, 2k even (327 / 325) then (the kernel has changed since: see
// kWideMinRowsCausal).
// d192 / d_v 128 (DeepSeek's prefill shape): 128 keys for every call.
// d256, 80 -> 64 keys (H100 GPU-82ce6714, bf16, 16k tokens, same call, a / b / b / a, two passes; .carry/s56/c7.sh):
// causal s = 512 / 1k 280-282 / 493-496 -> 294-295 / 497-500 (+5% / +0.8%), 2k / 4k 653-658 / 740-743 -> 620-623 /
// 682-684 (-5% / -8%, hence kWideMinRowsCausal 2048); windows at s = 4k: (255, 0) 2152-2190 -> 2254-2297 (+4.5%),
// (1023, 0) 1262-1269 -> 1237-1243, (512, 512) 1244-1251 -> 1206-1223 (-2 to -3%, hence kNarrowWindowKeys 512).
template <typename Element, int kHeadDim, int kWideN, int kHeadDimV = kHeadDim,
          int kNarrowN = (kWideN < 128 ? 64 : 128)>
struct Sm90FwdInstance
{
    using Narrow = Sm90FwdTraits<Element, kHeadDim, kNarrowN, kHeadDimV>;
    using Wide   = Sm90FwdTraits<Element, kHeadDim, kWideN, kHeadDimV>;
    // d128 with K freed after its S GEMM (kSplitKv), H200, bf16, causal s = 2k: 176 keys 511, 128 keys 543 TFLOP/s;
    // 4k even (630 / 624). d64 (H100, bf16, 16k tokens, same call, three passes; .carry/s52/c2.sh): causal s = 2k /
    // 3k 352-354 / 387-389 -> 382-383 / 407 (+8.5% / +5%), 4k even (429 / 429); without a mask 128 keys lost 2-4% at
    // 1k / 2k and were even at 512, so those keep 176.
    static constexpr int kWideMinRowsCausal = kHeadDim <= 128 ? 4096 : 2048;
    // A window bounded on both sides shows each tile about left + right + 128 keys whatever the length, so its first
    // and last blocks (mostly masked) weigh as a causal call's diagonal does at short lengths: below
    // kNarrowWindowKeys (left + right) it takes the narrow blocks. H100, bf16, 16k tokens, same call
    // (.carry/s50/c11.sh), 176 -> 128 keys at s = 4k / 16k: (255, 0) +27-29%, (1023, 0) +7-12%, (512, 512) +7-15%,
    // (4095, 0) -4% to even (d64 / d128). d256's 64-key blocks: above.
    static constexpr int kNarrowWindowKeys = kWideN < 128 ? 512 : 2048;
    static constexpr int kSmemBytes = Narrow::kSmemBytes > Wide::kSmemBytes ? Narrow::kSmemBytes : Wide::kSmemBytes;
};

template <typename Inst>
cudaError_t run_fwd_sm90(const FwdParams& p, cudaStream_t stream)
{
    const bool short_window =
        p.mask.left >= 0 && p.mask.right >= 0 && int64_t(p.mask.left) + p.mask.right < Inst::kNarrowWindowKeys;
    if (short_window || (!p.mask.is_none() && p.max_seqlen_q < Inst::kWideMinRowsCausal))
        return launch_sm90<typename Inst::Narrow>(p, stream);
    return launch_sm90<typename Inst::Wide>(p, stream);
}

} // namespace mha::asm90
