// Checks philox4x32_10 against Random123's known answers, then the dropout counter layout of csrc/common/philox.h:
// every counter serves exactly 16 elements, each with its own byte; the 16 elements that one thread of an m16n8
// fragment holds in a 16-row tile across the four n8 tiles of a 32-column group (the backward's dropout tiles) share
// one counter, and dropout_byte picks the byte the backward kernel picks from the fragment half, n8 tile and column
// parity; a forward key block of 48 or 64 keys needs two counters per 16 rows; distinct (batch, head), offsets and
// seeds draw distinct values; the kept fraction matches the threshold.
// Prints "philox_check: ok" or the first failure.
#include "common/philox.h"

#include <cstdio>
#include <map>
#include <set>
#include <tuple>

static int fail(const char* what, int a, int b)
{
    std::printf("philox_check: FAIL %s (%d, %d)\n", what, a, b);
    return 1;
}

int main()
{
    // 0. philox4x32_10 against Random123's published known answers (its kat_vectors file: counter, key, output), so
    //    the generator the kernels and the host references share cannot drift with both sides still agreeing
    const uint32_t kat[3][10] = {
        {0u, 0u, 0u, 0u, 0u, 0u, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0xd16cfe09u, 0x94fdccebu,
         0x5001e420u, 0x24126ea1u}};
    for (int i = 0; i < 3; ++i)
    {
        const uint32_t* v  = kat[i];
        const mha::Philox4 o = mha::philox4x32_10(mha::Philox4{v[0], v[1], v[2], v[3]}, v[4], v[5]);
        if (o.x != v[6] || o.y != v[7] || o.z != v[8] || o.w != v[9])
            return fail("philox4x32_10 differs from Random123's known answer", i, 0);
    }
    const uint64_t seed = 0x1234567890abcdefull, offset = 0x0000000500000007ull;
    const int bh = 3, rows = 48, cols = 384;
    // 1. Philox output (one per counter) -> the elements it serves: 16 each, each its own byte position
    std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, std::set<int>> bytes_of;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
        {
            const mha::Philox4 o = mha::dropout_philox(seed, offset, bh, r, c);
            const int b = r % 16 / 8 * 8 + c % 32 / 8 * 2 + c % 2;
            const uint32_t words[4] = {o.x, o.y, o.z, o.w};
            if (mha::dropout_byte(o, r, c) != uint8_t(words[b / 4] >> (8 * (b % 4))))
                return fail("dropout_byte takes another byte than philox.h says", r, c);
            if (!bytes_of[{o.x, o.y, o.z, o.w}].insert(b).second)
                return fail("two elements of one counter take the same byte", r, c);
        }
    if (bytes_of.size() != size_t(rows * cols / 16))
        return fail("counters do not serve 16 elements each", int(bytes_of.size()), rows * cols / 16);
    // 2. a backward fragment thread (lane l, warp w of four along N, each warp on 32 consecutive columns) in a 16-row
    //    tile: one counter for its 16 elements, and the byte the kernel picks (word by half and n8 tile, shift by the
    //    tile's parity and the column's)
    for (int tile = 0; tile < rows / 16; ++tile)
        for (int nb = 0; nb < cols / 128; ++nb)
            for (int w = 0; w < 4; ++w)
                for (int l = 0; l < 32; ++l)
                {
                    const int r0 = 16 * tile + l / 4, c0 = 128 * nb + 32 * w + 2 * (l % 4);
                    const mha::Philox4 rnd = mha::dropout_philox(seed, offset, bh, r0, c0);
                    for (int h = 0; h < 2; ++h)
                        for (int v = 0; v < 4; ++v)
                            for (int e = 0; e < 2; ++e)
                            {
                                const int r = r0 + 8 * h, c = c0 + 8 * v + e;
                                const mha::Philox4 own = mha::dropout_philox(seed, offset, bh, r, c);
                                if (own.x != rnd.x || own.y != rnd.y || own.z != rnd.z || own.w != rnd.w)
                                    return fail("a fragment thread's elements do not share a counter", r, c);
                                const int j8 = (c - e) % 32 / 8;
                                const uint32_t word = h ? (j8 < 2 ? rnd.z : rnd.w) : (j8 < 2 ? rnd.x : rnd.y);
                                const uint8_t kernel_byte = uint8_t(word >> (8 * (2 * (j8 % 2) + e)));
                                if (kernel_byte != mha::dropout_byte(rnd, r, c) ||
                                    kernel_byte != mha::dropout_value(seed, offset, bh, r, c))
                                    return fail("the kernel's byte pick differs from dropout_byte", r, c);
                            }
                }
    // 2b. a forward fragment thread holds every column of its key block: per 16 rows, a 64-key block (on a multiple
    //     of 64) and a 48-key block (on a multiple of 48) each need two counters
    for (int kb : {48, 64})
        for (int n0 = 0; n0 + kb <= cols; n0 += kb)
            for (int l = 0; l < 32; ++l)
            {
                std::set<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> counters;
                for (int u = 0; u < kb / 8; ++u)
                    for (int h = 0; h < 2; ++h)
                        for (int e = 0; e < 2; ++e)
                        {
                            const mha::Philox4 o =
                                mha::dropout_philox(seed, offset, bh, 16 + l / 4 + 8 * h, n0 + 8 * u + 2 * (l % 4) + e);
                            counters.insert({o.x, o.y, o.z, o.w});
                        }
                if (counters.size() != 2)
                    return fail("a forward key block's 16 rows need other than two counters", kb, int(counters.size()));
            }
    // 3. streams differ across (batch, head), offset and seed; 4. keep fraction at threshold 229 (p_drop ~ 0.1)
    int same_bh = 0, same_off = 0, same_seed = 0, kept = 0;
    const int n = rows * cols;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
        {
            const uint8_t v = mha::dropout_value(seed, offset, bh, r, c);
            same_bh += v == mha::dropout_value(seed, offset, bh + 1, r, c);
            same_off += v == mha::dropout_value(seed, offset + 1, bh, r, c);
            same_off += v == mha::dropout_value(seed, offset + (1ull << 32), bh, r, c);
            same_seed += v == mha::dropout_value(seed ^ (1ull << 40), offset, bh, r, c);
            kept += v <= 229;
        }
    // independent bytes agree with probability 1/256: about 72 of 18432 here
    if (same_bh > n / 128 || same_off > 2 * n / 128 || same_seed > n / 128)
        return fail("streams repeat across (batch, head), offset or seed", same_bh, same_off);
    const double frac = double(kept) / n, expect = 230.0 / 256.0;
    if (frac < expect - 0.01 || frac > expect + 0.01)
        return fail("kept fraction far from 230 / 256 (per mille)", int(1000 * frac), int(1000 * expect));
    std::printf("philox_check: ok (%zu counters, kept %.4f of %d, expected %.4f)\n", bytes_of.size(), frac, n, expect);
    return 0;
}
