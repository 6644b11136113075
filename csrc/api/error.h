#pragma once
// Per-thread "why did the last call fail" state behind aiter::mha_get_last_error(). Both libmha_fwd.so and
// libmha_bwd.so contain it; the setter is exported like the getters so that, with both libraries loaded, every caller
// resolves to one copy and reads the reason that was actually set.

#include <string>

namespace aiter {
__attribute__((visibility("default"))) void mha_set_last_error(const std::string& msg);
__attribute__((visibility("default"))) void mha_set_last_kernel_name(const char* name);
} // namespace aiter

namespace mha {
// Records the reason and returns -1, the AITER "unsupported / invalid" value: `return fail("...")`.
inline float fail(const std::string& msg)
{
    aiter::mha_set_last_error(msg);
    return -1.f;
}
} // namespace mha
