#pragma once
// The flat instance tables that csrc/codegen/generate.py writes (build/gen/*_table.cpp): one row per kernel instance
// the generator knows, built or not. A row whose launch function is null was filtered out of this build; its
// compile hint names the compile.py option that adds it. csrc/api is the only code that reads these tables.

#include "../common/bwd_params.h"
#include "../common/fwd_params.h"

#include <cuda_runtime_api.h>

namespace mha {

enum class Family : int
{
    ck      = 0, // CuTe mma.sync tile kernels, sm_80 and newer
    asm_v3  = 1, // Hopper-only TMA + wgmma kernels (sm_90a)
};

using FwdLaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

// Forward instance features (FwdKernelTraits' kFeatures): 0 "plain", kFwdAlibi "alibi" (ALiBi only), kFwdDropout
// "dropout" (dropout only; built at some head dims, generate.py FWD_VARIANT_DIMS), kFwdFull "full".
constexpr int kFwdAlibi = 2, kFwdDropout = 4, kFwdFull = 7;

struct FwdInstance
{
    Family family;
    DType dtype;
    int hdim;                 // serves calls with hdim_q <= hdim and hdim_v <= hdim_v (smaller ones zero-padded)
    int hdim_v;
    int features;             // 0 plain, kFwdAlibi, kFwdDropout, kFwdFull "full" (soft-cap, bias, ALiBi, sinks, dropout)
    bool split;               // split-KV / paged-KV kernel (mha_fwd_splitkv, mha_batch_prefill)
    int block_m;              // query rows per CTA (split-KV: 16 = decode tile, 64 = prefill tile)
    const char* name;         // kernel name printed by -kname / log_level_
    const char* compile_hint; // compile.py options that build this instance
    FwdLaunchFn launch;       // nullptr: not in this build
    const int* smem_bytes;    // dynamic shared memory per CTA (nullptr: not in this build)
};

struct BuildInfo
{
    const char* archs;        // e.g. "sm_80,sm_90a"
    const int* arch_ccs;      // compute capabilities built, e.g. {80, 90}
    int num_archs;
};

using BwdLaunchFn = cudaError_t (*)(const BwdParams&, cudaStream_t);

// Backward instances (libmha_bwd.so): ck, plain (masks only) or full (also bias + dbias, ALiBi, dropout), and the
// sm_90a asm family (plain). The caller provides the workspace: ck, the fp32 dQ accumulator [batch, nhead_q,
// max_seqlen_q, hdim] and, deterministic, the turn counters [batch, nhead_q, ceil(max_seqlen_q / block_m)]; asm, the
// accumulator, the padded LSE / D rows and in group mode the sequences' tensor maps
// (asm_bwd_workspace_bytes, bwd_params.h).
// Backward instance features (BwdKernelTraits' kFeatures): 0 "plain", kBwdAlibi "alibi", kBwdDropout "dropout",
// all three "full".
constexpr int kBwdBias = 1, kBwdAlibi = 2, kBwdDropout = 4;

struct BwdInstance
{
    Family family;
    DType dtype;
    int hdim;     // serves calls with hdim_q <= hdim and hdim_v <= hdim_v
    int hdim_v;
    int features; // kBwdBias | kBwdAlibi | kBwdDropout: what the instance implements beyond masks
    int block_m;  // query rows per step (turn counter granularity)
    int block_n;  // keys per CTA
    const char* name;
    const char* compile_hint;
    BwdLaunchFn launch; // nullptr: not in this build
    const int* smem_bytes; // dynamic shared memory per CTA (nullptr: not in this build)
};

extern const FwdInstance kFwdInstances[];
extern const int kNumFwdInstances;
extern const BuildInfo kBuildInfo;
extern const BwdInstance kBwdInstances[]; // libmha_bwd.so
extern const int kNumBwdInstances;
extern const BuildInfo kBwdBuildInfo;

} // namespace mha
