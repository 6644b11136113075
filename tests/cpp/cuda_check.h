#pragma once
// CHECK(cudaCall): print the CUDA error with its place and exit with status 2 (the GPU checks' "could not run").
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(x)                                                                                                     \
    do                                                                                                               \
    {                                                                                                                \
        cudaError_t e_ = (x);                                                                                        \
        if (e_ != cudaSuccess)                                                                                       \
        {                                                                                                            \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);                   \
            std::exit(2);                                                                                            \
        }                                                                                                            \
    } while (0)
