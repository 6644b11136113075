// Torch-free GPU check of the two paged-attention implementations (include/mha_paged.h) against a float64 reference
// on fresh random caches: both cache layouts, head sizes on and off the kernel's 64-dim padding, block sizes that are
// and are not multiples of 16 / 32, GQA groups of 1, 3, 4 and 16, partitions through the workspace, ALiBi, soft-cap,
// sliding windows (stale block ids before them, never read), empty and clamped contexts, partitions split over
// thread-block clusters and merged in large grids, token-major caches by explicit token strides (AITER's 4-D HND, NHD
// with padded heads), NaN-poisoned outputs.
// Small enough to run under compute-sanitizer.
// Build (any machine with nvcc; runs on an sm_90 GPU):
//   nvcc -std=c++17 -O2 -Iinclude -Icsrc -gencode=arch=compute_90a,code=sm_90a -cudart static \
//        tests/cpp/paged_check.cu csrc/paged/paged_attention.cu csrc/api/error.cpp csrc/api/l2_flush.cu -o paged_check
// Exit status 0 when every case is within tolerance, 1 otherwise, 2 on a CUDA or API error.
#include "mha_paged.h"
#include "cuda_check.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>


struct Case
{
    const char* name;
    bool bf16, nhd, asm_too;
    int seqs, heads, kv_heads, head, block, max_ctx, partition, window;
    float softcap;
    bool alibi;
    int token_major = 0; // with nhd: 1 = AITER's 4-D "HND" [nb][hk][bs][D] (token stride D), 2 = NHD with heads
                         // padded to D + 8 elements (NaN pads; token stride hk x (D + 8)), both by explicit strides
};

static uint16_t to_bits(float x, bool bf16)
{
    uint16_t b;
    if (bf16)
    {
        const __nv_bfloat16 v = __float2bfloat16(x);
        std::memcpy(&b, &v, 2);
    }
    else
    {
        const __half v = __float2half(x);
        std::memcpy(&b, &v, 2);
    }
    return b;
}

static float from_bits(uint16_t b, bool bf16)
{
    if (bf16)
    {
        __nv_bfloat16 v;
        std::memcpy(&v, &b, 2);
        return __bfloat162float(v);
    }
    __half v;
    std::memcpy(&v, &b, 2);
    return __half2float(v);
}

template <typename T>
static T* upload(const std::vector<T>& h)
{
    T* d = nullptr;
    CHECK(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * sizeof(T)));
    CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

static bool run_case(const Case& c, std::mt19937& rng)
{
    const int D = c.head, bs = c.block, hk = c.kv_heads, H = c.heads, S = c.seqs, ratio = H / hk;
    const int per_seq = (c.max_ctx + bs - 1) / bs, nb = S * per_seq + 5;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    // logical values (rounded to the element type), then stored in the chosen layout
    std::vector<float> q(size_t(S) * H * D), k(size_t(nb) * hk * bs * D), v(k.size()); // k, v: [nb][hk][t][d]
    for (auto* x : {&q, &k, &v})
        for (auto& e : *x)
            e = from_bits(to_bits(u(rng), c.bf16), c.bf16);
    const int Dp = c.token_major == 2 ? D + 8 : D; // NHD's padded head stride
    const size_t cache_elems = size_t(nb) * hk * bs * Dp;
    std::vector<uint16_t> qh(q.size()), kh(cache_elems, 0xffff), vh(cache_elems, 0xffff), va(v.size()); // NaN pads
    for (size_t i = 0; i < q.size(); ++i)
        qh[i] = to_bits(q[i], c.bf16);
    for (int b = 0; b < nb; ++b)
        for (int h = 0; h < hk; ++h)
            for (int t = 0; t < bs; ++t)
                for (int d = 0; d < D; ++d)
                {
                    const size_t l = ((size_t(b) * hk + h) * bs + t) * D + d;
                    size_t ko, vo;
                    if (c.nhd && c.token_major == 1)
                        ko = vo = l;
                    else if (c.nhd)
                        ko = vo = ((size_t(b) * bs + t) * hk + h) * Dp + d;
                    else
                    {
                        ko = (((size_t(b) * hk + h) * (D / 8) + d / 8) * bs + t) * 8 + d % 8;
                        vo = ((size_t(b) * hk + h) * D + d) * bs + t;
                    }
                    kh[ko] = to_bits(k[l], c.bf16);
                    vh[vo] = to_bits(v[l], c.bf16);
                    if (!c.nhd) // asm V [nb, hk, bs / 8, D, 8]
                        va[(((size_t(b) * hk + h) * (bs / 8) + t / 8) * D + d) * 8 + t % 8] = to_bits(v[l], c.bf16);
                }
    std::vector<int32_t> tables(size_t(S) * per_seq), lens(S);
    std::uniform_int_distribution<int> blk(0, nb - 1), len(1, c.max_ctx);
    for (auto& t : tables)
        t = blk(rng);
    for (int s = 0; s < S; ++s)
        lens[s] = s == 0 ? c.max_ctx : len(rng);
    if (S > 2)
        lens[1] = 0; // an empty context: zeros
    std::vector<float> alibi(H);
    for (auto& a : alibi)
        a = (u(rng) + 1.f) * 0.05f;
    const float scale = 1.f / std::sqrt(float(D));

    // float64 reference
    std::vector<double> ref(q.size(), 0.0);
    for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
        {
            const int ctx = lens[s], kvh = h / ratio, lo = c.window > 0 ? std::max(0, ctx - c.window) : 0;
            std::vector<double> sc(ctx, -INFINITY);
            double m = -INFINITY;
            for (int t = lo; t < ctx; ++t)
            {
                const int b = tables[size_t(s) * per_seq + t / bs];
                double acc = 0;
                for (int d = 0; d < D; ++d)
                    acc += double(q[(size_t(s) * H + h) * D + d]) * k[((size_t(b) * hk + kvh) * bs + t % bs) * D + d];
                acc *= scale;
                if (c.alibi) // AITER's pa_v1 order: ALiBi, then the cap
                    acc += double(alibi[h]) * (t - ctx + 1);
                if (c.softcap > 0)
                    acc = c.softcap * std::tanh(acc / c.softcap);
                sc[t] = acc;
                m = std::max(m, acc);
            }
            double sum = 0;
            for (int t = lo; t < ctx; ++t)
                sum += (sc[t] = std::exp(sc[t] - m));
            for (int t = lo; t < ctx; ++t)
            {
                const int b = tables[size_t(s) * per_seq + t / bs];
                for (int d = 0; d < D; ++d)
                    ref[(size_t(s) * H + h) * D + d] += sc[t] / sum * v[((size_t(b) * hk + kvh) * bs + t % bs) * D + d];
            }
        }

    // blocks wholly before a sliding window may have been freed by the engine: stale ids far past the pool there
    // (the kernels must not read them: a fault, or NaN through P V)
    if (c.window > 0)
        for (int s = 0; s < S; ++s)
            for (int bi = 0; bi < std::max(0, lens[s] - c.window) / bs; ++bi)
                tables[size_t(s) * per_seq + bi] = 0x7fffffff;
    uint16_t *dq = upload(qh), *dk = upload(kh), *dv = upload(vh), *dva = upload(va), *dout = nullptr;
    int32_t *dt = upload(tables), *dl = upload(lens);
    float* dal = upload(alibi);
    CHECK(cudaMalloc(&dout, q.size() * 2));
    aiter::paged_attention_args a{};
    a.data_type = c.bf16 ? "bf16" : "fp16";
    a.query = dq, a.key_cache = dk, a.value_cache = dv, a.out = dout, a.block_tables = dt, a.context_lens = dl;
    a.alibi_slopes = c.alibi ? dal : nullptr;
    a.num_seqs = S, a.num_heads = H, a.num_kv_heads = hk, a.head_size = D, a.block_size = bs;
    a.block_tables_stride = per_seq, a.max_context_len = c.max_ctx, a.partition_size = c.partition;
    a.q_stride_seq = a.o_stride_seq = int64_t(H) * D, a.q_stride_head = a.o_stride_head = D;
    a.k_stride_block = a.v_stride_block = int64_t(hk) * bs * Dp;
    a.k_stride_head = a.v_stride_head = c.nhd && c.token_major != 1 ? Dp : int64_t(bs) * D;
    if (c.token_major != 0)
        a.k_stride_token = a.v_stride_token = c.token_major == 1 ? D : int64_t(hk) * Dp;
    a.scale = scale, a.logits_soft_cap = c.softcap, a.sliding_window = c.window, a.nhd = c.nhd;
    const int64_t ws = aiter::paged_attention_workspace_bytes(S, H, D, c.max_ctx, c.partition, 2);
    void* dws = nullptr;
    CHECK(cudaMalloc(&dws, std::max<int64_t>(ws, 16)));
    a.workspace = dws, a.workspace_bytes = ws;

    bool ok = true;
    auto check = [&](const char* impl) {
        std::vector<uint16_t> out(q.size());
        CHECK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
        double err = 0;
        for (size_t i = 0; i < out.size(); ++i)
        {
            const double x = from_bits(out[i], c.bf16);
            err = std::isfinite(x) ? std::max(err, std::fabs(x - ref[i])) : INFINITY;
        }
        const double tol = c.bf16 ? 1.5e-2 : 2e-3;
        std::printf("%-34s %-18s max_err=%.3g %s\n", c.name, impl, err, err < tol ? "ok" : "FAIL");
        ok = ok && err < tol;
    };
    CHECK(cudaMemset(dout, 0xff, q.size() * 2)); // NaN
    if (aiter::paged_attention_v1(a, ck_tile::stream_config{}) < 0)
    {
        std::printf("%s: paged_attention_v1 failed: %s\n", c.name, aiter::mha_get_last_error());
        std::exit(2);
    }
    CHECK(cudaDeviceSynchronize());
    check("paged_attention_v1");
    if (c.asm_too)
    {
        a.value_cache = dva, a.workspace = nullptr, a.workspace_bytes = 0;
        CHECK(cudaMemset(dout, 0xff, q.size() * 2));
        if (aiter::pa_fwd_asm(a, ck_tile::stream_config{}) < 0)
        {
            std::printf("%s: pa_fwd_asm failed: %s\n", c.name, aiter::mha_get_last_error());
            std::exit(2);
        }
        CHECK(cudaDeviceSynchronize());
        check("pa_fwd_asm");
    }
    for (void* p : {(void*)dq, (void*)dk, (void*)dv, (void*)dva, (void*)dout, (void*)dt, (void*)dl, (void*)dal, dws})
        CHECK(cudaFree(p));
    return ok;
}

// Arguments the library must refuse with a reason, not run: an NHD cache with a padded head stride and no token
// stride (the packed row's token stride would be wrong), token strides with HND or off 8 elements, and workspace sizes
// for arguments no call accepts (the product would overflow).
bool errors_case()
{
    bool ok = true;
    auto expect = [&](bool cond, const char* what) {
        std::printf("%-34s %s\n", what, cond ? "ok" : "FAIL");
        ok = ok && cond;
    };
    const int S = 2, H = 4, hk = 2, D = 72, bs = 16, blocks = 4;
    uint16_t *dq = nullptr, *dk = nullptr, *dout = nullptr;
    int32_t* dt = nullptr;
    CHECK(cudaMalloc(&dq, size_t(S) * H * D * 2));
    CHECK(cudaMalloc(&dout, size_t(S) * H * D * 2));
    CHECK(cudaMalloc(&dk, size_t(blocks) * bs * hk * 80 * 2));
    CHECK(cudaMalloc(&dt, 64));
    aiter::paged_attention_args a{};
    a.data_type = "bf16";
    a.query = dq, a.key_cache = dk, a.value_cache = dk, a.out = dout, a.block_tables = dt, a.context_lens = dt;
    a.num_seqs = S, a.num_heads = H, a.num_kv_heads = hk, a.head_size = D, a.block_size = bs;
    a.block_tables_stride = 2, a.max_context_len = 16, a.partition_size = 256;
    a.q_stride_seq = a.o_stride_seq = int64_t(H) * D, a.q_stride_head = a.o_stride_head = D;
    a.k_stride_block = a.v_stride_block = int64_t(bs) * hk * 80;
    a.k_stride_head = a.v_stride_head = 80; // heads padded to 80 elements
    a.scale = 0.1f, a.nhd = true;
    const float r = aiter::paged_attention_v1(a, ck_tile::stream_config{});
    expect(r < 0 && std::strstr(aiter::mha_get_last_error(), "NHD layout without k_stride_token") != nullptr,
           "refuses NHD with padded heads");
    a.nhd = false, a.k_stride_token = a.v_stride_token = 80;
    expect(aiter::paged_attention_v1(a, ck_tile::stream_config{}) < 0 &&
               std::strstr(aiter::mha_get_last_error(), "token strides are fixed") != nullptr,
           "refuses token strides with HND");
    a.nhd = true, a.k_stride_token = 12;
    expect(aiter::paged_attention_v1(a, ck_tile::stream_config{}) < 0 &&
               std::strstr(aiter::mha_get_last_error(), "multiples of 8") != nullptr,
           "refuses a token stride off 8 elements");
    expect(aiter::paged_attention_workspace_bytes(65535, 65535, 256, 2147483647, 1, 2) == -1,
           "workspace_bytes past the limits");
    expect(aiter::paged_attention_workspace_bytes(-1, 8, 128, 600, 256, 2) == -1, "workspace_bytes negative");
    expect(aiter::paged_attention_workspace_bytes(2, 8, 128, 600, 256, 2) == int64_t(2) * 8 * 3 * (128 * 2 + 8),
           "workspace_bytes of 3 partitions");
    for (void* p : {(void*)dq, (void*)dk, (void*)dout, (void*)dt})
        CHECK(cudaFree(p));
    return ok;
}

int main()
{
    std::mt19937 rng(20261126);
    const Case cases[] = {
        // name                              bf16   nhd    asm    S  H   hk  D    bs  ctx   P     win  cap   alibi
        {"hnd d128 b16 gqa4 partitions", true, false, true, 3, 32, 8, 128, 16, 700, 256, 0, 0.f, false},
        {"hnd d80 b8 gqa3 fp16", false, false, false, 3, 6, 2, 80, 8, 300, 48, 0, 0.f, false},
        {"hnd d256 b32 gqa16 window capped", true, false, false, 3, 32, 2, 256, 32, 1100, 1024, 150, 20.f, true},
        {"hnd d96 b48 gqa1 window", true, false, false, 2, 4, 4, 96, 48, 500, 96, 70, 0.f, false},
        {"nhd d120 b12 gqa3 window", true, true, false, 3, 6, 2, 120, 12, 400, 36, 100, 0.f, false},
        {"nhd d64 b16 gqa1 alibi fp16", false, true, false, 3, 8, 8, 64, 16, 260, 64, 0, 0.f, true},
        {"nhd d128 b5 gqa16 one partition", true, true, false, 2, 16, 1, 128, 5, 120, 120, 0, 30.f, false},
        // small grids: the context as one partition (up to 1024 tokens) or the caller's partitions, each split over a
        // cluster of 8 / 4 / 2 CTAs (ranks past a short context have no tiles)
        {"hnd d128 b16 gqa4 one-partition cluster", true, false, true, 3, 8, 2, 128, 16, 1000, 512, 0, 0.f, false},
        {"hnd d256 b16 gqa4 clusters window", false, false, false, 3, 8, 2, 256, 16, 1000, 512, 300, 0.f, true},
        {"nhd d64 b32 gqa16 cluster window", false, true, false, 2, 16, 1, 64, 32, 900, 256, 200, 0.f, true},
        {"nhd d72 b8 gqa2 one partition 2", true, true, false, 1, 4, 2, 72, 8, 130, 256, 0, 10.f, false},
        {"hnd d128 b16 gqa4 clusters + combine", true, false, true, 2, 8, 2, 128, 16, 2000, 256, 0, 0.f, false},
        // a large grid: the caller's partitions of 128 merged four at a time
        {"hnd d128 b16 gqa4 merged partitions", true, false, true, 40, 32, 8, 128, 16, 600, 128, 0, 0.f, false},
        // token-major caches by explicit token strides: AITER's 4-D HND, NHD with padded heads (NaN pads)
        {"hnd4 d128 b16 gqa4 alibi capped", true, true, false, 3, 32, 8, 128, 16, 700, 256, 0, 15.f, true, 1},
        {"hnd4 d64 b32 gqa2 window fp16", false, true, false, 2, 8, 4, 64, 32, 900, 256, 300, 0.f, false, 1},
        {"nhd padded d72 b16 gqa3 window", true, true, false, 3, 6, 2, 72, 16, 500, 128, 200, 0.f, true, 2},
    };
    bool ok = true;
    for (const Case& c : cases)
        ok = run_case(c, rng) && ok;
    ok = errors_case() && ok;
    std::printf("%s\n", ok ? "paged_check: all ok" : "paged_check: FAILED");
    return ok ? 0 : 1;
}
