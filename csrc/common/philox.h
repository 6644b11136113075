#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based generator, so
// forward and backward regenerate the same dropout mask from (seed, offset) with no state in memory.
// Dropout value of element (row, col) of one (batch, head), rows and columns counted inside the batch:
//   key     = {seed_lo, seed_hi + offset_hi}
//   counter = {col / 32,  row / 16 * 32 + row % 8 * 4 + col % 8 / 2,  batch * nhead_q + head,  offset_lo}
//   value   = byte (row % 16 / 8) * 8 + (col % 32 / 8) * 2 + col % 2 of the output words x, y, z, w (little-endian)
// The 16 elements that share a counter are the ones one thread of an m16n8 MMA fragment holds in a 16-row tile across
// the four n8 tiles of one 32-column group. The forward's warps hold every column of their key block: a 64-key block
// draws two calls per 16 rows (all 16 bytes of each), a 48-key block two as well (one group whole, half of another).
// The backward's dropout instances put each S warp along N on 32 consecutive columns (bwd_traits.cuh): one call per
// 16 rows. No m16n8 layout needs more than one call per 16 x 8 MMA tile (4 bytes).

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

// The counter words of (row, col) that vary inside a (batch, head): elements with equal words share one Philox output.
MHA_HOST_DEVICE uint32_t dropout_counter_x(int col) { return uint32_t(col) / 32; }
MHA_HOST_DEVICE uint32_t dropout_counter_y(int row, int col)
{
    return uint32_t(row) / 16 * 32 + uint32_t(row) % 8 * 4 + uint32_t(col) % 8 / 2;
}

// The Philox output that holds the dropout value of (row, col) and of the 15 elements that share its counter.
// bh = batch * nhead_q + head, taken modulo 2^32 (both passes and the references compute it so).
MHA_HOST_DEVICE Philox4 dropout_philox(uint64_t seed, uint64_t offset, uint32_t bh, int row, int col)
{
    return philox4x32_10(Philox4{dropout_counter_x(col), dropout_counter_y(row, col), bh, uint32_t(offset)},
                         uint32_t(seed), uint32_t(seed >> 32) + uint32_t(offset >> 32));
}

// The dropout value of (row, col) from its counter's output (dropout_philox of any element sharing the counter).
MHA_HOST_DEVICE uint8_t dropout_byte(const Philox4& rnd, int row, int col)
{
    const uint32_t b = uint32_t(row) % 16 / 8 * 8 + uint32_t(col) % 32 / 8 * 2 + uint32_t(col) % 2;
    // select, not an indexed array: a run-time index would put the words in local memory
    const uint32_t word = b < 8 ? (b < 4 ? rnd.x : rnd.y) : (b < 12 ? rnd.z : rnd.w);
    return uint8_t(word >> (8 * (b % 4)));
}

MHA_HOST_DEVICE uint8_t dropout_value(uint64_t seed, uint64_t offset, uint32_t bh, int row, int col)
{
    return dropout_byte(dropout_philox(seed, offset, bh, row, col), row, col);
}

} // namespace mha
