#pragma once
// The argument block and launcher of the binding's one device helper (strided_sum.cu, compiled into the module),
// used by device_ops.h.
//
//   out[o] = sum over r of in[in_offset(o) + r0 * red_stride[0] + r1 * red_stride[1] + r2 * red_stride[2]]
//
// with o running over a row-major `shape` (4 dims) at out_stride / in_stride and r over red_shape, accumulated in fp32
// and rounded once. It sums dK / dV over the query heads of a KV head (GQA) and dBias over broadcast dims; a red_shape
// holding 0 makes it a zero fill of any strided view (`in` is then never read).

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mha_py {

inline constexpr int kSumDims    = 4; // output dims
inline constexpr int kSumRedDims = 3; // reduced dims

struct StridedSumParams
{
    void* out;
    const void* in;
    int64_t numel; // product of shape
    int64_t shape[kSumDims];
    int64_t out_stride[kSumDims]; // elements
    int64_t in_stride[kSumDims];
    int64_t red_shape[kSumRedDims];
    int64_t red_stride[kSumRedDims];
    // 8 elements of the last dim per thread, 16-byte loads and stores: the last dim contiguous on both sides and a
    // multiple of 8, every other stride a multiple of 8, both pointers 16-byte aligned (make_sum decides)
    bool vec8;
};

// Enqueues the fp16 (or bf16) kernel on `stream` with a grid-stride loop over p.numel (p.numel / 8 with vec8);
// returns the launch error.
cudaError_t launch_strided_sum(const StridedSumParams& p, bool bf16, unsigned blocks, unsigned threads,
                               cudaStream_t stream);

} // namespace mha_py
