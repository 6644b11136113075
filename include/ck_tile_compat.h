#pragma once
// The small slice of CK's `ck_tile` namespace that AITER's public MHA headers expose (AITER's `ck_tile_shim.h` role):
// index_t, stream_config (with cudaStream_t in place of hipStream_t) and the mask / bias / quant / mode enums.
// Consumers include this through mha_fwd.h / mha_bwd.h; it needs only the CUDA runtime headers, never CUTLASS or nvcc.

#include <cuda_runtime_api.h>
#include <cstdint>

// The argument structs hold std::string / std::function and travel by value, and the library is built with
// libstdc++'s C++11 ABI (the default since GCC 5). A caller compiled with -D_GLIBCXX_USE_CXX11_ABI=0 (devtoolset,
// old libtorch builds) would still link, since aiter::mha_fwd's mangled name does not carry the ABI, and then hand the
// library misread fields; stop it here instead.
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI == 0
#error "aiter_mha: the library is built with libstdc++'s C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1); this translation unit uses the old one"
#endif

namespace ck_tile {

using index_t      = int32_t;
using long_index_t = int64_t;

// Same fields, order and defaults as ck_tile::stream_config. time_kernel_ makes every API return the average
// milliseconds of nrepeat_ timed passes after cold_niters_ warm-up passes; log_level_ > 0 prints ", <kernel name>".
struct stream_config
{
    cudaStream_t stream_id_ = nullptr;
    bool time_kernel_       = false;
    int log_level_          = 0;
    int cold_niters_        = 3;
    int nrepeat_            = 10;
    bool is_gpu_timer_      = true;
    bool flush_cache_       = false;
    int rotating_count_     = 1;
};

} // namespace ck_tile

// CK declares these at global scope (mask.hpp, bias.hpp, quant.hpp); AITER's structs carry them as int.
enum class mask_enum
{
    no_mask = 0,
    mask_top_left,
    mask_bottom_right,
    window_generic,
};

enum class bias_enum
{
    no_bias          = 0,
    elementwise_bias = 1,
    alibi            = 2,
};

enum class quant_scale_enum
{
    no_scale   = 0,
    pertensor  = 1,
    blockscale = 2,
};

enum class mode_enum
{
    batch = 0,
    group = 1,
};
