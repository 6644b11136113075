#pragma once
// Argument checks and device queries shared by the forward (mha_fwd.cpp) and backward (mha_bwd.cpp) entry points.
// The sequence checks are templates: aiter::mha_fwd_args and aiter::mha_bwd_args name those fields alike.

#include "launch.h"
#include "registry.h"

#include <cstdint>
#include <string>
#include <utility>

namespace mha {

inline std::string str(long long v) { return std::to_string(v); }

inline bool aligned(const void* p, int bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

// seqstart / seqlen / cu_seqlen pointers and lengths of batch or group mode: a reason string, or "" when valid.
template <typename Args>
std::string invalid_sequences(const Args& a)
{
    if (a.cu_seqlen_q_ptr && a.seqlen_q_ptr)
        return "seqlen_q_ptr and cu_seqlen_q_ptr are mutually exclusive";
    if (a.cu_seqlen_k_ptr && a.seqlen_k_ptr)
        return "seqlen_k_ptr and cu_seqlen_k_ptr are mutually exclusive";
    if (a.is_group_mode)
    {
        if (a.seqstart_q_ptr == nullptr || a.seqstart_k_ptr == nullptr)
            return "group mode needs seqstart_q_ptr and seqstart_k_ptr ([batch + 1] int32 physical starts)";
        if (a.max_seqlen_q < 0)
            return "max_seqlen_q must be >= 0, got " + str(a.max_seqlen_q);
        for (auto [n, p] : {std::pair{"seqstart_q_ptr", a.seqstart_q_ptr}, std::pair{"seqstart_k_ptr", a.seqstart_k_ptr},
                            std::pair{"seqlen_q_ptr", a.seqlen_q_ptr}, std::pair{"seqlen_k_ptr", a.seqlen_k_ptr},
                            std::pair{"cu_seqlen_q_ptr", a.cu_seqlen_q_ptr},
                            std::pair{"cu_seqlen_k_ptr", a.cu_seqlen_k_ptr}})
            if (!aligned(p, 4))
                return std::string(n) + " must be 4-byte aligned (int32)";
        return "";
    }
    if (a.seqstart_q_ptr || a.seqstart_k_ptr || a.seqlen_q_ptr || a.seqlen_k_ptr)
        return "seqstart_q/k_ptr and seqlen_q/k_ptr must be nullptr in batch mode (use cu_seqlen_q/k_ptr for padding)";
    if (a.seqlen_q < 0 || a.seqlen_k < 0)
        return "seqlen_q and seqlen_k must be >= 0, got " + str(a.seqlen_q) + " and " + str(a.seqlen_k);
    return "";
}

// The compute capability of the current device, or an error reason.
inline std::string current_cc(int& cc)
{
    int dev = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (err == cudaSuccess)
        err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (err != cudaSuccess)
        return cuda_error_reason("no usable CUDA device", err);
    cc = major * 10 + minor;
    return "";
}

// "" when a kernel with `bytes` of dynamic shared memory per CTA fits the current device, else why not (sm_86 / sm_89
// allow 99 KiB, sm_80 163 KiB, sm_90 227 KiB; the larger tiles need Hopper or A100).
inline std::string smem_unfit(const char* name, const int* bytes)
{
    int dev = 0, optin = 0;
    if (bytes == nullptr || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || *bytes <= optin)
        return "";
    return std::string(name) + " needs " + str(*bytes) + " bytes of shared memory per block but this GPU allows " +
           str(optin);
}

inline bool arch_built(const BuildInfo& build, int cc)
{
    for (int i = 0; i < build.num_archs; ++i)
        if (build.arch_ccs[i] == cc)
            return true;
    return false;
}

} // namespace mha
