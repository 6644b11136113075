// A host-only stand-in for the CUDA runtime and libmha_bwd.so, so that benchmark_mha_bwd's whole flow (layouts,
// uploads, the callbacks, the dropout mask it rebuilds, the references and the comparison) runs on a machine without a
// GPU: tests/test_benchmark_bwd_cpu.py links benchmark/benchmark_mha_bwd.cpp against this file with g++. "Device"
// memory is host memory. mha_bwd computes the gradients in fp32 from the arguments alone (strides, seqstarts, the
// uploaded O and LSE, Philox dropout), independently of the benchmark's packed reference layouts, with P and dS
// rounded to the input type before the products as a tensor-core kernel rounds them.
// FAKE_MHA_BWD=unsupported makes every call return -1; FAKE_MHA_BWD=skip_dk leaves dK unwritten, scale_dq writes
// 0.9 dQ, bad_randval stores one wrong random value (the last element of the last batch and head) with
// is_store_randval: validation must fail each time.

#include "common/philox.h"
#include "mha_bwd.h"
#include "reference/attention_spec.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

// ---- the CUDA runtime calls the benchmark makes ----------------------------------------------------------------

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes)
{
    *p = std::malloc(bytes);
    return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p)
{
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind)
{
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes)
{
    std::memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
cudaError_t cudaGetDeviceCount(int* count)
{
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t) { return "fake runtime error"; }

} // extern "C"

namespace bench {
cudaError_t fill_uniform_device(void* p, int64_t n, bool bf16, uint32_t seed)
{
    for (int64_t i = 0; i < n; ++i)
    {
        const float x = float((uint32_t(i) * 2654435761u ^ seed) >> 8) * (1.f / 16777216.f);
        if (bf16)
            static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(x);
        else
            static_cast<__half*>(p)[i] = __float2half(x);
    }
    return cudaSuccess;
}
} // namespace bench

// ---- libmha_bwd.so ----------------------------------------------------------------------------------------------

namespace aiter {

namespace {

thread_local std::string g_last_error;

float reject(const std::string& why)
{
    g_last_error = why;
    return -1.f;
}

float to_float(__half x) { return __half2float(x); }
float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
T from_float(float x);
template <>
__half from_float<__half>(float x) { return __float2half(x); }
template <>
__nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }

// Row offset of batch b: group mode starts at seqstart[b] rows, batch mode at b batch strides.
int64_t row0(const mha_bwd_args& a, const void* seqstart, int b, int64_t row_stride, int64_t batch_stride)
{
    return a.is_group_mode ? int64_t(static_cast<const int32_t*>(seqstart)[b]) * row_stride : b * batch_stride;
}

template <typename T>
void backward(const mha_bwd_args& a)
{
    const T* q     = static_cast<const T*>(a.q_ptr);
    const T* k     = static_cast<const T*>(a.k_ptr);
    const T* v     = static_cast<const T*>(a.v_ptr);
    const T* o     = static_cast<const T*>(a.o_ptr);
    const T* dout  = static_cast<const T*>(a.do_ptr);
    const float* lse = static_cast<const float*>(a.lse_ptr);
    float* dsum    = static_cast<float*>(a.d_ptr);
    T* dq          = static_cast<T*>(a.dq_ptr);
    T* dk          = static_cast<T*>(a.dk_ptr);
    T* dv          = static_cast<T*>(a.dv_ptr);
    T* dbias       = static_cast<T*>(a.dbias_ptr);
    const std::string mode = std::getenv("FAKE_MHA_BWD") != nullptr ? std::getenv("FAKE_MHA_BWD") : "";
    const bool skip_dk = mode == "skip_dk", bad_randval = mode == "bad_randval", scale_dq = mode == "scale_dq";

    uint64_t seed = 0, offset = 0;
    if (auto* v2 = std::get_if<std::pair<uint64_t, uint64_t>>(&a.drop_seed_offset))
        seed = v2->first, offset = v2->second;
    else if (auto* ptrs = std::get_if<std::pair<const void*, const void*>>(&a.drop_seed_offset))
        seed = *static_cast<const uint64_t*>(ptrs->first), offset = *static_cast<const uint64_t*>(ptrs->second);
    const uint8_t keep_threshold = uint8_t(std::floor(a.p_undrop * 255.f));
    const reference::MaskSpec mask{a.mask_type, a.window_size_left, a.window_size_right, 0};

    for (int b = 0; b < a.batch; ++b)
    {
        const auto* sq_start = static_cast<const int32_t*>(a.seqstart_q_ptr);
        const auto* sk_start = static_cast<const int32_t*>(a.seqstart_k_ptr);
        const int sq = a.is_group_mode ? sq_start[b + 1] - sq_start[b] : a.seqlen_q;
        const int sk = a.is_group_mode ? sk_start[b + 1] - sk_start[b] : a.seqlen_k;
        for (int h = 0; h < a.nhead_q; ++h)
        {
            const int hk = h / (a.nhead_q / a.nhead_k);
            auto q_at  = [&](int i) { return q + row0(a, sq_start, b, a.stride_q, a.batch_stride_q) + int64_t(h) * a.nhead_stride_q + int64_t(i) * a.stride_q; };
            auto o_at  = [&](int i) { return o + row0(a, sq_start, b, a.stride_o, a.batch_stride_o) + int64_t(h) * a.nhead_stride_o + int64_t(i) * a.stride_o; };
            auto do_at = [&](int i) { return dout + row0(a, sq_start, b, a.stride_do, a.batch_stride_do) + int64_t(h) * a.nhead_stride_do + int64_t(i) * a.stride_do; };
            auto dq_at = [&](int i) { return dq + row0(a, sq_start, b, a.stride_dq, a.batch_stride_dq) + int64_t(h) * a.nhead_stride_dq + int64_t(i) * a.stride_dq; };
            auto k_at  = [&](int j) { return k + row0(a, sk_start, b, a.stride_k, a.batch_stride_k) + int64_t(hk) * a.nhead_stride_k + int64_t(j) * a.stride_k; };
            auto v_at  = [&](int j) { return v + row0(a, sk_start, b, a.stride_v, a.batch_stride_v) + int64_t(hk) * a.nhead_stride_v + int64_t(j) * a.stride_v; };
            auto dk_at = [&](int j) { return dk + row0(a, sk_start, b, a.stride_dk, a.batch_stride_dk) + int64_t(h) * a.nhead_stride_dk + int64_t(j) * a.stride_dk; };
            auto dv_at = [&](int j) { return dv + row0(a, sk_start, b, a.stride_dv, a.batch_stride_dv) + int64_t(h) * a.nhead_stride_dv + int64_t(j) * a.stride_dv; };
            const int64_t lse0 = row0(a, sq_start, b, 1, a.batch_stride_lsed) + int64_t(h) * a.nhead_stride_lsed;
            const float slope = a.bias_type == 2 ? static_cast<const float*>(a.bias_ptr)[b * a.stride_bias + h] : 0.f;

            std::vector<float> dk_acc(size_t(sk) * a.hdim_q, 0.f), dv_acc(size_t(sk) * a.hdim_v, 0.f);
            for (int i = 0; i < sq; ++i)
            {
                float d_i = 0.f;
                for (int x = 0; x < a.hdim_v; ++x)
                    d_i += to_float(do_at(i)[x]) * to_float(o_at(i)[x]);
                dsum[lse0 + i] = a.has_dropout ? d_i * (1.f - a.p_drop) : d_i; // CK's softmax_d: times p_undrop
                std::vector<float> dq_acc(size_t(a.hdim_q), 0.f);
                for (int j = 0; j < sk; ++j)
                {
                    if (a.has_dropout && a.is_store_randval) // every element, masked ones too (as the library)
                    {
                        const uint32_t bh = uint32_t(b) * uint32_t(a.nhead_q) + uint32_t(h);
                        uint8_t rv = mha::dropout_value(seed, offset, bh, i, j);
                        rv ^= bad_randval && b == a.batch - 1 && h == a.nhead_q - 1 && i == sq - 1 && j == sk - 1;
                        uint8_t* const rows = static_cast<uint8_t*>(a.rand_val_ptr) +
                                              row0(a, sq_start, b, a.stride_randval, a.batch_stride_randval);
                        rows[int64_t(h) * a.nhead_stride_randval + int64_t(i) * a.stride_randval + j] = rv;
                    }
                    float ds = 0.f;
                    if (mask.visible(i, j, sq, sk))
                    {
                        float s = 0.f;
                        for (int x = 0; x < a.hdim_q; ++x)
                            s += to_float(q_at(i)[x]) * to_float(k_at(j)[x]);
                        s *= a.scale;
                        if (a.bias_type == 1)
                            s += to_float(static_cast<const T*>(a.bias_ptr)[row0(a, sq_start, b, a.stride_bias, a.batch_stride_bias) +
                                                                    int64_t(h) * a.nhead_stride_bias + int64_t(i) * a.stride_bias + j]);
                        else if (a.bias_type == 2)
                            s += reference::alibi_value(reference::alibi_mode(mask), slope, i, j, sq, sk);
                        const float p = std::exp(s - lse[lse0 + i]);
                        float f = 1.f;
                        if (a.has_dropout)
                        {
                            const uint8_t rv = mha::dropout_value(seed, offset, uint32_t(b) * uint32_t(a.nhead_q) + uint32_t(h), i, j);
                            f = rv <= keep_threshold ? 1.f / a.p_undrop : 0.f;
                        }
                        // P f and dS enter the dV / dQ / dK products rounded to T, as in a tensor-core kernel
                        const float p_lp = to_float(from_float<T>(p * f));
                        float dp         = 0.f;
                        for (int x = 0; x < a.hdim_v; ++x)
                        {
                            dp += to_float(do_at(i)[x]) * to_float(v_at(j)[x]);
                            dv_acc[size_t(j) * a.hdim_v + x] += p_lp * to_float(do_at(i)[x]);
                        }
                        ds = p * (f * dp - d_i);
                        const float ds_lp = to_float(from_float<T>(ds));
                        for (int x = 0; x < a.hdim_q; ++x)
                        {
                            dq_acc[x] += a.scale * ds_lp * to_float(k_at(j)[x]);
                            dk_acc[size_t(j) * a.hdim_q + x] += a.scale * ds_lp * to_float(q_at(i)[x]);
                        }
                    }
                    if (a.has_dbias)
                        dbias[row0(a, sq_start, b, a.stride_dbias, a.batch_stride_dbias) + int64_t(h) * a.nhead_stride_dbias +
                              int64_t(i) * a.stride_dbias + j] = from_float<T>(ds);
                }
                for (int x = 0; x < a.hdim_q; ++x)
                    dq_at(i)[x] = from_float<T>(dq_acc[x] * (scale_dq ? 0.9f : 1.f));
            }
            for (int j = 0; j < sk; ++j)
            {
                for (int x = 0; x < a.hdim_q && !skip_dk; ++x)
                    dk_at(j)[x] = from_float<T>(dk_acc[size_t(j) * a.hdim_q + x]);
                for (int x = 0; x < a.hdim_v; ++x)
                    dv_at(j)[x] = from_float<T>(dv_acc[size_t(j) * a.hdim_v + x]);
            }
        }
    }
}

} // namespace

thread_local const char* g_kernel = "";

__attribute__((visibility("default"))) const char* mha_get_last_error() { return g_last_error.c_str(); }
__attribute__((visibility("default"))) const char* mha_get_last_kernel_name() { return g_kernel; }

float mha_bwd(mha_bwd_args a, const ck_tile::stream_config& s)
{
    g_last_error.clear();
    g_kernel = "fake_bwd_kernel";
    const char* mode = std::getenv("FAKE_MHA_BWD");
    if (mode != nullptr && std::string(mode) == "unsupported")
        return reject("fake mha_bwd: unsupported on request");
    // FAKE_MHA_BWD=asm: the asm backward covers every use_asm_v3 call (v3_api_check answers 1 without running)
    if (mode != nullptr && std::string(mode) == "asm" && a.use_asm_v3)
    {
        g_kernel = "fmha_bwd_asm_v3_fake";
        if (a.v3_api_check)
            return 1.f;
    }
    if (!a.workspace_alloc)
        return reject("fake mha_bwd: workspace_alloc is required");
    if (a.is_group_mode && !a.pinned_host_alloc)
        return reject("fake mha_bwd: group mode requires pinned_host_alloc callback");
    if (a.data_type != "fp16" && a.data_type != "bf16")
        return reject("fake mha_bwd: data_type " + a.data_type);
    // the callbacks hand out usable memory; a zero-initialised block reads zero
    auto* ws = static_cast<unsigned char*>(a.workspace_alloc(1000, true));
    if (ws == nullptr)
        return reject("fake mha_bwd: workspace_alloc returned null");
    for (int i = 0; i < 1000; ++i)
        if (ws[i] != 0)
            return reject("fake mha_bwd: workspace not zeroed");
    std::memset(ws, 0xAB, 1000);
    if (a.is_group_mode && a.pinned_host_alloc(64) == nullptr)
        return reject("fake mha_bwd: pinned_host_alloc returned null");
    if (s.log_level_ > 0)
        std::cout << ", fake_bwd_kernel" << std::flush;
    if (a.data_type == "bf16")
        backward<__nv_bfloat16>(a);
    else
        backward<__half>(a);
    return s.time_kernel_ ? 0.25f : 0.f;
}

} // namespace aiter
