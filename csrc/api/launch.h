#pragma once
// ck_tile::launch_kernel semantics for every entry point: launch once and return 0, or (time_kernel_) run
// cold_niters_ warm-up passes, time nrepeat_ passes with CUDA events (or a host clock after a stream sync when
// is_gpu_timer_ is false) and return the average ms per pass. With flush_cache_ every timed pass follows an L2
// sweep (l2_flush.cu) and is timed alone, so the passes read their inputs from DRAM (CK flushes the instruction cache
// and rotates input copies for the same purpose). A CUDA error anywhere returns -1 with its reason.
// The launchers read their launch errors with cudaGetLastError, which also returns an error left pending by earlier
// work on this thread: in the library's own CUDA runtime (cudart is linked statically) an earlier failure of ours, and
// in any runtime the context's sticky error after a kernel fault, whoever launched it. So a pending error is refused
// before anything is launched (and left pending), and an error of ours is consumed before returning, so that it is
// not reported again by the next call.

#include "ck_tile_compat.h"
#include "error.h"

#include <chrono>
#include <cstdio>
#include <cuda_runtime_api.h>
#include <string>
#include <vector>

namespace mha {

inline std::string cuda_error_reason(const char* what, cudaError_t err)
{
    return std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

// Fills the L2 of the current device with unrelated clean lines (a read sweep of four times its size) on `stream`,
// then holds the stream 100 us so that the next pass is queued before its start event.
cudaError_t flush_l2(cudaStream_t stream);

// -1 with the reason, after consuming the thread's last error (ours: a launch or runtime call of this pass failed)
inline float fail_cuda(const char* name, cudaError_t err)
{
    (void)cudaGetLastError();
    return fail(cuda_error_reason(name, err));
}

// `pass` launches one pass of the operation (possibly several kernels) and returns the launch error.
template <typename Pass>
float launch_and_time(const ck_tile::stream_config& s, const char* name, Pass&& pass)
{
    if (const cudaError_t pending = cudaPeekAtLastError(); pending != cudaSuccess)
        return fail(std::string(name) + ": nothing launched: a CUDA error from earlier work is pending on this thread: " +
                    cudaGetErrorName(pending) + " (" + cudaGetErrorString(pending) +
                    "); cudaGetLastError() clears it unless the context is unusable");
    if (s.log_level_ > 0)
    {
        std::printf(", %s", name);
        std::fflush(stdout);
    }
    if (!s.time_kernel_)
    {
        const cudaError_t err = pass();
        return err == cudaSuccess ? 0.f : fail_cuda(name, err);
    }
    for (int i = 0; i < s.cold_niters_; ++i)
        if (cudaError_t err = pass(); err != cudaSuccess)
            return fail_cuda(name, err);
    const int n = s.nrepeat_ > 0 ? s.nrepeat_ : 1;
    if (s.flush_cache_)
    {
        // one event pair per pass, read after the last one: no host round trip between passes
        std::vector<cudaEvent_t> ev(2 * size_t(n), nullptr);
        cudaError_t err = cudaSuccess;
        for (auto& e : ev)
            if (err == cudaSuccess)
                err = cudaEventCreate(&e);
        double total = 0.0;
        for (int i = 0; i < n && err == cudaSuccess; ++i)
        {
            err = flush_l2(s.stream_id_);
            if (err == cudaSuccess && !s.is_gpu_timer_)
                err = cudaStreamSynchronize(s.stream_id_);
            const auto t0 = std::chrono::steady_clock::now();
            if (err == cudaSuccess)
                err = cudaEventRecord(ev[2 * i], s.stream_id_);
            if (err == cudaSuccess)
                err = pass();
            if (err == cudaSuccess)
                err = cudaEventRecord(ev[2 * i + 1], s.stream_id_);
            if (err == cudaSuccess && !s.is_gpu_timer_)
            {
                err = cudaStreamSynchronize(s.stream_id_);
                total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            }
        }
        if (err == cudaSuccess)
            err = cudaEventSynchronize(ev.back());
        for (int i = 0; i < n && err == cudaSuccess && s.is_gpu_timer_; ++i)
        {
            float ms = 0.f;
            err = cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
            total += ms;
        }
        for (auto& e : ev)
            if (e != nullptr)
                cudaEventDestroy(e);
        return err == cudaSuccess ? float(total / n) : fail_cuda(name, err);
    }
    if (s.is_gpu_timer_)
    {
        cudaEvent_t start, stop;
        if (cudaError_t err = cudaEventCreate(&start); err != cudaSuccess)
            return fail_cuda("cudaEventCreate", err);
        if (cudaError_t err = cudaEventCreate(&stop); err != cudaSuccess)
        {
            cudaEventDestroy(start);
            return fail_cuda("cudaEventCreate", err);
        }
        cudaError_t err = cudaEventRecord(start, s.stream_id_);
        for (int i = 0; i < n && err == cudaSuccess; ++i)
            err = pass();
        if (err == cudaSuccess)
            err = cudaEventRecord(stop, s.stream_id_);
        if (err == cudaSuccess)
            err = cudaEventSynchronize(stop);
        float ms = 0.f;
        if (err == cudaSuccess)
            err = cudaEventElapsedTime(&ms, start, stop);
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        return err == cudaSuccess ? ms / n : fail_cuda(name, err);
    }
    cudaError_t err = cudaStreamSynchronize(s.stream_id_);
    const auto t0   = std::chrono::steady_clock::now();
    for (int i = 0; i < n && err == cudaSuccess; ++i)
        err = pass();
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(s.stream_id_);
    const auto t1 = std::chrono::steady_clock::now();
    return err == cudaSuccess ? std::chrono::duration<float, std::milli>(t1 - t0).count() / n
                              : fail_cuda(name, err);
}

} // namespace mha
