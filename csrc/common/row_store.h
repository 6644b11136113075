#pragma once
// Writing a tile of 16-bit rows staged in shared memory to global memory in 8-element (16-byte) chunks, and the
// host's test for whether a [batch, row, head, column] tensor's rows are all 16-byte aligned. Used by the backward's
// dQ conversions (csrc/ck/bwd_kernel.cuh, csrc/asm/sm90_bwd.cuh) and the asm kernels' output stores.

#include <cstdint>

namespace mha {

// Whether every row of a 16-bit tensor (base `ptr`, element strides) starts 16-byte aligned; a stride of an extent-1
// dimension is never applied, and group mode has no batch stride.
inline bool rows_16b_aligned(const void* ptr, int64_t row_stride, int64_t head_stride, int nhead, int64_t batch_stride,
                             int batch, bool group)
{
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && row_stride % 8 == 0 &&
           (nhead == 1 || head_stride % 8 == 0) && (group || batch == 1 || batch_stride % 8 == 0);
}

#if defined(__CUDACC__)
// Rows [0, rows) and chunks [0, chunks) of a kRows x kCols tile in shared memory (row pitch kPitch elements, 16-byte
// aligned rows) to dst (row stride in elements), by the CTA's threads in turn. align: what dst's rows allow, 16 (one
// 16-byte store per chunk), 4 (four 4-byte stores) or 2 (eight element stores).
template <int kRows, int kCols, int kPitch, typename Element>
__device__ __forceinline__ void store_tile_rows(const Element* tile, Element* dst, int64_t row_stride, int rows,
                                                int chunks, int align)
{
    static_assert(kCols % 8 == 0 && kPitch % 8 == 0 && sizeof(Element) == 2, "16-bit rows of 8-element chunks");
    const int nthreads = blockDim.x * blockDim.y * blockDim.z;
    for (int i = threadIdx.x; i < kRows * (kCols / 8); i += nthreads)
    {
        const int row = i / (kCols / 8), ch = i % (kCols / 8);
        if (row >= rows || ch >= chunks)
            continue;
        const uint4 v = *reinterpret_cast<const uint4*>(tile + row * kPitch + 8 * ch);
        Element* d = dst + int64_t(row) * row_stride + 8 * ch;
        if (align == 16)
            *reinterpret_cast<uint4*>(d) = v;
        else if (align == 4)
        {
            uint32_t* d4 = reinterpret_cast<uint32_t*>(d);
            d4[0] = v.x, d4[1] = v.y, d4[2] = v.z, d4[3] = v.w;
        }
        else
        {
            const Element* e = reinterpret_cast<const Element*>(&v);
#pragma unroll
            for (int k = 0; k < 8; ++k)
                d[k] = e[k];
        }
    }
}
#endif

} // namespace mha
