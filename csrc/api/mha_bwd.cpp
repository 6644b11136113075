// aiter::mha_bwd entry point. No backward kernel exists yet: every call is answered -1 with the reason, and nothing
// launches. The argument struct and the return contract are final, so callers can be written against it today.

#include "mha_bwd.h"

#include "error.h"

namespace aiter {

float mha_bwd(mha_bwd_args args, const ck_tile::stream_config&)
{
    mha_set_last_error("");
    if (args.is_group_mode && !args.pinned_host_alloc)
        return mha::fail("mha_bwd: group mode requires pinned_host_alloc callback");
    return mha::fail("mha_bwd: backward kernels are not built yet");
}

} // namespace aiter
