// Torch-free throughput of the two paged-attention decode implementations (include/mha_paged.h): paged_attention_v1
// (the generic kernel, partitions through the workspace) and pa_fwd_asm (the tuned one; HND only) on vLLM's block-16
// caches (HND, or NHD for paged_attention_v1 alone), one query per sequence, 32 query / 8 KV heads, d=128, bf16,
// every sequence at the full length, blocks shuffled over the pool. Each call is timed by the library itself
// (stream_config with time_kernel_ and flush_cache_: the L2 swept by a read before every call, CUDA events around the
// call, the mean of 20 after 3 cold ones), so the partition combine's launch and its overlap with the partition
// kernel count. GB/s of K + V read. scripts/paged_bench.py measures the same shapes through the Python binding under
// torch.profiler.
// Build (any machine with nvcc; runs on an sm_90 GPU):
//   nvcc -std=c++17 -O2 -Iinclude -Icsrc -gencode=arch=compute_90a,code=sm_90a -cudart static \
//        scripts/paged_bench.cu csrc/paged/paged_attention.cu csrc/api/error.cpp csrc/api/l2_flush.cu -o paged_bench
// Usage: paged_bench [partition_size (256)] [batches (1,16,64)] [lengths (1024,2048,4096,8192,32768)] [HND|NHD]
#include "mha_paged.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#define CHECK(x)                                                                                                     \
    do                                                                                                               \
    {                                                                                                                \
        if (cudaError_t e_ = (x); e_ != cudaSuccess)                                                                 \
        {                                                                                                            \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                         \
            std::exit(2);                                                                                            \
        }                                                                                                            \
    } while (0)

// uniform bf16 values in [-0.5, 0.5) from a hash of the index
__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed)
{
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
        p[i] = uint16_t(__float_as_uint((h & 0xffff) / 65536.f - 0.5f) >> 16);
    }
}

static std::vector<int> ints(const char* s)
{
    std::vector<int> v;
    std::stringstream ss(s);
    for (std::string x; std::getline(ss, x, ',');)
        v.push_back(std::atoi(x.c_str()));
    return v;
}

int main(int argc, char** argv)
{
    const int hq = 32, hk = 8, D = 128, bs = 16;
    const int P = argc > 1 ? std::atoi(argv[1]) : 256;
    const std::vector<int> batches = ints(argc > 2 ? argv[2] : "1,16,64");
    const std::vector<int> lengths = ints(argc > 3 ? argv[3] : "1024,2048,4096,8192,32768");
    const bool nhd = argc > 4 && std::string(argv[4]) == "NHD";
    std::mt19937 rng(1);
    std::printf("# 32 q / 8 KV heads, d128, bf16, %s block 16, v1 partitions of %d; L2 swept, mean of 20 calls\n",
                nhd ? "NHD" : "HND", P);
    std::printf("%3s %6s %9s %9s %9s %9s\n", "b", "L", "v1 us", "v1 GB/s", "asm us", "asm GB/s");
    for (int b : batches)
        for (int L : lengths)
        {
            const int per = (L + bs - 1) / bs, nb = b * per;
            const size_t kv = size_t(nb) * hk * bs * D;
            uint16_t *k = nullptr, *v = nullptr, *q = nullptr, *o = nullptr;
            int32_t *tab = nullptr, *len = nullptr;
            void* ws = nullptr;
            CHECK(cudaMalloc(&k, kv * 2));
            CHECK(cudaMalloc(&v, kv * 2));
            CHECK(cudaMalloc(&q, size_t(b) * hq * D * 2));
            CHECK(cudaMalloc(&o, size_t(b) * hq * D * 2));
            fill_bf16<<<1024, 256>>>(k, kv, 1);
            fill_bf16<<<1024, 256>>>(v, kv, 2);
            fill_bf16<<<64, 256>>>(q, size_t(b) * hq * D, 3);
            CHECK(cudaGetLastError());
            std::vector<int32_t> t(nb), l(b, L);
            std::iota(t.begin(), t.end(), 0);
            std::shuffle(t.begin(), t.end(), rng);
            CHECK(cudaMalloc(&tab, size_t(nb) * 4));
            CHECK(cudaMalloc(&len, size_t(b) * 4));
            CHECK(cudaMemcpy(tab, t.data(), size_t(nb) * 4, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(len, l.data(), size_t(b) * 4, cudaMemcpyHostToDevice));
            aiter::paged_attention_args a{};
            a.data_type = "bf16", a.query = q, a.key_cache = k, a.value_cache = v, a.out = o;
            a.block_tables = tab, a.context_lens = len;
            a.num_seqs = b, a.num_heads = hq, a.num_kv_heads = hk, a.head_size = D, a.block_size = bs;
            a.block_tables_stride = per, a.max_context_len = L, a.partition_size = P;
            a.q_stride_seq = a.o_stride_seq = int64_t(hq) * D, a.q_stride_head = a.o_stride_head = D;
            a.k_stride_block = a.v_stride_block = int64_t(hk) * bs * D;
            a.k_stride_head = a.v_stride_head = nhd ? D : int64_t(bs) * D; // NHD: [blocks, 16 tokens, 8 heads, d]
            a.nhd = nhd;
            a.scale = 1.f / std::sqrt(float(D));
            const int64_t wsb = aiter::paged_attention_workspace_bytes(b, hq, D, L, P, 2);
            CHECK(cudaMalloc(&ws, size_t(std::max<int64_t>(wsb, 16))));
            a.workspace = ws, a.workspace_bytes = wsb;
            ck_tile::stream_config s{};
            s.time_kernel_ = true, s.flush_cache_ = true, s.nrepeat_ = 20, s.cold_niters_ = 3;
            const float t1 = aiter::paged_attention_v1(a, s);
            if (t1 < 0)
                return std::printf("paged_attention_v1: %s\n", aiter::mha_get_last_error()), 2;
            a.workspace = nullptr, a.workspace_bytes = 0;
            const float t2 = nhd ? 0.f : aiter::pa_fwd_asm(a, s);
            if (t2 < 0)
                return std::printf("pa_fwd_asm: %s\n", aiter::mha_get_last_error()), 2;
            const double bytes = 2.0 * kv * 2;
            std::printf("%3d %6d %9.2f %9.0f %9.2f %9.0f\n", b, L, t1 * 1e3, bytes / (t1 * 1e-3) / 1e9, t2 * 1e3,
                        t2 > 0 ? bytes / (t2 * 1e-3) / 1e9 : 0.0);
            std::fflush(stdout);
            for (void* x : {(void*)k, (void*)v, (void*)q, (void*)o, (void*)tab, (void*)len, ws})
                CHECK(cudaFree(x));
        }
    return 0;
}
