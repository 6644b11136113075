// benchmark_mha_fwd: AITER's forward benchmark and verifier on top of aiter::mha_fwd (include/mha_fwd.h, libmha_fwd.so).
// Same flags, defaults, header line, "ms / TFlops / GB/s / valid:y|n" output and exit codes as AITER's
// op_tests/cpp/mha/benchmark_mha_fwd.cpp (spec sections 4.1-4.5): 0 pass, -1 bad arguments or -?, -2 unsupported,
// invalid, failed validation or CUDA error, -3 unknown -prec. Flags and the header live in fwd_config.h, the tensor
// layouts (batch or group mode, spec 1.7) in bench_problem.h. This file fills and uploads the tensors, calls the
// library and validates O and LSE: -v=1 against the host reference (csrc/reference/host_reference.h), -v=2 against
// the naive GPU kernel (csrc/reference/naive_attention.cu); with dropout both replay the random values the library
// stored.

#include "bench_common.h"
#include "common/philox.h"
#include "device_fill.h"
#include "fwd_config.h"
#include "mha_fwd.h"
#include "reference/host_reference.h"
#include "reference/naive_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <limits>
#include <tuple>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace bench;

// Host copies of Q / K / V only when something is validated.
bool host_inputs(const FwdConfig& c) { return c.validation > 0; }

// The host-side inputs: values rounded to the dtype (T for the upload, float for the host reference).
template <typename T>
struct HostInputs
{
    std::vector<T> q, k, v, bias;
    std::vector<float> q_exact, k_exact, v_exact, bias_exact;
    std::vector<float> alibi_slopes; // [h] or [b, h]
    std::vector<float> sink;         // [h] sink logits
};

template <typename T>
HostInputs<T> make_inputs(const FwdConfig& c, const ProblemLayout& l)
{
    HostInputs<T> in;
    if (host_inputs(c)) // -v=0 fills Q / K / V on the device (upload_inputs)
    {
        in.q.resize(size_t(l.q.elements));
        in.k.resize(size_t(l.k.elements));
        in.v.resize(size_t(l.v.elements));
        fill_tensor(c.init, c.seed, in.q, in.q_exact);
        fill_tensor(c.init, c.seed + 1, in.k, in.k_exact);
        fill_tensor(c.init, c.seed + 2, in.v, in.v_exact);
    }
    if (c.bias.type == bias_enum::elementwise_bias)
    {
        in.bias.resize(size_t(l.bias.elements));
        fill_tensor(c.init, c.seed + 3, in.bias, in.bias_exact);
    }
    if (c.bias.type == bias_enum::alibi)
    {
        const std::vector<float> slopes = alibi_slopes(c.nhead);
        for (int b = 0; b < (c.bias.rank_info == 1 ? c.batch : 1); ++b)
            in.alibi_slopes.insert(in.alibi_slopes.end(), slopes.begin(), slopes.end());
    }
    if (c.init_sink)
    {
        constexpr float kSinkMin = -2.f, kSinkMax = 6.f;
        std::mt19937 gen(c.seed + 4);
        std::uniform_real_distribution<float> dist(kSinkMin, kSinkMax);
        for (int h = 0; h < c.nhead; ++h)
            in.sink.push_back(dist(gen));
    }
    return in;
}

// Device copies of everything the call reads or writes.
struct DeviceTensors
{
    DeviceBuffer q, k, v, o, lse, bias, randval, sink;
    DeviceBuffer seqstart_q, seqstart_k, seqlen_k; // group mode
    DeviceBuffer drop_seed_offset;                 // -drop_prefs=1: {seed, offset} as uint64
    // mha_fwd_splitkv: the K/V cache (paged or batch-permuted copies of k / v), its tables and the fp32 partials
    DeviceBuffer k_cache, v_cache, block_table, cache_batch_idx, seqlen_k_cache, lse_acc, o_acc;
};

// K/V cache layout of a split-KV call. Paged: [pages, h_k, page, d] (iperm) or [pages, page, h_k, d], AITER's
// pages = batch * ceil(max_seqlen_k / page), block table [batch, pages / batch] a shuffled iota. Dense with
// cache_batch_idx: the dense layout, batch b stored in slot cache_batch_idx[b] (a shuffled iota).
struct KvCacheLayout
{
    int pages = 0, pages_per_seq = 0;
    reference::Strides k, v; // row = token, head, batch = page
    int64_t k_elements = 0, v_elements = 0;
    std::vector<int32_t> block_table, cache_batch_idx;
};

std::vector<int32_t> shuffled_iota(int n, uint32_t seed)
{
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
        v[size_t(i)] = i;
    std::shuffle(v.begin(), v.end(), std::mt19937(seed));
    return v;
}

KvCacheLayout make_kvcache_layout(const FwdConfig& c, const ProblemLayout& l)
{
    KvCacheLayout kv;
    if (c.page_block_size > 0)
    {
        const int64_t ps = c.page_block_size, hk = c.nhead_k;
        kv.pages_per_seq = std::max(1, int((l.max_seqlen_k + ps - 1) / ps));
        kv.pages = c.batch * kv.pages_per_seq;
        for (auto [t, d, n] : {std::tuple{&kv.k, int64_t(c.hdim_q), &kv.k_elements},
                               std::tuple{&kv.v, int64_t(c.hdim_v), &kv.v_elements}})
        {
            *t = c.iperm ? reference::Strides{hk * ps * d, ps * d, d} : reference::Strides{ps * hk * d, d, hk * d};
            *n = kv.pages * hk * ps * d;
        }
        kv.block_table = shuffled_iota(kv.pages, c.seed + 5);
    }
    else
    {
        kv.k = l.k.strides, kv.v = l.v.strides;
        kv.k_elements = l.k.elements, kv.v_elements = l.v.elements;
        if (c.cache_batch_idx)
            kv.cache_batch_idx = shuffled_iota(c.batch, c.seed + 6);
    }
    return kv;
}

// Scatters the logical K / V (layout l) into the cache layout; cache rows no key maps to hold NaN, so a kernel that
// reads one fails validation.
template <typename T>
int upload_kvcache(const FwdConfig& c, const ProblemLayout& l, const KvCacheLayout& kv, const HostInputs<T>& in,
                   DeviceTensors& d)
{
    if (!host_inputs(c))
    {
        BENCH_CHECK_CUDA(device_fill<T>(d.k_cache, kv.k_elements, c.seed + 1));
        BENCH_CHECK_CUDA(device_fill<T>(d.v_cache, kv.v_elements, c.seed + 2));
    }
    const T nan = T(std::numeric_limits<float>::quiet_NaN());
    std::vector<T> k(host_inputs(c) ? size_t(kv.k_elements) : 0, nan), v(host_inputs(c) ? size_t(kv.v_elements) : 0, nan);
    for (int b = 0; b < c.batch && host_inputs(c); ++b)
        for (int h = 0; h < c.nhead_k; ++h)
            for (int j = 0; j < c.seqlen_ks[size_t(b)]; ++j)
            {
                const int64_t row = c.group() ? l.seqstart_k[size_t(b)] + j : j;
                const int64_t src_b = c.group() ? 0 : b;
                int64_t page = 0, in_page = row;
                if (c.page_block_size > 0)
                {
                    page = kv.block_table[size_t(b * kv.pages_per_seq + j / c.page_block_size)];
                    in_page = j % c.page_block_size;
                }
                else if (c.cache_batch_idx)
                    page = kv.cache_batch_idx[size_t(b)];
                else
                    page = src_b;
                for (auto [dst, src, ls, cs, dim] :
                     {std::tuple{&k, &in.k, &l.k.strides, &kv.k, c.hdim_q}, std::tuple{&v, &in.v, &l.v.strides, &kv.v, c.hdim_v}})
                {
                    const int64_t so = src_b * ls->batch + h * ls->head + row * ls->row;
                    const int64_t dof = page * cs->batch + h * cs->head + in_page * cs->row;
                    std::copy_n(src->begin() + so, dim, dst->begin() + dof);
                }
            }
    if (host_inputs(c))
    {
        BENCH_CHECK_CUDA(d.k_cache.upload(k));
        BENCH_CHECK_CUDA(d.v_cache.upload(v));
    }
    if (!kv.block_table.empty())
        BENCH_CHECK_CUDA(d.block_table.upload(kv.block_table));
    if (!kv.cache_batch_idx.empty())
        BENCH_CHECK_CUDA(d.cache_batch_idx.upload(kv.cache_batch_idx));
    if (!c.group())
        BENCH_CHECK_CUDA(d.seqlen_k_cache.upload(c.seqlen_ks));
    if (c.num_splits > 1)
    {
        const int64_t rows = int64_t(l.shape_batch) * c.nhead * c.num_splits * l.shape_seqlen_q;
        BENCH_CHECK_CUDA(d.lse_acc.allocate(sizeof(float) * rows));
        BENCH_CHECK_CUDA(d.o_acc.allocate(sizeof(float) * rows * c.hdim_v));
        // NaN partials: a split that leaves its own unwritten (an empty split writes LSE -inf, O 0) fails validation
        BENCH_CHECK_CUDA(cudaMemset(d.lse_acc.get(), 0xFF, sizeof(float) * rows));
        BENCH_CHECK_CUDA(cudaMemset(d.o_acc.get(), 0xFF, sizeof(float) * rows * c.hdim_v));
    }
    return kExitPass;
}

bool stores_randval(const FwdConfig& c) { return c.p_drop > 0.f && c.validation > 0; }



template <typename T>
int upload_inputs(const FwdConfig& c, const ProblemLayout& l, const HostInputs<T>& in, DeviceTensors& d)
{
    if (host_inputs(c))
    {
        BENCH_CHECK_CUDA(d.q.upload(in.q));
        BENCH_CHECK_CUDA(d.k.upload(in.k));
        BENCH_CHECK_CUDA(d.v.upload(in.v));
    }
    else
    {
        BENCH_CHECK_CUDA(device_fill<T>(d.q, l.q.elements, c.seed));
        // split-KV reads only the cache copies (upload_kvcache)
        BENCH_CHECK_CUDA(device_fill<T>(d.k, c.use_splitkv() ? 0 : l.k.elements, c.seed + 1));
        BENCH_CHECK_CUDA(device_fill<T>(d.v, c.use_splitkv() ? 0 : l.v.elements, c.seed + 2));
    }
    BENCH_CHECK_CUDA(d.o.allocate(sizeof(T) * l.o.elements));
    BENCH_CHECK_CUDA(d.lse.allocate(sizeof(float) * l.lse_elements));
    // 0xFF bytes are NaN in fp16, bf16 and fp32: any element the kernel does not write fails validation.
    BENCH_CHECK_CUDA(cudaMemset(d.o.get(), 0xFF, sizeof(T) * l.o.elements));
    BENCH_CHECK_CUDA(cudaMemset(d.lse.get(), 0xFF, sizeof(float) * l.lse_elements));
    if (c.bias.type == bias_enum::elementwise_bias)
        BENCH_CHECK_CUDA(d.bias.upload(in.bias));
    if (c.bias.type == bias_enum::alibi)
        BENCH_CHECK_CUDA(d.bias.upload(in.alibi_slopes));
    if (c.init_sink)
        BENCH_CHECK_CUDA(d.sink.upload(in.sink));
    if (stores_randval(c))
    {
        BENCH_CHECK_CUDA(d.randval.allocate(size_t(l.randval.elements)));
        BENCH_CHECK_CUDA(cudaMemset(d.randval.get(), 0, size_t(l.randval.elements)));
    }
    if (c.group())
    {
        BENCH_CHECK_CUDA(d.seqstart_q.upload(l.seqstart_q));
        BENCH_CHECK_CUDA(d.seqstart_k.upload(l.seqstart_k));
        if (!c.seqlen_kpads.empty())
            BENCH_CHECK_CUDA(d.seqlen_k.upload(c.seqlen_ks));
    }
    if (c.p_drop > 0.f && c.drop_prefs)
        BENCH_CHECK_CUDA(d.drop_seed_offset.upload(std::vector<uint64_t>{c.drop_seed, c.drop_offset}));
    return kExitPass;
}

// Every field set explicitly; fp8 descales and block scales (not run by this build) get null pointers and zeros.
aiter::mha_fwd_args make_fwd_args(const FwdConfig& c, const ProblemLayout& l, const DeviceTensors& d)
{
    aiter::mha_fwd_args a;
    a.use_asm_v3      = c.fwd_v3;
    a.v3_api_check    = c.is_v3_check;
    a.how_v3_bf16_cvt = c.v3_bf16_cvt;
    a.data_type       = c.prec;
    a.is_group_mode   = c.group();
    a.bias_type       = int(c.bias.type);
    a.has_lse         = c.lse;
    a.qscale_type     = int(c.qscale);
    a.has_sink        = c.has_sink();

    a.q_ptr         = d.q.get();
    a.k_ptr         = d.k.get();
    a.v_ptr         = d.v.get();
    a.bias_ptr      = c.bias.type != bias_enum::no_bias ? d.bias.get() : nullptr;
    a.q_descale_ptr = a.k_descale_ptr = a.v_descale_ptr = nullptr;
    a.rand_val_ptr  = stores_randval(c) ? d.randval.get() : nullptr;
    a.lse_ptr       = c.lse ? d.lse.get() : nullptr;
    a.o_ptr         = d.o.get();

    a.seqstart_q_ptr  = c.group() ? d.seqstart_q.get() : nullptr;
    a.seqstart_k_ptr  = c.group() ? d.seqstart_k.get() : nullptr;
    a.seqlen_q_ptr    = nullptr;
    a.seqlen_k_ptr    = c.group() && !c.seqlen_kpads.empty() ? d.seqlen_k.get() : nullptr;
    a.cu_seqlen_q_ptr = a.cu_seqlen_k_ptr = nullptr;
    a.block_scale_seqstart_q_ptr = a.block_scale_seqstart_k_ptr = nullptr;
    a.sink_ptr                                                   = c.init_sink ? d.sink.get() : nullptr;

    a.seqlen_q     = l.shape_seqlen_q;
    a.seqlen_k     = l.shape_seqlen_k;
    a.batch        = c.batch;
    a.max_seqlen_q = l.max_seqlen_q;
    a.hdim_q       = c.hdim_q;
    a.hdim_v       = c.hdim_v;
    a.nhead_q      = c.nhead;
    a.nhead_k      = c.nhead_k;

    a.scale_s         = c.scale_s;
    a.logits_soft_cap = c.logits_soft_cap;

    a.stride_q             = idx(l.q.strides.row);
    a.stride_k             = idx(l.k.strides.row);
    a.stride_v             = idx(l.v.strides.row);
    a.stride_bias          = c.bias.type == bias_enum::alibi ? (c.bias.rank_info == 1 ? c.nhead : 0)
                                                             : idx(l.bias.strides.row);
    a.stride_randval       = idx(l.randval.strides.row);
    a.stride_o             = idx(l.o.strides.row);
    a.nhead_stride_q       = idx(l.q.strides.head);
    a.nhead_stride_k       = idx(l.k.strides.head);
    a.nhead_stride_v       = idx(l.v.strides.head);
    a.nhead_stride_bias    = c.bias.type == bias_enum::elementwise_bias ? idx(l.bias.strides.head) : 0;
    a.nhead_stride_randval = idx(l.randval.strides.head);
    a.nhead_stride_lse     = idx(l.lse.head);
    a.nhead_stride_o       = idx(l.o.strides.head);
    a.batch_stride_q       = idx(l.q.strides.batch);
    a.batch_stride_k       = idx(l.k.strides.batch);
    a.batch_stride_v       = idx(l.v.strides.batch);
    a.batch_stride_bias    = c.bias.type == bias_enum::elementwise_bias ? idx(l.bias.strides.batch) : 0;
    a.batch_stride_randval = idx(l.randval.strides.batch);
    a.batch_stride_lse     = idx(l.lse.batch);
    a.batch_stride_o       = idx(l.o.strides.batch);
    a.nhead_stride_q_descale = a.nhead_stride_k_descale = a.nhead_stride_v_descale = 0;
    a.batch_stride_q_descale = a.batch_stride_k_descale = a.batch_stride_v_descale = 0;

    a.window_size_left  = c.mask.left;
    a.window_size_right = c.mask.right;
    a.sink_size         = c.mask.sink_size;
    a.mask_type         = int(c.mask.type);
    a.min_seqlen_q      = 0;

    a.p_drop    = c.p_drop;
    a.s_randval = stores_randval(c);
    if (c.p_drop > 0.f && c.drop_prefs)
    {
        const uint64_t* seed_offset = d.drop_seed_offset.as<uint64_t>();
        a.drop_seed_offset          = std::pair<const void*, const void*>{seed_offset, seed_offset + 1};
    }
    else
        a.drop_seed_offset = std::pair<uint64_t, uint64_t>{c.drop_seed, c.drop_offset};

    a.block_scale_size_q  = 128; // AITER's benchmark value; read only with -qscale=bs
    a.block_scale_size_kv = 128;
    return a;
}

// mha_fwd_splitkv's arguments: the forward's, with the cache tensors and CK's partial layouts
// (lse_acc [shape_b, h, splits, shape_s_q], o_acc [shape_b, h, splits, shape_s_q, d_v]).
aiter::mha_fwd_splitkv_args make_splitkv_args(const FwdConfig& c, const ProblemLayout& l, const KvCacheLayout& kv,
                                              const DeviceTensors& d)
{
    const aiter::mha_fwd_args f = make_fwd_args(c, l, d);
    aiter::mha_fwd_splitkv_args a{};
    a.q_ptr = f.q_ptr, a.k_ptr = d.k_cache.get(), a.v_ptr = d.v_cache.get(), a.bias_ptr = f.bias_ptr;
    a.lse_acc_ptr = d.lse_acc.get(), a.o_acc_ptr = d.o_acc.get(), a.lse_ptr = f.lse_ptr, a.o_ptr = f.o_ptr;
    a.block_table_ptr = c.page_block_size > 0 ? d.block_table.get() : nullptr;
    a.batch_stride_block_table = kv.pages_per_seq;
    a.page_block_size = c.page_block_size;
    a.is_gappy = false;
    a.cache_batch_idx = c.cache_batch_idx ? d.cache_batch_idx.get() : nullptr;
    a.seqstart_q_ptr = f.seqstart_q_ptr, a.seqstart_k_ptr = f.seqstart_k_ptr;
    // CK's fmha_fwd runner (which AITER's benchmark follows): batch mode passes the per-batch key counts only when
    // a KV cache is in use (pages or cache_batch_idx); a dense split-KV call reads seqlen_k
    a.seqlen_k_ptr = c.group() ? f.seqlen_k_ptr
                     : c.page_block_size > 0 || c.cache_batch_idx ? d.seqlen_k_cache.get()
                                                                  : nullptr;
    a.seqlen_q = f.seqlen_q, a.seqlen_k = l.max_seqlen_k, a.batch = f.batch, a.max_seqlen_q = f.max_seqlen_q;
    a.hdim_q = f.hdim_q, a.hdim_v = f.hdim_v, a.nhead_q = f.nhead_q, a.nhead_k = f.nhead_k;
    a.num_splits = c.num_splits;
    a.scale_s = f.scale_s, a.scale_p = a.scale_o = 1.f, a.logits_soft_cap = f.logits_soft_cap;
    a.stride_q = f.stride_q, a.stride_k = idx(kv.k.row), a.stride_v = idx(kv.v.row), a.stride_bias = f.stride_bias;
    a.stride_o = f.stride_o;
    a.nhead_stride_q = f.nhead_stride_q, a.nhead_stride_k = idx(kv.k.head), a.nhead_stride_v = idx(kv.v.head);
    a.nhead_stride_bias = f.nhead_stride_bias, a.nhead_stride_lse = f.nhead_stride_lse;
    a.nhead_stride_o = f.nhead_stride_o;
    a.batch_stride_q = f.batch_stride_q, a.batch_stride_k = idx(kv.k.batch), a.batch_stride_v = idx(kv.v.batch);
    a.batch_stride_bias = f.batch_stride_bias, a.batch_stride_lse = f.batch_stride_lse;
    a.batch_stride_o = f.batch_stride_o;
    const int64_t sq = l.shape_seqlen_q, ns = std::max(1, c.num_splits), dv = c.hdim_v;
    a.stride_o_acc = idx(dv);
    a.split_stride_lse_acc = idx(sq), a.nhead_stride_lse_acc = idx(ns * sq), a.batch_stride_lse_acc = idx(c.nhead * ns * sq);
    a.split_stride_o_acc = idx(sq * dv), a.nhead_stride_o_acc = idx(ns * sq * dv);
    a.batch_stride_o_acc = idx(c.nhead * ns * sq * dv);
    a.window_size_left = f.window_size_left, a.window_size_right = f.window_size_right;
    a.sink_size = f.sink_size, a.mask_type = f.mask_type;
    return a;
}

// Reads the library's O (any layout) and LSE back in the references' packed fp32 layout.
template <typename T>
int download_outputs(const FwdConfig& c, const ProblemLayout& l, const DeviceTensors& d, std::vector<float>& out_o,
                     std::vector<float>& out_lse)
{
    std::vector<T> o_host(size_t(l.o.elements));
    std::vector<float> lse_host(size_t(l.lse_elements));
    BENCH_CHECK_CUDA(cudaMemcpy(o_host.data(), d.o.get(), sizeof(T) * o_host.size(), cudaMemcpyDeviceToHost));
    BENCH_CHECK_CUDA(cudaMemcpy(lse_host.data(), d.lse.get(), sizeof(float) * lse_host.size(), cudaMemcpyDeviceToHost));
    const int64_t rows = int64_t(c.nhead) * l.out_start.back();
    out_o.resize(size_t(rows * c.hdim_v));
    out_lse.resize(size_t(rows));
    const int32_t* seqstart = c.group() ? l.seqstart_q.data() : nullptr;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.nhead; ++h)
            for (int i = 0; i < c.seqlen_qs[b]; ++i)
            {
                const int64_t out = int64_t(c.nhead) * l.out_start[b] + int64_t(h) * c.seqlen_qs[b] + i;
                const T* src      = o_host.data() + reference::element_offset(l.o.strides, seqstart, b, h, i);
                for (int dd = 0; dd < c.hdim_v; ++dd)
                    out_o[out * c.hdim_v + dd] = DTypeTraits<T>::to_float(src[dd]);
                out_lse[out] = lse_host[reference::element_offset(l.lse, seqstart, b, h, i)];
            }
    return kExitPass;
}

// -v=1 on the host, -v=2 with the naive GPU kernel on the library's own device inputs.
template <typename T>
int run_reference(const FwdConfig& c, const ProblemLayout& l, const HostInputs<T>& in, const DeviceTensors& d,
                  std::vector<float>& ref_o, std::vector<float>& ref_lse)
{
    const int64_t rows = int64_t(c.nhead) * l.out_start.back();
    ref_o.resize(size_t(rows * c.hdim_v));
    ref_lse.resize(size_t(rows));
    if (c.validation == 1)
    {
        std::vector<uint8_t> randval(c.p_drop > 0.f ? size_t(l.randval.elements) : 0);
        if (!randval.empty())
            BENCH_CHECK_CUDA(cudaMemcpy(randval.data(), d.randval.get(), randval.size(), cudaMemcpyDeviceToHost));
        const ReferenceArrays host{c.seqlen_qs.data(),
                                   c.seqlen_ks.data(),
                                   l.out_start.data(),
                                   c.group() ? l.seqstart_q.data() : nullptr,
                                   c.group() ? l.seqstart_k.data() : nullptr,
                                   in.q_exact.data(),
                                   in.k_exact.data(),
                                   in.v_exact.data(),
                                   in.bias_exact.data(),
                                   in.alibi_slopes.data(),
                                   c.init_sink ? in.sink.data() : nullptr,
                                   randval.data(),
                                   ref_o.data(),
                                   ref_lse.data()};
        reference::reference_attention_fwd(make_reference_problem(c, l, host));
        return kExitPass;
    }
    DeviceBuffer seqlen_q, seqlen_k, out_start, seqstart_q, seqstart_k, o_dev, lse_dev;
    BENCH_CHECK_CUDA(seqlen_q.upload(c.seqlen_qs));
    BENCH_CHECK_CUDA(seqlen_k.upload(c.seqlen_ks));
    BENCH_CHECK_CUDA(out_start.upload(l.out_start));
    BENCH_CHECK_CUDA(seqstart_q.upload(l.seqstart_q));
    BENCH_CHECK_CUDA(seqstart_k.upload(l.seqstart_k));
    BENCH_CHECK_CUDA(o_dev.allocate(sizeof(float) * ref_o.size()));
    BENCH_CHECK_CUDA(lse_dev.allocate(sizeof(float) * ref_lse.size()));
    const ReferenceArrays dev{seqlen_q.as<const int32_t>(),
                              seqlen_k.as<const int32_t>(),
                              out_start.as<const int32_t>(),
                              c.group() ? seqstart_q.as<const int32_t>() : nullptr,
                              c.group() ? seqstart_k.as<const int32_t>() : nullptr,
                              d.q.get(),
                              d.k.get(),
                              d.v.get(),
                              d.bias.get(),
                              d.bias.as<const float>(), // the ALiBi slopes when -bias=a
                              c.init_sink ? d.sink.as<const float>() : nullptr,
                              d.randval.as<const uint8_t>(),
                              o_dev.as<float>(),
                              lse_dev.as<float>()};
    const reference::AttentionProblem p = make_reference_problem(c, l, dev);
    const auto dtype = std::is_same_v<T, __half> ? reference::NaiveDType::fp16 : reference::NaiveDType::bf16;
    BENCH_CHECK_CUDA(reference::naive_attention_fwd(dtype, p, nullptr));
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    BENCH_CHECK_CUDA(cudaMemcpy(ref_o.data(), o_dev.get(), sizeof(float) * ref_o.size(), cudaMemcpyDeviceToHost));
    BENCH_CHECK_CUDA(cudaMemcpy(ref_lse.data(), lse_dev.get(), sizeof(float) * ref_lse.size(), cudaMemcpyDeviceToHost));
    return kExitPass;
}

// With dropout: the stored random values must be philox.h's (mha::dropout_value of (b * nhead + h, row, col), rows and
// columns counted inside batch b), the stream the backward regenerates; "" when every visible element matches (the
// kernels skip key blocks the mask hides, so masked elements may keep whatever the buffer held, as in CK).
std::string randval_mismatch(const FwdConfig& c, const ProblemLayout& l, const DeviceTensors& d)
{
    std::vector<uint8_t> randval(size_t(l.randval.elements));
    if (cudaError_t e = cudaMemcpy(randval.data(), d.randval.get(), randval.size(), cudaMemcpyDeviceToHost);
        e != cudaSuccess)
        return std::string("randval read-back failed: ") + cudaGetErrorString(e);
    const int32_t* seqstart = c.group() ? l.seqstart_q.data() : nullptr;
    const reference::MaskSpec mask{int(c.mask.type), c.mask.left, c.mask.right, c.mask.sink_size};
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.nhead; ++h)
            for (int i = 0; i < c.seqlen_qs[b]; ++i)
            {
                const uint8_t* row = randval.data() + reference::element_offset(l.randval.strides, seqstart, b, h, i);
                for (int j = 0; j < c.seqlen_ks[b]; ++j)
                {
                    if (!mask.visible(i, j, c.seqlen_qs[b], c.seqlen_ks[b]))
                        continue;
                    const uint32_t bh  = uint32_t(b) * uint32_t(c.nhead) + uint32_t(h);
                    const uint8_t want = mha::dropout_value(c.drop_seed, c.drop_offset, bh, i, j);
                    if (row[j] != want)
                        return "randval(b=" + std::to_string(b) + ", h=" + std::to_string(h) + ", i=" +
                               std::to_string(i) + ", j=" + std::to_string(j) + ") = " + std::to_string(row[j]) +
                               ", philox.h gives " + std::to_string(want) + "\n";
                }
            }
    return "";
}

// Compares batch by batch and stops at the first failing batch, as AITER does.
template <typename T>
bool validate(const FwdConfig& c, const ProblemLayout& l, const std::vector<float>& out_o,
              const std::vector<float>& ref_o, const std::vector<float>& out_lse, const std::vector<float>& ref_lse,
              std::ostream& log)
{
    for (int b = 0; b < c.batch; ++b)
    {
        const int sq        = c.seqlen_qs[b];
        const int64_t row0  = int64_t(c.nhead) * l.out_start[b];
        const int64_t nrows = int64_t(c.nhead) * sq;
        const char* what    = nullptr;
        if (!check_slice(out_o.data() + row0 * c.hdim_v, ref_o.data() + row0 * c.hdim_v, nrows * c.hdim_v, sq,
                         c.hdim_v, DTypeTraits<T>::rtol, DTypeTraits<T>::atol, false, "OUT Error: Incorrect results!",
                         log))
            what = "OUT";
        else if (c.lse && !check_slice(out_lse.data() + row0, ref_lse.data() + row0, nrows, sq, 1,
                                       DTypeTraits<T>::rtol, DTypeTraits<T>::atol, true,
                                       "LSE Error: Incorrect results!", log))
            what = "LSE";
        if (what != nullptr)
        {
            log << what << " mismatch found at batch: " << b << "\n\tseqlen_q: " << sq
                << "\n\tseqlen_k: " << c.seqlen_ks[b] << "\n\tseqstart_q: " << str(l.seqstart_q)
                << "\n\tseqstart_k: " << str(l.seqstart_k) << "\n";
            return false;
        }
    }
    return true;
}

// "a, b, c" in the header's "X ms, Y TFlops, Z GB/s" part. FLOPs count Q K^T and P V per batch, halved under any
// mask (AITER's convention); bytes are one pass over Q, K, V, O with h heads (AITER's, not h_k).
template <typename T>
void print_performance(const FwdConfig& c, float ave_time)
{
    double flop = 0.0, bytes = 0.0;
    for (int b = 0; b < c.batch; ++b)
    {
        const double sq = c.seqlen_qs[b], sk = c.seqlen_ks[b];
        flop += double(c.nhead) * (2.0 * sq * sk * c.hdim_q + 2.0 * sq * c.hdim_v * sk);
        bytes += double(c.nhead) * sizeof(T) * (sq * c.hdim_q + sk * c.hdim_q + c.hdim_v * sk + sq * c.hdim_v);
    }
    if (c.mask.type != mask_enum::no_mask)
        flop *= 0.5;
    const double ms = ave_time > 0.f ? double(ave_time) : 0.0; // 0: nothing was launched (every s_q is 0)
    std::cout << std::fixed << ", " << std::setprecision(3) << ave_time << " ms, " << std::setprecision(2)
              << (ms > 0 ? flop / 1e9 / ms : 0.0) << " TFlops, " << std::setprecision(2)
              << (ms > 0 ? bytes / 1e6 / ms : 0.0) << " GB/s" << std::flush;
}

template <typename T>
int run(const FwdConfig& c)
{
    if (c.validation == 2 && c.hdim_v > reference::kNaiveMaxHdimV)
        return fail(kExitFailed, "-v=2: the naive GPU reference covers d_v <= ", reference::kNaiveMaxHdimV,
                    "; use -v=1");
    const ProblemLayout l = make_problem_layout(c);
    std::vector<const TensorLayout*> strided{&l.q, &l.k, &l.v, &l.o};
    if (c.bias.type == bias_enum::elementwise_bias)
        strided.push_back(&l.bias);
    if (stores_randval(c))
        strided.push_back(&l.randval);
    for (const TensorLayout* t : strided) // the aiter strides are int32
        if (!fits_index(t->strides.head) || (!c.group() && !fits_index(t->strides.batch)))
            return fail(kExitFailed, "a tensor of ", t->elements,
                        " elements needs strides beyond the int32 ones of aiter::mha_fwd_args");
    if (!fits_index(l.lse.head) || (!c.group() && !fits_index(l.lse.batch)))
        return fail(kExitFailed, "the LSE strides exceed int32");

    if (c.page_block_size > 0) // page ids are int32: batch x ceil(max_seqlen_k / page) pages
        if (const int64_t pages = int64_t(c.batch) * std::max<int64_t>(1, (int64_t(l.max_seqlen_k) + c.page_block_size - 1) /
                                                                              c.page_block_size);
            pages > std::numeric_limits<int32_t>::max())
            return fail(kExitFailed, "a paged cache of ", pages, " pages needs page ids beyond int32");
    if (c.is_v3_check && c.use_splitkv()) // the asm kernels serve mha_fwd only
    {
        std::cout << header_line(c) << ", v3 not supported" << std::endl;
        std::cerr << "reason: -is_v3_check asks about the fwd v3 (asm) kernels, which serve mha_fwd only; "
                     "-num_splits > 1, -page_block_size and -cache_batch_idx run mha_fwd_splitkv" << std::endl;
        return kExitFailed;
    }

    const HostInputs<T> in = make_inputs<T>(c, l);
    DeviceTensors d;
    if (const int rc = upload_inputs(c, l, in, d); rc != kExitPass)
        return rc;

    const KvCacheLayout kv = c.use_splitkv() ? make_kvcache_layout(c, l) : KvCacheLayout{};
    if (c.use_splitkv())
    {
        for (const reference::Strides* t : {&kv.k, &kv.v})
            if (!fits_index(t->batch) || !fits_index(t->head))
                return fail(kExitFailed, "the K/V cache strides exceed int32");
        if (const int rc = upload_kvcache(c, l, kv, in, d); rc != kExitPass)
            return rc;
    }

    const aiter::mha_fwd_args args = make_fwd_args(c, l, d);
    std::cout << header_line(c) << std::flush;
    const ck_tile::stream_config stream{nullptr, true, c.kname, c.warmup, c.repeat, c.gpu_timer, c.flush_cache};
    const float ave_time =
        c.use_splitkv() ? aiter::mha_fwd_splitkv(make_splitkv_args(c, l, kv, d), stream, c.prec, c.group(),
                                                 c.mask.type, c.bias.type, c.lse, c.has_sink())
                        : aiter::mha_fwd(args, stream);
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());

    if (const std::optional<int> code = end_before_timing(ave_time, c.is_v3_check, ", not supported yet", aiter::mha_get_last_error))
        return *code;
    print_performance<T>(c, ave_time);
    if (c.validation == 0)
    {
        std::cout << std::endl;
        return kExitPass;
    }

    std::vector<float> out_o, out_lse, ref_o, ref_lse;
    if (const int rc = download_outputs<T>(c, l, d, out_o, out_lse); rc != kExitPass)
        return rc;
    if (const int rc = run_reference<T>(c, l, in, d, ref_o, ref_lse); rc != kExitPass)
        return rc;

    std::ostringstream log;
    const std::string rv_why = stores_randval(c) && c.validation == 1 ? randval_mismatch(c, l, d) : ""; // host-sized
    const bool pass = validate<T>(c, l, out_o, ref_o, out_lse, ref_lse, log) && rv_why.empty();
    log << rv_why;
    std::cout << ", valid:" << (pass ? "y" : "n") << std::endl << log.str() << std::flush;
    return pass ? kExitPass : kExitFailed;
}

// AITER's option rules, with its messages: -s_knew and -rotary_dim are ignored; cache_batch_idx is ignored with a
// paged cache or in group mode, dropout with split-KV or a KV cache; num_splits = 0 asks the library's heuristic;
// more than 128 is an error.
int legalize_splitkv(FwdConfig& c)
{
    if (c.seqlen_knew != 0) // as AITER, which builds without append-kv and RoPE
    {
        std::cerr << "fmha_fwd_appendkv() is not enabled. ignoring the 's_knew' option" << std::endl;
        c.seqlen_knew = 0;
    }
    if (c.rotary_dim > 0)
    {
        std::cerr << "rotary embedding is not supported. ignoring the 'rotary_dim' option" << std::endl;
        c.rotary_dim = 0;
    }
    if (c.cache_batch_idx && c.page_block_size > 0)
    {
        std::cerr << "paged-kvcache does not support cache_batch_idx. ignoring the 'cache_batch_idx' option" << std::endl;
        c.cache_batch_idx = false;
    }
    if (c.cache_batch_idx && c.group())
    {
        std::cerr << "group mode will not use cache_batch_idx. ignoring the 'cache_batch_idx' option" << std::endl;
        c.cache_batch_idx = false;
    }
    if (c.num_splits < 0 || c.page_block_size < 0)
        return fail(kExitBadArgs, "num_splits and page_block_size must be >= 0");
    if (c.num_splits == 0)
        c.num_splits = aiter::mha_fwd_splitkv_num_splits(
            c.batch, c.nhead, c.nhead_k, *std::max_element(c.seqlen_qs.begin(), c.seqlen_qs.end()),
            *std::max_element(c.seqlen_ks.begin(), c.seqlen_ks.end()), int(c.bias.type), c.hdim_q, c.hdim_v,
            c.page_block_size > 0);
    if (c.num_splits > 128)
        return fail(kExitFailed, "num_splits greater than 128 is not supported");
    if (c.p_drop > 0.f && c.use_splitkv())
    {
        std::cerr << "dropout is not supoprted by split-kv kernels. ignoring the 'p_drop' option" << std::endl;
        c.p_drop = 0.f;
    }
    return kExitPass;
}

} // namespace

int main(int argc, char* argv[])
{
    ArgParser parser = make_fwd_parser();
    if (!parser.parse(argc, argv))
        return kExitBadArgs;

    const std::string prec = parser.get_str("prec");
    if (prec != "fp16" && prec != "bf16" && prec != "fp8bf16")
    {
        std::cerr << "unsupported precision: " << prec << " (fp16, bf16, fp8bf16)" << std::endl;
        return kExitUnknownPrec;
    }

    FwdConfig config;
    if (const int rc = read_fwd_config(parser, config); rc != kExitPass)
        return rc;

    if (const int rc = legalize_splitkv(config); rc != kExitPass)
        return rc;

    // Features this build does not have answer like an unsupported call, without touching the GPU.
    if (const std::string reason = unsupported_reason(config); !reason.empty())
    {
        std::cout << header_line(config) << ", not supported yet" << std::endl;
        std::cerr << "reason: " << reason << " is not supported yet" << std::endl;
        return kExitFailed;
    }

    // Q, K, V (and a bias) on the host as 16-bit and float values, O read back and the reference's: refused before
    // any device work when far past this machine's memory
    if (host_inputs(config))
    {
        const ProblemSize z = problem_size(config);
        if (const int rc = check_host_memory("benchmark_mha_fwd",
                                             (z.q + z.k + z.v + 2 * z.o + z.bias) * (2 + sizeof(float)));
            rc != kExitPass)
            return rc;
    }

    int device_count        = 0;
    const cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess || device_count == 0)
    {
        std::cerr << "benchmark_mha_fwd: no CUDA GPU visible ("
                  << (error != cudaSuccess ? cudaGetErrorString(error) : "cudaGetDeviceCount returned 0") << ")"
                  << std::endl;
        return kExitFailed;
    }

    return run_guarded("benchmark_mha_fwd", [&] { return prec == "bf16" ? run<__nv_bfloat16>(config) : run<__half>(config); });
}
