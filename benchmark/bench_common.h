#pragma once
// Host-side pieces the MHA benchmarks share: exit codes and the CUDA check, fp16/bf16 traits and tolerances, device
// buffers, input generation as CK's benchmarks do it (tensor init methods, per-batch sequence lengths of group mode,
// ALiBi slopes) and check_err, the elementwise comparison with AITER's message format.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <new>
#include <ostream>
#include <stdexcept>
#include <random>
#include <vector>

#include <unistd.h>

namespace bench {

constexpr int kExitPass        = 0;
constexpr int kExitBadArgs     = -1;
constexpr int kExitFailed      = -2; // unsupported, invalid, validation failed, no GPU or CUDA error
constexpr int kExitUnknownPrec = -3;

#define BENCH_CHECK_CUDA(expr)                                                                                        \
    do                                                                                                                 \
    {                                                                                                                  \
        const cudaError_t bench_err_ = (expr);                                                                         \
        if (bench_err_ != cudaSuccess)                                                                                 \
        {                                                                                                              \
            std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(bench_err_)); \
            return bench::kExitFailed;                                                                                 \
        }                                                                                                              \
    } while (0)

// Runs a benchmark body: host memory the problem's tensors need and this machine lacks (the inputs, outputs and
// reference copies are sized from the flags) is a message and kExitFailed rather than std::terminate.
template <typename Body>
int run_guarded(const char* tool, Body&& body)
{
    try
    {
        return body();
    }
    catch (const std::bad_alloc&)
    {
        std::cerr << tool << ": not enough host memory for this problem's host tensors (inputs, outputs and the "
                  << "reference's copies); use smaller sizes, or -v=0 to skip the host reference" << std::endl;
    }
    catch (const std::length_error& e)
    {
        std::cerr << tool << ": a host tensor is too large for this machine (" << e.what() << ")" << std::endl;
    }
    return kExitFailed;
}

// The host memory a run's host tensors would take (an estimate: the inputs in their dtype and as exact floats, the
// outputs read back and the reference's) against this machine's physical memory: a problem far past it is refused
// up front with a message instead of paging for minutes (or being killed) while its inputs are filled.
inline int check_host_memory(const char* tool, double bytes)
{
    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page_size <= 0)
        return kExitPass;
    const double physical = double(pages) * double(page_size);
    if (bytes <= physical)
        return kExitPass;
    std::cerr << tool << ": the host tensors of this problem need about " << bytes / double(1 << 30)
              << " GiB, more than this machine's " << physical / double(1 << 30)
              << " GiB of memory; use smaller sizes, or -v=0 (inputs filled on the device, no host reference)"
              << std::endl;
    return kExitFailed;
}

template <typename T>
struct DTypeTraits;
template <>
struct DTypeTraits<__half>
{
    static constexpr double rtol = 1e-3, atol = 1e-3;
    static __half from_float(float x) { return __float2half(x); }
    static float to_float(__half x) { return __half2float(x); }
};
template <>
struct DTypeTraits<__nv_bfloat16>
{
    static constexpr double rtol = 1e-2, atol = 1e-2;
    static __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
    static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
};

// True when v fits the int32 strides of the aiter argument structs.
inline bool fits_index(int64_t v) { return v >= 0 && v <= std::numeric_limits<int32_t>::max(); }

// Owns one device allocation; at least kMinBytes so that empty tensors (s_k = 0) still get a valid pointer.
class DeviceBuffer
{
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer()
    {
        if (ptr_ != nullptr)
            cudaFree(ptr_);
    }
    cudaError_t allocate(size_t bytes) { return cudaMalloc(&ptr_, std::max(bytes, kMinBytes)); }
    // Allocates and copies `v` in.
    template <typename E>
    cudaError_t upload(const std::vector<E>& v)
    {
        cudaError_t e = allocate(sizeof(E) * v.size());
        if (e == cudaSuccess && !v.empty())
            e = cudaMemcpy(ptr_, v.data(), sizeof(E) * v.size(), cudaMemcpyHostToDevice);
        return e;
    }
    void* get() const { return ptr_; }
    template <typename E>
    E* as() const
    {
        return static_cast<E*>(ptr_);
    }

private:
    static constexpr size_t kMinBytes = 256;
    void* ptr_                        = nullptr;
};

enum class InitMethod
{
    uniform_int,   // ui / 0: integers in [-3, 3]
    normal_int,    // ni: normal(0, sqrt 3) rounded, clamped to [-3, 3]
    uniform_float, // uf / 1: [0, 1)
    normal_float,  // nf: normal(0, sqrt 3)
    trig_float,    // tf / 2: cos(i)
    uniform_quant, // ufq / uf:q / 3: [-1, 1) (AITER: +-dtype max, meant for fp8 quantisation)
    // benchmark_mha_bwd's -init (CK's backward example ranges)
    small_int,       // 0: integers in [-2, 2]
    symmetric_float, // 1: [-1, 1)
};

// Values rounded to T: `host` holds them as T for the upload, `exact` as float for the host reference.
template <typename T>
void fill_tensor(InitMethod method, uint32_t seed, std::vector<T>& host, std::vector<float>& exact)
{
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> uniform_int(-3, 3);
    std::uniform_int_distribution<int> small_int(-2, 2);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    std::uniform_real_distribution<float> symmetric(-1.f, 1.f);
    std::normal_distribution<float> normal(0.f, std::sqrt(3.f));
    exact.resize(host.size());
    for (size_t i = 0; i < host.size(); ++i)
    {
        float x = 0.f;
        switch (method)
        {
        case InitMethod::uniform_int: x = float(uniform_int(gen)); break;
        case InitMethod::normal_int: x = std::min(3.f, std::max(-3.f, std::round(normal(gen)))); break;
        case InitMethod::uniform_float: x = unit(gen); break;
        case InitMethod::normal_float: x = normal(gen); break;
        case InitMethod::trig_float: x = std::cos(float(i)); break;
        case InitMethod::uniform_quant: x = symmetric(gen); break;
        case InitMethod::small_int: x = float(small_int(gen)); break;
        case InitMethod::symmetric_float: x = symmetric(gen); break;
        }
        host[i]  = DTypeTraits<T>::from_float(x);
        exact[i] = DTypeTraits<T>::to_float(host[i]);
    }
}

// CK's generate_seqlens: `count` lengths starting at `avg` (clamped to [lo, hi]), then avg * (count / 2) random moves
// of one row from one sequence to another that keep the sum and every length inside [lo, hi]. hi < 0: unbounded.
inline std::vector<int32_t> generate_seqlens(int count, int32_t avg, int32_t lo, int32_t hi, std::mt19937& rng)
{
    lo = std::max(lo, 1);
    hi = hi > 0 ? std::max(hi, lo) : std::numeric_limits<int32_t>::max();
    std::vector<int32_t> lens(size_t(std::max(count, 0)), std::clamp(avg, lo, hi));
    if (count < 2)
        return lens;
    std::uniform_int_distribution<int> pick(0, count - 1);
    std::uniform_int_distribution<int> step(1, count - 1);
    for (int64_t moves = int64_t(avg) * (count / 2); moves > 0; --moves)
    {
        const int from = pick(rng);
        if (lens[from] <= lo)
            continue;
        const int to = (from + step(rng)) % count;
        if (lens[to] >= hi)
            continue;
        --lens[from];
        ++lens[to];
    }
    return lens;
}

inline std::vector<int32_t> cumulative(const std::vector<int32_t>& lens)
{
    std::vector<int32_t> starts{0};
    for (int32_t n : lens)
        starts.push_back(starts.back() + n);
    return starts;
}

// The ALiBi slopes of `nhead` heads (Press et al.; CK's get_alibi_slopes): 2^(-8/n * (i + 1)) for the largest power of
// two n <= nhead, then every other slope of 2n for the remaining heads.
inline std::vector<float> alibi_slopes(int nhead)
{
    auto power_of_2_slopes = [](int n) {
        std::vector<float> s;
        const double start = std::pow(2.0, -8.0 / n);
        for (int i = 0; i < n; ++i)
            s.push_back(float(std::pow(start, i + 1)));
        return s;
    };
    int pow2 = 1;
    while (pow2 * 2 <= nhead)
        pow2 *= 2;
    std::vector<float> slopes = power_of_2_slopes(pow2);
    const std::vector<float> extra = power_of_2_slopes(2 * pow2);
    for (int i = 0; int(slopes.size()) < nhead; i += 2)
        slopes.push_back(extra[i]);
    return slopes;
}

// check_err: |out - ref| <= atol + rtol * |ref|; NaN always fails; infinities pass only when allow_infinity_ref and
// out equals ref. Writes `msg`, the first few mismatches and a summary to `log`. The slice is [h, rows, cols] (cols =
// d_v for O, 1 for LSE), which names the mismatching elements.
inline bool check_slice(const float* out, const float* ref, int64_t n, int rows, int cols, double rtol, double atol,
                        bool allow_infinity_ref, const char* msg, std::ostream& log)
{
    constexpr int64_t kMaxListed = 5;
    int64_t errors               = 0;
    double max_err               = 0.0;
    for (int64_t i = 0; i < n; ++i)
    {
        const double o = out[i], r = ref[i];
        bool ok;
        if (std::isnan(o) || std::isnan(r))
            ok = false;
        else if (std::isinf(o) || std::isinf(r))
            ok = allow_infinity_ref && o == r;
        else
        {
            const double err = std::abs(o - r);
            max_err          = std::max(max_err, err);
            ok               = err <= atol + rtol * std::abs(r);
        }
        if (ok)
            continue;
        if (errors == 0)
            log << msg << "\n";
        if (errors < kMaxListed)
        {
            log << "  out[h:" << i / (int64_t(rows) * cols) << ", s:" << (i / cols) % rows;
            if (cols > 1)
                log << ", d:" << i % cols;
            log << "] != ref: " << o << " != " << r << "\n";
        }
        ++errors;
    }
    if (errors > 0)
        log << std::setprecision(7) << "max err: " << max_err << ", number of errors: " << errors << ", "
            << 100.0 * double(errors) / double(n) << "% wrong values\n";
    return errors == 0;
}

} // namespace bench
