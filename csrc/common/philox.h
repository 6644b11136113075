#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based generator, so
// forward and backward regenerate the same dropout mask from (seed, offset) with no state in memory.
// Counter layout used for dropout (one call yields the uint8 random values of 16 consecutive key columns):
//   key = {seed_lo, seed_hi + offset_hi},  counter = {col / 16, row, batch * nhead_q + head, offset_lo}
// and random value of column col = byte (col % 16) of the four output words, little-endian.

#include "fwd_params.h"

#include <cstdint>

namespace mha {

struct Philox4
{
    uint32_t x, y, z, w;
};

MHA_HOST_DEVICE Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1)
{
    constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u; // round multipliers
    constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u; // Weyl key increments
    for (int r = 0; r < 10; ++r)
    {
        const uint64_t p0 = uint64_t(kM0) * ctr.x;
        const uint64_t p1 = uint64_t(kM1) * ctr.z;
        const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
        const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
        ctr = Philox4{hi1 ^ ctr.y ^ key0, lo1, hi0 ^ ctr.w ^ key1, lo0};
        key0 += kW0;
        key1 += kW1;
    }
    return ctr;
}

// The 16 random bytes for key columns [16 * col16, 16 * col16 + 16) of one (batch, head, row).
MHA_HOST_DEVICE Philox4 dropout_random16(uint64_t seed, uint64_t offset, int bh, int row, int col16)
{
    return philox4x32_10(Philox4{uint32_t(col16), uint32_t(row), uint32_t(bh), uint32_t(offset)}, uint32_t(seed),
                         uint32_t(seed >> 32) + uint32_t(offset >> 32));
}

} // namespace mha
