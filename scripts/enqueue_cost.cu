// Host time to enqueue one dense decode step (aiter::mha_fwd_splitkv through scripts/decode_shim.cu, 32 query / 8 KV
// heads, d128, bf16, bhsd), next to empty launches of the kinds the library makes: wall time of N calls with no
// synchronization, best of three rounds, then the same calls back to back with the GPU (a call whose enqueue takes
// longer than its GPU time is host-bound without CUDA graphs). Two passes; the second is the one to read.
//   nvcc -std=c++17 -O2 -Iinclude -Icsrc -gencode=arch=compute_90a,code=sm_90a -cudart static scripts/enqueue_cost.cu \
//     -L<build> -lmha_fwd -Xlinker -rpath -Xlinker <build> -o /tmp/enqueue_cost && /tmp/enqueue_cost
// Pointing LD_LIBRARY_PATH at another build's libmha_fwd.so times that build with the same binary (A/Bs).
#include "decode_shim.cu"

#include <algorithm>
#include <chrono>

#define CK(x)                                                                                                          \
    do                                                                                                                 \
    {                                                                                                                  \
        const cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess)                                                                                         \
        {                                                                                                              \
            std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                                                       \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

struct Params1216 // the size of FwdParams, the decode kernel's parameter block
{
    char bytes[1216];
};
__global__ void empty_small(int) {}
__global__ void empty_big(const __grid_constant__ Params1216) {}

using Clock = std::chrono::steady_clock;

// Wall microseconds per call of f, best of three rounds of n calls, the stream drained between rounds.
template <typename F>
double per_call(F f, cudaStream_t s, int n)
{
    for (int i = 0; i < 20; ++i)
        f();
    cudaStreamSynchronize(s);
    double best = 1e30;
    for (int r = 0; r < 3; ++r)
    {
        const auto t0 = Clock::now();
        for (int i = 0; i < n; ++i)
            f();
        const auto t1 = Clock::now();
        cudaStreamSynchronize(s);
        best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
    }
    return best;
}

int main()
{
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    Params1216 big{};
    auto launch_ex = [&](int cluster_y, bool cooperative) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(1, 8, 16), cfg.blockDim = dim3(128), cfg.stream = s;
        cudaLaunchAttribute at[3]{};
        if (cluster_y > 1)
        {
            at[cfg.numAttrs].id              = cudaLaunchAttributeClusterDimension;
            at[cfg.numAttrs++].val.clusterDim = {1, unsigned(cluster_y), 1};
        }
        if (cooperative)
        {
            at[cfg.numAttrs].id                = cudaLaunchAttributeCooperative;
            at[cfg.numAttrs++].val.cooperative = 1;
        }
        cfg.attrs = at;
        return cudaLaunchKernelEx(&cfg, empty_big, big);
    };
    const int shapes[][2] = {{1, 1024}, {1, 8192}, {16, 1024}, {16, 8192}, {64, 1024}, {64, 8192}};
    for (int pass = 0; pass < 2; ++pass)
    {
        std::printf("-- pass %d (us per call)\n", pass);
        std::printf("empty <<<>>>, 4-byte parameters     %6.2f\n",
                    per_call([&] { empty_small<<<128, 128, 0, s>>>(0); }, s, 400));
        std::printf("empty <<<>>>, 1216-byte parameters  %6.2f\n",
                    per_call([&] { empty_big<<<128, 128, 0, s>>>(big); }, s, 400));
        std::printf("empty cudaLaunchKernelEx            %6.2f\n", per_call([&] { launch_ex(1, false); }, s, 400));
        std::printf("empty, clusters of 2                %6.2f\n", per_call([&] { launch_ex(2, false); }, s, 400));
        std::printf("empty, cooperative                  %6.2f\n", per_call([&] { launch_ex(1, true); }, s, 400));
        std::printf("cudaFuncSetAttribute alone          %6.2f\n", per_call([&] {
                        cudaFuncSetAttribute(empty_big, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000);
                    }, s, 400));
        for (const auto& sh : shapes)
        {
            const int b = sh[0], keys = sh[1];
            const size_t kv = size_t(b) * 8 * keys * 128, qn = size_t(b) * 32 * 128;
            void *q, *k, *v, *o, *lacc, *oacc;
            CK(cudaMalloc(&q, qn * 2));
            CK(cudaMalloc(&o, qn * 2));
            CK(cudaMalloc(&k, kv * 2));
            CK(cudaMalloc(&v, kv * 2));
            CK(cudaMalloc(&lacc, qn / 128 * 128 * 4)); // decode_shim's partials: 128 splits of b * 32 rows
            CK(cudaMalloc(&oacc, qn * 128 * 4));
            CK(cudaMemset(q, 0, qn * 2));
            CK(cudaMemset(k, 0, kv * 2));
            CK(cudaMemset(v, 0, kv * 2));
            bool failed = false;
            auto step   = [&] {
                failed |= decode_step_layout(q, k, v, o, lacc, oacc, b, 32, 8, keys, 128, 0, 0, s) < 0;
            };
            const double enqueue = per_call(step, s, 200);
            CK(cudaStreamSynchronize(s));
            const auto t0 = Clock::now();
            for (int i = 0; i < 200; ++i)
                step();
            CK(cudaStreamSynchronize(s));
            const double with_gpu = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 200;
            CK(cudaGetLastError());
            std::printf("decode b=%-2d keys=%-5d splits=%-2d enqueue %6.2f, back to back %7.2f%s\n", b, keys,
                        decode_splits(b, 32, 8, keys), enqueue, with_gpu, failed ? "  FAILED" : "");
            for (void* x : {q, k, v, o, lacc, oacc})
                cudaFree(x);
            if (failed)
                return 1;
        }
    }
    return 0;
}
