// GPU check of the paged entry points against the (validated) dense forward on the same data:
//   prefill  mha_batch_prefill (SGLang page table) vs mha_fwd in group mode, with GQA, masks, soft-cap and dropout
//   bigpool  mha_fwd_splitkv over a pool of 140,000 pages (block ids > 65,535, > 2^31 elements per cache) vs mha_fwd
//            on the same keys gathered densely
//   ragged   batch-mode mha_fwd_splitkv with per-sequence key counts below the cache's capacity (dense and paged,
//            NaN past every sequence; key counts past the cache clamp to it) vs mha_fwd in group mode
//   padding  batch-mode mha_fwd with cu_seqlen_q / cu_seqlen_k (lengths past the padding clamp to it; padded rows
//            untouched) vs one call per batch; group mode with cu_seqlen_q / cu_seqlen_k logical lengths inside
//            padded segments (NaN padding) vs one batch-mode call per sequence; ck and asm families
//   graph    a split-KV decode step captured into a CUDA graph replays bit for bit what the eager call wrote (cluster
//            merge, merge inside the split grid, combine kernel, placement clusters)
//   masked   masked speculative-decode steps of 17 to 64 rows per KV head over a dense cache vs mha_fwd; the decode
//            tile's up to 16 rows with ALiBi (one head per tile) and soft-cap (packed heads), windows
//   merge    split-KV calls merging inside their grids on two streams at once, and on more o_acc addresses than the
//            counter pool has slots, vs the same calls through the combine kernel; the same with a second CUDA
//            context on the device taking turns with the primary one
// Prints "<case> max_err=<e> (bar <b>) lse_err=<e> (at lse <l>) ok|FAIL" per case and exits non-zero on any failure.
#include "mha_fwd.h"
#include "cuda_check.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>


using bf16 = __nv_bfloat16;

template <typename T>
T* upload(const std::vector<T>& v)
{
    T* p = nullptr;
    CHECK(cudaMalloc(&p, std::max<size_t>(sizeof(T) * v.size(), 16)));
    if (!v.empty())
        CHECK(cudaMemcpy(p, v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
    return p;
}

template <typename T>
std::vector<T> download(const T* p, size_t n)
{
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost));
    return v;
}

std::vector<bf16> random_bf16(size_t n, std::mt19937& g)
{
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<bf16> v(n);
    for (auto& x : v)
        x = __float2bfloat16(d(g));
    return v;
}

// The larger of a running maximum and a new difference, NaN sticking (std::max would drop it).
double worse(double acc, double diff) { return diff <= acc ? acc : diff; }

// O against the reference `a` to 1% of max|a| (plus 1e-4): with inputs in U[-1, 1) and a thousand keys |O| is under
// 0.1, where an absolute 1e-2 let a combine that ignores the partials' LSE weights or two swapped V pages pass (errors
// 2e-3 to 8e-3); the two calls differ by rounding alone (max_err ~5e-4 and below on the GPU). LSE to 1e-3.
bool compare(const char* name, const std::vector<bf16>& a, const std::vector<bf16>& b, const std::vector<float>& la,
             const std::vector<float>& lb)
{
    double err = 0, lerr = 0, top = 0, lerr_at = 0;
    bool lse_ok = true;
    for (size_t i = 0; i < a.size(); ++i)
    {
        err = worse(err, std::fabs(__bfloat162float(a[i]) - __bfloat162float(b[i])));
        top = worse(top, std::fabs(__bfloat162float(a[i])));
    }
    // LSE: 1e-3 plus 4e-6 of its size (32 fp32 ulps). A causal ALiBi row adds slope * j, so its LSE reaches
    // thousands, where one ulp is 2.4e-4 and two kernels that merge their partials in other orders differ by 10-20
    for (size_t i = 0; i < la.size(); ++i)
        if (!(std::isinf(la[i]) && la[i] == lb[i]))
        {
            const double e = std::fabs(la[i] - lb[i]);
            if (!(e <= lerr))
                lerr_at = la[i];
            lerr = worse(lerr, e);
            lse_ok &= e <= 1e-3 + 4e-6 * std::fabs(la[i]);
        }
    const double bar = 1e-2 * top + 1e-4;
    const bool ok    = err <= bar && lse_ok && std::isfinite(err) && std::isfinite(lerr);
    std::printf("%s max_err=%.3g (bar %.3g) lse_err=%.3g (at lse %.4g) %s\n", name, err, bar, lerr, lerr_at,
                ok ? "ok" : "FAIL");
    return ok;
}

// The reference call of the ragged and batch-prefill cases: mha_fwd in group mode, bf16, MHA (K / V copied out to
// every query head, so mha_fwd runs its per-head prefill kernel, not the split tiles under test), Q / O / K / V
// [rows, h, d], LSE [h, total_q]; no mask (the caller sets one).
aiter::mha_fwd_args mha_reference_args(const void* q, const void* k, const void* v, void* o, void* lse,
                                       const int* seqstart_q, const int* seqstart_k, int b, int max_q, int h, int d,
                                       int total_q)
{
    aiter::mha_fwd_args a{};
    a.data_type = "bf16", a.is_group_mode = true, a.has_lse = true;
    a.q_ptr = q, a.k_ptr = k, a.v_ptr = v, a.o_ptr = o, a.lse_ptr = lse;
    a.seqstart_q_ptr = seqstart_q, a.seqstart_k_ptr = seqstart_k;
    a.batch = b, a.max_seqlen_q = max_q, a.hdim_q = a.hdim_v = d, a.nhead_q = a.nhead_k = h;
    a.scale_s = 1.f / std::sqrt(float(d));
    a.stride_q = a.stride_o = a.stride_k = a.stride_v = h * d;
    a.nhead_stride_q = a.nhead_stride_o = a.nhead_stride_k = a.nhead_stride_v = d;
    a.nhead_stride_lse = total_q;
    a.window_size_left = a.window_size_right = -1;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    return a;
}

// The outputs of a split-KV case: the reference's O / LSE (o1, l1: [rows, h, d] bf16, [h, rows] fp32), the split
// call's (o2, l2: NaN, so every element must be written) and the fp32 partials of `splits` splits.
void alloc_split_outputs(int rows, int h, int d, int splits, bf16*& o1, bf16*& o2, float*& l1, float*& l2,
                         float*& lacc, float*& oacc)
{
    const size_t on = size_t(rows) * h * d, ln = size_t(rows) * h;
    CHECK(cudaMalloc(&o1, on * 2));
    CHECK(cudaMalloc(&o2, on * 2));
    CHECK(cudaMalloc(&l1, ln * 4));
    CHECK(cudaMalloc(&l2, ln * 4));
    CHECK(cudaMalloc(&lacc, size_t(splits) * ln * 4));
    CHECK(cudaMalloc(&oacc, size_t(splits) * on * 4));
    CHECK(cudaMemset(o2, 0xFF, on * 2));
    CHECK(cudaMemset(l2, 0xFF, ln * 4));
    // partials NaN too: a split that leaves its LSE / O unwritten (an empty split must write -inf / 0) shows
    CHECK(cudaMemset(lacc, 0xFF, size_t(splits) * ln * 4));
    CHECK(cudaMemset(oacc, 0xFF, size_t(splits) * on * 4));
}

// Group-mode Q/O [total_q, h, d]; keys of batch b: dense rows seqstart_k[b].. of [total_k, h_k, d], or pages.
// max_q_given > 0: the max_seqlen_q mha_batch_prefill gets (an over-estimate; the reference gets the true one).
// randval false: with dropout neither call stores its random values (the kernels' per-element fast path, a different
// tile in each call), so equal outputs mean equal keep decisions.
bool prefill_case(const char* name, std::vector<int> sq, std::vector<int> sk, int h, int hk, int d, int page,
                  int mask_type, int wl, int wr, float softcap, float p_drop, uint32_t seed, int max_q_given = 0,
                  bool randval = true)
{
    std::mt19937 g(seed);
    const int b = int(sq.size());
    std::vector<int> qs(b + 1, 0), ks(b + 1, 0);
    for (int i = 0; i < b; ++i)
        qs[i + 1] = qs[i] + sq[i], ks[i + 1] = ks[i] + sk[i];
    const int tq = qs[b], tk = ks[b], max_q = *std::max_element(sq.begin(), sq.end());
    const int max_k = *std::max_element(sk.begin(), sk.end());
    auto q = random_bf16(size_t(tq) * h * d, g), k = random_bf16(size_t(tk) * hk * d, g),
         v = random_bf16(size_t(tk) * hk * d, g);

    // pages: batch b's keys fill pages indptr[b] .. indptr[b+1] in order; page ids are a shuffled pool
    std::vector<int> indptr(b + 1, 0), last(b);
    for (int i = 0; i < b; ++i)
    {
        const int n = std::max(1, (sk[i] + page - 1) / page);
        indptr[i + 1] = indptr[i] + n;
        last[i] = sk[i] - (n - 1) * page;
    }
    const int pool = indptr[b] + 3;
    std::vector<int> ids(pool);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    ids.resize(indptr[b]);
    const size_t page_elems = size_t(page) * hk * d;
    std::vector<bf16> kc(pool * page_elems, __float2bfloat16(NAN)), vc(pool * page_elems, __float2bfloat16(NAN));
    for (int i = 0; i < b; ++i)
        for (int j = 0; j < sk[i]; ++j)
        {
            const size_t dst = ids[indptr[i] + j / page] * page_elems + size_t(j % page) * hk * d;
            const size_t src = size_t(ks[i] + j) * hk * d;
            std::copy_n(k.begin() + src, hk * d, kc.begin() + dst);
            std::copy_n(v.begin() + src, hk * d, vc.begin() + dst);
        }

    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v), *dkc = upload(kc), *dvc = upload(vc);
    int *dqs = upload(qs), *dks = upload(ks), *dind = upload(indptr), *dids = upload(ids), *dlast = upload(last);
    bf16 *o1 = nullptr, *o2 = nullptr;
    float *l1 = nullptr, *l2 = nullptr;
    uint8_t *r1 = nullptr, *r2 = nullptr;
    const size_t on = size_t(tq) * h * d, rn = size_t(h) * tq * std::max(max_k, 1);
    CHECK(cudaMalloc(&o1, on * 2));
    CHECK(cudaMalloc(&o2, on * 2));
    CHECK(cudaMalloc(&l1, size_t(h) * tq * 4 + 16));
    CHECK(cudaMalloc(&l2, size_t(h) * tq * 4 + 16));
    CHECK(cudaMalloc(&r1, rn + 16));
    CHECK(cudaMalloc(&r2, rn + 16));
    CHECK(cudaMemset(o2, 0xFF, on * 2));
    CHECK(cudaMemset(l2, 0xFF, size_t(h) * tq * 4));

    aiter::mha_fwd_args a{};
    a.data_type = "bf16", a.is_group_mode = true, a.has_lse = true;
    a.q_ptr = dq, a.k_ptr = dk, a.v_ptr = dv, a.o_ptr = o1, a.lse_ptr = l1, a.rand_val_ptr = r1;
    a.seqstart_q_ptr = dqs, a.seqstart_k_ptr = dks;
    a.batch = b, a.max_seqlen_q = max_q, a.hdim_q = a.hdim_v = d, a.nhead_q = h, a.nhead_k = hk;
    a.scale_s = 1.f / std::sqrt(float(d)), a.logits_soft_cap = softcap;
    a.stride_q = a.stride_o = h * d, a.stride_k = a.stride_v = hk * d;
    a.nhead_stride_q = a.nhead_stride_o = d, a.nhead_stride_k = a.nhead_stride_v = d;
    a.nhead_stride_lse = tq, a.stride_randval = std::max(max_k, 1), a.nhead_stride_randval = tq * a.stride_randval;
    a.window_size_left = wl, a.window_size_right = wr, a.mask_type = mask_type;
    a.p_drop = p_drop, a.s_randval = p_drop > 0.f && randval;
    if (!a.s_randval)
        a.rand_val_ptr = nullptr;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{1234, 5};
    const ck_tile::stream_config sc{};
    const float t1 = aiter::mha_fwd(a, sc);
    const std::string err1 = t1 < 0 ? aiter::mha_get_last_error() : ""; // the next call resets it

    aiter::mha_batch_prefill_args p{};
    p.q_ptr = dq, p.k_ptr = dkc, p.v_ptr = dvc, p.o_ptr = o2, p.lse_ptr = l2, p.rand_val_ptr = r2;
    p.seqstart_q_ptr = dqs;
    p.batch = b, p.max_seqlen_q = max_q_given > 0 ? max_q_given : max_q, p.hdim_q = p.hdim_v = d, p.nhead_q = h;
    p.nhead_k = hk;
    p.num_total_pages = pool, p.page_block_size = page, p.kv_indptr = dind, p.kv_page_indices = dids;
    p.kv_last_page_lens = dlast;
    p.scale_s = a.scale_s, p.logits_soft_cap = softcap;
    p.stride_q = p.stride_o = h * d, p.stride_k = p.stride_v = hk * d;
    p.nhead_stride_q = p.nhead_stride_o = d, p.nhead_stride_k = p.nhead_stride_v = d;
    p.batch_stride_k = p.batch_stride_v = int(page_elems);
    p.nhead_stride_lse = tq, p.stride_randval = a.stride_randval, p.nhead_stride_randval = a.nhead_stride_randval;
    p.window_size_left = wl, p.window_size_right = wr, p.mask_type = mask_type;
    p.p_drop = p_drop, p.s_randval = a.s_randval, p.drop_seed_offset = a.drop_seed_offset;
    if (!p.s_randval)
        p.rand_val_ptr = nullptr;
    const float t2 = aiter::mha_batch_prefill(p, sc, "bf16", true, mask_enum(mask_type > 0 ? mask_type : 0),
                                              bias_enum::no_bias, true, quant_scale_enum::no_scale, false);
    CHECK(cudaDeviceSynchronize());
    if (t1 < 0 || t2 < 0)
    {
        std::printf("%s FAIL: %s\n", name, t1 < 0 ? ("mha_fwd (the reference): " + err1).c_str()
                                                   : aiter::mha_get_last_error());
        return false;
    }
    bool ok = compare(name, download(o1, on), download(o2, on), download(l1, size_t(h) * tq),
                      download(l2, size_t(h) * tq));
    if (p_drop > 0.f && randval)
    {
        const auto a1 = download(r1, rn), a2 = download(r2, rn);
        const bool same = a1 == a2;
        std::printf("%s randval %s\n", name, same ? "identical ok" : "differs FAIL");
        ok = ok && same;
    }
    for (void* x : {(void*)dq, (void*)dk, (void*)dv, (void*)dkc, (void*)dvc, (void*)dqs, (void*)dks, (void*)dind,
                    (void*)dids, (void*)dlast, (void*)o1, (void*)o2, (void*)l1, (void*)l2, (void*)r1, (void*)r2})
        cudaFree(x);
    return ok;
}

// Decode over a 140,000-page pool (16 tokens x 8 KV heads x 128 = 16,384 elements per page: 2.29e9 elements per
// cache) whose block tables point past page 65,535 and past element 2^31; compared with mha_fwd on the same keys.
// The outputs of one decode comparison: O / LSE of the reference call (1) and of the call under test (2), and the
// split-KV partials.
struct DecodeOut
{
    bf16 *o1 = nullptr, *o2 = nullptr;
    float *l1 = nullptr, *l2 = nullptr, *lacc = nullptr, *oacc = nullptr;
    DecodeOut(int b, int h, int d, int splits)
    {
        CHECK(cudaMalloc(&o1, size_t(b) * h * d * 2));
        CHECK(cudaMalloc(&o2, size_t(b) * h * d * 2));
        CHECK(cudaMalloc(&l1, size_t(b) * h * 4));
        CHECK(cudaMalloc(&l2, size_t(b) * h * 4));
        CHECK(cudaMalloc(&lacc, size_t(splits) * b * h * 4));
        CHECK(cudaMalloc(&oacc, size_t(splits) * b * h * d * 4));
        CHECK(cudaMemset(lacc, 0xFF, size_t(splits) * b * h * 4)); // NaN partials: every split must write its own
        CHECK(cudaMemset(oacc, 0xFF, size_t(splits) * b * h * d * 4));
    }
    ~DecodeOut()
    {
        for (void* x : {(void*)o1, (void*)o2, (void*)l1, (void*)l2, (void*)lacc, (void*)oacc})
            cudaFree(x);
    }
};

bool bigpool_case()
{
    const int b = 2, h = 32, hk = 8, d = 128, page = 16, pool = 140000, sk = 1000;
    const int per_seq = (sk + page - 1) / page;
    const size_t page_elems = size_t(page) * hk * d;
    std::mt19937 g(7);
    bf16 *kc = nullptr, *vc = nullptr;
    if (cudaMalloc(&kc, pool * page_elems * 2) != cudaSuccess || cudaMalloc(&vc, pool * page_elems * 2) != cudaSuccess)
    {
        std::printf("bigpool FAIL: cannot allocate 2 x %.1f GB\n", pool * page_elems * 2 / 1e9);
        return false;
    }
    // pages from the top of the pool: ids 139,999 down, interleaved between the two sequences
    std::vector<int> table(b * per_seq);
    for (int i = 0; i < b * per_seq; ++i)
        table[(i % b) * per_seq + i / b] = pool - 1 - 3 * i;
    auto q = random_bf16(size_t(b) * h * d, g), k = random_bf16(size_t(b) * sk * hk * d, g),
         v = random_bf16(size_t(b) * sk * hk * d, g);
    for (int s = 0; s < b; ++s)
        for (int j = 0; j < sk; ++j)
        {
            const size_t dst = size_t(table[s * per_seq + j / page]) * page_elems + size_t(j % page) * hk * d;
            const size_t src = (size_t(s) * sk + j) * hk * d;
            CHECK(cudaMemcpy(kc + dst, k.data() + src, hk * d * 2, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(vc + dst, v.data() + src, hk * d * 2, cudaMemcpyHostToDevice));
        }
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v);
    int* dt = upload(table);
    std::vector<int> lens(b, sk);
    int* dl = upload(lens);
    const int splits = 4;
    DecodeOut out(b, h, d, splits);
    bf16 *o1 = out.o1, *o2 = out.o2;
    float *l1 = out.l1, *l2 = out.l2, *lacc = out.lacc, *oacc = out.oacc;

    aiter::mha_fwd_args a{};
    a.data_type = "bf16", a.has_lse = true;
    a.q_ptr = dq, a.k_ptr = dk, a.v_ptr = dv, a.o_ptr = o1, a.lse_ptr = l1;
    a.seqlen_q = 1, a.seqlen_k = sk, a.batch = b, a.max_seqlen_q = 1, a.hdim_q = a.hdim_v = d;
    a.nhead_q = h, a.nhead_k = hk, a.scale_s = 1.f / std::sqrt(float(d));
    a.stride_q = a.stride_o = h * d, a.stride_k = a.stride_v = hk * d;
    a.nhead_stride_q = a.nhead_stride_o = a.nhead_stride_k = a.nhead_stride_v = d;
    a.batch_stride_q = a.batch_stride_o = h * d, a.batch_stride_k = a.batch_stride_v = sk * hk * d;
    a.nhead_stride_lse = 1, a.batch_stride_lse = h;
    a.window_size_left = a.window_size_right = -1;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    const float t1 = aiter::mha_fwd(a, ck_tile::stream_config{});

    aiter::mha_fwd_splitkv_args s{};
    s.q_ptr = dq, s.k_ptr = kc, s.v_ptr = vc, s.o_ptr = o2, s.lse_ptr = l2, s.lse_acc_ptr = lacc, s.o_acc_ptr = oacc;
    s.block_table_ptr = dt, s.batch_stride_block_table = per_seq, s.page_block_size = page, s.seqlen_k_ptr = dl;
    s.seqlen_q = 1, s.seqlen_k = sk, s.batch = b, s.max_seqlen_q = 1, s.hdim_q = s.hdim_v = d;
    s.nhead_q = h, s.nhead_k = hk, s.num_splits = splits, s.scale_s = a.scale_s;
    s.stride_q = s.stride_o = h * d, s.stride_k = s.stride_v = hk * d;
    s.nhead_stride_q = s.nhead_stride_o = s.nhead_stride_k = s.nhead_stride_v = d;
    s.batch_stride_q = s.batch_stride_o = h * d, s.batch_stride_k = s.batch_stride_v = int(page_elems);
    s.nhead_stride_lse = 1, s.batch_stride_lse = h;
    s.stride_o_acc = d, s.split_stride_o_acc = b * h * d, s.batch_stride_o_acc = h * d, s.nhead_stride_o_acc = d;
    s.split_stride_lse_acc = b * h, s.batch_stride_lse_acc = h, s.nhead_stride_lse_acc = 1;
    s.window_size_left = s.window_size_right = -1;
    const float t2 = aiter::mha_fwd_splitkv(s, ck_tile::stream_config{}, "bf16", false, mask_enum::no_mask,
                                            bias_enum::no_bias, true);
    CHECK(cudaDeviceSynchronize());
    if (t1 < 0 || t2 < 0)
    {
        std::printf("bigpool FAIL: %s\n", aiter::mha_get_last_error());
        return false;
    }
    const bool ok = compare("bigpool (140000 pages, ids > 65535, offsets > 2^31)", download(o1, size_t(b) * h * d),
                            download(o2, size_t(b) * h * d), download(l1, b * h), download(l2, b * h));
    for (void* x : {(void*)kc, (void*)vc, (void*)dq, (void*)dk, (void*)dv, (void*)dt, (void*)dl})
        cudaFree(x);
    return ok;
}

// Batch-mode split-KV over a cache of `cap` rows per sequence where each sequence holds lens[i] <= cap keys
// (seqlen_k_ptr, as serving engines call it), against mha_fwd in group mode on the keys packed densely (and copied
// out to every query head, so the reference runs the prefill kernel, not the split tiles under test). Cache rows
// past a sequence's length are NaN and, paged, its block-table entries past its last page point at a NaN page, so
// reading any of them shows. Q / O [b, sq, h, d]; bottom-right causal when sq > 1.
// over > 0: sequences filling the cache get cap + over as their key count (device data past the cache: it clamps to
// cap, and the reference sees cap keys)
// tile: on an sm_90 GPU, a substring the split-KV call's kernel name must contain (its tile, e.g. "b16x32")
// group: the split-KV call in group mode (Q / O [total_q, h, d], partials [splits, h, total_q(, d)]); its key
// counts over a block table clamp to the table row (cap a multiple of page: to cap). A dense cache keeps batch i's
// keys at seqstart_k[i] = i * cap.
// quirks (group mode): kNoSeqstartK passes no seqstart_k (a block table with key counts needs none), kSeqlenKUnset
// leaves seqlen_k at -1 (CK ignores it in group mode: read as 0), kNegativeEmpty gives the empty sequences a key
// count of -1000 (an empty batch; its split ranges once overflowed)
enum RaggedQuirk { kNoSeqstartK = 1, kSeqlenKUnset = 2, kNegativeEmpty = 4 };
bool ragged_case(const char* name, std::vector<int> lens, int cap, int splits, int page, int sq, uint32_t seed,
                 int d = 128, int over = 0, const char* tile = nullptr, bool group = false, int quirks = 0)
{
    const int b = int(lens.size()), h = 32, hk = 8;
    std::mt19937 g(seed);
    std::vector<int> qs(b + 1, 0), ks(b + 1, 0);
    for (int i = 0; i < b; ++i)
        qs[i + 1] = qs[i] + sq, ks[i + 1] = ks[i] + lens[i];
    const int tq = qs[b], tk = ks[b];
    auto q = random_bf16(size_t(tq) * h * d, g), k = random_bf16(size_t(tk) * hk * d, g),
         v = random_bf16(size_t(tk) * hk * d, g);
    const size_t row = size_t(hk) * d;
    const int per_seq = page > 0 ? (cap + page - 1) / page : 0; // block-table entries per sequence
    std::vector<int> table;
    std::vector<bf16> kc, vc;
    if (page > 0)
    {
        // pages of all sequences shuffled over a pool; the pool's last page (all NaN) fills the tables' tails
        const int used = b * per_seq, pool = used + 1;
        std::vector<int> ids(used);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), g);
        table.assign(size_t(b) * per_seq, pool - 1);
        for (int i = 0; i < b; ++i)
            for (int p = 0; p < (lens[i] + page - 1) / page; ++p)
                table[size_t(i) * per_seq + p] = ids[size_t(i) * per_seq + p];
        kc.assign(size_t(pool) * page * row, __float2bfloat16(NAN));
    }
    else
        kc.assign(size_t(b) * cap * row, __float2bfloat16(NAN));
    vc = kc;
    for (int i = 0; i < b; ++i)
        for (int j = 0; j < lens[i]; ++j)
        {
            const size_t dst = page > 0 ? (size_t(table[size_t(i) * per_seq + j / page]) * page + j % page) * row
                                        : (size_t(i) * cap + j) * row;
            std::copy_n(k.begin() + size_t(ks[i] + j) * row, row, kc.begin() + dst);
            std::copy_n(v.begin() + size_t(ks[i] + j) * row, row, vc.begin() + dst);
        }
    // the reference reads K / V copied out to every query head (MHA): mha_fwd then runs its per-head prefill
    // kernel, not the packed split tiles (which it takes for GQA up to 256 rows per KV head) that are under test
    const int ratio = h / hk;
    std::vector<bf16> kx(size_t(tk) * h * d), vx(size_t(tk) * h * d);
    for (size_t t = 0; t < size_t(tk); ++t)
        for (int hh = 0; hh < h; ++hh)
        {
            std::copy_n(k.begin() + (t * hk + hh / ratio) * d, d, kx.begin() + (t * h + hh) * d);
            std::copy_n(v.begin() + (t * hk + hh / ratio) * d, d, vx.begin() + (t * h + hh) * d);
        }
    bf16 *dq = upload(q), *dk = upload(kx), *dv = upload(vx), *dkc = upload(kc), *dvc = upload(vc);
    std::vector<int> given = lens, cache_starts(b + 1);
    for (int& x : given)
        x += x == cap ? over : (x == 0 && (quirks & kNegativeEmpty) ? -1000 : 0);
    for (int i = 0; i <= b; ++i)
        cache_starts[i] = i * cap;
    int *dqs = upload(qs), *dks = upload(ks), *dl = upload(given), *dt = page > 0 ? upload(table) : nullptr;
    int* dcs = upload(cache_starts);
    const size_t on = size_t(tq) * h * d;
    bf16 *o1 = nullptr, *o2 = nullptr;
    float *l1 = nullptr, *l2 = nullptr, *lacc = nullptr, *oacc = nullptr;
    // partials for the split count (splits = 0: the heuristic's bound for the shape)
    const int ns = splits > 0 ? splits : aiter::mha_fwd_splitkv_num_splits(b, h, hk, sq, cap);
    alloc_split_outputs(tq, h, d, ns, o1, o2, l1, l2, lacc, oacc);
    const int mask_type = sq > 1 ? 2 : 0, wr = sq > 1 ? 0 : -1;

    aiter::mha_fwd_args a = mha_reference_args(dq, dk, dv, o1, l1, dqs, dks, b, sq, h, d, tq);
    a.window_size_left = -1, a.window_size_right = wr, a.mask_type = mask_type;
    const float t1 = aiter::mha_fwd(a, ck_tile::stream_config{});
    const std::string ref_kernel = t1 >= 0 ? aiter::mha_get_last_kernel_name() : "";

    aiter::mha_fwd_splitkv_args s{};
    s.q_ptr = dq, s.k_ptr = dkc, s.v_ptr = dvc, s.o_ptr = o2, s.lse_ptr = l2, s.lse_acc_ptr = lacc, s.o_acc_ptr = oacc;
    s.block_table_ptr = dt, s.batch_stride_block_table = page > 0 ? per_seq : 0, s.page_block_size = page;
    s.seqlen_k_ptr = dl;
    s.seqlen_q = sq, s.seqlen_k = cap, s.batch = b, s.max_seqlen_q = sq, s.hdim_q = s.hdim_v = d;
    s.nhead_q = h, s.nhead_k = hk, s.num_splits = splits, s.scale_s = a.scale_s;
    s.stride_q = s.stride_o = h * d, s.stride_k = s.stride_v = hk * d;
    s.nhead_stride_q = s.nhead_stride_o = s.nhead_stride_k = s.nhead_stride_v = d;
    s.batch_stride_q = s.batch_stride_o = sq * h * d;
    s.batch_stride_k = s.batch_stride_v = page > 0 ? page * hk * d : cap * hk * d;
    s.nhead_stride_lse = tq, s.batch_stride_lse = sq; // the reference's [h, total_q] layout
    // partials [splits, b, h, sq] / [splits, b, h, sq, d]
    s.stride_o_acc = d, s.nhead_stride_o_acc = sq * d, s.batch_stride_o_acc = h * sq * d;
    s.split_stride_o_acc = b * h * sq * d;
    s.nhead_stride_lse_acc = sq, s.batch_stride_lse_acc = h * sq, s.split_stride_lse_acc = b * h * sq;
    if (group) // rows at their physical (seqstart_q) position; partials [splits, h, total_q(, d)]
    {
        s.seqstart_q_ptr = dqs, s.seqstart_k_ptr = quirks & kNoSeqstartK ? nullptr : page > 0 ? dks : dcs;
        s.nhead_stride_o_acc = tq * d, s.split_stride_o_acc = h * tq * d;
        s.nhead_stride_lse_acc = tq, s.split_stride_lse_acc = h * tq;
        if (quirks & kSeqlenKUnset)
            s.seqlen_k = -1;
    }
    s.window_size_left = -1, s.window_size_right = wr, s.mask_type = mask_type;
    const float t2 = aiter::mha_fwd_splitkv(s, ck_tile::stream_config{}, "bf16", group,
                                            sq > 1 ? mask_enum::mask_bottom_right : mask_enum::no_mask,
                                            bias_enum::no_bias, true);
    const std::string kernel = t2 >= 0 ? aiter::mha_get_last_kernel_name() : "";
    CHECK(cudaDeviceSynchronize());
    bool ok = t1 >= 0 && t2 >= 0;
    int dev = 0, major = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (!ok)
        std::printf("%s FAIL: %s\n", name, aiter::mha_get_last_error());
    else if (ref_kernel.find("splitkv") != std::string::npos)
    {
        std::printf("%s FAIL: the reference ran the split-KV kernel %s\n", name, ref_kernel.c_str());
        ok = false;
    }
    else if (tile != nullptr && major == 9 && kernel.find(tile) == std::string::npos)
    {
        std::printf("%s FAIL: ran %s, expected a %s tile\n", name, kernel.c_str(), tile);
        ok = false;
    }
    else
        ok = compare(name, download(o1, on), download(o2, on), download(l1, size_t(h) * tq),
                     download(l2, size_t(h) * tq));
    for (void* x : {(void*)dq, (void*)dk, (void*)dv, (void*)dkc, (void*)dvc, (void*)dqs, (void*)dks, (void*)dl,
                    (void*)dt, (void*)dcs, (void*)o1, (void*)o2, (void*)l1, (void*)l2, (void*)lacc, (void*)oacc})
        cudaFree(x);
    return ok;
}

// A masked step of sq queries over a dense batch-mode cache of sk keys in every sequence (no seqlen_k_ptr), Q / O
// [b, sq, h, d], K / V [b, sk, hk, d], d128, against mha_fwd in group mode on the same keys copied out to every query
// head. With 17 to 64 rows per KV head the decode tile runs in 16-row blocks (grid.x); a mask that hides no key from
// the step as a whole still hides the last keys from its first row blocks (causal), so the
// block a split issues at kernel entry (kRingEarly) must be each row block's own first block. softcap > 0 and alibi
// (slopes per head, shared by the batches) apply to both calls; mask_type 0 is no mask.
bool masked_step_case(const char* name, int b, int h, int hk, int sq, int sk, int splits, int mask_type, int wl, int wr,
                      uint32_t seed, float softcap = 0.f, bool alibi = false)
{
    const int d = 128;
    std::mt19937 g(seed);
    auto q = random_bf16(size_t(b) * sq * h * d, g), k = random_bf16(size_t(b) * sk * hk * d, g),
         v = random_bf16(size_t(b) * sk * hk * d, g);
    const int ratio = h / hk, tq = b * sq;
    std::vector<bf16> kx(size_t(b) * sk * h * d), vx(size_t(b) * sk * h * d);
    for (size_t t = 0; t < size_t(b) * sk; ++t)
        for (int hh = 0; hh < h; ++hh)
        {
            std::copy_n(k.begin() + (t * hk + hh / ratio) * d, d, kx.begin() + (t * h + hh) * d);
            std::copy_n(v.begin() + (t * hk + hh / ratio) * d, d, vx.begin() + (t * h + hh) * d);
        }
    std::vector<int> qs(b + 1), ks(b + 1);
    for (int i = 0; i <= b; ++i)
        qs[i] = i * sq, ks[i] = i * sk;
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v), *dkx = upload(kx), *dvx = upload(vx);
    int *dqs = upload(qs), *dks = upload(ks);
    const size_t on = size_t(tq) * h * d;
    const int ns = splits > 0 ? splits : aiter::mha_fwd_splitkv_num_splits(b, h, hk, sq, sk);
    bf16 *o1 = nullptr, *o2 = nullptr;
    float *l1 = nullptr, *l2 = nullptr, *lacc = nullptr, *oacc = nullptr;
    alloc_split_outputs(tq, h, d, ns, o1, o2, l1, l2, lacc, oacc);

    aiter::mha_fwd_args a = mha_reference_args(dq, dkx, dvx, o1, l1, dqs, dks, b, sq, h, d, tq);
    a.window_size_left = wl, a.window_size_right = wr, a.mask_type = mask_type;
    // ALiBi: one slope per head shared by the batches (stride_bias 0), distinct and up to 1 so that the bias moves
    // the scores of 1000s of keys apart; soft-cap: on both calls
    std::vector<float> slopes(h);
    for (int hh = 0; hh < h; ++hh)
        slopes[hh] = std::ldexp(1.f, -(hh % 8)) * (1.f + 0.1f * (hh / 8));
    float* dslopes = alibi ? upload(slopes) : nullptr;
    a.logits_soft_cap = softcap;
    if (alibi)
        a.bias_type = 2, a.bias_ptr = dslopes, a.stride_bias = 0;
    const float t1 = aiter::mha_fwd(a, ck_tile::stream_config{});
    const std::string ref_kernel = t1 >= 0 ? aiter::mha_get_last_kernel_name() : "";

    aiter::mha_fwd_splitkv_args s{};
    s.q_ptr = dq, s.k_ptr = dk, s.v_ptr = dv, s.o_ptr = o2, s.lse_ptr = l2, s.lse_acc_ptr = lacc, s.o_acc_ptr = oacc;
    s.seqlen_q = sq, s.seqlen_k = sk, s.batch = b, s.max_seqlen_q = sq, s.hdim_q = s.hdim_v = d;
    s.nhead_q = h, s.nhead_k = hk, s.num_splits = splits, s.scale_s = a.scale_s;
    s.stride_q = s.stride_o = h * d, s.stride_k = s.stride_v = hk * d;
    s.nhead_stride_q = s.nhead_stride_o = s.nhead_stride_k = s.nhead_stride_v = d;
    s.batch_stride_q = s.batch_stride_o = sq * h * d, s.batch_stride_k = s.batch_stride_v = sk * hk * d;
    s.nhead_stride_lse = tq, s.batch_stride_lse = sq; // the reference's [h, total_q] layout
    s.stride_o_acc = d, s.nhead_stride_o_acc = sq * d, s.batch_stride_o_acc = h * sq * d;
    s.split_stride_o_acc = b * h * sq * d;
    s.nhead_stride_lse_acc = sq, s.batch_stride_lse_acc = h * sq, s.split_stride_lse_acc = b * h * sq;
    s.window_size_left = wl, s.window_size_right = wr, s.mask_type = mask_type;
    s.logits_soft_cap = softcap;
    if (alibi)
        s.bias_ptr = dslopes, s.stride_bias = 0;
    const float t2 = aiter::mha_fwd_splitkv(s, ck_tile::stream_config{}, "bf16", false,
                                            mask_type == 0   ? mask_enum::no_mask
                                            : mask_type == 1 ? mask_enum::mask_top_left
                                                             : mask_enum::mask_bottom_right,
                                            alibi ? bias_enum::alibi : bias_enum::no_bias, true);
    const std::string kernel = t2 >= 0 ? aiter::mha_get_last_kernel_name() : "";
    CHECK(cudaDeviceSynchronize());
    bool ok = t1 >= 0 && t2 >= 0;
    if (!ok)
        std::printf("%s FAIL: %s\n", name, aiter::mha_get_last_error());
    else if (ref_kernel.find("splitkv") != std::string::npos)
    {
        std::printf("%s FAIL: the reference ran the split-KV kernel %s\n", name, ref_kernel.c_str());
        ok = false;
    }
    else
        ok = compare((std::string(name) + " (" + kernel + ", " + std::to_string(ns) + " splits)").c_str(),
                     download(o1, on), download(o2, on), download(l1, size_t(h) * tq), download(l2, size_t(h) * tq));
    for (void* x : {(void*)dq, (void*)dk, (void*)dv, (void*)dkx, (void*)dvx, (void*)dqs, (void*)dks, (void*)o1,
                    (void*)o2, (void*)l1, (void*)l2, (void*)lacc, (void*)oacc, (void*)dslopes})
        cudaFree(x);
    return ok;
}

// Batch-mode mha_batch_prefill (Q / O [b, sq, h, d], 8 query heads on 2 KV heads, d128, bottom-right causal with
// a left window): batch i's page table holds table_keys[i] keys and seqlen_k = cap bounds them (masks, bias and
// rand_val are sized by seqlen_k, so the kernels clamp each count to it), against mha_fwd in group mode on the first
// min(table_keys[i], cap) keys, copied out to every query head. Keys past cap are random data, so reading them
// shows. null_last: no kv_last_page_lens (allowed for pages of one key).
bool prefill_batch_case(const char* name, std::vector<int> table_keys, int cap, int sq, int page, bool null_last,
                        int wl, uint32_t seed)
{
    std::mt19937 g(seed);
    const int b = int(table_keys.size()), h = 8, hk = 2, d = 128, tq = b * sq, ratio = h / hk;
    std::vector<int> qs(b + 1, 0), ks(b + 1, 0), indptr(b + 1, 0), last(b);
    for (int i = 0; i < b; ++i)
    {
        const int n = (table_keys[i] + page - 1) / page; // table_keys[i] >= 1
        qs[i + 1] = qs[i] + sq, ks[i + 1] = ks[i] + std::min(table_keys[i], cap);
        indptr[i + 1] = indptr[i] + n, last[i] = table_keys[i] - (n - 1) * page;
    }
    const int tk = ks[b], pool = indptr[b] + 2;
    std::vector<int> ids(pool);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    ids.resize(indptr[b]);
    const size_t row = size_t(hk) * d, page_elems = size_t(page) * row;
    const auto q = random_bf16(size_t(tq) * h * d, g), kc = random_bf16(pool * page_elems, g),
               vc = random_bf16(pool * page_elems, g);
    std::vector<bf16> kx(size_t(std::max(tk, 1)) * h * d), vx(kx.size());
    for (int i = 0; i < b; ++i)
        for (int j = 0; j < ks[i + 1] - ks[i]; ++j)
            for (int hh = 0; hh < h; ++hh)
            {
                const size_t src = size_t(ids[indptr[i] + j / page]) * page_elems + (j % page) * row + hh / ratio * d;
                std::copy_n(kc.begin() + src, d, kx.begin() + (size_t(ks[i] + j) * h + hh) * d);
                std::copy_n(vc.begin() + src, d, vx.begin() + (size_t(ks[i] + j) * h + hh) * d);
            }
    bf16 *dq = upload(q), *dk = upload(kx), *dv = upload(vx), *dkc = upload(kc), *dvc = upload(vc);
    int *dqs = upload(qs), *dks = upload(ks), *dind = upload(indptr), *dids = upload(ids), *dlast = upload(last);
    const size_t on = size_t(tq) * h * d;
    bf16 *o1 = nullptr, *o2 = nullptr;
    float *l1 = nullptr, *l2 = nullptr;
    CHECK(cudaMalloc(&o1, on * 2));
    CHECK(cudaMalloc(&o2, on * 2));
    CHECK(cudaMalloc(&l1, size_t(h) * tq * 4));
    CHECK(cudaMalloc(&l2, size_t(h) * tq * 4));
    CHECK(cudaMemset(o2, 0xFF, on * 2));
    CHECK(cudaMemset(l2, 0xFF, size_t(h) * tq * 4));

    aiter::mha_fwd_args a = mha_reference_args(dq, dk, dv, o1, l1, dqs, dks, b, sq, h, d, tq);
    a.window_size_left = wl, a.window_size_right = 0, a.mask_type = 2;
    const float t1 = aiter::mha_fwd(a, ck_tile::stream_config{});
    const std::string err1 = t1 < 0 ? aiter::mha_get_last_error() : "";

    aiter::mha_batch_prefill_args p{};
    p.q_ptr = dq, p.k_ptr = dkc, p.v_ptr = dvc, p.o_ptr = o2, p.lse_ptr = l2;
    p.seqlen_q = sq, p.seqlen_k = cap, p.batch = b, p.max_seqlen_q = sq, p.hdim_q = p.hdim_v = d;
    p.nhead_q = h, p.nhead_k = hk;
    p.num_total_pages = pool, p.page_block_size = page, p.kv_indptr = dind, p.kv_page_indices = dids;
    p.kv_last_page_lens = null_last ? nullptr : dlast;
    p.scale_s = a.scale_s;
    p.stride_q = p.stride_o = h * d, p.nhead_stride_q = p.nhead_stride_o = d, p.batch_stride_q = p.batch_stride_o =
                                                                                  sq * h * d;
    p.stride_k = p.stride_v = hk * d, p.nhead_stride_k = p.nhead_stride_v = d;
    p.batch_stride_k = p.batch_stride_v = int(page_elems);
    p.nhead_stride_lse = sq, p.batch_stride_lse = h * sq; // [b, h, sq]
    p.window_size_left = wl, p.window_size_right = 0, p.mask_type = 2;
    p.drop_seed_offset = a.drop_seed_offset;
    const float t2 = aiter::mha_batch_prefill(p, ck_tile::stream_config{}, "bf16", false, mask_enum::mask_bottom_right,
                                              bias_enum::no_bias, true, quant_scale_enum::no_scale, false);
    CHECK(cudaDeviceSynchronize());
    bool ok = t1 >= 0 && t2 >= 0;
    if (!ok)
        std::printf("%s FAIL: %s\n", name, t1 < 0 ? ("mha_fwd (the reference): " + err1).c_str()
                                                  : aiter::mha_get_last_error());
    else
    {
        // LSE [b, h, sq] -> the reference's [h, total_q]
        const std::vector<float> lb = download(l2, size_t(h) * tq);
        std::vector<float> lg(lb.size());
        for (int i = 0; i < b; ++i)
            for (int hh = 0; hh < h; ++hh)
                for (int r = 0; r < sq; ++r)
                    lg[size_t(hh) * tq + i * sq + r] = lb[(size_t(i) * h + hh) * sq + r];
        ok = compare(name, download(o1, on), download(o2, on), download(l1, size_t(h) * tq), lg);
    }
    for (void* x : {(void*)dq, (void*)dk, (void*)dv, (void*)dkc, (void*)dvc, (void*)dqs, (void*)dks, (void*)dind,
                    (void*)dids, (void*)dlast, (void*)o1, (void*)o2, (void*)l1, (void*)l2})
        cudaFree(x);
    return ok;
}

// Two NaN-poisoned outputs of on bf16 O elements and ln fp32 LSE entries each (the reference's and the call's).
void alloc_poisoned(size_t on, size_t ln, bf16*& o1, bf16*& o2, float*& l1, float*& l2)
{
    CHECK(cudaMalloc(&o1, on * 2));
    CHECK(cudaMalloc(&o2, on * 2));
    CHECK(cudaMalloc(&l1, ln * 4));
    CHECK(cudaMalloc(&l2, ln * 4));
    for (void* x : {(void*)o1, (void*)o2})
        CHECK(cudaMemset(x, 0xFF, on * 2));
    for (void* x : {(void*)l1, (void*)l2})
        CHECK(cudaMemset(x, 0xFF, ln * 4));
}

// mha_fwd(a), and with MHA_REQUIRE_ASM=1 (a build with the asm instances, on sm_90) a use_asm_v3 call must not have
// fallen back to ck. False (with the reason printed for the latter) when either fails.
bool run_fwd_asm_checked(const char* name, const aiter::mha_fwd_args& a)
{
    if (aiter::mha_fwd(a, ck_tile::stream_config{}) < 0)
        return false;
    const char* req = std::getenv("MHA_REQUIRE_ASM");
    if (a.use_asm_v3 && req && std::string(req) == "1" &&
        std::string(aiter::mha_get_last_kernel_name()).find("_asm_v3_") == std::string::npos)
    {
        std::printf("%s FAIL: ran %s, not an asm instance\n", name, aiter::mha_get_last_kernel_name());
        return false;
    }
    return true;
}

// Rows that no call may write: the elements of O row `o` (d values) and LSE entry `l` of both outputs that lost their
// poison (all-ones bits) are counted, then all are zeroed for compare(), which treats NaN as an error.
size_t poison_lost(std::vector<bf16>& oa, std::vector<bf16>& ob, std::vector<float>& la, std::vector<float>& lb,
                   size_t l, size_t o, int d)
{
    size_t touched = 0;
    uint32_t wa, wb;
    std::memcpy(&wa, &la[l], 4), std::memcpy(&wb, &lb[l], 4);
    touched += wa != 0xFFFFFFFFu || wb != 0xFFFFFFFFu;
    la[l] = lb[l] = 0.f;
    for (int c = 0; c < d; ++c)
    {
        uint16_t xa, xb;
        std::memcpy(&xa, &oa[o + c], 2), std::memcpy(&xb, &ob[o + c], 2);
        touched += xa != 0xFFFFu || xb != 0xFFFFu;
        oa[o + c] = ob[o + c] = __float2bfloat16(0.f);
    }
    return touched;
}

// Group mode with logical lengths: cu_seqlen_q / cu_seqlen_k (cumulative logical lengths) inside longer physical
// segments (seqstart_q / seqstart_k) whose padding rows of q, k and v hold NaN, against one batch-mode call per
// sequence over exactly its rows. Padding rows of O and LSE must keep their poison.
bool group_logical_case(const char* name, std::vector<int> lq, std::vector<int> lk, std::vector<int> pad_q,
                        std::vector<int> pad_k, bool causal, uint32_t seed, bool use_asm_v3)
{
    const int b = int(lq.size()), h = 8, hk = 2, d = 128;
    std::mt19937 g(seed);
    std::vector<int> sq(b + 1, 0), sk(b + 1, 0), cq(b + 1, 0), ck(b + 1, 0);
    for (int i = 0; i < b; ++i)
    {
        sq[i + 1] = sq[i] + lq[i] + pad_q[i], sk[i + 1] = sk[i] + lk[i] + pad_k[i];
        cq[i + 1] = cq[i] + lq[i], ck[i + 1] = ck[i] + lk[i];
    }
    const int tq = sq[b], tk = sk[b], max_q = *std::max_element(lq.begin(), lq.end());
    auto q = random_bf16(size_t(tq) * h * d, g), k = random_bf16(size_t(tk) * hk * d, g),
         v = random_bf16(size_t(tk) * hk * d, g);
    const bf16 nan = __float2bfloat16(std::nanf(""));
    for (int i = 0; i < b; ++i)
    {
        std::fill(q.begin() + size_t(sq[i] + lq[i]) * h * d, q.begin() + size_t(sq[i + 1]) * h * d, nan);
        std::fill(k.begin() + size_t(sk[i] + lk[i]) * hk * d, k.begin() + size_t(sk[i + 1]) * hk * d, nan);
        std::fill(v.begin() + size_t(sk[i] + lk[i]) * hk * d, v.begin() + size_t(sk[i + 1]) * hk * d, nan);
    }
    const size_t on = size_t(tq) * h * d, ln = size_t(h) * tq;
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v), *o1 = nullptr, *o2 = nullptr;
    int *dsq = upload(sq), *dsk = upload(sk), *dcq = upload(cq), *dck = upload(ck);
    float *l1 = nullptr, *l2 = nullptr;
    alloc_poisoned(on, ln, o1, o2, l1, l2);

    aiter::mha_fwd_args a{};
    a.data_type = "bf16", a.is_group_mode = true, a.has_lse = true;
    a.q_ptr = dq, a.k_ptr = dk, a.v_ptr = dv, a.o_ptr = o2, a.lse_ptr = l2;
    a.seqstart_q_ptr = dsq, a.seqstart_k_ptr = dsk, a.cu_seqlen_q_ptr = dcq, a.cu_seqlen_k_ptr = dck;
    a.batch = b, a.max_seqlen_q = max_q, a.hdim_q = a.hdim_v = d, a.nhead_q = h, a.nhead_k = hk;
    a.scale_s = 1.f / std::sqrt(float(d));
    a.stride_q = a.stride_o = h * d, a.stride_k = a.stride_v = hk * d;
    a.nhead_stride_q = a.nhead_stride_o = a.nhead_stride_k = a.nhead_stride_v = d;
    a.nhead_stride_lse = tq;
    a.window_size_left = -1, a.window_size_right = causal ? 0 : -1, a.mask_type = causal ? 2 : 0;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    a.use_asm_v3 = use_asm_v3;
    bool ok = run_fwd_asm_checked(name, a);
    for (int i = 0; ok && i < b; ++i)
    {
        if (lq[i] == 0)
            continue;
        aiter::mha_fwd_args r = a; // sequence i alone in batch mode, exactly its rows
        r.is_group_mode = false, r.seqstart_q_ptr = r.seqstart_k_ptr = r.cu_seqlen_q_ptr = r.cu_seqlen_k_ptr = nullptr;
        r.batch = 1, r.seqlen_q = r.max_seqlen_q = lq[i], r.seqlen_k = lk[i];
        r.q_ptr = dq + size_t(sq[i]) * h * d, r.o_ptr = o1 + size_t(sq[i]) * h * d;
        r.k_ptr = dk + size_t(sk[i]) * hk * d, r.v_ptr = dv + size_t(sk[i]) * hk * d;
        r.lse_ptr = l1 + sq[i];
        r.batch_stride_q = r.batch_stride_o = lq[i] * h * d, r.batch_stride_k = r.batch_stride_v = std::max(lk[i], 1) * hk * d;
        r.batch_stride_lse = h * tq;
        ok = aiter::mha_fwd(r, ck_tile::stream_config{}) >= 0;
    }
    CHECK(cudaDeviceSynchronize());
    if (!ok)
        std::printf("%s FAIL: %s\n", name, aiter::mha_get_last_error());
    else
    {
        // padding rows (and the rows of sequences without queries): both buffers keep the poison; compared as bits,
        // then zeroed for compare(), which treats NaN as an error
        auto oa = download(o1, on), ob = download(o2, on);
        auto la = download(l1, ln), lb = download(l2, ln);
        size_t touched = 0;
        for (int i = 0; i < b; ++i)
            for (int row = sq[i] + lq[i]; row < sq[i + 1]; ++row)
                for (int hh = 0; hh < h; ++hh)
                    touched += poison_lost(oa, ob, la, lb, size_t(hh) * tq + row, (size_t(row) * h + hh) * d, d);
        if (touched)
            std::printf("%s FAIL: %zu padded O / LSE elements written\n", name, touched);
        ok = compare(name, oa, ob, la, lb) && touched == 0;
    }
    for (void* x : {(void*)dq, (void*)dk, (void*)dv, (void*)o1, (void*)o2, (void*)l1, (void*)l2, (void*)dsq,
                    (void*)dsk, (void*)dcq, (void*)dck})
        cudaFree(x);
    return ok;
}

// Batch-mode padding: mha_fwd over [b, sq_pad] queries and [b, sk_pad] keys with per-batch lengths from
// cu_seqlen_q / cu_seqlen_k (differences; lengths above the padded ones clamp to them) vs one batch-mode call per
// batch over exactly its rows. Rows past a batch's length must keep the poison in O and LSE. nan_pad: the padded
// rows of q, k and v hold NaN, which must not reach any output row (a key block that runs past a batch's length must
// not feed them to the P V product).
bool padding_case(const char* name, std::vector<int> lq, std::vector<int> lk, int sq_pad, int sk_pad, bool causal,
                  uint32_t seed, bool use_asm_v3 = false, bool nan_pad = false)
{
    const int b = int(lq.size()), h = 8, hk = 2, d = 128;
    std::mt19937 g(seed);
    std::vector<int> cq(b + 1, 0), ck(b + 1, 0);
    for (int i = 0; i < b; ++i)
        cq[i + 1] = cq[i] + lq[i], ck[i + 1] = ck[i] + lk[i];
    const size_t on = size_t(b) * sq_pad * h * d, ln = size_t(b) * h * sq_pad;
    auto q = random_bf16(on, g), k = random_bf16(size_t(b) * sk_pad * hk * d, g),
         v = random_bf16(size_t(b) * sk_pad * hk * d, g);
    if (nan_pad)
        for (int i = 0; i < b; ++i)
        {
            const bf16 nan = __float2bfloat16(std::nanf(""));
            for (size_t r = std::min(lq[i], sq_pad); r < size_t(sq_pad); ++r)
                std::fill_n(q.begin() + (size_t(i) * sq_pad + r) * h * d, size_t(h) * d, nan);
            for (size_t r = std::min(lk[i], sk_pad); r < size_t(sk_pad); ++r)
            {
                std::fill_n(k.begin() + (size_t(i) * sk_pad + r) * hk * d, size_t(hk) * d, nan);
                std::fill_n(v.begin() + (size_t(i) * sk_pad + r) * hk * d, size_t(hk) * d, nan);
            }
        }
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v), *o1 = nullptr, *o2 = nullptr;
    int *dcq = upload(cq), *dck = upload(ck);
    float *l1 = nullptr, *l2 = nullptr;
    alloc_poisoned(on, ln, o1, o2, l1, l2);

    aiter::mha_fwd_args a{};
    a.data_type = "bf16", a.is_group_mode = false, a.has_lse = true;
    a.q_ptr = dq, a.k_ptr = dk, a.v_ptr = dv, a.o_ptr = o2, a.lse_ptr = l2;
    a.cu_seqlen_q_ptr = dcq, a.cu_seqlen_k_ptr = dck;
    a.seqlen_q = a.max_seqlen_q = sq_pad, a.seqlen_k = sk_pad, a.batch = b;
    a.hdim_q = a.hdim_v = d, a.nhead_q = h, a.nhead_k = hk, a.scale_s = 1.f / std::sqrt(float(d));
    a.stride_q = a.stride_o = h * d, a.stride_k = a.stride_v = hk * d;
    a.nhead_stride_q = a.nhead_stride_o = a.nhead_stride_k = a.nhead_stride_v = d;
    a.batch_stride_q = a.batch_stride_o = sq_pad * h * d, a.batch_stride_k = a.batch_stride_v = sk_pad * hk * d;
    a.nhead_stride_lse = sq_pad, a.batch_stride_lse = h * sq_pad;
    a.window_size_left = -1, a.window_size_right = causal ? 0 : -1, a.mask_type = causal ? 2 : 0;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    a.use_asm_v3 = use_asm_v3; // the asm (wgmma) family where it covers the call, else ck
    bool ok = run_fwd_asm_checked(name, a);
    for (int i = 0; ok && i < b; ++i)
    {
        aiter::mha_fwd_args r = a; // batch i alone, exactly its (clamped) lengths
        r.cu_seqlen_q_ptr = r.cu_seqlen_k_ptr = nullptr;
        r.batch = 1, r.seqlen_q = r.max_seqlen_q = std::min(lq[i], sq_pad), r.seqlen_k = std::min(lk[i], sk_pad);
        r.q_ptr = dq + size_t(i) * a.batch_stride_q, r.o_ptr = o1 + size_t(i) * a.batch_stride_o;
        r.k_ptr = dk + size_t(i) * a.batch_stride_k, r.v_ptr = dv + size_t(i) * a.batch_stride_v;
        r.lse_ptr = l1 + size_t(i) * a.batch_stride_lse;
        ok = aiter::mha_fwd(r, ck_tile::stream_config{}) >= 0;
    }
    CHECK(cudaDeviceSynchronize());
    if (!ok)
    {
        std::printf("%s FAIL: %s\n", name, aiter::mha_get_last_error());
        ok = false;
    }
    else
    {
        // rows past a batch's length: both buffers must still hold the poison (compare() treats NaN as an error,
        // so they are compared as bits here and replaced by zeros before it)
        auto oa = download(o1, on), ob = download(o2, on);
        auto la = download(l1, ln), lb = download(l2, ln);
        size_t touched = 0;
        for (int i = 0; i < b; ++i)
            for (int r = std::min(lq[i], sq_pad); r < sq_pad; ++r)
                for (int hh = 0; hh < h; ++hh)
                    touched += poison_lost(oa, ob, la, lb, (size_t(i) * h + hh) * sq_pad + r,
                                           ((size_t(i) * sq_pad + r) * h + hh) * d, d);
        if (touched)
            std::printf("%s FAIL: %zu padded O / LSE elements written\n", name, touched);
        ok = compare(name, oa, ob, la, lb) && touched == 0;
    }
    for (void* x :
         {(void*)dq, (void*)dk, (void*)dv, (void*)dcq, (void*)dck, (void*)o1, (void*)o2, (void*)l1, (void*)l2})
        cudaFree(x);
    return ok;
}

// Dense bshd decode (one query, 32 q / 8 KV heads, d128) with [splits, b, h, d] partials.
aiter::mha_fwd_splitkv_args decode_args(int b, int sk, int splits, const bf16* q, const bf16* k, const bf16* v, bf16* o,
                                        float* lse, float* lse_acc, float* o_acc, int d = 128)
{
    const int h = 32, hk = 8;
    aiter::mha_fwd_splitkv_args s{};
    s.q_ptr = q, s.k_ptr = k, s.v_ptr = v, s.o_ptr = o, s.lse_ptr = lse, s.lse_acc_ptr = lse_acc, s.o_acc_ptr = o_acc;
    s.seqlen_q = 1, s.seqlen_k = sk, s.batch = b, s.max_seqlen_q = 1, s.hdim_q = s.hdim_v = d;
    s.nhead_q = h, s.nhead_k = hk, s.num_splits = splits, s.scale_s = 1.f / std::sqrt(float(d));
    s.stride_q = s.stride_o = h * d, s.stride_k = s.stride_v = hk * d;
    s.nhead_stride_q = s.nhead_stride_o = s.nhead_stride_k = s.nhead_stride_v = d;
    s.batch_stride_q = s.batch_stride_o = h * d, s.batch_stride_k = s.batch_stride_v = sk * hk * d;
    s.nhead_stride_lse = 1, s.batch_stride_lse = h;
    s.stride_o_acc = d, s.split_stride_o_acc = b * h * d, s.batch_stride_o_acc = h * d, s.nhead_stride_o_acc = d;
    s.split_stride_lse_acc = b * h, s.batch_stride_lse_acc = h, s.nhead_stride_lse_acc = 1;
    s.window_size_left = s.window_size_right = -1;
    return s;
}

float decode_call(const aiter::mha_fwd_splitkv_args& s, cudaStream_t st)
{
    ck_tile::stream_config sc{};
    sc.stream_id_ = st;
    return aiter::mha_fwd_splitkv(s, sc, "bf16", false, mask_enum::no_mask, bias_enum::no_bias, true);
}

// A decode step captured into a CUDA graph (as serving engines run it) on a stream of its own must replay bit for bit
// what the eager call computed. On sm_90, 8 splits merge inside thread-block clusters, 16 at b=3 inside the
// cooperatively launched split grid, 16 at b=8 (more CTAs than fit at once) in the combine kernel launched as a
// programmatic dependent, and one split over 157 key blocks at b=4 launches placement clusters. With
// capture_first, the capture comes before the eager call: splits = 0 at d64 then makes the split heuristic's first
// cluster-occupancy query (csrc/api/decode_occupancy.cu) inside a global-mode capture, which must not invalidate it.
bool graph_case(int b, int splits, int d = 128, bool capture_first = false)
{
    const int h = 32, hk = 8, sk = 5000;
    const int acc_splits = splits > 0 ? splits : 128; // room for any count without asking the heuristic first
    std::mt19937 g(11);
    auto q = random_bf16(size_t(b) * h * d, g), k = random_bf16(size_t(b) * sk * hk * d, g),
         v = random_bf16(size_t(b) * sk * hk * d, g);
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v);
    DecodeOut out(b, h, d, acc_splits);
    bf16 *o1 = out.o1, *o2 = out.o2;
    float *l1 = out.l1, *l2 = out.l2;
    aiter::mha_fwd_splitkv_args s = decode_args(b, sk, splits, dq, dk, dv, o1, l1, out.lacc, out.oacc, d);
    auto call = [&](cudaStream_t st) { return decode_call(s, st); };

    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    auto capture = [&]() {
        s.o_ptr = o2, s.lse_ptr = l2;
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        const float t = call(st);
        const cudaError_t end = cudaStreamEndCapture(st, &graph);
        s.o_ptr = o1, s.lse_ptr = l1;
        if (t < 0 || end != cudaSuccess)
        {
            std::printf("graph FAIL (capture): %s / %s\n", aiter::mha_get_last_error(), cudaGetErrorString(end));
            return false;
        }
        return true;
    };
    if (capture_first && !capture())
        return false;
    if (call(nullptr) < 0)
    {
        std::printf("graph FAIL (eager): %s\n", aiter::mha_get_last_error());
        return false;
    }
    CHECK(cudaDeviceSynchronize());
    const auto o_eager = download(o1, size_t(b) * h * d);
    const auto l_eager = download(l1, b * h);
    if (!capture_first && !capture())
        return false;
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    bool ok = true;
    for (int rep = 0; rep < 3 && ok; ++rep)
    {
        CHECK(cudaMemsetAsync(o2, 0xff, size_t(b) * h * d * 2, st)); // NaN: every replay must write all of O
        CHECK(cudaMemsetAsync(l2, 0xff, b * h * 4, st));
        // and the partials: a merge that read them before the replay wrote them would show
        CHECK(cudaMemsetAsync(out.oacc, 0xff, size_t(acc_splits) * b * h * d * 4, st));
        CHECK(cudaMemsetAsync(out.lacc, 0xff, size_t(acc_splits) * b * h * 4, st));
        CHECK(cudaGraphLaunch(exec, st));
        CHECK(cudaStreamSynchronize(st));
        const auto o = download(o2, size_t(b) * h * d);
        const auto l = download(l2, b * h);
        ok = std::equal(o.begin(), o.end(), o_eager.begin(), [](bf16 x, bf16 y) {
                 return __bfloat16_as_ushort(x) == __bfloat16_as_ushort(y);
             }) && std::equal(l.begin(), l.end(), l_eager.begin(), [](float x, float y) {
                 return std::memcmp(&x, &y, 4) == 0;
             });
    }
    std::printf("graph (split-KV decode, b=%d, d%d, %d splits%s, 3 replays) bitwise %s\n", b, d, splits,
                capture_first ? ", captured first" : "", ok ? "ok" : "FAIL");
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(st));
    for (void* x : {(void*)dq, (void*)dk, (void*)dv})
        cudaFree(x);
    return ok;
}

// The same decode call repeated must give the same bits every time (a forward pass is deterministic: serving
// engines compare runs and replay graphs), at split counts of each merge: the warps of one CTA (2 to 6 at d128),
// a cluster (8), the split grid (16 at b=3).
bool determinism_case(int b, int d, int sk, int splits)
{
    const int h = 32, hk = 8, reps = 20;
    const int acc_splits = splits > 0 ? splits : 128;
    std::mt19937 g(31);
    auto q = random_bf16(size_t(b) * h * d, g), k = random_bf16(size_t(b) * sk * hk * d, g),
         v = random_bf16(size_t(b) * sk * hk * d, g);
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v);
    DecodeOut out(b, h, d, acc_splits);
    const aiter::mha_fwd_splitkv_args s = decode_args(b, sk, splits, dq, dk, dv, out.o1, out.l1, out.lacc, out.oacc, d);
    std::vector<bf16> first;
    std::vector<float> first_l;
    int differ = 0;
    bool ok = true;
    for (int r = 0; r < reps && ok; ++r)
    {
        CHECK(cudaMemset(out.o1, 0xff, size_t(b) * h * d * 2));
        if (decode_call(s, nullptr) < 0)
        {
            std::printf("determinism FAIL: %s\n", aiter::mha_get_last_error());
            ok = false;
            break;
        }
        CHECK(cudaDeviceSynchronize());
        auto o = download(out.o1, size_t(b) * h * d);
        auto l = download(out.l1, b * h);
        if (r == 0)
        {
            first = std::move(o), first_l = std::move(l);
            continue;
        }
        differ += std::memcmp(o.data(), first.data(), o.size() * sizeof(bf16)) != 0 ||
                  std::memcmp(l.data(), first_l.data(), l.size() * 4) != 0;
    }
    ok &= differ == 0;
    std::printf("determinism (split-KV decode, b=%d, d%d, %d keys, %d splits): %d of %d repeats differ %s\n", b, d,
                sk, splits, differ, reps - 1, ok ? "ok" : "FAIL");
    for (void* x : {(void*)dq, (void*)dk, (void*)dv})
        cudaFree(x);
    return ok;
}

// The host's share of a decode step: the split heuristic and the ring schedule read device facts on every call
// with num_splits = 0, and one of them (the memory clock) is not a cached attribute: queried per call it cost ~0.36 ms
// of host time per query on an H100 (eighteenth session), so a 30 us decode step was host-bound. 200 calls are
// enqueued back to back on a stream (no synchronisation inside the loop); the median host time per call must stay
// far below that (bound: 100 us; ~10-20 us expected).
bool host_overhead_case()
{
    const int b = 16, h = 32, hk = 8, d = 128, sk = 1024, calls = 200;
    std::mt19937 g(41);
    auto q = random_bf16(size_t(b) * h * d, g), k = random_bf16(size_t(b) * sk * hk * d, g),
         v = random_bf16(size_t(b) * sk * hk * d, g);
    bf16 *dq = upload(q), *dk = upload(k), *dv = upload(v);
    DecodeOut out(b, h, d, 128);
    const aiter::mha_fwd_splitkv_args s = decode_args(b, sk, 0, dq, dk, dv, out.o1, out.l1, out.lacc, out.oacc, d);
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    bool ok = decode_call(s, st) >= 0; // first call: one-time queries and attribute setting
    CHECK(cudaStreamSynchronize(st));
    std::vector<double> us;
    for (int i = 0; i < calls && ok; ++i)
    {
        const auto t0 = std::chrono::steady_clock::now();
        ok &= decode_call(s, st) >= 0;
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        if (i % 50 == 49) // keep the queue short
            CHECK(cudaStreamSynchronize(st));
    }
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaStreamDestroy(st));
    std::sort(us.begin(), us.end());
    const double median = us.empty() ? 0.0 : us[us.size() / 2];
    ok &= !us.empty() && median < 100.0;
    std::printf("host overhead (split-KV decode b=%d, %d keys, num_splits=0): median %.1f us per call, %zu calls %s\n",
                b, sk, median, us.size(), ok ? "ok" : "FAIL");
    for (void* x : {(void*)dq, (void*)dk, (void*)dv})
        cudaFree(x);
    return ok;
}

// Decode calls whose splits merge inside the split grid (b=1, 8k keys: 64 splits) run on two streams at once, each
// with partials of its own, 20 times each, under MHA_SPLITKV_MERGE=grid (a call that could not merge in the grid would
// fail): every result must equal what the same call wrote through the combine kernel (MHA_SPLITKV_MERGE=combine),
// within rounding (the two merges add the splits in different orders). The partials are NaN before every call, so a
// merge that read them before all splits were in would show. Then calls on 140 o_acc addresses: past the counter
// pool's 128 slots (csrc/api/merge_counters.cu) they take the combine kernel, with the same results, and a call under
// MHA_SPLITKV_MERGE=grid on a new address is refused with the reason.
bool concurrent_merge_case()
{
    const int b = 1, h = 32, hk = 8, d = 128, sk = 8192, splits = 64;
    const size_t o_elems = size_t(b) * h * d, acc_floats = size_t(splits) * b * h * d;
    std::mt19937 g(23);
    struct Problem
    {
        bf16 *q, *k, *v;
        std::vector<bf16> o_ref;
        std::vector<float> l_ref;
    } pr[2];
    for (auto& x : pr)
    {
        x.q = upload(random_bf16(size_t(b) * h * d, g));
        x.k = upload(random_bf16(size_t(b) * sk * hk * d, g));
        x.v = upload(random_bf16(size_t(b) * sk * hk * d, g));
    }
    DecodeOut out[2] = {DecodeOut(b, h, d, splits), DecodeOut(b, h, d, splits)};
    auto args = [&](int i, float* o_acc) {
        return decode_args(b, sk, splits, pr[i].q, pr[i].k, pr[i].v, out[i].o2, out[i].l2, out[i].lacc, o_acc);
    };
    auto poison = [&](int i, float* o_acc, cudaStream_t st) { // NaN partials and outputs
        CHECK(cudaMemsetAsync(o_acc, 0xff, acc_floats * 4, st));
        CHECK(cudaMemsetAsync(out[i].lacc, 0xff, size_t(splits) * b * h * 4, st));
        CHECK(cudaMemsetAsync(out[i].o2, 0xff, o_elems * 2, st));
        CHECK(cudaMemsetAsync(out[i].l2, 0xff, b * h * 4, st));
    };
    bool ok = true;
    setenv("MHA_SPLITKV_MERGE", "combine", 1);
    for (int i = 0; i < 2; ++i)
    {
        ok &= decode_call(args(i, out[i].oacc), nullptr) >= 0;
        CHECK(cudaDeviceSynchronize());
        pr[i].o_ref = download(out[i].o2, o_elems);
        pr[i].l_ref = download(out[i].l2, b * h);
    }
    setenv("MHA_SPLITKV_MERGE", "grid", 1);
    cudaStream_t st[2];
    for (auto& x : st)
        CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    for (int rep = 0; rep < 20 && ok; ++rep)
        for (int i = 0; i < 2 && ok; ++i)
        {
            poison(i, out[i].oacc, st[i]);
            if (decode_call(args(i, out[i].oacc), st[i]) < 0)
            {
                std::printf("in-grid merge FAIL: %s\n", aiter::mha_get_last_error());
                ok = false;
            }
        }
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 2 && ok; ++i)
        ok &= compare(i ? "in-grid merge, concurrent stream 2" : "in-grid merge, concurrent stream 1", pr[i].o_ref,
                      download(out[i].o2, o_elems), pr[i].l_ref, download(out[i].l2, b * h));
    for (auto& x : st)
        CHECK(cudaStreamDestroy(x));

    // 140 o_acc addresses inside one buffer, 1 MiB apart, on the legacy stream
    unsetenv("MHA_SPLITKV_MERGE");
    const int calls = 140;
    float* pool = nullptr;
    CHECK(cudaMalloc(&pool, (calls + 1) * acc_floats * 4));
    double worst = 0, worst_lse = 0;
    for (int c = 0; c < calls && ok; ++c)
    {
        poison(0, pool + c * acc_floats, nullptr);
        ok &= decode_call(args(0, pool + c * acc_floats), nullptr) >= 0;
        const auto o = download(out[0].o2, o_elems);
        const auto l = download(out[0].l2, b * h);
        for (size_t j = 0; j < o.size(); ++j)
            worst = worse(worst, std::fabs(__bfloat162float(o[j]) - __bfloat162float(pr[0].o_ref[j])));
        for (size_t j = 0; j < l.size(); ++j)
            worst_lse = worse(worst_lse, std::fabs(l[j] - pr[0].l_ref[j]));
    }
    double top = 0;
    for (const bf16& x : pr[0].o_ref)
        top = worse(top, std::fabs(__bfloat162float(x)));
    ok &= worst <= 1e-2 * top + 1e-4 && worst_lse <= 1e-3; // compare()'s bar; false for NaN
    std::printf("in-grid merge, %d o_acc addresses max_err=%.3g lse_err=%.3g %s\n", calls, worst, worst_lse,
                ok ? "ok" : "FAIL");
    setenv("MHA_SPLITKV_MERGE", "grid", 1);
    const bool refused = decode_call(args(0, pool + calls * acc_floats), nullptr) < 0 &&
                         std::strstr(aiter::mha_get_last_error(), "no arrival counters left") != nullptr;
    unsetenv("MHA_SPLITKV_MERGE");
    std::printf("in-grid merge, slots exhausted: MHA_SPLITKV_MERGE=grid %s\n", refused ? "refused ok" : "FAIL");
    ok &= refused;
    cudaFree(pool);
    for (auto& x : pr)
        for (void* p : {(void*)x.q, (void*)x.k, (void*)x.v})
            cudaFree(p);
    return ok;
}

// One batch-mode mha_fwd call (1 x 300 queries and keys, 4 heads, d128, no mask): the per-head prefill kernel, whose
// 64 KB of dynamic shared memory need the attribute set in the current context. Its O, or nothing when it failed.
std::vector<bf16> prefill_once()
{
    const int h = 4, s = 300, d = 128;
    const size_t n = size_t(s) * h * d;
    std::mt19937 g(41);
    bf16 *dq = upload(random_bf16(n, g)), *dk = upload(random_bf16(n, g)), *dv = upload(random_bf16(n, g));
    bf16* o = nullptr;
    CHECK(cudaMalloc(&o, n * 2));
    CHECK(cudaMemset(o, 0xFF, n * 2));
    aiter::mha_fwd_args a{};
    a.data_type = "bf16", a.q_ptr = dq, a.k_ptr = dk, a.v_ptr = dv, a.o_ptr = o;
    a.seqlen_q = a.seqlen_k = a.max_seqlen_q = s, a.batch = 1, a.hdim_q = a.hdim_v = d, a.nhead_q = a.nhead_k = h;
    a.scale_s = 1.f / std::sqrt(float(d));
    a.stride_q = a.stride_k = a.stride_v = a.stride_o = h * d;
    a.nhead_stride_q = a.nhead_stride_k = a.nhead_stride_v = a.nhead_stride_o = d;
    a.batch_stride_q = a.batch_stride_k = a.batch_stride_v = a.batch_stride_o = int(n);
    a.window_size_left = a.window_size_right = -1;
    a.drop_seed_offset = std::pair<uint64_t, uint64_t>{0, 0};
    const bool ran = aiter::mha_fwd(a, ck_tile::stream_config{}) >= 0;
    if (!ran)
        std::printf("prefill mha_fwd: %s\n", aiter::mha_get_last_error());
    CHECK(cudaDeviceSynchronize());
    std::vector<bf16> out = ran ? download(o, n) : std::vector<bf16>{};
    for (void* x : {(void*)dq, (void*)dk, (void*)dv, (void*)o})
        cudaFree(x);
    return out;
}

// The driver function `name` at ABI `version`, or nullptr (the check links the runtime only).
template <typename Fn>
Fn driver_fn(const char* name, int version)
{
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
    {
        (void)cudaGetLastError();
        return nullptr;
    }
    return reinterpret_cast<Fn>(fn);
}

// Two CUDA contexts on one device, each with the library's module loaded (and its own merge counters): the primary
// context runs two in-grid merges on two streams at once (64k keys: each runs longer than the host takes to issue the
// next calls) while a second context (cuCtxCreate) runs its own in between, 10 rounds, under MHA_SPLITKV_MERGE=grid.
// Every result must equal the same call through the combine kernel. (The counter slots used to be kept per device, so
// a call from the other context reset them and the primary context's second call took the slot its first call was
// still counting on; the old code passed this case all the same on an H200, likely because cooperative grids do not
// run at the same time, so it is a check of the two-context path, not a reproduction of that hazard.)
bool two_contexts_case()
{
    const auto ctx_create = driver_fn<PFN_cuCtxCreate_v3020>("cuCtxCreate", 3020);
    const auto ctx_push   = driver_fn<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent", 4000);
    const auto ctx_pop    = driver_fn<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent", 4000);
    const auto ctx_del    = driver_fn<PFN_cuCtxDestroy_v4000>("cuCtxDestroy", 4000);
    const auto dev_get    = driver_fn<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000);
    int ordinal = 0;
    CHECK(cudaGetDevice(&ordinal));
    CUdevice dev{};
    CUcontext other = nullptr, popped = nullptr;
    if (!ctx_create || !ctx_push || !ctx_pop || !ctx_del || !dev_get || dev_get(&dev, ordinal) != CUDA_SUCCESS ||
        ctx_create(&other, 0, dev) != CUDA_SUCCESS)
    {
        std::printf("in-grid merge, two contexts FAIL: no second context (driver entry points)\n");
        return false;
    }
    ctx_pop(&popped); // cuCtxCreate made it current: back to the primary context

    const int b = 1, h = 32, hk = 8, d = 128, splits = 64;
    const size_t o_elems = size_t(b) * h * d, acc_floats = size_t(splits) * b * h * d;
    struct Side // a problem and its outputs, allocated in the context that runs it
    {
        int sk = 0;
        bf16 *q = nullptr, *k = nullptr, *v = nullptr;
        DecodeOut* out[2] = {nullptr, nullptr};
        cudaStream_t st[2] = {nullptr, nullptr};
        std::vector<bf16> o_ref;
        std::vector<float> l_ref;
    } side[2];
    auto make = [&](Side& x, int sk, uint32_t seed) {
        std::mt19937 g(seed);
        x.sk = sk;
        x.q  = upload(random_bf16(size_t(b) * h * d, g));
        x.k  = upload(random_bf16(size_t(b) * sk * hk * d, g));
        x.v  = upload(random_bf16(size_t(b) * sk * hk * d, g));
        for (int i = 0; i < 2; ++i)
        {
            x.out[i] = new DecodeOut(b, h, d, splits);
            CHECK(cudaStreamCreateWithFlags(&x.st[i], cudaStreamNonBlocking));
        }
    };
    auto args = [&](Side& x, int i) {
        return decode_args(b, x.sk, splits, x.q, x.k, x.v, x.out[i]->o2, x.out[i]->l2, x.out[i]->lacc,
                           x.out[i]->oacc);
    };
    auto call = [&](Side& x, int i) {
        DecodeOut& o = *x.out[i];
        CHECK(cudaMemsetAsync(o.oacc, 0xff, acc_floats * 4, x.st[i]));
        CHECK(cudaMemsetAsync(o.lacc, 0xff, size_t(splits) * b * h * 4, x.st[i]));
        CHECK(cudaMemsetAsync(o.o2, 0xff, o_elems * 2, x.st[i]));
        CHECK(cudaMemsetAsync(o.l2, 0xff, b * h * 4, x.st[i]));
        const bool ran = decode_call(args(x, i), x.st[i]) >= 0;
        if (!ran)
            std::printf("in-grid merge, two contexts FAIL: %s\n", aiter::mha_get_last_error());
        return ran;
    };
    auto reference = [&](Side& x) {
        setenv("MHA_SPLITKV_MERGE", "combine", 1);
        const bool ran = decode_call(args(x, 0), nullptr) >= 0;
        CHECK(cudaDeviceSynchronize());
        x.o_ref = download(x.out[0]->o2, o_elems), x.l_ref = download(x.out[0]->l2, b * h);
        return ran;
    };
    bool ok = true;
    make(side[0], 65536, 41);
    ok &= reference(side[0]);
    ctx_push(other);
    make(side[1], 8192, 43);
    ok &= reference(side[1]);
    ctx_pop(&popped);
    setenv("MHA_SPLITKV_MERGE", "grid", 1);
    for (int rep = 0; rep < 10 && ok; ++rep)
    {
        ok &= call(side[0], 0);
        ctx_push(other);
        ok &= call(side[1], 0);
        ctx_pop(&popped);
        ok &= call(side[0], 1);
    }
    unsetenv("MHA_SPLITKV_MERGE");
    CHECK(cudaDeviceSynchronize());
    ctx_push(other);
    CHECK(cudaDeviceSynchronize());
    ctx_pop(&popped);
    for (int c = 0; c < 2 && ok; ++c)
    {
        if (c == 1)
            ctx_push(other);
        for (int i = 0; i < (c == 0 ? 2 : 1) && ok; ++i)
        {
            const std::string name = std::string("in-grid merge, two contexts: ") + (c ? "second context" : "primary") +
                                     (c ? "" : i ? ", stream 2" : ", stream 1");
            ok &= compare(name.c_str(), side[c].o_ref, download(side[c].out[i]->o2, o_elems), side[c].l_ref,
                          download(side[c].out[i]->l2, b * h));
        }
        if (c == 1)
            ctx_pop(&popped);
    }
    for (int c = 1; c >= 0; --c) // the second context's memory is freed while it is current
    {
        if (c == 1)
            ctx_push(other);
        for (int i = 0; i < 2; ++i)
        {
            delete side[c].out[i];
            cudaStreamDestroy(side[c].st[i]);
        }
        for (void* x : {(void*)side[c].q, (void*)side[c].k, (void*)side[c].v})
            cudaFree(x);
        if (c == 1)
            ctx_pop(&popped);
    }
    ctx_del(other);
    return ok;
}

// After a cudaDeviceReset, the library's per-context state must follow the new context: kernel attributes (set once
// per context, func_attr.h: a prefill call before the reset and the same call after it must both run and agree bit
// for bit), the in-grid merge's arrival counters (the module is loaded again, maybe elsewhere; before the reset
// concurrent_merge_case used up every slot, so a grid merge here also shows that the slots were handed back) and
// the L2 sweep buffer of timed passes (stream_config::flush_cache_). A b=1 8k decode merged in the grid and a timed
// pass with the sweep must both match the combine kernel's result of the same call.
bool reset_case()
{
    const std::vector<bf16> before = prefill_once();
    CHECK(cudaDeviceReset());
    const std::vector<bf16> after = prefill_once();
    const bool same = !before.empty() && after.size() == before.size() &&
                      std::memcmp(before.data(), after.data(), before.size() * sizeof(bf16)) == 0;
    std::printf("after cudaDeviceReset, prefill kernel (64 KB shared memory) %s\n",
                same ? "ok" : before.empty() ? "FAIL (before the reset)" : after.empty() ? "FAIL (did not run)"
                                                                                        : "FAIL (differs)");
    const int b = 1, h = 32, hk = 8, d = 128, sk = 8192, splits = 64;
    const size_t o_elems = size_t(b) * h * d;
    std::mt19937 g(31);
    bf16* dq = upload(random_bf16(size_t(b) * h * d, g));
    bf16* dk = upload(random_bf16(size_t(b) * sk * hk * d, g));
    bf16* dv = upload(random_bf16(size_t(b) * sk * hk * d, g));
    bool ok = true;
    {
        DecodeOut out(b, h, d, splits);
        const auto s1 = decode_args(b, sk, splits, dq, dk, dv, out.o1, out.l1, out.lacc, out.oacc);
        const auto s2 = decode_args(b, sk, splits, dq, dk, dv, out.o2, out.l2, out.lacc, out.oacc);
        setenv("MHA_SPLITKV_MERGE", "combine", 1);
        ok &= decode_call(s1, nullptr) >= 0;
        setenv("MHA_SPLITKV_MERGE", "grid", 1);
        CHECK(cudaMemset(out.o2, 0xff, o_elems * 2));
        CHECK(cudaMemset(out.l2, 0xff, b * h * 4));
        const bool merged = decode_call(s2, nullptr) >= 0;
        if (!merged)
            std::printf("after cudaDeviceReset, in-grid merge FAIL: %s\n", aiter::mha_get_last_error());
        ok &= merged;
        CHECK(cudaDeviceSynchronize());
        const auto o_ref = download(out.o1, o_elems);
        const auto l_ref = download(out.l1, b * h);
        if (ok)
            ok &= compare("after cudaDeviceReset, in-grid merge", o_ref, download(out.o2, o_elems), l_ref,
                          download(out.l2, b * h));
        unsetenv("MHA_SPLITKV_MERGE");
        ck_tile::stream_config sc{};
        sc.time_kernel_ = true, sc.flush_cache_ = true, sc.cold_niters_ = 0, sc.nrepeat_ = 2;
        CHECK(cudaMemset(out.o2, 0xff, o_elems * 2));
        CHECK(cudaMemset(out.l2, 0xff, b * h * 4));
        const float ms = aiter::mha_fwd_splitkv(s2, sc, "bf16", false, mask_enum::no_mask, bias_enum::no_bias, true);
        if (!(ms > 0.f))
            std::printf("after cudaDeviceReset, timed pass with the L2 sweep FAIL (%g): %s\n", ms,
                        aiter::mha_get_last_error());
        ok &= ms > 0.f;
        CHECK(cudaDeviceSynchronize());
        if (ms > 0.f)
            ok &= compare("after cudaDeviceReset, timed pass with the L2 sweep", o_ref, download(out.o2, o_elems),
                          l_ref, download(out.l2, b * h));
    }
    for (void* x : {(void*)dq, (void*)dk, (void*)dv})
        cudaFree(x);
    return ok && same;
}

// The split count of the nine-argument aiter::mha_fwd_splitkv_num_splits: never more than the six-argument form's
// (which sizes partial buffers for any call of the shape); a paged cache at head dims 64 and 96 keeps the general
// count, and so does dense d96 outside the band. On an sm_90 GPU under 4 TB/s of DRAM bandwidth (H100) with 132 SMs (csrc/api/mha_fwd.cpp):
// 96 decode tiles (b=12) take the lean rule's 3 splits at dense d128 / d256 and 3 over a paged d128 cache against the
// general rule's 5, and dense d64 fills every slot, 8 splits while 96 clusters of 8 fit at once (6 to 8 by the GPU's
// GPCs); 160 tiles (b=20) take the band's 2 at dense d64 / d128 and paged d128 against 3; 512 tiles (b=64) of 8192
// keys take 4 splits at dense d128 (four-warp tiles), 1 with 1024 keys (the lean rule) and paged d128 keeps 1. Past
// the decode branch the four-warp tiles replace the wave rule's 1 or 2 splits: b=128 (1024 tiles, its 2) and b=256
// (its 1) take 4, b=100 keeps its 6, and b=20000 its 1 (4 splits would pass the grid's 65535 batches x splits).
bool split_rule_case()
{
    auto n9 = [](int b, int d, bool paged) { return aiter::mha_fwd_splitkv_num_splits(b, 32, 8, 1, 8192, 0, d, d, paged); };
    const int bound = aiter::mha_fwd_splitkv_num_splits(12, 32, 8, 1, 8192);
    const int general = n9(12, 96, true), dense96 = n9(12, 96, false), dense = n9(12, 128, false);
    const int paged = n9(12, 128, true), d64 = n9(12, 64, false), paged64 = n9(12, 64, true), d256 = n9(12, 256, false);
    int dev = 0, major = 0, khz = 0, bits = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev));
    CHECK(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // b=20: 160 tiles, in the two-split band (more tiles than SMs, at most 4/3 of them) at d64; d128 takes 3 there
    // (three decode warps per SM), dense and paged
    const int bound20 = aiter::mha_fwd_splitkv_num_splits(20, 32, 8, 1, 8192);
    const int general20 = n9(20, 96, true), band64 = n9(20, 64, false), band128 = n9(20, 128, false);
    const int paged20 = n9(20, 64, true), paged128_20 = n9(20, 128, true);
    // b=64: 512 tiles, 3.9 per SM
    const int bound64 = aiter::mha_fwd_splitkv_num_splits(64, 32, 8, 1, 8192);
    const int four64 = n9(64, 128, false), paged64_128 = n9(64, 128, true), general64 = n9(64, 96, true);
    const int short64 = aiter::mha_fwd_splitkv_num_splits(64, 32, 8, 1, 1024, 0, 128, 128, false);
    // past the decode branch (more than 6 tiles per SM)
    const int four128 = n9(128, 128, false), general128 = n9(128, 96, true), four256 = n9(256, 128, false);
    const int general256 = n9(256, 96, true), six100 = n9(100, 128, false), general100 = n9(100, 96, true);
    const int huge = n9(20000, 128, false), general_huge = n9(20000, 96, true);
    const int bound128 = aiter::mha_fwd_splitkv_num_splits(128, 32, 8, 1, 8192);
    // four queries (16 rows per tile, a speculative-decode step): at most a cluster's 8 splits on an H100 at d128
    auto q4 = [](int b, int keys, int d, bool paged) {
        return aiter::mha_fwd_splitkv_num_splits(b, 32, 8, 4, keys, 0, d, d, paged);
    };
    auto q4_general = [&](int b, int keys) { return q4(b, keys, 96, true); };
    const int q4_b4 = q4(4, 8192, 128, false), q4_b1_1k = q4(1, 1024, 128, false), q4_b1 = q4(1, 8192, 128, false);
    const int q4_b4_paged = q4(4, 8192, 128, true), q4_b4_d64 = q4(4, 8192, 64, false), q4_b6 = q4(6, 8192, 128, false);
    // eight queries (32 rows): on sm_90 the decode tile's count for its two 16-row blocks (b=4 8k: 64 CTAs per split,
    // 8 splits of 1024 keys) where the prefill tile's rule gives 7 on 132 SMs
    const int q8_b4 = aiter::mha_fwd_splitkv_num_splits(4, 32, 8, 8, 8192, 0, 128, 128, false);
    const int q8_bound = aiter::mha_fwd_splitkv_num_splits(4, 32, 8, 8, 8192);
    const double gbps = 2.0 * khz * 1e3 * (bits / 8) / 1e9;
    const bool lean = major == 9 && gbps < 4000.0;
    bool ok = dense96 == general && paged64 == general && bound == std::max({general, d64, dense}) &&
              paged20 == general20 && bound20 == std::max(general20, band128);
    for (int n : {dense, paged, d64, d256, band64, band128, paged128_20})
        ok &= n >= 1;
    ok &= dense <= bound && paged <= bound && d256 <= bound && band64 <= bound20 && band128 <= bound20 &&
          paged128_20 <= bound20 && four64 <= bound64 && paged64_128 <= bound64 && four64 >= 1 && short64 >= 1 &&
          four128 <= bound128 && six100 == general100 && huge == general_huge && 20000 * huge <= 65535 &&
          q4_b4 <= q4_general(4, 8192) && q4_b1_1k <= q4_general(1, 1024) && q4_b1 == q4_general(1, 8192) &&
          q4_b4_paged == q4_b4 && q4_b4_d64 == q4_general(4, 8192) && q8_b4 >= 1 && q8_b4 <= q8_bound;
    if (major == 9 && sms == 132)
        ok &= q8_b4 == 8;
    if (lean && sms == 132)
        ok &= general == 5 && dense == 5 && d256 == 3 && paged == 5 && d64 >= 6 && d64 <= 8 && general20 == 3 &&
              band64 == 2 && band128 == 3 && paged128_20 == 3 && four64 == 4 && short64 == 1 && paged64_128 == 1 &&
              general128 == 2 && four128 == 4 && general256 == 1 && four256 == 4 && six100 == 6 && q4_b4 == 8 &&
              q4_general(4, 8192) == 16 && q4_b1_1k == 8 && q4_general(1, 1024) == 32 && q4_b1 == 64 && q4_b6 == 8;
    else if (!lean)
        ok &= dense == general && paged == general && d64 == general && band64 == general20 &&
              band128 == general20 && paged128_20 == general20 && four64 == general64 && four128 == general128 &&
              four256 == general256 && q4_b1 == q4_general(1, 8192) &&
              (major == 9 && sms == 132 ? q4_b4 == 16 && q4_b1_1k == 8 && q4_b6 == 8
                                        : major != 9 ? q4_b4 == q4_general(4, 8192) && q4_b1_1k == q4_general(1, 1024)
                                                     : true);
    std::printf("split rule (peak %.0f GB/s, %d SMs): b=12 8k general %d, bound %d, dense d128 %d, d256 %d, d64 %d, "
                "paged d128 %d, d64 %d; b=20 general %d, dense d64 %d, d128 %d, paged d128 %d, d64 %d; "
                "b=64 8k dense d128 %d (1k %d), paged %d, bound %d; b=128 %d (general %d), b=256 %d (%d), b=100 %d, "
                "b=20000 %d; 4 queries b=4 8k %d (general %d, paged %d, d64 %d), b=6 %d, b=1 1k %d, 8k %d; 8 queries "
                "b=4 8k %d (bound %d) %s\n",
                gbps, sms, general, bound, dense, d256, d64, paged, paged64, general20, band64, band128, paged128_20,
                paged20, four64, short64, paged64_128, bound64, four128, general128, four256, general256, six100, huge,
                q4_b4, q4_general(4, 8192), q4_b4_paged, q4_b4_d64, q4_b6, q4_b1_1k, q4_b1, q8_b4, q8_bound,
                ok ? "ok" : "FAIL");
    return ok;
}

int main()
{
    bool ok = true;
    // first: nothing before it has asked the split heuristic for a d64 count
    ok &= graph_case(12, 0, 64, true);
    for (auto [b, d, sk, splits] : {std::tuple{16, 128, 1024, 4}, std::tuple{16, 128, 8192, 4},
                                    std::tuple{12, 64, 8192, 5}, std::tuple{8, 128, 4096, 6},
                                    std::tuple{12, 128, 4096, 3}, std::tuple{8, 128, 4096, 8},
                                    std::tuple{3, 128, 8192, 16}})
        ok &= determinism_case(b, d, sk, splits);
    ok &= prefill_case("prefill page16 causal gqa", {37, 1, 130}, {200, 17, 130}, 8, 2, 128, 16, 2, -1, 0, 0.f, 0.f, 1);
    ok &= prefill_case("prefill page1 window", {64, 20}, {64, 300}, 4, 4, 64, 1, 3, 32, 8, 0.f, 0.f, 2);
    ok &= prefill_case("prefill page128 softcap", {300, 5}, {257, 700}, 6, 3, 96, 128, 0, -1, -1, 30.f, 0.f, 3);
    ok &= prefill_case("prefill page32 dropout", {100, 64}, {120, 90}, 4, 2, 128, 32, 2, -1, 0, 0.f, 0.3f, 4);
    ok &= prefill_case("prefill page16 dropout, no randval", {100, 64, 7}, {300, 90, 129}, 4, 2, 128, 16, 2, -1, 0,
                       0.f, 0.3f, 6, 0, false);
    ok &= prefill_case("prefill page64 dropout, no randval, d64", {130, 20}, {200, 257}, 4, 4, 64, 64, 0, -1, -1, 0.f,
                       0.2f, 7, 0, false);
    ok &= prefill_case("prefill page64 d256 empty seq", {0, 50, 9}, {10, 0, 77}, 2, 1, 256, 64, 1, -1, 0, 0.f, 0.f, 5);
    // at most 16 rows per sequence at d256: the 16 x 16 split tile, whose 16-key blocks take half a Philox group each
    // (fwd_features.cuh, TileDropout::walk's two-tile branch), against mha_fwd's 64-key blocks
    ok &= prefill_case("prefill page16 dropout, d256 16-row tile", {9, 16, 3}, {300, 77, 129}, 4, 4, 256, 16, 2, -1, 0,
                       0.f, 0.2f, 8);
    ok &= prefill_case("prefill page16 dropout, no randval, d256 16-row tile", {9, 16, 3}, {300, 77, 129}, 4, 4, 256,
                       16, 0, -1, -1, 0.f, 0.2f, 9, 0, false);
    // batch mode: page-table key counts past seqlen_k clamp to it (one short, one empty but for its last key)
    ok &= prefill_batch_case("prefill batch mode page16 counts past seqlen_k", {150, 37, 100, 1}, 100, 20, 16, false,
                             40, 14);
    ok &= prefill_batch_case("prefill batch mode page1 no last_page_lens", {70, 5, 130}, 120, 7, 1, true, -1, 15);
    // max_seqlen_q over-estimated so that it times the 1024 query heads of the KV head (2^31 + 16384 tile rows)
    // overflows 32 bits: each query head then gets its own tile (pack_ratio), every row still computed
    ok &= prefill_case("prefill page16 gqa1024 max_seqlen_q 2^21+16", {20}, {130}, 1024, 1, 128, 16, 0, -1, -1, 0.f,
                       0.f, 7, (1 << 21) + 16);
    ok &= padding_case("padding batch mode", {64, 17, 5, 1}, {200, 90, 1, 150}, 64, 200, false, 8);
    ok &= padding_case("padding batch mode causal", {30, 64, 2}, {31, 7, 200}, 64, 200, true, 9);
    // cu_seqlen differences above the padded lengths (device data) clamp to them: no read past a batch's slab
    ok &= padding_case("padding batch mode lengths past the padding", {64, 90, 3}, {200, 1000, 1 << 20}, 64, 200,
                       false, 10);
    ok &= padding_case("padding batch mode causal lengths past the padding", {70, 5}, {5000, 180}, 64, 200, true, 11);
    ok &= padding_case("padding batch mode asm lengths past the padding", {300, 100}, {900, 70}, 256, 512, false, 12,
                       true);
    ok &= padding_case("padding batch mode asm causal", {256, 100, 7}, {300, 512, 9}, 256, 512, true, 13, true);
    // NaN in the padding: the asm forward copies a key block that runs past a batch's length with cp.async, rows
    // past it zero-filled (ck predicates its loads)
    ok &= padding_case("padding batch mode asm NaN padding", {200, 129, 1}, {177, 333, 90}, 256, 512, false, 16, true,
                       true);
    ok &= padding_case("padding batch mode asm causal NaN padding", {100, 256}, {176, 175}, 256, 512, true, 17, true,
                       true);
    ok &= padding_case("padding batch mode ck NaN padding", {200, 129, 1}, {177, 333, 90}, 256, 512, true, 18, false,
                       true);
    // group mode with cu_seqlen_q / cu_seqlen_k logical lengths inside padded segments (NaN padding): sequences
    // shorter than a query / key block, just past one, without queries, without keys
    for (int fam = 0; fam < 2; ++fam)
        for (int causal = 0; causal < 2; ++causal)
        {
            char name[96];
            std::snprintf(name, sizeof(name), "group logical lengths %s%s", fam ? "asm" : "ck", causal ? " causal" : "");
            ok &= group_logical_case(name, {200, 1, 129, 0, 300, 90}, {177, 90, 1, 50, 400, 0}, {3, 5, 0, 7, 1, 2},
                                     {9, 0, 4, 2, 6, 3}, causal == 1, 30 + 2 * fam + causal, fam == 1);
        }
    ok &= bigpool_case();
    // cache capacity 3000 (94 key blocks of 32): lengths that end on, just after and just before a block, one key,
    // and splits left empty by short sequences; 3 and 8 splits merge in clusters, 16 in the combine kernel, 0 is
    // the heuristic
    const std::vector<int> lens = {3000, 1, 33, 1777, 2048, 31, 2999, 64};
    for (int splits : {0, 1, 3, 8, 16})
        for (int page : {0, 16, 128})
        {
            char name[96];
            std::snprintf(name, sizeof(name), "ragged splitkv splits=%d page=%d", splits, page);
            ok &= ragged_case(name, lens, 3000, splits, page, 1, 20 + splits + page);
        }
    ok &= split_rule_case();
    ok &= host_overhead_case();
    // 12 sequences (96 tiles): the heuristic's d128 count on an H100 (5 splits: three warps per SM), dense
    ok &= ragged_case("ragged splitkv b=12 splits=0", {3000, 1, 33, 1777, 2048, 31, 2999, 64, 2500, 700, 32, 3000},
                      3000, 0, 0, 1, 90);
    // 20 sequences (160 tiles): 3 splits on an H100
    ok &= ragged_case("ragged splitkv b=20 splits=0", {3000, 1, 33, 1777, 2048, 31, 2999, 64, 2500, 700, 32, 3000,
                                                        100, 2900, 65, 1024, 3000, 2, 1500, 96},
                      3000, 0, 0, 1, 91);
    // the same 12 sequences over a paged d128 cache (5 splits on an H100) and a dense d64 one (the fill: 6 to 8)
    ok &= ragged_case("ragged splitkv b=12 splits=0 page=16", {3000, 1, 33, 1777, 2048, 31, 2999, 64, 2500, 700, 32,
                      3000}, 3000, 0, 16, 1, 92);
    ok &= ragged_case("ragged splitkv b=12 splits=0 d64", {3000, 1, 33, 1777, 2048, 31, 2999, 64, 2500, 700, 32, 3000},
                      3000, 0, 0, 1, 93, 64);
    // 16 sequences, 4 splits (512 decode warps: late ring refills on an H100, warp splits taking blocks in turn)
    ok &= ragged_case("ragged splitkv b=16 splits=4", {3000, 1, 33, 1777, 2048, 31, 2999, 64, 2500, 700, 32, 3000,
                                                       100, 2900, 65, 1024}, 3000, 4, 0, 1, 94);
    ok &= ragged_case("ragged splitkv causal sq=3 splits=4", {3000, 5, 900}, 3000, 4, 0, 3, 60);
    ok &= ragged_case("ragged splitkv causal sq=3 splits=4 page=16", {3000, 5, 900}, 3000, 4, 16, 3, 61);
    // four queries (16 rows per tile: the transposed step of two 8-row tiles on sm_90): the heuristic, warps of one
    // CTA, a cluster of 8, the split grid, pages, head dim 64
    for (auto [splits, page, d] : {std::tuple{0, 0, 128}, std::tuple{4, 0, 128}, std::tuple{8, 16, 128},
                                   std::tuple{16, 0, 128}, std::tuple{0, 32, 64}, std::tuple{6, 0, 64}})
    {
        char name[96];
        std::snprintf(name, sizeof(name), "ragged splitkv causal sq=4 splits=%d page=%d d=%d", splits, page, d);
        ok &= ragged_case(name, {3000, 4, 1500, 2999}, 3000, splits, page, 4, 65 + splits + page, d);
    }
    // 5 to 16 queries (17 to 64 rows per tile): on sm_90 the decode tile's 16-row blocks where the decode tile's own
    // count splits the cache short (4 sequences of 3000 keys: 8 splits of 384 keys for 32 rows; 1000 keys: 4 of 256
    // for 64 rows), else the 64 x 64 prefill tile, whatever count is given: the heuristic, a cluster of 8, the split
    // grid (16 splits, 3 x 8 tiles x 2 blocks), pages, a last row block of 4 rows (5 queries), head dim 64
    for (auto [sq, cap, splits, page, d, tile] :
         {std::tuple{8, 3000, 0, 0, 128, "b16x32"}, std::tuple{8, 3000, 4, 16, 128, "b16x32"},
          std::tuple{8, 3000, 16, 0, 128, "b16x32"}, std::tuple{5, 3000, 3, 128, 128, "b16x32"},
          std::tuple{16, 1000, 0, 0, 128, "b16x32"}, std::tuple{12, 1000, 8, 16, 128, "b16x32"},
          std::tuple{16, 3000, 8, 0, 128, "b64x64"}, std::tuple{12, 3000, 0, 16, 128, "b64x64"},
          std::tuple{8, 3000, 6, 32, 64, "b16x32"}})
    {
        char name[112];
        std::snprintf(name, sizeof(name), "ragged splitkv causal sq=%d cap=%d splits=%d page=%d d=%d", sq, cap, splits,
                      page, d);
        const std::vector<int> spec_lens = splits == 16 ? std::vector<int>{cap, 16, cap - 1}
                                                        : std::vector<int>{cap, 16, cap / 2, cap - 1};
        ok &= ragged_case(name, spec_lens, cap, splits, page, sq, 70 + sq + splits + page, d, 0, tile);
    }
    // masked steps over a dense cache without per-batch counts, 17 to 64 rows in 16-row blocks (MHA: one row per
    // query; 32 / 8 heads: four): bottom-right causal, the heuristic (8 splits on an H100) and a cluster; top-left
    // causal with sq = sk, where the first row block's last split has no key at all; a key count off the blocks
    for (auto [b, h, hk, sq, sk, splits, mask_type] :
         {std::tuple{1, 8, 8, 64, 4096, 0, 2}, std::tuple{2, 8, 8, 48, 4096, 4, 2}, std::tuple{1, 8, 8, 64, 4000, 8, 2},
          std::tuple{1, 8, 8, 64, 64, 2, 1}, std::tuple{2, 4, 4, 40, 40, 0, 1}, std::tuple{2, 32, 8, 16, 2048, 0, 2},
          std::tuple{1, 32, 8, 16, 16, 2, 1}})
    {
        char name[112];
        std::snprintf(name, sizeof(name), "masked step b=%d h=%d/%d sq=%d sk=%d splits=%d mask=%d", b, h, hk, sq, sk,
                      splits, mask_type);
        ok &= masked_step_case(name, b, h, hk, sq, sk, splits, mask_type, -1, 0, 110 + sq + splits);
    }
    // score modifiers on the decode tile at up to 16 rows: ALiBi (one head per tile, so 1 to 16 rows of one head)
    // and soft-cap (packed heads), with a window, the heuristic and given counts
    for (auto [b, h, hk, sq, sk, splits, mask_type, wl, softcap, alibi] :
         {std::tuple{2, 8, 8, 1, 3000, 0, 0, -1, 0.f, true}, std::tuple{2, 8, 2, 16, 2000, 4, 2, -1, 0.f, true},
          std::tuple{1, 4, 4, 5, 1500, 3, 2, 300, 0.f, true}, std::tuple{3, 32, 8, 1, 2500, 0, 0, -1, 15.f, false},
          std::tuple{2, 32, 8, 4, 1800, 6, 2, 200, 20.f, false}, std::tuple{2, 16, 4, 2, 2100, 0, 2, -1, 10.f, true}})
    {
        char name[128];
        std::snprintf(name, sizeof(name), "decode tile b=%d h=%d/%d sq=%d sk=%d splits=%d mask=%d left=%d%s%s", b, h,
                      hk, sq, sk, splits, mask_type, wl, softcap > 0 ? " softcap" : "", alibi ? " alibi" : "");
        ok &= masked_step_case(name, b, h, hk, sq, sk, splits, mask_type, wl, mask_type ? 0 : -1, 130 + sq + splits,
                               softcap, alibi);
    }
    ok &= ragged_case("ragged splitkv key counts past the cache", {3000, 1, 700, 3000}, 3000, 0, 0, 1, 62, 128, 5000);
    ok &= ragged_case("ragged splitkv key counts past the cache page=16", {3000, 1, 700, 3000}, 3000, 3, 16, 1, 63, 128,
                      1 << 24);
    ok &= ragged_case("ragged splitkv causal key counts past the cache", {3000, 5, 3000}, 3000, 4, 0, 3, 64, 128, 1);
    // group mode over a block table: counts past a table row clamp to it (cap = 128 pages of 16); the heuristic, a
    // cluster of 8, the split grid, one split
    for (int splits : {0, 8, 16, 1})
    {
        char name[96];
        std::snprintf(name, sizeof(name), "ragged splitkv group mode key counts past the table splits=%d", splits);
        ok &= ragged_case(name, {2048, 1, 700, 2048}, 2048, splits, 16, 1, 100 + splits, 128, 1 << 20, nullptr, true);
    }
    ok &= ragged_case("ragged splitkv group mode causal sq=3 page=128", {2048, 5, 1000}, 2048, 3, 128, 3, 104, 128,
                      5000, nullptr, true);
    // group mode as CK takes it: no seqstart_k over a block table with key counts, seqlen_k left unset
    for (int splits : {8, 0})
    {
        char name[96];
        std::snprintf(name, sizeof(name), "ragged splitkv group mode no seqstart_k, seqlen_k unset splits=%d", splits);
        ok &= ragged_case(name, {2048, 1, 700, 2048}, 2048, splits, 16, 1, 120 + splits, 128, 0, nullptr, true,
                          kNoSeqstartK | kSeqlenKUnset);
    }
    // a negative group-mode key count is an empty batch (dense and paged; 4 and 16 splits)
    ok &= ragged_case("ragged splitkv group mode negative count dense", {700, 0, 300}, 700, 4, 0, 1, 125, 128, 0,
                      nullptr, true, kNegativeEmpty);
    ok &= ragged_case("ragged splitkv group mode negative count page=16", {700, 0, 300}, 704, 16, 16, 1, 126, 128, 0,
                      nullptr, true, kNegativeEmpty);
    for (auto [b, splits] : {std::pair{3, 8}, std::pair{3, 16}, std::pair{8, 16}, std::pair{4, 1}})
        ok &= graph_case(b, splits);
    ok &= two_contexts_case(); // before concurrent_merge_case, which uses up the primary context's counter slots
    ok &= concurrent_merge_case();
    ok &= reset_case(); // last: it releases every allocation of the cases before it
    std::printf("kvcache_check: %s\n", ok ? "all ok" : "FAILED");
    return ok ? 0 : 1;
}
