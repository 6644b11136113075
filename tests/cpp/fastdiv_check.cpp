// Checks mha::FastDiv (csrc/common/fwd_params.h), the multiply-high division the split kernel uses for its run-time
// divisors: n / d equals the hardware division for every divisor 1..4096 against numerators 0..70000 and
// near 2^31, and for large divisors (powers of two, their neighbours, 2^31 - 1) against numerators around multiples
// of them. Prints "fastdiv_check: ok" or the first failure.
#include "common/fwd_params.h"

#include <cstdint>
#include <cstdio>
#include <vector>

static int check(int32_t d, int32_t n)
{
    const mha::FastDiv f = mha::FastDiv::make(d);
    if (f.div(n) != n / d)
    {
        std::printf("fastdiv_check: FAIL %d / %d: %d, want %d\n", n, d, f.div(n), n / d);
        return 1;
    }
    return 0;
}

int main()
{
    const int32_t top = 2147483647;
    for (int32_t d = 1; d <= 4096; ++d)
    {
        for (int32_t n = 0; n <= 70000; ++n)
            if (check(d, n))
                return 1;
        for (int32_t n = top - 70000; n != top; ++n)
            if (check(d, n) || check(d, n + 1))
                return 1;
    }
    std::vector<int32_t> big = {top, top - 1, 1 << 30, (1 << 30) + 1, (1 << 30) - 1, 65537, 1000003, 123456789};
    for (int k = 12; k <= 30; ++k)
        for (int32_t e : {-1, 0, 1})
            big.push_back((int32_t(1) << k) + e);
    for (int32_t d : big)
        for (int64_t m = 0; m * d <= top; m += m < 64 ? 1 : m / 4)
            for (int64_t e = -2; e <= 2; ++e)
            {
                const int64_t n = m * d + e;
                if (n >= 0 && n <= top && check(d, int32_t(n)))
                    return 1;
            }
    std::printf("fastdiv_check: ok\n");
    return 0;
}
