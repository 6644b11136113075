#pragma once
// Programmatic dependent launch (sm_90 and newer; no-ops before): a primary kernel lets the grid launched after it
// as a programmatic dependent (cudaLaunchAttributeProgrammaticStreamSerialization) start early, and that dependent
// waits for the primary grid's completion and memory before it reads what the primary wrote. Used by the split-KV
// combine (csrc/ck/splitkv_combine.cuh) and the generic paged kernel's partition combine (csrc/paged).

namespace mha {

__device__ __forceinline__ void grid_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void grid_dependency_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

} // namespace mha
