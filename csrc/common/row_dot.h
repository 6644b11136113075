#pragma once
// One thread's share of D = rowsum(dO * O) for one query row, 8 threads per row (lane8 = 0..7), as the backward
// preprocess kernels compute it (csrc/ck/bwd_kernel.cuh's bwd_dot_do_o, csrc/asm/sm90_bwd.cuh's sm90_bwd_pre); the
// caller adds the 8 shares (shuffles over lanes 1, 2, 4). 16-byte loads, 8 consecutive chunks per row, when O's row
// allows them (dO's always do: the API checks it); else column pairs. hdim_v is a multiple of 8, so neither path
// straddles the end.

#include <cstdint>

namespace mha {

template <typename Element>
__device__ __forceinline__ float row_dot_share(const Element* o, const Element* dout, int hdim_v, int lane8)
{
    float acc = 0.f;
    if (reinterpret_cast<uintptr_t>(o) % 16 == 0)
    {
        for (int c = lane8 * 8; c < hdim_v; c += 64)
        {
            const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
            const uint4 gv = *reinterpret_cast<const uint4*>(dout + c);
            const Element* oe = reinterpret_cast<const Element*>(&ov);
            const Element* ge = reinterpret_cast<const Element*>(&gv);
#pragma unroll
            for (int k = 0; k < 8; ++k)
                acc += float(oe[k]) * float(ge[k]);
        }
    }
    else
    {
        for (int c = lane8 * 2; c < hdim_v; c += 16)
            acc += float(o[c]) * float(dout[c]) + float(o[c + 1]) * float(dout[c + 1]);
    }
    return acc;
}

} // namespace mha
