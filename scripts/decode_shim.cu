// C entry points for scripts/decode_harness.py and scripts/decode_bench.py (ctypes): one dense decode step through
// aiter::mha_fwd_splitkv on a caller's stream and on the caller's tensors, so that our kernel runs inside a PyTorch
// process next to SDPA's, on the very memory SDPA reads (same pre-call kernels, same CUPTI trace), plus the
// first-load probes of the harness's --probe table (below). Built by the scripts: nvcc -shared against the
// libmha_fwd.so they are pointed at.
#include "mha_fwd.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

// bshd 0: q [b, hq, sq, d], k / v [b, hk, keys, d], o like q (contiguous); bshd 1: q [b, sq, hq, d], k / v [b, keys,
// hk, d], o like q. sq queries (a speculative-decode step for sq > 1; no mask). lse_acc / o_acc sized for 128 splits
// (b * hq * sq * 128 floats and that times d). Returns the API's value.
extern "C" float decode_step_q(void* q, void* k, void* v, void* o, void* lse_acc, void* o_acc, int b, int hq, int hk,
                               int sq, int keys, int d, int splits, int bshd, void* stream)
{
    constexpr int kMaxSplits = 128;
    aiter::mha_fwd_splitkv_args a{};
    a.q_ptr = q, a.k_ptr = k, a.v_ptr = v, a.lse_acc_ptr = lse_acc, a.o_acc_ptr = o_acc, a.o_ptr = o;
    a.seqlen_q = sq, a.seqlen_k = keys, a.batch = b, a.max_seqlen_q = sq, a.hdim_q = d, a.hdim_v = d;
    a.nhead_q = hq, a.nhead_k = hk, a.num_splits = splits;
    a.scale_s = 1.f / std::sqrt(float(d)), a.scale_p = a.scale_o = 1.f;
    // bshd: Q / O rows hq heads apart, K / V rows hk heads apart
    a.stride_q = a.stride_o = bshd ? hq * d : d;
    a.stride_k = a.stride_v = bshd ? hk * d : d;
    a.nhead_stride_q = a.nhead_stride_o = bshd ? d : sq * d, a.nhead_stride_k = a.nhead_stride_v = bshd ? d : keys * d;
    a.batch_stride_q = a.batch_stride_o = hq * sq * d, a.batch_stride_k = a.batch_stride_v = hk * keys * d;
    // partials [b, hq, split, sq(, d)]
    a.stride_o_acc = d, a.split_stride_lse_acc = sq, a.nhead_stride_lse_acc = kMaxSplits * sq;
    a.batch_stride_lse_acc = hq * kMaxSplits * sq, a.split_stride_o_acc = sq * d;
    a.nhead_stride_o_acc = kMaxSplits * sq * d, a.batch_stride_o_acc = hq * kMaxSplits * sq * d;
    a.window_size_left = a.window_size_right = -1;
    ck_tile::stream_config s{};
    s.stream_id_ = static_cast<cudaStream_t>(stream);
    const float r = aiter::mha_fwd_splitkv(a, s, "bf16", false, mask_enum::no_mask, bias_enum::no_bias, false);
    if (r < 0)
        std::fprintf(stderr, "decode_step: %s\n", aiter::mha_get_last_error());
    return r;
}

// One query (decode_bench.py, decode_harness.py).
extern "C" float decode_step_layout(void* q, void* k, void* v, void* o, void* lse_acc, void* o_acc, int b, int hq,
                                    int hk, int keys, int d, int splits, int bshd, void* stream)
{
    return decode_step_q(q, k, v, o, lse_acc, o_acc, b, hq, hk, 1, keys, d, splits, bshd, stream);
}

// The bhsd step (decode_harness.py).
extern "C" float decode_step(void* q, void* k, void* v, void* o, void* lse_acc, void* o_acc, int b, int hq, int hk,
                             int keys, int d, int splits, void* stream)
{
    return decode_step_layout(q, k, v, o, lse_acc, o_acc, b, hq, hk, keys, d, splits, 0, stream);
}

extern "C" int decode_splits(int b, int hq, int hk, int keys)
{
    // the nine-argument form: what a dense d128 call resolves num_splits = 0 to (the six-argument form is an upper
    // bound for sizing partial buffers)
    return aiter::mha_fwd_splitkv_num_splits(b, hq, hk, 1, keys, 0, 128, 128, false);
}

// A pre-call kernel for the harness's `sweep+params` sequence: one CTA that reads a 4 KB kernel-parameter block (a
// torch reduction passes ~1 KB of parameters, the sweep ~24 B; the parameters were not what slowed our next call).
struct ParamBlock
{
    unsigned int words[1024];
};

__global__ void read_params(const __grid_constant__ ParamBlock p, unsigned int* sink)
{
    unsigned int acc = 0;
    for (int i = threadIdx.x; i < 1024; i += blockDim.x)
        acc ^= p.words[i];
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

extern "C" int params_kernel(void* stream)
{
    ParamBlock p{};
    read_params<<<1, 128, 0, static_cast<cudaStream_t>(stream)>>>(p, nullptr);
    return int(cudaGetLastError());
}

// ---- First-load probes for the harness's --probe table: which load path a pre-call kernel delays ----
// `ctas` one-warp CTAs each read their own 16 KB of `buf` (bf16 rows of 128 columns, 64 rows per CTA) by one of
//   0: ld.global.cg, 16 bytes per lane per step (the LSU path cuDNN's kernel takes, through cp.async);
//   1: one 1-D bulk copy (cp.async.bulk, no tensor map) into shared memory, completing on an mbarrier;
//   2: two tensor-map boxes of 64 columns x 64 rows, 128-byte swizzle (our decode ring's path; map in the params),
// kind + 3: the same after a store to and a load from local memory (a stack frame),
// and record %globaltimer at entry and once the data is in registers / has landed: times[2 c], times[2 c + 1].
__device__ __forceinline__ unsigned long long probe_clock()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int kKind, bool kLocal>
__global__ void __launch_bounds__(32) probe_kernel(const __grid_constant__ CUtensorMap map, const uint4* buf,
                                                   unsigned long long* times, unsigned int* sink)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned long long t0 = probe_clock();
    const int lane = threadIdx.x, cta = blockIdx.x;
    unsigned int acc = 0;
    if constexpr (kLocal) // a local-memory round trip first (the decode kernel's 16-byte stack frame does one)
    {
        volatile unsigned int loc[16];
        loc[lane % 16] = unsigned(t0);
        acc = loc[(lane + 1) % 16];
    }
    if constexpr (kKind == 0)
    {
        const uint4* src = buf + size_t(cta) * 1024;
        uint4 v[32];
#pragma unroll
        for (int i = 0; i < 32; ++i)
            v[i] = __ldcg(src + i * 32 + lane);
#pragma unroll
        for (int i = 0; i < 32; ++i)
            acc ^= v[i].x ^ v[i].w;
    }
    else
    {
        // the 128-byte swizzle wants 1024-byte aligned boxes; the barrier sits after the 16 KB
        const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
        const uint32_t dst = (raw + 1023) / 1024 * 1024, b = dst + 16384;
        const unsigned char* smem = smem_raw + (dst - raw);
        if (lane == 0)
        {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(16384) : "memory");
            if constexpr (kKind == 1)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             ::"r"(dst), "l"(buf + size_t(cta) * 1024), "r"(16384), "r"(b)
                             : "memory");
            else
                for (int c = 0; c < 2; ++c)
                    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst + c * 8192),
                                 "l"(reinterpret_cast<uint64_t>(&map)), "r"(c * 64), "r"(cta * 64), "r"(b)
                                 : "memory");
        }
        __syncwarp();
        uint32_t done = 0;
        while (!done)
            asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                         " selp.u32 %0, 1, 0, p;\n}"
                         : "=r"(done)
                         : "r"(b)
                         : "memory");
        acc = reinterpret_cast<const unsigned int*>(smem)[lane * 32];
    }
    const unsigned long long t1 = probe_clock();
    if (lane == 0)
        times[2 * cta] = t0, times[2 * cta + 1] = t1;
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

// kind as above; buf: at least ctas * 16 KB; times: 2 * ctas entries; smem: dynamic shared memory per CTA (at least
// 16 KB + 1032, so that occupancy can be set like the decode kernel's). 0 or a CUDA / driver error code.
extern "C" int probe(int kind, void* buf, int ctas, void* times, int smem, void* stream)
{
    if (smem < 16384 + 1024 + 8)
        return -2;
    CUtensorMap map{};
    if (kind % 3 == 2)
    {
        static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
            void* fn = nullptr;
            cudaDriverEntryPointQueryResult found{};
            if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
                    cudaSuccess ||
                found != cudaDriverEntryPointSuccess)
                fn = nullptr;
            return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
        }();
        if (encode == nullptr)
            return -1;
        const cuuint64_t dims[2] = {128, cuuint64_t(ctas) * 64};
        const cuuint64_t strides[1] = {256};
        const cuuint32_t box[2] = {64, 64}, unit[2] = {1, 1};
        const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, buf, dims, strides, box, unit,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return int(r);
    }
    auto* t = static_cast<unsigned long long*>(times);
    auto* s = static_cast<cudaStream_t>(stream);
    const uint4* src = static_cast<const uint4*>(buf);
    auto go = [&](auto kernel) {
        const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess)
            return int(e);
        kernel<<<ctas, 32, smem, s>>>(map, src, t, nullptr);
        return int(cudaGetLastError());
    };
    switch (kind)
    {
    case 0: return go(probe_kernel<0, false>);
    case 1: return go(probe_kernel<1, false>);
    case 2: return go(probe_kernel<2, false>);
    case 3: return go(probe_kernel<0, true>);
    case 4: return go(probe_kernel<1, true>);
    default: return go(probe_kernel<2, true>);
    }
}
