// benchmark_mha_bwd: AITER's backward benchmark and verifier on top of aiter::mha_bwd (include/mha_bwd.h,
// libmha_bwd.so). Same flags, defaults, header line, "ms / TFlops / GB/s / valid:y|n" output and exit codes as AITER's
// op_tests/cpp/mha/benchmark_mha_bwd.cpp (spec sections 4.3-4.5): 0 pass, -1 bad arguments or -?, -2 unsupported,
// invalid, failed validation or CUDA error, -3 unknown -prec. Flags and the header live in bwd_config.h, the forward
// problem's layouts in bench_problem.h (shared with benchmark_mha_fwd). Flow as AITER's: the timed call first (O and
// LSE hold zeros then), and with -v=1 the host forward reference (csrc/reference/host_reference.h) supplies O and LSE,
// the library runs once more and dQ / dK / dV / dBias are compared with csrc/reference/host_reference_bwd.h. The
// dropout mask is rebuilt on the host from the library's Philox stream (csrc/common/philox.h).

#include "bench_common.h"
#include "bwd_config.h"
#include "common/philox.h"
#include "device_fill.h"
#include "mha_bwd.h"
#include "reference/host_reference.h"
#include "reference/host_reference_bwd.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace bench;

// The forward problem's tensors (ProblemLayout) and the gradients'. dO is laid out like O (operm); dQ like Q; dK / dV
// like K / V (iperm) but with nhead_q heads, AITER's contract; dBias [shape_b, h, shape_s_q, max_s_k] in the input
// layout (iperm), as AITER's benchmark allocates it.
struct BwdLayout
{
    ProblemLayout fwd;
    TensorLayout dout, dq, dk, dv, dbias;
    std::vector<int32_t> key_start; // [b + 1] cumulative seqlen_k: where batch b's keys start in the packed dK / dV
};

BwdLayout make_bwd_layout(const BwdConfig& c)
{
    BwdLayout l;
    l.fwd = make_problem_layout(c);
    const ProblemLayout& f = l.fwd;
    l.dout      = f.o;
    l.dq        = f.q;
    l.dk        = make_layout(c.iperm, f.shape_batch, c.nhead, f.shape_seqlen_k, c.hdim_q);
    l.dv        = make_layout(c.iperm, f.shape_batch, c.nhead, f.shape_seqlen_k, c.hdim_v);
    l.dbias     = make_layout(c.iperm, f.shape_batch, c.nhead, f.shape_seqlen_q, f.max_seqlen_k);
    l.key_start = cumulative(c.seqlen_ks);
    return l;
}

bool host_inputs(const BwdConfig& c) { return c.validation > 0; }

// The host-side inputs: values rounded to the dtype (T for the upload, float for the host references).
template <typename T>
struct HostInputs
{
    std::vector<T> q, k, v, dout, bias;
    std::vector<float> q_exact, k_exact, v_exact, dout_exact, bias_exact;
    std::vector<float> alibi_slopes; // [h] or [b, h]
};

template <typename T>
HostInputs<T> make_inputs(const BwdConfig& c, const BwdLayout& l)
{
    HostInputs<T> in;
    if (host_inputs(c)) // -v=0 fills Q / K / V / dO on the device (upload_inputs)
    {
        in.q.resize(size_t(l.fwd.q.elements));
        in.k.resize(size_t(l.fwd.k.elements));
        in.v.resize(size_t(l.fwd.v.elements));
        in.dout.resize(size_t(l.dout.elements));
        fill_tensor(c.init, c.seed, in.q, in.q_exact);
        fill_tensor(c.init, c.seed + 1, in.k, in.k_exact);
        fill_tensor(c.init, c.seed + 2, in.v, in.v_exact);
        fill_tensor(c.init, c.seed + 4, in.dout, in.dout_exact);
    }
    if (c.bias.type == bias_enum::elementwise_bias)
    {
        in.bias.resize(size_t(l.fwd.bias.elements));
        fill_tensor(c.init, c.seed + 3, in.bias, in.bias_exact);
    }
    if (c.bias.type == bias_enum::alibi)
    {
        const std::vector<float> slopes = alibi_slopes(c.nhead);
        for (int b = 0; b < (c.bias.rank_info == 1 ? c.batch : 1); ++b)
            in.alibi_slopes.insert(in.alibi_slopes.end(), slopes.begin(), slopes.end());
    }
    return in;
}

// mha_bwd's workspace_alloc: device blocks that live as long as the pool (the end of run()). Each mha_bwd call starts
// with begin_call(); its requests then take the first free block large enough, else a new cudaMalloc. Handing a block
// to the next call is safe because every call and every zero-fill is queued on the same (default) stream.
class WorkspacePool
{
public:
    WorkspacePool() = default;
    WorkspacePool(const WorkspacePool&) = delete;
    WorkspacePool& operator=(const WorkspacePool&) = delete;
    ~WorkspacePool()
    {
        for (const Block& b : blocks_)
            cudaFree(b.ptr);
    }

    void begin_call()
    {
        for (Block& b : blocks_)
            b.in_use = false;
    }

    // nullptr (after saying why) when the memory cannot be had; the library then fails the call.
    void* allocate(size_t bytes, bool zero_init)
    {
        auto it = std::find_if(blocks_.begin(), blocks_.end(),
                               [bytes](const Block& b) { return !b.in_use && b.bytes >= bytes; });
        if (it == blocks_.end())
        {
            void* p               = nullptr;
            const cudaError_t err = cudaMalloc(&p, std::max(bytes, kMinBytes));
            if (err != cudaSuccess)
            {
                std::cerr << "workspace_alloc: cudaMalloc of " << bytes << " bytes failed: " << cudaGetErrorString(err)
                          << std::endl;
                return nullptr;
            }
            blocks_.push_back(Block{p, std::max(bytes, kMinBytes), false});
            it = blocks_.end() - 1;
            // a new block the library did not ask to be zeroed starts as NaN (0xFF bytes), so an accumulator tile the
            // pass reads without zeroing fails validation (a reused block holds the previous call's sums instead)
            if (!zero_init)
                if (const cudaError_t e = cudaMemsetAsync(p, 0xFF, it->bytes, nullptr); e != cudaSuccess)
                {
                    std::cerr << "workspace_alloc: cudaMemsetAsync failed: " << cudaGetErrorString(e) << std::endl;
                    return nullptr;
                }
        }
        if (zero_init && bytes > 0)
        {
            const cudaError_t err = cudaMemsetAsync(it->ptr, 0, bytes, nullptr);
            if (err != cudaSuccess)
            {
                std::cerr << "workspace_alloc: cudaMemsetAsync failed: " << cudaGetErrorString(err) << std::endl;
                return nullptr;
            }
        }
        it->in_use = true;
        return it->ptr;
    }

private:
    struct Block
    {
        void* ptr;
        size_t bytes;
        bool in_use;
    };
    static constexpr size_t kMinBytes = 256;
    std::vector<Block> blocks_;
};

// mha_bwd's pinned_host_alloc (group mode): page-locked host memory, freed when the library drops its last reference.
std::shared_ptr<void> pinned_host_alloc(size_t bytes)
{
    void* p               = nullptr;
    const cudaError_t err = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess)
    {
        std::cerr << "pinned_host_alloc: cudaMallocHost of " << bytes << " bytes failed: " << cudaGetErrorString(err)
                  << std::endl;
        return nullptr;
    }
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

// AITER's s_randval: the library stores the dropout random values of the validated run.
bool store_randval(const BwdConfig& c) { return c.p_drop > 0.f && c.validation != 0; }

// Device copies of everything the call reads or writes.
struct DeviceTensors
{
    DeviceBuffer q, k, v, o, lse, dout, d, dq, dk, dv, bias, dbias;
    DeviceBuffer randval;                // store_randval: [shape_b, h, shape_s_q, max_s_k] uint8
    DeviceBuffer seqstart_q, seqstart_k; // group mode
    DeviceBuffer drop_seed_offset;       // -drop_prefs=1: {seed, offset} as uint64
};

template <typename T>
int upload_inputs(const BwdConfig& c, const BwdLayout& l, const HostInputs<T>& in, DeviceTensors& d)
{
    const ProblemLayout& f = l.fwd;
    if (host_inputs(c))
    {
        BENCH_CHECK_CUDA(d.q.upload(in.q));
        BENCH_CHECK_CUDA(d.k.upload(in.k));
        BENCH_CHECK_CUDA(d.v.upload(in.v));
        BENCH_CHECK_CUDA(d.dout.upload(in.dout));
        // the timed call sees O = 0 and LSE = 0; the validation call gets the forward reference's
        BENCH_CHECK_CUDA(d.o.allocate(sizeof(T) * f.o.elements));
        BENCH_CHECK_CUDA(cudaMemset(d.o.get(), 0, sizeof(T) * f.o.elements));
    }
    else
    {
        BENCH_CHECK_CUDA(device_fill<T>(d.q, f.q.elements, c.seed));
        BENCH_CHECK_CUDA(device_fill<T>(d.k, f.k.elements, c.seed + 1));
        BENCH_CHECK_CUDA(device_fill<T>(d.v, f.v.elements, c.seed + 2));
        BENCH_CHECK_CUDA(device_fill<T>(d.dout, l.dout.elements, c.seed + 4));
        BENCH_CHECK_CUDA(device_fill<T>(d.o, f.o.elements, c.seed + 5));
    }
    BENCH_CHECK_CUDA(d.lse.allocate(sizeof(float) * f.lse_elements));
    BENCH_CHECK_CUDA(cudaMemset(d.lse.get(), 0, sizeof(float) * f.lse_elements));
    BENCH_CHECK_CUDA(d.d.allocate(sizeof(float) * f.lse_elements));
    BENCH_CHECK_CUDA(d.dq.allocate(sizeof(T) * l.dq.elements));
    BENCH_CHECK_CUDA(d.dk.allocate(sizeof(T) * l.dk.elements));
    BENCH_CHECK_CUDA(d.dv.allocate(sizeof(T) * l.dv.elements));
    if (c.dbias)
        BENCH_CHECK_CUDA(d.dbias.allocate(sizeof(T) * l.dbias.elements));
    if (c.bias.type == bias_enum::elementwise_bias)
        BENCH_CHECK_CUDA(d.bias.upload(in.bias));
    if (c.bias.type == bias_enum::alibi)
        BENCH_CHECK_CUDA(d.bias.upload(in.alibi_slopes));
    if (c.group())
    {
        BENCH_CHECK_CUDA(d.seqstart_q.upload(f.seqstart_q));
        BENCH_CHECK_CUDA(d.seqstart_k.upload(f.seqstart_k));
    }
    if (c.p_drop > 0.f && c.drop_prefs)
        BENCH_CHECK_CUDA(d.drop_seed_offset.upload(std::vector<uint64_t>{c.drop_seed, c.drop_offset}));
    if (store_randval(c))
        BENCH_CHECK_CUDA(d.randval.allocate(std::max<size_t>(size_t(f.randval.elements), 1)));
    return kExitPass;
}

// Every field set explicitly. As AITER: with dropout and -v=1 the library stores its random values
// (is_store_randval); -v=1 checks them against philox.h's and builds its reference from the host's.
aiter::mha_bwd_args make_bwd_args(const BwdConfig& c, const BwdLayout& l, const DeviceTensors& d,
                                  WorkspacePool& pool)
{
    const ProblemLayout& f = l.fwd;
    aiter::mha_bwd_args a{};
    a.use_asm_v3     = c.bwd_v3;
    a.v3_atomic_fp32 = c.v3_atomic_fp32;
    a.v3_bf16_cvt    = c.v3_bf16_cvt;
    a.v3_api_check   = c.v3_api_check;

    a.hdim_q           = c.hdim_q;
    a.hdim_v           = c.hdim_v;
    a.data_type        = c.prec;
    a.is_group_mode    = c.group();
    a.mask_type        = int(c.mask.type);
    a.bias_type        = int(c.bias.type);
    a.has_dbias        = c.dbias;
    a.has_dropout      = c.p_drop > 0.f;
    a.is_store_randval = store_randval(c);
    a.is_deterministic = c.deterministic;

    a.q_ptr        = d.q.get();
    a.k_ptr        = d.k.get();
    a.v_ptr        = d.v.get();
    a.bias_ptr     = c.bias.type != bias_enum::no_bias ? d.bias.get() : nullptr;
    a.o_ptr        = d.o.get();
    a.lse_ptr      = d.lse.get();
    a.do_ptr       = d.dout.get();
    a.d_ptr        = d.d.get();
    a.rand_val_ptr = store_randval(c) ? d.randval.get() : nullptr;
    a.dq_ptr       = d.dq.get();
    a.dk_ptr       = d.dk.get();
    a.dv_ptr       = d.dv.get();
    a.dbias_ptr    = c.dbias ? d.dbias.get() : nullptr;
    a.sink_ptr     = nullptr;
    a.d_sink_ptr   = nullptr;

    a.seqstart_q_ptr  = c.group() ? d.seqstart_q.get() : nullptr;
    a.seqstart_k_ptr  = c.group() ? d.seqstart_k.get() : nullptr;
    a.seqlen_q_ptr    = nullptr;
    a.seqlen_k_ptr    = nullptr;
    a.cu_seqlen_q_ptr = nullptr;
    a.cu_seqlen_k_ptr = nullptr;

    a.seqlen_q     = f.shape_seqlen_q;
    a.seqlen_k     = f.shape_seqlen_k;
    a.batch        = c.batch;
    a.max_seqlen_q = f.max_seqlen_q;
    a.max_seqlen_k = f.max_seqlen_k;
    a.nhead_q      = c.nhead;
    a.nhead_k      = c.nhead_k;
    a.scale        = c.scale_s;

    a.stride_q       = idx(f.q.strides.row);
    a.stride_k       = idx(f.k.strides.row);
    a.stride_v       = idx(f.v.strides.row);
    a.stride_bias    = c.bias.type == bias_enum::alibi ? (c.bias.rank_info == 1 ? c.nhead : 0)
                                                       : idx(f.bias.strides.row);
    a.stride_o       = idx(f.o.strides.row);
    a.stride_randval = store_randval(c) ? idx(f.randval.strides.row) : 0;
    a.stride_do      = idx(l.dout.strides.row);
    a.stride_dq      = idx(l.dq.strides.row);
    a.stride_dk      = idx(l.dk.strides.row);
    a.stride_dv      = idx(l.dv.strides.row);
    a.stride_dbias   = idx(l.dbias.strides.row);

    a.nhead_stride_q       = idx(f.q.strides.head);
    a.nhead_stride_k       = idx(f.k.strides.head);
    a.nhead_stride_v       = idx(f.v.strides.head);
    a.nhead_stride_bias    = c.bias.type == bias_enum::elementwise_bias ? idx(f.bias.strides.head) : 0;
    a.nhead_stride_o       = idx(f.o.strides.head);
    a.nhead_stride_randval = store_randval(c) ? idx(f.randval.strides.head) : 0;
    a.nhead_stride_do      = idx(l.dout.strides.head);
    a.nhead_stride_lsed    = idx(f.lse.head);
    a.nhead_stride_dq      = idx(l.dq.strides.head);
    a.nhead_stride_dk      = idx(l.dk.strides.head);
    a.nhead_stride_dv      = idx(l.dv.strides.head);
    a.nhead_stride_dbias   = idx(l.dbias.strides.head);

    a.batch_stride_q       = idx(f.q.strides.batch);
    a.batch_stride_k       = idx(f.k.strides.batch);
    a.batch_stride_v       = idx(f.v.strides.batch);
    a.batch_stride_bias    = c.bias.type == bias_enum::elementwise_bias ? idx(f.bias.strides.batch) : 0;
    a.batch_stride_o       = idx(f.o.strides.batch);
    a.batch_stride_randval = store_randval(c) ? idx(f.randval.strides.batch) : 0;
    a.batch_stride_do      = idx(l.dout.strides.batch);
    a.batch_stride_lsed    = idx(f.lse.batch);
    a.batch_stride_dq      = idx(l.dq.strides.batch);
    a.batch_stride_dk      = idx(l.dk.strides.batch);
    a.batch_stride_dv      = idx(l.dv.strides.batch);
    a.batch_stride_dbias   = idx(l.dbias.strides.batch);

    a.window_size_left  = c.mask.left;
    a.window_size_right = c.mask.right;
    a.p_drop            = c.p_drop;
    a.p_undrop          = 1.f - c.p_drop;
    if (c.p_drop > 0.f && c.drop_prefs)
    {
        const uint64_t* seed_offset = d.drop_seed_offset.as<uint64_t>();
        a.drop_seed_offset          = std::pair<const void*, const void*>{seed_offset, seed_offset + 1};
    }
    else
        a.drop_seed_offset = std::pair<uint64_t, uint64_t>{c.drop_seed, c.drop_offset};

    a.workspace_alloc   = [&pool](size_t bytes, bool zero_init) { return pool.allocate(bytes, zero_init); };
    a.pinned_host_alloc = pinned_host_alloc;
    return a;
}

// The library's dropout random values, [shape_b, h, shape_s_q, max_s_k] uint8 (ProblemLayout::randval):
// mha::dropout_value(seed, offset, b * nhead_q + h, row, col) (philox.h), rows and columns counted inside batch b
// (group mode too).
std::vector<uint8_t> dropout_randval(const BwdConfig& c, const ProblemLayout& f)
{
    std::vector<uint8_t> randval(size_t(f.randval.elements), 0);
    const int32_t* seqstart = c.group() ? f.seqstart_q.data() : nullptr;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.nhead; ++h)
            for (int i = 0; i < c.seqlen_qs[b]; ++i)
            {
                uint8_t* row = randval.data() + reference::element_offset(f.randval.strides, seqstart, b, h, i);
                for (int j = 0; j < c.seqlen_ks[b]; ++j)
                    row[j] = mha::dropout_value(c.drop_seed, c.drop_offset,
                                                uint32_t(b) * uint32_t(c.nhead) + uint32_t(h), i, j);
            }
    return randval;
}

// Calls f(b, h, i, packed row) for every row of every (batch, head): the references' packed row is
// nhead * start[b] + h * lens[b] + i (start = out_start for query rows, key_start for key rows).
template <typename F>
void for_each_packed_row(const BwdConfig& c, const std::vector<int32_t>& lens, const std::vector<int32_t>& start,
                         F&& f)
{
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.nhead; ++h)
            for (int i = 0; i < lens[b]; ++i)
                f(b, h, i, int64_t(c.nhead) * start[b] + int64_t(h) * lens[b] + i);
}

// Reads a device-layout tensor back as packed fp32 rows `width` wide (the first `cols` columns filled).
template <typename T>
int download_packed(const DeviceBuffer& buf, const TensorLayout& t, const int32_t* seqstart, const BwdConfig& c,
                    const std::vector<int32_t>& lens, const std::vector<int32_t>& start, int cols, int width,
                    std::vector<float>& out)
{
    std::vector<T> host(size_t(t.elements));
    BENCH_CHECK_CUDA(cudaMemcpy(host.data(), buf.get(), sizeof(T) * host.size(), cudaMemcpyDeviceToHost));
    out.assign(size_t(int64_t(c.nhead) * start.back() * width), 0.f);
    for_each_packed_row(c, lens, start, [&](int b, int h, int i, int64_t row) {
        const T* src = host.data() + reference::element_offset(t.strides, seqstart, b, h, i);
        for (int x = 0; x < cols; ++x)
            out[size_t(row * width + x)] = DTypeTraits<T>::to_float(src[x]);
    });
    return kExitPass;
}

// -v=1, before the validation call: the forward reference's O (rounded to T) and LSE in the device layouts; dQ, dK,
// dV poisoned with NaN (0xFF bytes) so an element the library does not write fails; dBias zeroed, as AITER does.
template <typename T>
int upload_forward(const BwdConfig& c, const BwdLayout& l, const std::vector<float>& ref_o,
                   const std::vector<float>& ref_lse, DeviceTensors& d)
{
    const ProblemLayout& f  = l.fwd;
    const int32_t* seqstart = c.group() ? f.seqstart_q.data() : nullptr;
    std::vector<T> o(size_t(f.o.elements), DTypeTraits<T>::from_float(0.f));
    std::vector<float> lse(size_t(f.lse_elements), 0.f);
    for_each_packed_row(c, c.seqlen_qs, f.out_start, [&](int b, int h, int i, int64_t row) {
        T* dst = o.data() + reference::element_offset(f.o.strides, seqstart, b, h, i);
        for (int x = 0; x < c.hdim_v; ++x)
            dst[x] = DTypeTraits<T>::from_float(ref_o[size_t(row * c.hdim_v + x)]);
        lse[size_t(reference::element_offset(f.lse, seqstart, b, h, i))] = ref_lse[size_t(row)];
    });
    BENCH_CHECK_CUDA(cudaMemcpy(d.o.get(), o.data(), sizeof(T) * o.size(), cudaMemcpyHostToDevice));
    BENCH_CHECK_CUDA(cudaMemcpy(d.lse.get(), lse.data(), sizeof(float) * lse.size(), cudaMemcpyHostToDevice));
    BENCH_CHECK_CUDA(cudaMemset(d.dq.get(), 0xFF, sizeof(T) * l.dq.elements));
    BENCH_CHECK_CUDA(cudaMemset(d.dk.get(), 0xFF, sizeof(T) * l.dk.elements));
    BENCH_CHECK_CUDA(cudaMemset(d.dv.get(), 0xFF, sizeof(T) * l.dv.elements));
    if (c.dbias)
        BENCH_CHECK_CUDA(cudaMemset(d.dbias.get(), 0, sizeof(T) * l.dbias.elements));
    if (store_randval(c)) // poisoned: the timed passes stored the same values
        BENCH_CHECK_CUDA(cudaMemset(d.randval.get(), 0xA5, size_t(f.randval.elements)));
    return kExitPass;
}

// Packed fp32 gradients (host_reference_bwd.h's AttentionGrads layout), the library's or the reference's.
struct Grads
{
    std::vector<float> dq, dk, dv, dbias; // dbias rows are max_seqlen_k wide
};

// The reference: the forward pass (O, LSE) and the backward pass from the same problem and dropout mask.
// randval: the host's dropout random values (dropout_randval), empty without dropout.
template <typename T>
void run_references(const BwdConfig& c, const BwdLayout& l, const HostInputs<T>& in, std::vector<float>& ref_o,
                    std::vector<float>& ref_lse, Grads& ref, std::vector<uint8_t>& randval)
{
    const ProblemLayout& f = l.fwd;
    const int64_t q_rows   = int64_t(c.nhead) * f.out_start.back();
    const int64_t k_rows   = int64_t(c.nhead) * l.key_start.back();
    const int dbias_width  = std::max(f.max_seqlen_k, 1);
    randval = c.p_drop > 0.f ? dropout_randval(c, f) : std::vector<uint8_t>{};
    ref_o.assign(size_t(q_rows * c.hdim_v), 0.f);
    ref_lse.assign(size_t(q_rows), 0.f);
    const ReferenceArrays host{c.seqlen_qs.data(),
                               c.seqlen_ks.data(),
                               f.out_start.data(),
                               c.group() ? f.seqstart_q.data() : nullptr,
                               c.group() ? f.seqstart_k.data() : nullptr,
                               in.q_exact.data(),
                               in.k_exact.data(),
                               in.v_exact.data(),
                               in.bias_exact.data(),
                               in.alibi_slopes.data(),
                               nullptr,
                               randval.data(),
                               ref_o.data(),
                               ref_lse.data()};
    const reference::AttentionProblem p = make_reference_problem(c, f, host);
    reference::reference_attention_fwd(p);

    // dO in the packed query-row layout of the backward reference
    std::vector<float> dout(size_t(q_rows * c.hdim_v));
    const int32_t* seqstart = c.group() ? f.seqstart_q.data() : nullptr;
    for_each_packed_row(c, c.seqlen_qs, f.out_start, [&](int b, int h, int i, int64_t row) {
        const float* src = in.dout_exact.data() + reference::element_offset(l.dout.strides, seqstart, b, h, i);
        std::copy_n(src, c.hdim_v, dout.begin() + row * c.hdim_v);
    });
    ref.dq.assign(size_t(q_rows * c.hdim_q), 0.f);
    ref.dk.assign(size_t(k_rows * c.hdim_q), 0.f);
    ref.dv.assign(size_t(k_rows * c.hdim_v), 0.f);
    ref.dbias.assign(c.dbias ? size_t(q_rows * dbias_width) : 0, 0.f);
    std::vector<float> o_read(ref_o.size());
    for (size_t e = 0; e < o_read.size(); ++e)
        o_read[e] = DTypeTraits<T>::to_float(DTypeTraits<T>::from_float(ref_o[e]));
    const reference::AttentionGrads g{dout.data(),   l.key_start.data(), ref.dq.data(), ref.dk.data(),
                                      ref.dv.data(), c.dbias ? ref.dbias.data() : nullptr, dbias_width,
                                      o_read.data(), [](float x) { return DTypeTraits<T>::to_float(DTypeTraits<T>::from_float(x)); }};
    reference::reference_attention_bwd(p, g);
}

template <typename T>
int download_grads(const BwdConfig& c, const BwdLayout& l, const DeviceTensors& d, Grads& out)
{
    const ProblemLayout& f    = l.fwd;
    const int32_t* seqstart_q = c.group() ? f.seqstart_q.data() : nullptr;
    const int32_t* seqstart_k = c.group() ? f.seqstart_k.data() : nullptr;
    const int hq = c.hdim_q, hv = c.hdim_v;
    if (const int rc = download_packed<T>(d.dq, l.dq, seqstart_q, c, c.seqlen_qs, f.out_start, hq, hq, out.dq);
        rc != kExitPass)
        return rc;
    if (const int rc = download_packed<T>(d.dk, l.dk, seqstart_k, c, c.seqlen_ks, l.key_start, hq, hq, out.dk);
        rc != kExitPass)
        return rc;
    if (const int rc = download_packed<T>(d.dv, l.dv, seqstart_k, c, c.seqlen_ks, l.key_start, hv, hv, out.dv);
        rc != kExitPass)
        return rc;
    if (c.dbias) // rows as wide as the reference's (max_seqlen_k, at least 1)
        return download_packed<T>(d.dbias, l.dbias, seqstart_q, c, c.seqlen_qs, f.out_start, f.max_seqlen_k,
                                  std::max(f.max_seqlen_k, 1), out.dbias);
    return kExitPass;
}

// Batch b's [h, s_q, s_k] block of packed dBias rows that are `width` wide.
std::vector<float> dbias_block(const std::vector<float>& packed, int64_t row0, int rows, int cols, int width)
{
    std::vector<float> block(size_t(int64_t(rows) * cols));
    for (int64_t r = 0; r < rows; ++r)
        std::copy_n(packed.begin() + (row0 + r) * width, cols, block.begin() + r * cols);
    return block;
}

// AITER's tolerances: 1e-2, and 3.2e-2 for bf16 with both head dims above 128.
template <typename T>
double tolerance(const BwdConfig& c)
{
    constexpr double kTol = 1e-2, kTolBf16Large = 3.2e-2;
    return std::is_same_v<T, __nv_bfloat16> && c.hdim_q > 128 && c.hdim_v > 128 ? kTolBf16Large : kTol;
}

// AITER's elementwise check, and ours on top: the largest error at most kMaxRelErr of the largest reference value, or
// a tenth of AITER's tolerance where the gradient is about zero (one visible key per row: dS = P (dP - D) cancels to
// rounding noise). Inputs in [-1, 1) make dQ and dK about as small as AITER's atol, so its check alone passes a dQ off
// by 10% or one without D on unmasked shapes. Every run of smoke_test_bwd.sh must pass both.
constexpr double kMaxRelErr = 0.05, kRelErrFloor = 0.1;
bool check_grad(const float* out, const float* ref, int64_t n, int rows, int cols, double tol, const char* msg,
                std::ostream& log)
{
    if (!check_slice(out, ref, n, rows, cols, tol, tol, false, msg, log))
        return false;
    double max_ref = 0.0, max_err = 0.0;
    for (int64_t i = 0; i < n; ++i)
        max_ref = std::max(max_ref, double(std::abs(ref[i]))),
        max_err = std::max(max_err, double(std::abs(out[i] - ref[i])));
    if (max_err <= std::max(kMaxRelErr * max_ref, kRelErrFloor * tol))
        return true;
    log << msg << "\n" << std::setprecision(7) << "max err: " << max_err << " > " << kMaxRelErr
        << " x max |ref| (" << max_ref << ") and > " << kRelErrFloor * tol << "\n";
    return false;
}

// Compares batch by batch, every gradient of a batch, and stops at the first failing batch, as AITER does.
template <typename T>
bool validate(const BwdConfig& c, const BwdLayout& l, const Grads& out, const Grads& ref, std::ostream& log)
{
    const double tol = tolerance<T>(c);
    const int width  = std::max(l.fwd.max_seqlen_k, 1);
    for (int b = 0; b < c.batch; ++b)
    {
        const int sq = c.seqlen_qs[b], sk = c.seqlen_ks[b];
        const int64_t q0 = int64_t(c.nhead) * l.fwd.out_start[b], k0 = int64_t(c.nhead) * l.key_start[b];
        const int64_t nq = int64_t(c.nhead) * sq, nk = int64_t(c.nhead) * sk;
        bool pass = check_grad(out.dq.data() + q0 * c.hdim_q, ref.dq.data() + q0 * c.hdim_q, nq * c.hdim_q, sq,
                               c.hdim_q, tol, "Error: QGrad Incorrect results!", log);
        pass &= check_grad(out.dk.data() + k0 * c.hdim_q, ref.dk.data() + k0 * c.hdim_q, nk * c.hdim_q, sk,
                           c.hdim_q, tol, "Error: KGrad Incorrect results!", log);
        pass &= check_grad(out.dv.data() + k0 * c.hdim_v, ref.dv.data() + k0 * c.hdim_v, nk * c.hdim_v, sk,
                           c.hdim_v, tol, "Error: VGrad Incorrect results!", log);
        if (c.dbias)
        {
            const std::vector<float> o = dbias_block(out.dbias, q0, int(nq), sk, width);
            const std::vector<float> r = dbias_block(ref.dbias, q0, int(nq), sk, width);
            pass &= check_grad(o.data(), r.data(), nq * sk, sq, sk, tol, "Error: BiasGrad Incorrect results!", log);
        }
        if (!pass)
        {
            log << "mismatch found at batch: " << b << "\n\tseqlen_q: " << sq << "\n\tseqlen_k: " << sk
                << "\n\tseqstart_q: " << str(l.fwd.seqstart_q) << "\n\tseqstart_k: " << str(l.fwd.seqstart_k) << "\n";
            return false;
        }
    }
    return true;
}

// The stored random values (is_store_randval) against the host's, every (b, h, i < s_q, j < s_k) of the batches.
bool check_randval(const BwdConfig& c, const ProblemLayout& f, const std::vector<uint8_t>& stored,
                   const std::vector<uint8_t>& host, std::ostream& log)
{
    const int32_t* seqstart = c.group() ? f.seqstart_q.data() : nullptr;
    int64_t errors = 0;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.nhead; ++h)
            for (int i = 0; i < c.seqlen_qs[b]; ++i)
            {
                const int64_t row = reference::element_offset(f.randval.strides, seqstart, b, h, i);
                for (int j = 0; j < c.seqlen_ks[b]; ++j)
                    if (stored[size_t(row + j)] != host[size_t(row + j)] && errors++ < 5)
                        log << (errors == 1 ? "Error: RandVal Incorrect results!\n" : "") << "  randval[b:" << b
                            << ", h:" << h << ", s:" << i << ", s_k:" << j << "] = " << int(stored[size_t(row + j)])
                            << " != " << int(host[size_t(row + j)]) << "\n";
            }
    if (errors > 0)
        log << "number of errors: " << errors << "\n";
    return errors == 0;
}

// ", X ms, Y TFlops, Z GB/s". FLOPs per batch: Q K^T, dS^T Q and dS K over hdim_q (3 x 2 s_q s_k d) and dO V^T,
// P^T dO over hdim_v (2 x 2 s_q s_k d_v), AITER's count; halved under any mask, as benchmark_mha_fwd does (and as
// AITER PR #4874 makes both of its hosts do; AITER's HEAD backward host does not halve yet). Bytes: one pass over Q, K,
// V, O, dO, dQ, dK, dV with h heads (AITER's, not h_k) plus the fp32 LSE.
template <typename T>
void print_performance(const BwdConfig& c, float ave_time)
{
    double flop = 0.0, bytes = 0.0;
    for (int b = 0; b < c.batch; ++b)
    {
        const double sq = c.seqlen_qs[b], sk = c.seqlen_ks[b], dq = c.hdim_q, dv = c.hdim_v;
        flop += double(c.nhead) * (3.0 * 2.0 * sq * sk * dq + 2.0 * 2.0 * sq * sk * dv);
        bytes += double(c.nhead) * (sizeof(T) * (2.0 * sq * dq + 2.0 * sk * dq + 2.0 * sk * dv + 2.0 * sq * dv) +
                                    sizeof(float) * sq);
    }
    if (c.mask.type != mask_enum::no_mask)
        flop *= 0.5;
    const double ms = ave_time > 0.f ? double(ave_time) : 0.0; // 0: nothing was launched (every s_q is 0)
    std::cout << std::fixed << ", " << std::setprecision(3) << ave_time << " ms, " << std::setprecision(2)
              << (ms > 0 ? flop / 1e9 / ms : 0.0) << " TFlops, " << std::setprecision(2)
              << (ms > 0 ? bytes / 1e6 / ms : 0.0) << " GB/s" << std::flush;
}

template <typename T>
int run(const BwdConfig& c)
{
    const BwdLayout l = make_bwd_layout(c);
    std::vector<const TensorLayout*> strided{&l.fwd.q, &l.fwd.k, &l.fwd.v, &l.fwd.o, &l.dk, &l.dv};
    if (c.bias.type == bias_enum::elementwise_bias)
        strided.push_back(&l.fwd.bias);
    if (c.dbias)
        strided.push_back(&l.dbias);
    if (store_randval(c))
        strided.push_back(&l.fwd.randval);
    for (const TensorLayout* t : strided) // the aiter strides are int32
        if (!fits_index(t->strides.head) || (!c.group() && !fits_index(t->strides.batch)))
            return fail(kExitFailed, "a tensor of ", t->elements,
                        " elements needs strides beyond the int32 ones of aiter::mha_bwd_args");
    if (!fits_index(l.fwd.lse.head) || (!c.group() && !fits_index(l.fwd.lse.batch)))
        return fail(kExitFailed, "the LSE strides exceed int32");
    const HostInputs<T> in = make_inputs<T>(c, l);
    DeviceTensors d;
    if (const int rc = upload_inputs(c, l, in, d); rc != kExitPass)
        return rc;
    WorkspacePool pool; // serves args.workspace_alloc, so it outlives args
    const aiter::mha_bwd_args args = make_bwd_args(c, l, d, pool);

    std::cout << header_line(c) << std::endl;
    const ck_tile::stream_config stream{nullptr, true, c.kname, c.warmup, c.repeat, c.gpu_timer, c.flush_cache};
    pool.begin_call();
    const float ave_time = aiter::mha_bwd(args, stream);
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    // -v3_api_check=1: 1 without a launch when the asm backward covers the call; otherwise ck ran (AITER HEAD)
    if (c.v3_api_check && ave_time > 0.f && std::strstr(aiter::mha_get_last_kernel_name(), "_asm_v3_") != nullptr)
    {
        std::cout << ", v3 supported" << std::endl;
        return kExitPass;
    }

    if (const std::optional<int> code =
            end_before_timing(ave_time, false, "not supported yet", aiter::mha_get_last_error))
        return *code;
    print_performance<T>(c, ave_time);
    if (c.validation == 0)
    {
        std::cout << std::endl;
        return kExitPass;
    }

    std::vector<float> ref_o, ref_lse;
    std::vector<uint8_t> randval;
    Grads ref, out;
    run_references<T>(c, l, in, ref_o, ref_lse, ref, randval);
    if (const int rc = upload_forward<T>(c, l, ref_o, ref_lse, d); rc != kExitPass)
        return rc;
    const ck_tile::stream_config once{nullptr, true, 0, 0, 1, c.gpu_timer};
    pool.begin_call();
    const float check_time = aiter::mha_bwd(args, once);
    BENCH_CHECK_CUDA(cudaDeviceSynchronize());
    if (check_time < 0.f)
    {
        std::cout << ", valid:n" << std::endl;
        std::cerr << "reason: the validation call failed: " << aiter::mha_get_last_error() << std::endl;
        return kExitFailed;
    }
    if (const int rc = download_grads<T>(c, l, d, out); rc != kExitPass)
        return rc;

    std::ostringstream log;
    bool pass = validate<T>(c, l, out, ref, log);
    if (pass && store_randval(c))
    {
        std::vector<uint8_t> stored(size_t(l.fwd.randval.elements));
        BENCH_CHECK_CUDA(cudaMemcpy(stored.data(), d.randval.get(), stored.size(), cudaMemcpyDeviceToHost));
        pass = check_randval(c, l.fwd, stored, randval, log);
    }
    std::cout << ", valid:" << (pass ? "y" : "n") << std::endl << log.str() << std::flush;
    return pass ? kExitPass : kExitFailed;
}

} // namespace

int main(int argc, char* argv[])
{
    ArgParser parser = make_bwd_parser();
    if (!parser.parse(argc, argv))
        return kExitBadArgs;

    const std::string prec = parser.get_str("prec");
    if (prec != "fp16" && prec != "bf16")
    {
        std::cerr << "unsupported precision: " << prec << " (fp16, bf16)" << std::endl;
        return kExitUnknownPrec;
    }

    BwdConfig config;
    if (const int rc = read_bwd_config(parser, config); rc != kExitPass)
        return rc;

    // What mha_bwd_args cannot express answers like an unsupported call, without touching the GPU.
    if (const std::string reason = unsupported_reason(config); !reason.empty())
    {
        std::cout << header_line(config) << std::endl << "not supported yet" << std::endl;
        std::cerr << "reason: " << reason << std::endl;
        return kExitFailed;
    }

    // Q, K, V, dO (and a bias) on the host as 16-bit and float values, O, the gradients read back and the
    // references': refused before any device work when far past this machine's memory
    if (host_inputs(config))
    {
        const ProblemSize z = problem_size(config);
        if (const int rc = check_host_memory("benchmark_mha_bwd",
                                             (2 * (z.q + z.k + z.v) + 3 * z.o + 2 * z.bias) * (2 + sizeof(float)));
            rc != kExitPass)
            return rc;
    }

    int device_count        = 0;
    const cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess || device_count == 0)
    {
        std::cerr << "benchmark_mha_bwd: no CUDA GPU visible ("
                  << (error != cudaSuccess ? cudaGetErrorString(error) : "cudaGetDeviceCount returned 0") << ")"
                  << std::endl;
        return kExitFailed;
    }

    return run_guarded("benchmark_mha_bwd", [&] { return prec == "bf16" ? run<__nv_bfloat16>(config) : run<__half>(config); });
}
