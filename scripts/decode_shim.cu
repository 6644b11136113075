// A C entry point for scripts/decode_harness.py (ctypes): one dense bhsd decode step through aiter::mha_fwd_splitkv
// on a caller's stream, so that our kernel runs inside a PyTorch process next to SDPA's (same pre-call kernels, same
// CUPTI trace). Built by the harness: nvcc -shared against the libmha_fwd.so it is pointed at.
#include "mha_fwd.h"

#include <cmath>
#include <cstdio>

// q [b, hq, 1, d], k / v [b, hk, keys, d], o like q; lse_acc / o_acc sized for 128 splits. Returns the API's value.
extern "C" float decode_step(void* q, void* k, void* v, void* o, void* lse_acc, void* o_acc, int b, int hq, int hk,
                             int keys, int d, int splits, void* stream)
{
    constexpr int kMaxSplits = 128;
    aiter::mha_fwd_splitkv_args a{};
    a.q_ptr = q, a.k_ptr = k, a.v_ptr = v, a.lse_acc_ptr = lse_acc, a.o_acc_ptr = o_acc, a.o_ptr = o;
    a.seqlen_q = 1, a.seqlen_k = keys, a.batch = b, a.max_seqlen_q = 1, a.hdim_q = d, a.hdim_v = d;
    a.nhead_q = hq, a.nhead_k = hk, a.num_splits = splits;
    a.scale_s = 1.f / std::sqrt(float(d)), a.scale_p = a.scale_o = 1.f;
    a.stride_q = a.stride_k = a.stride_v = a.stride_o = d;
    a.nhead_stride_q = a.nhead_stride_o = d, a.nhead_stride_k = a.nhead_stride_v = keys * d;
    a.batch_stride_q = a.batch_stride_o = hq * d, a.batch_stride_k = a.batch_stride_v = hk * keys * d;
    a.stride_o_acc = d, a.split_stride_lse_acc = 1, a.nhead_stride_lse_acc = kMaxSplits;
    a.batch_stride_lse_acc = hq * kMaxSplits, a.split_stride_o_acc = d, a.nhead_stride_o_acc = kMaxSplits * d;
    a.batch_stride_o_acc = hq * kMaxSplits * d;
    a.window_size_left = a.window_size_right = -1;
    ck_tile::stream_config s{};
    s.stream_id_ = static_cast<cudaStream_t>(stream);
    const float r = aiter::mha_fwd_splitkv(a, s, "bf16", false, mask_enum::no_mask, bias_enum::no_bias, false);
    if (r < 0)
        std::fprintf(stderr, "decode_step: %s\n", aiter::mha_get_last_error());
    return r;
}

extern "C" int decode_splits(int b, int hq, int hk, int keys)
{
    return aiter::mha_fwd_splitkv_num_splits(b, hq, hk, 1, keys, 0);
}

// A pre-call kernel for the harness's `sweep+params` sequence: one CTA that reads a 4 KB kernel-parameter block (a
// torch reduction, which delays our next call's first tensor copies, passes ~1 KB of parameters; the sweep ~24 B).
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
